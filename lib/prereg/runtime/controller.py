"""The controller: runs the gate, spends the run id, gathers each item's record and writes
the manifest. It is registered as the plugin ``prereg-controller`` in a hermetic session
(:mod:`prereg.runtime.launcher`); its xdist hooks are :class:`prereg.runtime.workers.XdistBridge`,
its terminal output :class:`prereg.runtime.terminal.TerminalOutput`."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import pytest

from prereg import records
from prereg.base import gitrepo, provenance
from prereg.base.hashing import canonical_json, read_json
from prereg.decisions import approval as approvals
from prereg.decisions import gate, manifest
from prereg.evidence import execution, hermetic
from prereg.kinds.plans import Plan
from prereg.kinds.stages import RunView, StageKind, load_kind
from prereg.proof import attest, keys, timestamp
from prereg.records import MANIFEST, formats, ledger
from prereg.records import snapshot as snapshots
from prereg.records.formats import Manifest
from prereg.records.runs import contained, item_dir_name, refusal_note
from prereg.runtime import items as item_side
from prereg.runtime import signals
from prereg.runtime.collection import clean_listing_reasons, item_changers
from prereg.runtime.listing import Listing
from prereg.runtime.process_run import PROCESS_RUN, PROPERTY, ProcessRun
from prereg.runtime.terminal import TerminalOutput
from prereg.runtime.workers import XdistBridge, distributed

JOIN_STEP_SECONDS = 0.1


class Deferred:
    """A check run in a daemon thread while the session goes on; :meth:`wait` gives its
    result, or raises what it raised. Not a ``concurrent.futures`` executor: its threads are
    joined at exit, so a session refused or interrupted meanwhile would wait for the check."""

    def __init__(self, check: Callable[[], list[str]], *, name: str) -> None:
        self._result: list[str] = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(check,), name=name, daemon=True)
        self._thread.start()

    def _run(self, check: Callable[[], list[str]]) -> None:
        try:
            self._result = check()
        except BaseException as err:  # noqa: BLE001 -- raised again in the waiting thread
            self._error = err

    def wait(self) -> list[str]:
        # Joined in short steps: the kernel may hand Ctrl-C to the check's thread, and Python
        # runs the handler only when the main thread runs Python code again.
        while self._thread.is_alive():
            self._thread.join(JOIN_STEP_SECONDS)
        if self._error is not None:
            raise self._error
        return self._result


class Controller(XdistBridge, TerminalOutput):
    """Runs the gate, spends the run id, gathers item records, writes the manifest."""

    def __init__(self, config: pytest.Config, run: ProcessRun) -> None:
        self.config = config
        self.run = run
        self.root = run.project  # the checkout: approvals, refusals, runs/, git
        self.code_root = Path(run.root)  # where the code runs from (a session's snapshot)
        self.layout = run.layout
        self.run_dir = self.layout.folder
        self.entries: dict[str, dict] = {}
        self.expected: list[str] = []
        self.worker_data: list[dict] = []
        self.workers = 0
        self.gateways: dict[str, dict] = {}  # gateway id -> its spec, description, problems
        self.collections: dict[str, list[str]] = {}  # gateway id -> the node ids it collected
        self.started = 0.0
        self.interrupted: str | None = None
        self.plan: Plan | None = None
        self.session: pytest.Session | None = None
        self.snapshot: snapshots.Snapshot | None = None
        self.environment: execution.Environment | None = None  # what the gate judged against
        self.listing: Listing | None = None  # started as the session's gate is judged
        self.kind_check: Deferred | None = None  # the stage kind's own check, run meanwhile
        self.approval: approvals.Approval | None = None  # loaded by the gate
        self.kind: StageKind | None = None  # the stage's kind, once the gate has passed
        self.execution: dict | None = None  # the execution record the gate judged
        self.remote_ledgers: tuple = ()  # what each git remote's ledger said at the gate
        self.started_at: str | None = None  # the spend: its UTC time
        self.saved_handlers: dict = {}  # the signal handlers to restore at the end
        self.reserve: Path | None = None  # disk space held back for the manifest
        self.finish_notes: list[str] = []  # said at the end of the terminal summary
        self.status = "?"  # the manifest's status, once it is written
        self._execution_at_end: list[str] | None = None
        self._snapshot_record: dict | None = None

    def check_gate(self) -> gate.Gathered:
        """The session's gate (:func:`pass_gate`); its approval and snapshot are kept."""
        self.approval, self.snapshot, gathered = pass_gate(self.config, self.run)
        return gathered

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """The gate, before xdist starts a worker; the run id is spent only once the items
        about to run are known to be the stage's full item set and the stage kind's own
        check, run meanwhile, found nothing (:meth:`_verify_and_spend`)."""
        self.session = session
        run = self.run
        # The clean listing (a process of its own) needs nothing the session's gate finds, and
        # the launcher's gate has passed: it runs while this gate is judged again, and a refusal
        # stops it (pytest_unconfigure). Only when this session's collection could differ from
        # it: otherwise the two are one collection and the session's own is the item set.
        if clean_listing_reasons(self.config, self.code_root, run.module):
            self.listing = Listing(self.code_root, run, self.config)
        gathered = self.check_gate()
        self.execution = gathered.execution or execution.record(
            self.code_root, self.config.pluginmanager.list_name_plugin(), snapshot=self.snapshot
        )

        self.environment = gathered.environment
        self.remote_ledgers = gathered.facts.remote_ledgers
        self.plan = gathered.plan
        spec = self.plan.stage(run.stage)
        self.kind = load_kind(spec["kind"])
        if gathered.kind_check is not None:  # E04 loads its model: meanwhile workers start
            self.kind_check = Deferred(gathered.kind_check, name="prereg-kind-check")
        gate_passed_at = time.time()
        deadline = gate_passed_at + spec["budget_seconds"] if spec["budget_enforced"] else None
        self.run = run = ProcessRun(
            **{
                **asdict(run),
                "deadline": deadline,
                "budget_seconds": spec["budget_seconds"] if spec["budget_enforced"] else None,
                "gate_passed": True,
                "snapshot_tree": self.snapshot.tree if self.snapshot is not None else None,
            }
        )
        self.config.stash[PROCESS_RUN] = run

    def refuse(self, refusals: list[gate.Refusal]) -> None:
        """:func:`refuse` this run's approval."""
        refuse(self.config, self.run, self.approval, refusals)

    def _verify_and_spend(self, about_to_run: list[str]) -> None:
        """Compare the items about to run with the stage's full item set, then spend the run id:
        in git first (atomic, once), then the run folder."""
        if self.started:
            return
        if self.kind_check is not None:  # joined first: it imports, and the checks below
            self.refuse(gate.input_refusals(self.kind_check.wait()))  # read sys.modules
            self._record_environment_set()
        self.refuse(self._worker_refusals())
        # Collection imported the stage's modules and whatever they import: that code must be
        # accounted for too, before the run id is spent, by the installed files and the
        # snapshot the gate judged (a package installed since then accounts for nothing).
        plugins = self.config.pluginmanager.list_name_plugin()
        problems = execution.problems(
            self.code_root, plugins, snapshot=self.snapshot, env=self.environment
        )
        self.refuse([gate.Refusal("execution", f"at collection: {p}") for p in problems])
        expected = self.listing.wait() if self.listing is not None else list(about_to_run)
        if isinstance(expected, str):
            self.refuse([gate.Refusal("whole-stage", expected)])
        self.refuse(
            gate.item_set(expected, about_to_run, item_changers(self.config, self.code_root))
        )
        self.expected = list(expected)
        record, run = self.approval, self.run
        if self.run_dir.exists():
            self.refuse([gate.Refusal(
                "run-id-unused",
                f"{self.run_dir.relative_to(self.root)} exists although no start is recorded; move "
                "it out of runs/ (it is not a run of this approval) and run again",
            )])  # fmt: skip
        stamped = self._stamp_approval()
        started_at = manifest.utc_now()
        start = manifest.start_record(
            stage=run.stage,
            run_id=record.run_id,
            approval_path=record.path,
            plan_sha256=record.record.plan.sha256,
            started_at=started_at,
            root=self.root,
            remote_ledgers=[remote.record() for remote in self.remote_ledgers],
            approval_timestamp=stamped,
        )
        single = self.plan.stage(run.stage)["single_attempt"]
        try:
            ledger.spend(
                self.root,
                record.run_id,
                canonical_json(start).encode(),
                single_attempt_stage=run.stage if single else None,
                source_commit=start["source_commit"],
            )
        except ledger.AlreadyRecorded as err:
            self.refuse([gate.Refusal(
                "run-id-unused",
                f"{err}: another run of this approval or stage started first (one approval, one "
                "run; a single-attempt stage runs once)",
            )])  # fmt: skip
        try:
            contained(self.root, self.run_dir.parent)
            manifest.write_start_record(self.run_dir, record=start, approval_path=record.path)
        except OSError as err:
            _drop_junit_report(self.config)
            raise pytest.UsageError(
                f"run {record.run_id} is spent (git records its start in "
                f"{ledger.start_ref(record.run_id)}) but its folder "
                f"{self.run_dir.relative_to(self.root)} could not be written: "
                f"{manifest.describe(err)}. No item ran; `prereg runs` lists the run and "
                "`prereg audit` names it. Free the disk or fix the permissions, then approve "
                "a new run id"
            ) from None
        witness = record.record.witness.url if record.record.witness else None
        refused = witness and ledger.witness_start(self.root, witness, record.run_id)
        if refused:
            _drop_junit_report(self.config)
            raise pytest.UsageError(
                f"run {record.run_id} is spent (git records its start in "
                f"{ledger.start_ref(record.run_id)}) but the witness "
                f"{ledger.shown_url(witness)} its approval names did not take the start "
                f"record: {refused}. No item ran. A witness refuses a run id it has seen "
                "started: approve a new run id (if it could not be reached, that too)"
            )
        disclosed = [  # the rehearsals its approval lists, as git here still holds them
            ledger.rehearsal_ref(run.stage, d["name"]) for d in record.record.rehearsals or ()
        ]
        self._publish(
            [ledger.start_ref(record.run_id), ledger.source_ref(record.run_id)]
            + [ledger.attempt_ref(run.stage)] * single
            + [ref for ref in disclosed if ledger.read(self.root, ref) is not None]
        )
        self.started = time.time()
        self.started_at = started_at
        progress = self.layout.progress_log
        progress.parent.mkdir(parents=True, exist_ok=True)
        progress.touch()
        # Restored when the manifest is written.
        self.saved_handlers = signals.install_signal_handlers()
        self.reserve = manifest.reserve_space(self.root, record.run_id, len(self.expected))

    def _stamp_approval(self) -> str | None:
        """The token of the timestamp authority the approval names over the approval commit
        (:mod:`prereg.proof.timestamp`), asked before the run id is spent: an authority that
        does not answer refuses the run with nothing spent."""
        stamp = self.approval.record.timestamp
        url = stamp.url if stamp else None
        if not url:
            return None
        commit = gitrepo.head_commit(self.root)
        try:
            token = timestamp.request(url, gitrepo.read_object(self.root, commit)[1])
        except (timestamp.TimestampProblem, timestamp.NoTimestamps) as err:
            self.refuse([gate.Refusal(
                "timestamp",
                f"the approval names the timestamp authority {url}, which must stamp the "
                f"approval commit before the run starts: {err}. Nothing is spent: run again "
                "when it answers",
            )])  # fmt: skip
        return timestamp.encode(token)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # pytest calls this hook from a finally block: a Ctrl-C or an error during collection
        # is in flight here. The collection did not finish, so nothing is verified or spent
        # (nor waited for: the kind's check may run for minutes), and it ends the session.
        if sys.exc_info()[1] is not None:
            return
        if not hasattr(self.config, "workerinput") and not distributed(self.config):
            self._verify_and_spend([item.nodeid for item in session.items])

    @pytest.hookimpl(tryfirst=True)  # before junit.xml takes the properties
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self.entries.setdefault(
            report.nodeid, {"nodeid": report.nodeid, "phases": {}, "elapsed_seconds": 0.0}
        )
        entry["phases"][report.when] = report.outcome
        entry["elapsed_seconds"] = round(entry["elapsed_seconds"] + report.duration, 6)
        node = getattr(report, "node", None)
        if node is not None:
            entry["worker"] = node.gateway.id
        for name, value in report.user_properties:
            if name == PROPERTY:
                entry.update(json.loads(value))
        self._receive_outputs(report, entry)
        if report.failed:
            entry.setdefault("tracebacks", {})[report.when] = report.longreprtext
        if report.when in ("teardown", "???"):  # "???": xdist's report for a crashed worker
            entry["outcome"] = item_side.outcome(entry["phases"])
            problem = manifest.append_item(self.run_dir, entry)
            if problem:
                entry["log_error"] = problem  # a reason in the manifest; the run goes on
            self._announce_finished(entry)
        spec = self.plan.stage(self.run.stage)
        if spec["budget_enforced"] and time.time() > self.started + spec["budget_seconds"]:
            self.session.shouldstop = "the stage's wall-time budget is exhausted"

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo) -> None:
        """Kept before pytest's terminal reporter renders the interruption: that rendering
        can itself fail (an interrupt that lands in a frame with no line number), and the
        run's record of the cause, and the "nothing spent" notice, must not depend on it."""
        message = str(excinfo.value) or "Ctrl-C or SIGINT"
        self._interruption(f"interrupted ({excinfo.typename}: {message})")

    def _interruption(self, cause: str) -> None:
        """Keep every cause of an interruption, in order, once each."""
        if not self.interrupted:
            self.interrupted = cause
        elif cause not in self.interrupted:
            self.interrupted = f"{self.interrupted}; {cause}"

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int):
        """Write the manifest after every other plugin's session end (xdist stopping its
        workers, the junit report), even when one of them failed or a signal came."""
        late: list[str] = []
        during = signals.defer_signals(late) if self.started else {}  # a 2nd Ctrl-C loses nothing
        failure = result = None
        try:
            if self.started:
                manifest.release_space(self.reserve)  # for junit.xml, manifest
                self._drain_xdist_events(session)  # before junit.xml is written
            else:  # ended before the spend: a junit.xml would make runs/<run-id>/ and block
                _drop_junit_report(self.config)  # the next attempt at this free run id
            try:
                result = yield
            except BaseException as err:  # noqa: BLE001 -- re-raised once the manifest is written
                failure = err
            if self.started:
                self._finish(session, failure)
        finally:
            signals.restore_signals(during)
            signals.restore_signals(self.saved_handlers)
            self.finish_notes += late
        if failure is not None:
            raise failure
        return result

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.listing is not None:
            self.listing.discard()
        if self.interrupted and not self.started:
            self.say_nothing_spent()

    def _finish(self, session: pytest.Session, failure: BaseException | None) -> None:
        """The final manifest, or a minimal ``incomplete`` one if it fails; then its git record."""
        data, errors = manifest.write_final(
            self.run_dir,
            lambda: self._full_manifest(session, failure),
            self._minimal_manifest,
        )
        self.finish_notes += errors
        self.status = (
            formats.loads(data, Manifest, MANIFEST).value.status
            if data is not None
            else "without a manifest"
        )
        if data is not None:
            try:
                ledger.record_manifest(self.root, self.run.run_id, data)
                self._publish([ledger.manifest_ref(self.run.run_id)])
            except Exception as err:  # noqa: BLE001 -- the manifest file stays; the audit sees no ref
                self.finish_notes.append(
                    f"the manifest's SHA-256 could not be recorded in git "
                    f"({ledger.manifest_ref(self.run.run_id)}): {manifest.describe(err)}"
                )
            self._attest()
        if self.status != manifest.COMPLETE and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if data is None:
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

    def _attest(self) -> None:
        """Write the run's attestation (:mod:`prereg.proof`), signed with the runner's key
        when there is one, and record it in git; a failure is a note, never a lost run."""
        home = os.environ.get(gitrepo.USER_HOME) or os.environ.get("HOME")
        key, why = attest.runner_key(keys.runner_key_path(home=home))
        target = self.run_dir / records.ATTESTATION
        try:
            data = attest.write(self.root, self.run_dir, target, key)
            ledger.record_attestation(self.root, self.run.run_id, data)
            self._publish([ledger.attestation_ref(self.run.run_id)])
        except Exception as err:  # noqa: BLE001 -- the run stands; prereg verify will refuse it
            self.finish_notes.append(
                f"the run's attestation ({target.name}) could not be written or recorded: "
                f"{manifest.describe(err)}"
            )
            return
        if key is None:
            self.finish_notes.append(
                f"the attestation {target.name} is unsigned: {why}; prereg verify refuses it"
            )
        stamp = self.approval.record.timestamp
        url = stamp.url if stamp else None
        if url:
            self._stamp_attestation(url, data)

    def _stamp_attestation(self, url: str, attestation: bytes) -> None:
        """``attestation.tsr``: the authority's token over the attestation, recorded in git
        once; a failure is a note (prereg verify then refuses the run's time)."""
        target = self.run_dir / records.ATTESTATION_TIMESTAMP
        try:
            reply = timestamp.request(url, attestation)
            attest.write_new(target, reply)
            ledger.record_attestation_timestamp(self.root, self.run.run_id, reply)
            self._publish([ledger.attestation_timestamp_ref(self.run.run_id)])
        except Exception as err:  # noqa: BLE001 -- the run stands; prereg verify will refuse its time
            self.finish_notes.append(
                f"the attestation could not be timestamped by {url} ({target.name}): "
                f"{manifest.describe(err)}"
            )

    def _publish(self, refs: list[str]) -> None:
        """Push ``refs`` to every remote the gate asked, so a clone of it sees the record; a
        remote that could not be asked or taken is named at the end (git here keeps the
        record, and ``start.json`` says which remotes were asked)."""
        for remote in self.remote_ledgers:
            problem = remote.problem or ledger.publish(self.root, remote.remote, refs)
            if problem is not None:
                self.finish_notes.append(
                    f"remote {remote.remote} does not record {', '.join(refs)} ({problem}); "
                    f"push the record when it can: git push {remote.remote} "
                    "'refs/prereg/*:refs/prereg/*'"
                )

    def _items(self) -> list[dict]:
        """Every item of the stage with its outcome, and the hashes of every item folder."""
        items = []
        for nodeid in sorted(set(self.expected) | set(self.entries)):
            entry = self.entries.get(nodeid, {"nodeid": nodeid, "phases": {}})
            entry["outcome"] = item_side.outcome(entry["phases"])
            items.append(entry)
        items = manifest.hash_item_folders(self.run_dir, items, item_dir_name)
        for item in items:
            if item["outcome"] == records.NOT_RUN and "outputs" in item:
                # no report came, but its folder shows it started
                item["outcome"] = records.INTERRUPTED
        return items

    def _reasons(self, session: pytest.Session, items: list[dict], failure) -> list[str]:
        reasons = []
        if self.interrupted or session.exitstatus == pytest.ExitCode.INTERRUPTED:
            reasons.append(self.interrupted or "interrupted")
        if isinstance(session.shouldstop, str):
            reasons.append(f"stopped: {session.shouldstop}")
        if failure is not None:
            reasons.append(f"a plugin failed as the session ended: {manifest.describe(failure)}")
        bad = [i["nodeid"] for i in items if i["outcome"] != records.PASSED]
        if bad:
            reasons.append(f"{len(bad)} item(s) did not pass: {', '.join(bad[:5])}")
        for key, what in (("log_error", "not in items.jsonl"), ("record_error", "incomplete")):
            hit = [i for i in items if i.get(key)]
            if hit:
                reasons.append(
                    f"the record of {len(hit)} item(s) is {what}, first {hit[0]['nodeid']}: "
                    f"{hit[0][key]}"
                )
        if not items:
            reasons.append("the stage has no items")
        at_end = self.execution_at_end()
        if at_end:
            reasons.append(
                f"code the approval does not cover ran during the run ({len(at_end)} problem(s), "
                f"see environment.execution_at_end): {at_end[0]}"
            )
        snapshot = self.snapshot_record()
        if snapshot is not None and snapshot["tree_at_end"] != snapshot["tree"]:
            reasons.append(
                f"the snapshot the run executed changed during the run (tree {snapshot['tree']} "
                f"at the start, {snapshot['tree_at_end']} at the end): what ran is unknown"
            )
        return reasons

    def _record_environment_set(self) -> None:
        """What the libraries the stage kind's own check loaded set in ``os.environ`` (E04's
        embedding model: OpenMP variables) goes into the execution record as the gate's own
        reading would have, and is judged as the gate judges it, before the spend."""
        if self.execution is None:
            return
        self.execution["environment_set_in_session"] = hermetic.environment_at_start()[1]
        self.refuse(
            [gate.Refusal("execution", p) for p in execution.environment_problems(self.execution)]
        )

    def execution_at_end(self) -> list[str]:
        """The execution condition judged again after the items ran: in this process when it
        ran them, and as each worker judged itself."""
        if self._execution_at_end is None:
            found = [] if self.worker_data else item_side.execution_at_end(
                self.config, self.code_root, self.snapshot
            )  # fmt: skip
            for data in self.worker_data:
                found += data.get("execution_at_end", [])
            self._execution_at_end = list(dict.fromkeys(found))
        return self._execution_at_end

    def snapshot_record(self) -> dict | None:
        """Which tree ran: the snapshot's tree proved at the gate and recomputed now."""
        if self.snapshot is None:
            return None
        if self._snapshot_record is None:
            folder = self.snapshot.folder
            try:
                at_end = snapshots.prove(folder, "", gitrepo.object_format(self.root)).tree
            except OSError as err:
                at_end = f"(unreadable: {manifest.describe(err)})"
            self._snapshot_record = {
                "commit": self.snapshot.commit,
                "tree": self.snapshot.tree,
                "tree_at_end": at_end,
                "folder": str(folder),
            }
        return self._snapshot_record

    def _full_manifest(self, session: pytest.Session, failure) -> dict:
        elapsed = time.time() - self.started
        items = self._items()
        reasons = self._reasons(session, items, failure)
        if not reasons and self.kind.summarise is not None:
            try:
                self.kind.summarise(self.view(items))
            except Exception:  # noqa: BLE001 -- any failure of the summary makes the stage incomplete
                reasons.append("the stage summary failed:\n" + traceback.format_exc())
        imported = {}
        for data in self.worker_data or [{"packages_imported": provenance.imported_packages()}]:
            imported.update(data["packages_imported"])
        env = manifest.environment(
            execution=self.execution,
            plugins=_plugin_names(self.config),
            imported=imported,
            threads={
                "threads_per_worker": self.run.threads,
                "per_item": "see items[].thread_settings",
            },
        )
        if self.gateways:  # each xdist worker: spec, host, checkout, Python, packages, threads
            env["workers"] = [self.gateways[k] for k in sorted(self.gateways)]
        if self.snapshot is not None:
            env["snapshot"] = self.snapshot_record()
        env["execution_at_end"] = self.execution_at_end()
        start = read_json(self.layout.start, what="start record")
        return manifest.build_manifest(
            run_dir=self.run_dir,
            start=start,
            approval=self.approval.data,
            plan_path=self.run.plan_path,
            stage_spec=self.plan.stage(self.run.stage),
            items=items,
            expected=self.expected,
            reasons=reasons,
            ended_at=manifest.utc_now(),
            elapsed=elapsed,
            env=env,
            workers=self.workers,
        )

    def _minimal_manifest(self, error: str) -> dict:
        """What the fallback manifest knows: the start record, the items, the error."""
        try:
            start = read_json(self.layout.start, what="start record")
        except Exception:  # noqa: BLE001 -- the fallback uses what the process run knows
            start = None
        try:
            items = self._items()
        except Exception as err:  # noqa: BLE001 -- unhashed items, and the reason why
            items = [dict(e, hash_error=manifest.describe(err)) for e in self.entries.values()]
        return manifest.minimal_manifest(
            run_dir=self.run_dir,
            start=start,
            stage=self.run.stage,
            run_id=self.run.run_id,
            plan_path=self.run.plan_path,
            items=items,
            expected=self.expected,
            reasons=[self.interrupted] if self.interrupted else [],
            error=error,
            ended_at=manifest.utc_now(),
        )

    def view(self, items: list[dict]):
        return RunView(
            root=self.root,
            run_dir=self.run_dir,
            plan=self.plan,
            stage=self.run.stage,
            items=tuple(items),
            rehearsal=self.run.rehearsal is not None,
        )


