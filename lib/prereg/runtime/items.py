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
from prereg.runtime.process_run import (
    CODE,
    ITEM_RECORD,
    PEAK,
    PROCESS_RUN,
    PROPERTY,
    PROVED_CHECKOUT,
    PROVED_SNAPSHOT,
    SHIPPED,
    WORKER_GATE,
    ProcessRun,
    verified_inputs,
)


def start_item(item: pytest.Item) -> None:
    """A research item's record starts, and its peak memory is measured from here."""
    run = item.config.stash[PROCESS_RUN]
    if run.research:
        item.stash[ITEM_RECORD] = {"nodeid": item.nodeid, "output_dir": item_dir_name(item.nodeid)}
        item.stash[PEAK] = provenance.PeakScope().start()


def proved_plan(request: pytest.FixtureRequest) -> dict:
    """The plan, re-checked in this process against the approval (the worker-side gate)."""
    run = request.config.stash[PROCESS_RUN]
    if not run.research:
        raise RuntimeError("the research fixture is only available under --research-stage")
    path = Path(run.root) / run.plan_path
    if run.rehearsal is not None:  # no gate to receive: the plan must be the one rehearsed
        if sha256_file(path) != run.plan_sha256:
            raise RuntimeError(f"{path} changed since the rehearsal started; rehearse again")
        return read_json(path, what="plan")
    if not run.gate_passed:
        raise RuntimeError("this process did not receive a passed gate from the controller")
    if sha256_file(path) != run.plan_sha256:
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
    run = config.stash[PROCESS_RUN]
    worker = config.workerinput.get("workerid")
    proved = config.workerinput.get(PROVED_SNAPSHOT) or config.workerinput.get(PROVED_CHECKOUT)
    if proved and os.path.realpath(run.root) != os.path.realpath(proved):
        elsewhere = (
            f"worker {worker} runs in {run.root}, not in the checkout {proved} it proved "
            "before the run: give its --tx spec chdir=<the top of that checkout>"
        )
        return [elsewhere]
    snapshot = None
    if run.checkout:  # a worker of a hermetic session (a remote one: its own snapshot)
        try:
            snapshot = snapshots.prove(Path(run.root), "", gitrepo.object_format(run.project))
        except (snapshots.SnapshotError, gitrepo.GitError, OSError) as err:
            return [f"worker {worker} could not prove its snapshot {run.root}: {err}"]
        if snapshot.tree != run.snapshot_tree:
            head = gitrepo.head_commit(run.project)
            changed = snapshots.differences(Path(run.root), run.project, head)
            other = (
                f"worker {worker} runs from {run.root}, whose tree {snapshot.tree} is not "
                f"the run's snapshot {run.snapshot_tree} ({', '.join(changed[:8])}): the "
                "snapshot changed, or the worker was started elsewhere"
            )
            return [other]
    config.stash[CODE] = (Path(run.root), snapshot)
    plugins = config.pluginmanager.list_name_plugin()
    problems = execution.problems(Path(run.root), plugins, worker=True, snapshot=snapshot)
    return [
        f"worker {worker} runs code the approval does not cover: {problem}" for problem in problems
    ]


def judge_worker_collection(session: pytest.Session) -> None:
    """In a worker of a research run, once it has collected: its judgement of its own code
    (:func:`worker_problems`) goes to the controller as a failed collect report, which the
    controller weighs, with every worker's ordered collection, before spending the run id."""
    config = session.config
    run = config.stash[PROCESS_RUN]
    if not hasattr(config, "workerinput") or run.run_id is None or not run.gate_passed:
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
    run = request.config.stash[PROCESS_RUN]
    record = request.node.stash[ITEM_RECORD]
    outputs = run.layout.item_dir(record["output_dir"])
    if run.ship_outputs:  # a remote worker: a private folder, sent back with the report
        outputs = Path(tempfile.mkdtemp(prefix="prereg-item-")) / record["output_dir"]
        request.node.stash[SHIPPED] = outputs
    outputs.mkdir(parents=True, exist_ok=False)
    context = ItemContext(
        stage=run.stage,
        run_id=run.run_id,
        plan=plan,
        outputs=outputs,
        seed_namespace=run.seed_namespace,
        deadline=deadline(run),
        record=record,
        inputs=verified_inputs(run),
        required_runs={
            k: consumed_folder(run.project, v) for k, v in (run.required_runs or {}).items()
        },
        progress_log=None if run.ship_outputs else run.layout.progress_log,
        rehearsal=run.layout.folder if run.rehearsal is not None else None,
    )
    context.check_budget()
    record["thread_settings"] = provenance.apply_thread_limits(run.threads)
    return context


def deadline(run: ProcessRun) -> float | None:
    """An enforced budget counts from the spend (``start.json``'s ``started_at``), read from
    the run folder where this process can see it; a remote worker uses the gate's time."""
    if run.budget_seconds is None or run.ship_outputs:
        return run.deadline
    started = read_json(run.layout.start, what="start record")["started_at"]
    return datetime.fromisoformat(started).timestamp() + run.budget_seconds


def record_report(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport) -> None:
    """The item's record (outputs, peak memory, budget), attached to its call report (or its
    failed setup report) for the controller; a remote worker's outputs travel with it."""
    record = item.stash.get(ITEM_RECORD, None)
    if record is not None and (report.when == "call" or (report.when == "setup" and report.failed)):
        try:
            run = item.config.stash[PROCESS_RUN]
            outputs = item.stash.get(SHIPPED, run.layout.item_dir(record["output_dir"]))
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
    if hasattr(config, "workeroutput") and config.stash[PROCESS_RUN].research:
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
