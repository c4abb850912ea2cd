"""The item side, in a serial process or an xdist worker: each item's record, the
worker-side gate (the ``_prereg_plan`` fixture), the item's context (the ``research``
fixture), the record sent to the controller with the item's report, the execution condition
judged again at the end, and the outcome an item's phases give it."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime
from pathlib import Path

import pytest

from prereg import records
from prereg.base import gitrepo, provenance
from prereg.base.hashing import file_entries, read_json, sha256_file
from prereg.decisions import manifest
from prereg.evidence import execution
from prereg.kinds.context import BudgetExceeded, ItemContext
from prereg.records import snapshot as snapshots
from prereg.records.runs import consumed_folder, item_dir_name
from prereg.runtime import remote
from prereg.runtime.settings import (
    CODE,
    ITEM_RECORD,
    PEAK,
    PROPERTY,
    PROVED_CHECKOUT,
    PROVED_SNAPSHOT,
    SETTINGS,
    SHIPPED,
    WORKER_GATE,
    Settings,
    verified_inputs,
)


def start_item(item: pytest.Item) -> None:
    """A research item's record starts, and its peak memory is measured from here."""
    settings = item.config.stash[SETTINGS]
    if settings.research:
        item.stash[ITEM_RECORD] = {"nodeid": item.nodeid, "output_dir": item_dir_name(item.nodeid)}
        item.stash[PEAK] = provenance.PeakScope().start()


def proved_plan(request: pytest.FixtureRequest) -> dict:
    """The plan, re-checked in this process against the approval (the worker-side gate)."""
    settings = request.config.stash[SETTINGS]
    if not settings.research:
        raise RuntimeError("the research fixture is only available under --research-stage")
    path = Path(settings.root) / settings.plan_path
    if settings.rehearsal is not None:  # no gate to receive: the plan must be the one rehearsed
        if sha256_file(path) != settings.plan_sha256:
            raise RuntimeError(f"{path} changed since the rehearsal started; rehearse again")
        return read_json(path, what="plan")
    if not settings.gate_passed:
        raise RuntimeError("this process did not receive a passed gate from the controller")
    if sha256_file(path) != settings.plan_sha256:
        raise RuntimeError(f"{path} no longer matches the approved plan; the run is void")
    if hasattr(request.config, "workerinput"):  # a worker's own code, checked as the gate did
        problems = worker_problems(request.config)
        if problems:
            raise RuntimeError("; ".join(problems))
    return read_json(path, what="plan")


def worker_problems(config: pytest.Config) -> list[str]:
    """Why this xdist worker's code is not the code the approval covers (none: it is): it
    runs in the checkout or snapshot it proved, the snapshot's tree is the run's, and the
    code it loaded (at collection: the stage's modules and what they import) is accounted
    for by the snapshot and the installed files, as the gate judged the controller's."""
    settings = config.stash[SETTINGS]
    worker = config.workerinput.get("workerid")
    proved = config.workerinput.get(PROVED_SNAPSHOT) or config.workerinput.get(PROVED_CHECKOUT)
    if proved and os.path.realpath(settings.root) != os.path.realpath(proved):
        elsewhere = (
            f"worker {worker} runs in {settings.root}, not in the checkout {proved} it proved "
            "before the run: give its --tx spec chdir=<the top of that checkout>"
        )
        return [elsewhere]
    snapshot = None
    if settings.checkout:  # a worker of a hermetic session (a remote one: its own snapshot)
        try:
            snapshot = snapshots.prove(
                Path(settings.root), "", gitrepo.object_format(settings.project)
            )
        except (snapshots.SnapshotError, gitrepo.GitError, OSError) as err:
            return [f"worker {worker} could not prove its snapshot {settings.root}: {err}"]
        if snapshot.tree != settings.snapshot_tree:
            head = gitrepo.head_commit(settings.project)
            changed = snapshots.differences(Path(settings.root), settings.project, head)
            other = (
                f"worker {worker} runs from {settings.root}, whose tree {snapshot.tree} is not "
                f"the run's snapshot {settings.snapshot_tree} ({', '.join(changed[:8])}): the "
                "snapshot changed, or the worker was started elsewhere"
            )
            return [other]
    config.stash[CODE] = (Path(settings.root), snapshot)
    plugins = config.pluginmanager.list_name_plugin()
    problems = execution.problems(Path(settings.root), plugins, worker=True, snapshot=snapshot)
    return [
        f"worker {worker} runs code the approval does not cover: {problem}" for problem in problems
    ]


def judge_worker_collection(session: pytest.Session) -> None:
    """In a worker of a research run, once it has collected: its judgement of its own code
    (:func:`worker_problems`) goes to the controller as a failed collect report, which the
    controller weighs, with every worker's ordered collection, before spending the run id."""
    config = session.config
    settings = config.stash[SETTINGS]
    if not hasattr(config, "workerinput") or settings.run_id is None or not settings.gate_passed:
        return
    problems = worker_problems(config)
    if problems:
        worker = config.workerinput.get("workerid")
        report = pytest.CollectReport(
            f"{WORKER_GATE}::{worker}", "failed", "\n".join(problems), result=[]
        )
        config.hook.pytest_collectreport(report=report)