def pass_gate(
    config: pytest.Config, run: ProcessRun, *, session_follows: bool = False
) -> tuple[approvals.Approval, snapshots.Snapshot | None, gate.Gathered]:
    """Gather the facts and check every run condition; :func:`refuse` if one fails.

    A hermetic session (code in a snapshot) first proves its snapshot: the tree id of its
    folder, recomputed from the bytes on disk, must be HEAD's tree. ``session_follows``: this
    is the launcher, and the session's gate judges what it loads again
    (:func:`prereg.decisions.gate.gather`). The stage kind's own check is left to the caller
    (:attr:`prereg.decisions.gate.Gathered.kind_check`)."""
    root = run.project
    record = approvals.load_approval(Path(run.approval_path))
    snapshot = None
    try:
        if config.option.prereg_checkout:  # a session: its code must be a snapshot
            snapshot = _proved_snapshot(root, Path(run.root))
        gathered = gate.gather(
            root,
            record.data,
            record.path,
            stage=run.stage,
            run_id_asked=config.option.prereg_run_id,
            plugins=config.pluginmanager.list_name_plugin(),
            snapshot=snapshot,
            session_follows=session_follows,
            defer_kind_check=True,
        )
    except gitrepo.GitError as err:
        refuse(config, run, record, [gate.Refusal("git", f"{err}. {GIT_FIX}")])
    refuse(config, run, record, gate.check(gathered.facts))
    return record, snapshot, gathered


