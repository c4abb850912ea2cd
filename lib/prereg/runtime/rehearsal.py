"""A rehearsal: ``pytest --research-stage=S --rehearse``.

The stage's items run through the same fixtures, item records, summary and terminal output
as a run, in a session of their own as a run's do, from a read-only copy of the working tree
as a commit of everything would hold it (uncommitted edits and new files included, no
git-ignored file: :func:`prereg.records.snapshot.working_copy`), with any selection
(``-k``, one item, ``--pdb``, ``--collect-only``) and without an approval: no gate is
judged and no run id is spent. What it writes goes to
``runs/rehearsals/<stage>-<UTC stamp>/`` (:class:`prereg.records.runs.RehearsalLayout`), whose one
record ``rehearsal.json`` says :data:`prereg.records.runs.REHEARSAL_NOTE`. No run folder, required
run, audit or report ever takes a rehearsal for a run: it has no ``start.json`` or
``manifest.json`` and no run id, and the audit refuses a folder holding a rehearsal record.

A rehearsal cannot show its run's outcome, and is disclosed. Its items draw from the
rehearsal's own seed namespace (:func:`prereg.base.seeds.rehearsal_namespace`), and git
keeps its disclosure (:func:`prereg.records.rehearsal_disclosure`: when, the plan's hash,
the working tree's id, how much of the stage, whether a summary was written) under
``refs/prereg/rehearsals/`` from its start (:func:`prereg.records.ledger.disclose_rehearsal`),
which the next approval of the stage lists.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from prereg.base import gitrepo
from prereg.base.hashing import canonical_json, file_entries, sha256_file
from prereg.decisions import manifest
from prereg.evidence import execution, hermetic
from prereg.kinds.plans import load_plan
from prereg.kinds.stages import InputsRefused, load_kind
from prereg.records import REHEARSAL_FORMAT, ledger, rehearsal_disclosure
from prereg.records import snapshot as snapshots
from prereg.records.runs import REHEARSAL_NOTE, RehearsalLayout, RunLayout, valid_run_id
from prereg.runtime import remote, signals
from prereg.runtime.controller import Controller
from prereg.runtime.process_run import PROCESS_RUN, ProcessRun

FORMAT = REHEARSAL_FORMAT


class Rehearsal(Controller):
    """The controller of a rehearsal: the run's item side and records, no gate, no spend."""

    def __init__(self, config: pytest.Config, run: ProcessRun) -> None:
        super().__init__(config, run)
        self.listing_only = bool(config.option.collectonly)
        self.summary_note: str | None = None  # a selection's summary that could not run
        # (HEAD, dirty paths, the working tree's id) rehearsed
        self.tree: tuple[str | None, list[str], str | None] = (None, [], None)
        # why a run would be refused: the command line typed (judged by the launcher), then
        # the code collection loaded (:meth:`_execution_refusals`)
        self.run_would_refuse: list[str] = json.loads(
            os.environ.get(hermetic.RUN_WOULD_REFUSE) or "[]"
        )

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        super().pytest_unconfigure(config)
        if self.run.rehearsal_scale is not None:  # the scaled plan it read
            Path(self.run.plan_path).unlink(missing_ok=True)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session
        run = self.run
        remote_specs = [s for s in _tx_specs(self.config) if remote.is_remote(s)]
        if remote_specs:
            raise pytest.UsageError(
                f"a rehearsal runs on this host only (--tx {remote.spec_text(remote_specs[0])} "
                "is another host's worker): rehearse with -n N, then approve the run"
            )
        self.plan = load_plan(self.code_root / run.plan_path)
        spec = self.plan.stage(run.stage)

        self.kind = load_kind(spec["kind"])
        try:  # the kind's run, as prereg approve checks them
            self.kind.check(self.plan, run.stage)
        except ValueError as err:
            raise pytest.UsageError(
                f"rehearsal of stage {run.stage}: the plan is refused ({REHEARSAL_NOTE}): {err}"
            ) from None
        if self.kind.check_inputs is not None:  # as prereg approve checks them
            bound = {name: Path(entry["path"]) for name, entry in run.inputs.items()}
            try:
                self.kind.check_inputs(self.plan, run.stage, bound)
            except Exception as err:  # noqa: BLE001 -- every refusal of the kind is shown
                problems = err.problems if isinstance(err, InputsRefused) else (str(err),)
                raise pytest.UsageError(
                    f"rehearsal of stage {run.stage}: the inputs are refused "
                    f"({REHEARSAL_NOTE}):\n  " + "\n  ".join(problems)
                ) from None
        deadline = time.time() + spec["budget_seconds"] if spec["budget_enforced"] else None
        self.run = ProcessRun(**{**asdict(run), "deadline": deadline})
        self.config.stash[PROCESS_RUN] = self.run
        self.approval = None

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_newgateway(self, gateway) -> None:
        """A rehearsal's workers are this host's: named, not described or proved."""
        self.gateways[gateway.id] = {
            "id": gateway.id,
            "spec": remote.spec_text(gateway.spec),
            "problems": [],
        }

    def refuse(self, refusals) -> None:
        if refusals:  # a worker that could not describe itself: nothing to record, nothing spent
            raise pytest.UsageError(
                f"rehearsal of stage {self.run.stage} stopped ({REHEARSAL_NOTE}):\n  "
                + "\n  ".join(str(r) for r in refusals)
            )

    def _verify_and_spend(self, about_to_run: list[str]) -> None:
        """Nothing is verified or spent: the items selected run, into a new folder."""
        if self.started or self.listing_only:
            return
        self.refuse(self._worker_refusals())
        self.expected = list(about_to_run)
        self.run_would_refuse = self.run_would_refuse + self._execution_refusals()
        try:
            self.run_dir.mkdir(parents=True, exist_ok=False)
        except OSError as err:
            raise pytest.UsageError(
                f"the rehearsal folder {self.run_dir} could not be made: {manifest.describe(err)}"
            ) from None
        self.started_at = manifest.utc_now()
        self.started = time.time()
        self.tree = _working_tree(self.root)  # what is rehearsed: read once, at the start
        self._write_bindings()
        self._write_record(status="running")
        self.layout.progress_log.touch()
        self.saved_handlers = signals.install_signal_handlers()

    def _execution_refusals(self) -> list[str]:
        """What a run's execution check would refuse in the code this process loaded by
        collection, judged on the rehearsal's copy of the working tree as a run's is on its
        snapshot (a module no covered loader read, a planted bytecode file, a sys.path entry
        outside the project): a rehearsal that loads such code predicts no run."""
        algorithm = gitrepo.object_format(self.root)
        tree, blobs = snapshots.read_folder(self.code_root, algorithm)
        copy = snapshots.Snapshot(self.code_root, "", tree, blobs, algorithm)
        plugins = self.config.pluginmanager.list_name_plugin()
        found = execution.problems(self.code_root, plugins, snapshot=copy)
        return [f"[execution] {problem}" for problem in found]

    def execution_at_end(self) -> list[str]:
        return []  # a rehearsal judges no execution condition: its code is whatever is here

    def snapshot_record(self) -> None:
        return None

    def _finish(self, session: pytest.Session, failure: BaseException | None) -> None:
        items = self._items()
        reasons = self._reasons(session, items, failure)
        if not reasons and self.kind.summarise is not None:
            try:
                self.kind.summarise(self.view(items))
            except Exception as err:  # noqa: BLE001 -- a failed summary is a reason, as in a run
                failed = f"the stage summary failed: {manifest.describe(err)}"
                selection = partial_selection(self.config)
                if selection is None:
                    reasons.append(failed)
                else:  # a summary of some items may need them all: said, not a failure
                    self.summary_note = (
                        f"{failed} (the rehearsal ran a selection, {selection}: rehearse the "
                        "whole stage to try its summary)"
                    )
        self.status = "passed" if not reasons else "failed"
        try:
            self._write_record(status=self.status, items=items, reasons=reasons)
        except OSError as err:
            self.finish_notes.append(f"the rehearsal record could not be written: {err}")
        if self.status != "passed" and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _write_bindings(self) -> None:
        """``approval.json`` in the rehearsal's folder: what an approval would bind, so the
        kind's summary reads its inputs and required runs as in a run. It is no approval
        (those live in plans/approvals/ and are committed) and says so
        (:data:`prereg.records.REHEARSAL_BINDINGS_SCHEMA`)."""
        run = self.run
        requires = {  # a rehearsal read in place of a run: the SHA-256 of its rehearsal.json
            stage: {"run_id": name, "manifest_sha256": sha256_file(self._record_of(name))}
            for stage, name in (run.required_runs or {}).items()
        }
        bindings = {
            "rehearsal": REHEARSAL_NOTE,
            "stage": run.stage,
            "plan": self._plan_rehearsed(),
            "scale": (run.rehearsal_scale or {}).get("parameters"),
            "seed_namespace": run.seed_namespace,
            "inputs": run.inputs,
            "requires": requires,
        }
        manifest.write_atomic(self.layout.approval_copy, canonical_json(bindings).encode())

    def _plan_rehearsed(self) -> dict:
        """The plan's path and SHA-256 (the plan itself, not the scaled copy read)."""
        scale = self.run.rehearsal_scale
        if scale is not None:
            return dict(scale["plan"])
        return {"path": self.run.plan_path, "sha256": self.run.plan_sha256}

    def _record_of(self, name: str) -> Path:
        """The record of a consumed run (its manifest) or rehearsal (its rehearsal.json)."""
        if valid_run_id(name):
            return RunLayout(self.root, name).manifest
        return RehearsalLayout(self.root, name).record

    def _write_record(self, *, status: str, items=None, reasons=None) -> None:
        """``rehearsal.json``: what was rehearsed, from which tree, and how it went
        (:data:`prereg.records.REHEARSAL_SCHEMA`)."""
        head, dirty, tree = self.tree
        summary = self.layout.summary_dir
        record = {
            "format": FORMAT,
            "rehearsal": REHEARSAL_NOTE,
            "stage": self.run.stage,
            "name": self.run.rehearsal,
            "status": status,
            "reasons": reasons or [],
            "head_commit": head,
            "uncommitted_paths": dirty,
            "tree": tree,
            "plan": self._plan_rehearsed(),
            "scale": self.run.rehearsal_scale,
            "inputs": self.run.inputs,
            "required_runs": self.run.required_runs,
            "arguments": list(self.config.invocation_params.args),
            "workers": self.workers,
            "started_at": self.started_at,
            "ended_at": manifest.utc_now() if items is not None else None,
            "elapsed_seconds": round(time.time() - self.started, 3),
            "items_selected": len(self.expected),
            "selection": partial_selection(self.config),
            "run_would_refuse": self.run_would_refuse,
            "summary_note": self.summary_note,
            "items": items or [],
            "summary_files": file_entries(summary) if summary.is_dir() else [],
        }
        manifest.write_atomic(self.layout.record, canonical_json(record).encode())
        disclosure = canonical_json(rehearsal_disclosure(record)).encode()
        try:
            ledger.disclose_rehearsal(self.root, self.run.stage, record["name"], disclosure)
        except (gitrepo.GitError, OSError) as err:
            note = f"git could not record this rehearsal, so no approval will list it: {err}"
            if note not in self.finish_notes:
                self.finish_notes.append(note)

    # -- the terminal --------------------------------------------------------------------------

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        where = self.layout.folder.relative_to(self.root)
        lines = [f"prereg: {REHEARSAL_NOTE}; stage {self.run.stage}, into {where}/"]
        scale = self.run.rehearsal_scale
        if scale is not None:
            lines.append(
                f"prereg: at the plan's rehearsal scale {scale['parameters']} (the run takes the "
                "plan's parameters; --rehearse-full-scale rehearses with them)"
            )
        lines += [
            f"prereg: stage {stage} is read from its rehearsal {name}, in place of a run (a "
            "run reads only a run)"
            for stage, name in sorted((self.run.required_runs or {}).items())
            if not valid_run_id(name)
        ]
        return lines

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.listing_only:
            terminalreporter.write_sep("=", f"prereg: {REHEARSAL_NOTE} (items listed only)")
            return
        if not self.started:
            return
        terminalreporter.write_sep("=", f"prereg: {REHEARSAL_NOTE}; {self.status}")
        for note in self.finish_notes:
            terminalreporter.write_line(f"WARNING: {note}", red=True, bold=True)
        if self.summary_note:
            terminalreporter.write_line(f"note: {self.summary_note}", yellow=True)
        terminalreporter.write_line(f"record: {self.layout.record}")
        if self.status != "passed":
            return
        if partial_selection(self.config) is not None:
            terminalreporter.write_line("the selection passed: rehearse the whole stage next")
        elif self.run_would_refuse:
            terminalreporter.write_line(
                "it passed, but a run would be refused for what follows, so it predicts "
                "nothing of the run and approve does not count it:",
                yellow=True,
            )
            for why in self.run_would_refuse:
                terminalreporter.write_line(f"  {why}", yellow=True)
        else:
            terminalreporter.write_line(
                f"it passed: commit, then approve and run it: prereg approve --stage "
                f"{self.run.stage}"
            )