def item_context(request: pytest.FixtureRequest, plan: dict) -> ItemContext:
    """The item's context: plan parameters, recorded seeds, output folder, budget."""
    settings = request.config.stash[SETTINGS]
    record = request.node.stash[ITEM_RECORD]
    outputs = settings.layout.item_dir(record["output_dir"])
    if settings.ship_outputs:  # a remote worker: a private folder, sent back with the report
        outputs = Path(tempfile.mkdtemp(prefix="prereg-item-")) / record["output_dir"]
        request.node.stash[SHIPPED] = outputs
    outputs.mkdir(parents=True, exist_ok=False)
    context = ItemContext(
        stage=settings.stage,
        run_id=settings.run_id,
        plan=plan,
        outputs=outputs,
        seed_namespace=settings.seed_namespace,
        deadline=deadline(settings),
        record=record,
        inputs=verified_inputs(settings),
        required_runs={
            k: consumed_folder(settings.project, v)
            for k, v in (settings.required_runs or {}).items()
        },
        progress_log=None if settings.ship_outputs else settings.layout.progress_log,
        rehearsal=settings.layout.folder if settings.rehearsal is not None else None,
    )
    context.check_budget()
    record["thread_settings"] = provenance.apply_thread_limits(settings.threads)
    return context


def deadline(settings: Settings) -> float | None:
    """An enforced budget counts from the spend (``start.json``'s ``started_at``), read from
    the run folder where this process can see it; a remote worker uses the gate's time."""
    if settings.budget_seconds is None or settings.ship_outputs:
        return settings.deadline
    started = read_json(settings.layout.start, what="start record")["started_at"]
    return datetime.fromisoformat(started).timestamp() + settings.budget_seconds


def record_report(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport) -> None:
    """The item's record (outputs, peak memory, budget), attached to its call report (or its
    failed setup report) for the controller; a remote worker's outputs travel with it."""
    record = item.stash.get(ITEM_RECORD, None)
    if record is not None and (report.when == "call" or (report.when == "setup" and report.failed)):
        try:
            settings = item.config.stash[SETTINGS]
            outputs = item.stash.get(SHIPPED, settings.layout.item_dir(record["output_dir"]))
            record["outputs"] = file_entries(outputs) if outputs.exists() else []
            if SHIPPED in item.stash:
                shipped = item.stash[SHIPPED]
                del item.stash[SHIPPED]
                try:
                    chunks = remote.pack(shipped)
                finally:
                    remote.discard(shipped.parent)
                report.user_properties.extend((remote.OUTPUT_PROPERTY, c) for c in chunks)
            peak = item.stash.get(PEAK, None)
            if peak is not None:
                record["peak_rss_bytes"], record["peak_rss_scope"] = peak.stop()
            if call.excinfo is not None and call.excinfo.errisinstance(BudgetExceeded):
                record["budget_exceeded"] = True
        except Exception as err:  # noqa: BLE001 -- the report must still reach the controller
            record["record_error"] = manifest.describe(err)
        # NaN stays NaN here (allow_nan): the controller names it in the manifest's reasons.
        report.user_properties.append((PROPERTY, json.dumps(record, sort_keys=True, default=str)))


def finish_worker(session: pytest.Session) -> None:
    """A research worker sends the controller the packages it imported and the execution
    condition judged again at its end."""
    config = session.config
    if hasattr(config, "workeroutput") and config.stash[SETTINGS].research:
        ran = config.stash.get(CODE, None)  # None: no item ran here
        config.workeroutput[PROPERTY] = {
            "packages_imported": provenance.imported_packages(),
            "execution_at_end": [] if ran is None else execution_at_end(config, *ran),
        }


def execution_at_end(config: pytest.Config, root: Path, snapshot) -> list[str]:
    """The execution condition judged again when the items have run: code an item imported
    (an installed module loaded late, a folder it put on sys.path) or a loaded file changed
    during the run (an installed package edited in place) is named."""
    plugins = config.pluginmanager.list_name_plugin()
    worker = hasattr(config, "workeroutput")
    try:
        return execution.problems(root, plugins, worker=worker, snapshot=snapshot)
    except Exception as err:  # noqa: BLE001 -- what could not be judged is itself a problem
        return [f"the loaded code could not be judged: {manifest.describe(err)}"]


def outcome(phases: dict[str, str]) -> str:
    """An item's outcome (:data:`prereg.records.OUTCOMES`) from its phases' outcomes (setup,
    call, teardown: pytest's "passed", "failed", "skipped")."""
    if not phases:
        return records.NOT_RUN
    if any(v == "failed" for v in phases.values()):
        return records.FAILED if phases.get("call") == "failed" else records.ERROR
    if phases.get("call") == "skipped" or phases.get("setup") == "skipped":
        return records.SKIPPED
    finished = phases.get("call") == "passed" and "teardown" in phases
    return records.PASSED if finished else records.INTERRUPTED