def refuse(
    config: pytest.Config,
    run: ProcessRun,
    record: approvals.Approval,
    refusals: list[gate.Refusal],
) -> None:
    """Record the refusals and stop with a usage error; a refusal spends no run id."""
    if not refusals:
        return
    root = run.project
    where = approvals.write_refusal(root, record, run.stage, record.run_id, refusals)
    _drop_junit_report(config)  # the refused run gets no runs/<run-id>/junit.xml
    raise pytest.UsageError(
        f"research stage {run.stage} refused (run {record.run_id}; "
        f"{refusal_note(root, record.run_id)}; refusal recorded in "
        f"{where.relative_to(root)}):\n  " + "\n  ".join(str(r) for r in refusals)
    )


GIT_FIX = (
    "prereg reads git without the user's or the system's configuration, so a safe.directory "
    "setting does not apply: run as the user who owns the checkout (or chown it), and make "
    "sure its objects are intact (git fsck)"
)


def _proved_snapshot(checkout: Path, folder: Path) -> snapshots.Snapshot:
    """This session's code folder as it is, claimed to be a snapshot of the checkout's HEAD."""
    return snapshots.prove(folder, gitrepo.head_commit(checkout), gitrepo.object_format(checkout))


def _drop_junit_report(config: pytest.Config) -> None:
    # _pytest.junitxml: only when a junit report is dropped (import prereg.plugin does not
    # load it)
    from _pytest.junitxml import xml_key

    xml = config.stash.get(xml_key, None)
    if xml is not None:  # as pytest's own junitxml unconfigure does
        del config.stash[xml_key]
        config.pluginmanager.unregister(xml)
        # A hook call already under way (the session's end) still calls the report's writer:
        # it writes nowhere, and says so.
        xml.logfile = os.devnull


def _plugin_names(config: pytest.Config) -> dict[str, list[str]]:
    """Loaded pytest plugins by their distribution or module name, and the blocked ones.

    Blocked plugins (``-p no:NAME``) are registered as ``None``: listed apart, so a
    reseeding plugin such as pytest-randomly never looks active when it was blocked.
    """
    manager = config.pluginmanager
    loaded = {f"{dist.project_name}-{dist.version}" for _, dist in manager.list_plugin_distinfo()}
    for name, plugin in manager.list_name_plugin():
        if (
            plugin is not None
            and name
            and not name.isdigit()
            and "." in getattr(plugin, "__name__", "")
        ):
            loaded.add(plugin.__name__)
    blocked = sorted(name for name, plugin in manager.list_name_plugin() if plugin is None and name)
    return {"loaded": sorted(loaded), "blocked": blocked}