def _working_tree(root) -> tuple[str | None, list[str], str | None]:
    """HEAD's commit, the paths that differ from it and the working tree's id (what a
    rehearsal ran)."""
    try:
        return gitrepo.head_commit(root), gitrepo.dirty_paths(root), gitrepo.working_tree_id(root)
    except gitrepo.GitError as err:
        return None, [f"(git could not be read: {err})"], None


def partial_selection(config: pytest.Config) -> str | None:
    """How the command line chose part of the stage's items (``-k``, ``-m``, ``--deselect``,
    node ids or files, ``--lf``), or None when it ran them all."""
    option = config.option
    chosen = [
        f"{flag} {value!r}"
        for flag, value in (("-k", option.keyword), ("-m", option.markexpr))
        if value
    ]
    chosen += [f"--deselect {d}" for d in getattr(option, "deselect", None) or []]
    if getattr(option, "lf", False):
        chosen.append("--lf")
    chosen += [a for a in config.args if "::" in a or a.endswith(".py")]
    return ", ".join(chosen) or None


def _tx_specs(config: pytest.Config) -> list:
    # execnet: only when a rehearsal names workers (import prereg.plugin does not load it)
    import execnet

    return [execnet.XSpec(t) for t in (getattr(config.option, "tx", None) or [])]
