"""pytest glue: ``--research-stage``, deselection, the gate and the run manifest.

Software runs (no ``--research-stage``) never collect the research folders and
deselect any item marked ``research_stage``. A research run resolves its approval,
passes the gate on the controller in ``pytest_sessionstart`` (before xdist starts
workers, and before any item), runs exactly the stage's items and writes the manifest
from the controller. See README.md, "For researchers".
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

import pytest

from prereg import approval as approvals
from prereg import (
    envlock,
    execution,
    gate,
    gitrepo,
    hermetic,
    ledger,
    manifest,
    options,
    provenance,
    remote,
)
from prereg import snapshot as snapshots
from prereg.context import BudgetExceeded, ItemContext
from prereg.hashing import canonical_json, file_entries, read_json, sha256_file
from prereg.plans import Plan, load_plan
from prereg.runs import RunLayout, contained, item_dir_name

STAGE_OPTION = "--research-stage"
RUN_ID_OPTION = "--run-id"
LIST_OPTION = "--prereg-list-items"
PROPERTY = "prereg"
# Environment variables a clean listing of the stage's items does not inherit.
LISTING_DROPS = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_CURRENT_TEST")


@dataclass(frozen=True)
class Settings:
    """The run a process belongs to; sent to xdist workers as plain data."""

    root: str  # where the code runs from: a hermetic session's snapshot, else the checkout
    stage: str | None = None
    run_id: str | None = None
    approval_path: str | None = None
    plan_path: str | None = None
    plan_sha256: str | None = None
    module: str | None = None
    threads: int = 1
    seed_namespace: str | None = None
    deadline: float | None = None  # gate passed + budget: a remote worker's enforced deadline
    budget_seconds: float | None = None  # the enforced budget, counted from the spend
    gate_passed: bool = False
    inputs: dict | None = (
        None  # name -> bound input (path, kind, sha256 or commit), from the approval
    )
    required_runs: dict | None = None  # stage -> run id, from the approval
    # A remote worker (xdist socket=/ssh= gateway): outputs go back through the item report.
    ship_outputs: bool = False
    # The checkout whose runs/ the run writes and whose git records it (None: root itself).
    checkout: str | None = None
    snapshot_tree: str | None = None  # a hermetic session's tree, proved again by each worker

    @property
    def research(self) -> bool:
        return self.stage is not None

    @property
    def project(self) -> Path:
        """The checkout: runs/, plans/approvals/, git, caches (not the snapshot)."""
        return Path(self.checkout or self.root)

    @property
    def layout(self) -> RunLayout:
        """Every path of this run (its folder, records, progress log)."""
        return RunLayout(self.project, self.run_id)


SETTINGS = pytest.StashKey[Settings]()
ITEM_RECORD = pytest.StashKey[dict]()
PEAK = pytest.StashKey[provenance.PeakScope]()
SHIPPED = pytest.StashKey[Path]()  # a remote worker's private output folder of an item
CODE = pytest.StashKey[tuple]()  # a worker's code folder and the snapshot it proved
PROVED_CHECKOUT = "prereg_proved_checkout"  # workerinput: the checkout a remote worker proved
PROVED_SNAPSHOT = "prereg_proved_snapshot"  # workerinput: the snapshot it wrote and runs from


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("prereg", "preregistered research stages")
    group.addoption(
        STAGE_OPTION,
        dest="research_stage",
        default=None,
        metavar="NAME",
        help="run the items of one research stage, behind its committed approval record",
    )
    group.addoption(
        RUN_ID_OPTION,
        dest="prereg_run_id",
        default=None,
        metavar="RUN_ID",
        help="the approved run id to use (default: the stage's only unspent approval)",
    )
    group.addoption(
        LIST_OPTION,
        dest="prereg_list_items",
        default=None,
        metavar="PATH",
        help=argparse.SUPPRESS,  # internal: the controller's clean listing of a stage's items
    )
    group.addoption(
        hermetic.CHECKOUT_OPTION,
        dest="prereg_checkout",
        default=None,
        metavar="PATH",
        help=argparse.SUPPRESS,  # internal: a hermetic session's checkout (prereg.hermetic)
    )
    parser.addini("prereg_plans", type="linelist", help="plan files whose stages are known")
    parser.addini("prereg_research_paths", type="linelist", help="folders holding research stages")


def known_stages(root: Path, config: pytest.Config) -> dict[str, str]:
    stages: dict[str, str] = {}
    for rel in config.getini("prereg_plans"):
        try:
            plan = load_plan(root / rel)
        except (OSError, ValueError) as err:
            raise pytest.UsageError(f"prereg_plans in pytest.ini: {err}") from None
        for name in plan.stages:
            stages[name] = rel
    return stages


def project_root(config: pytest.Config) -> Path:
    """The checkout of this run (its ``runs/``, caches and git), wherever the code runs from:
    a research run's code runs from a snapshot, whose folder is ``config.rootpath``."""
    return config.stash[SETTINGS].project


def stage_plan(config: pytest.Config) -> Plan:
    """The approved plan of this research run (for ``pytest_generate_tests`` in experiments)."""
    settings = config.stash[SETTINGS]
    if not settings.research:
        raise RuntimeError("stage_plan() is only available in a research run")
    return load_plan(Path(settings.root) / settings.plan_path)


def stage_inputs(config: pytest.Config) -> dict[str, Path]:
    """The inputs this research run's approval binds, by name (``prereg approve --input``),
    each re-hashed against the approval now: an input edited after the gate is refused."""
    settings = config.stash[SETTINGS]
    if not settings.research:
        raise RuntimeError("stage_inputs() is only available in a research run")
    return _verified_inputs(settings)


class InputChanged(RuntimeError):
    """A bound input no longer matches the approval (edited after the gate passed)."""


def _verified_inputs(settings: Settings) -> dict[str, Path]:
    bound = settings.inputs or {}
    problems = approvals.input_problems(bound)
    if problems:
        raise InputChanged(
            "; ".join(problems) + f"; the run {settings.run_id} cannot use it: restore the "
            "approved input (the run ends incomplete), or approve the new input under a new run id"
        )
    return {name: Path(entry["path"]) for name, entry in bound.items()}


def _launches(config: pytest.Config) -> bool:
    """A research run typed by a user: this process launches a hermetic session."""
    option = config.option
    return (
        option.research_stage is not None
        and not hasattr(config, "workerinput")
        and not option.prereg_list_items
        and not option.prereg_checkout
        and not option.help
        and not option.version
    )


def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """``pytest --research-stage=S``: pass the gate here, then become the hermetic session
    (:mod:`prereg.hermetic`); this process never collects or runs an item itself."""
    if not _launches(config):
        return None
    root = Path(config.rootpath)
    settings = _resolve_research_run(config, root)
    launcher = Controller(config, settings)
    launcher.check_gate()
    checkout = Path(gitrepo.toplevel(root))
    handoff = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    if handoff:  # a SIGTERM from now on leaves no snapshot behind
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        snapshot = snapshots.materialise(checkout, gitrepo.head_commit(checkout))
    except (snapshots.SnapshotError, gitrepo.GitError, OSError) as err:
        launcher.refuse([gate.Refusal("hermetic", f"the approved commit cannot be run: {err}")])
    try:
        lock = launcher.approval.data.get("environment_lock") or {}
        loaded, blocked = _entry_point_plugins(config, lock.get("distributions") or {})
        argv = hermetic.command(
            checkout=checkout,
            folder=snapshot.folder,
            args=[
                *config.invocation_params.args,
                *hermetic.output_arguments(config.option, config.invocation_params.dir),
            ],
            plugins=hermetic.plugin_arguments(loaded, blocked),
            addopts=os.environ.get("PYTEST_ADDOPTS"),
            pythonpath=os.environ.get("PYTHONPATH"),
        )
        capture = config.pluginmanager.getplugin("capturemanager")
        if capture is not None:
            capture.stop_global_capturing()
        hermetic.exec_session(  # the session resets SIGTERM and deletes the snapshot itself
            argv,
            cwd=snapshot.folder,
            env=hermetic.session_environment(snapshot.folder),
            handoff=handoff,
        )
    except BaseException as err:
        snapshots.remove(snapshot.folder)
        if isinstance(err, OSError):
            raise pytest.UsageError(f"the hermetic session could not start: {err}") from None
        raise
    return None  # not reached


def _entry_point_plugins(
    config: pytest.Config, locked: dict | None = None
) -> tuple[list[str], list[str]]:
    """The installed (``pytest11``) plugins loaded here by their entry-point names, and the
    names blocked with ``-p no:NAME``. With ``locked`` (the approval's environment lock:
    name -> version), only plugins of distributions it holds at that version count: one
    installed after approval is never loaded by a session (and the gate refuses it)."""
    manager = config.pluginmanager
    loaded = [
        manager.get_name(plugin)
        for plugin, dist in manager.list_plugin_distinfo()
        if locked is None
        or (locked.get(envlock.normalised(dist.project_name)) or {}).get("version") == dist.version
    ]
    blocked = [name for name, plugin in manager.list_name_plugin() if plugin is None and name]
    return sorted(n for n in loaded if n), sorted(blocked)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "software: a software check, what CI runs")
    config.addinivalue_line("markers", "research_stage(name): an item of a research stage")
    root = Path(config.rootpath)
    if hasattr(config, "workerinput"):
        data = config.workerinput.get(PROPERTY)
        # Each worker's own checkout: a remote worker's differs from the controller's.
        settings = Settings(**{**data, "root": str(root)}) if data else Settings(root=str(root))
        if settings.ship_outputs:  # a remote worker: its own checkout, and its snapshot if any
            ran_from = config.workerinput.get(PROVED_SNAPSHOT)
            own = config.workerinput.get(PROVED_CHECKOUT) if ran_from else None
            settings = Settings(**{**asdict(settings), "checkout": own})
        if settings.research:
            provenance.set_thread_environment(settings.threads)  # remote workers inherit none
    elif config.option.research_stage is None or config.option.help or config.option.version:
        settings = Settings(root=str(root))
    elif config.option.prereg_list_items:
        config.option.collectonly = True  # a listing never runs an item
        settings = _resolve_research_run(config, root, listing=True)
    elif config.option.prereg_checkout:
        settings = _resolve_research_run(config, root)
        config.pluginmanager.register(Controller(config, settings), "prereg-controller")
    else:
        raise pytest.UsageError(
            f"a research run starts from the command line (`pytest {STAGE_OPTION}=NAME`), "
            "which runs it from a snapshot of the approved commit; it cannot run inside "
            "another pytest session"
        )
    config.stash[SETTINGS] = settings


def _resolve_research_run(config: pytest.Config, root: Path, listing: bool = False) -> Settings:
    """The run asked for: ``root`` holds the code (a session's snapshot), the approval and
    the run folder belong to the checkout (``--prereg-checkout``, else ``root``)."""
    checkout = Path(config.option.prereg_checkout or root)
    stage = config.option.research_stage
    run_id = config.option.prereg_run_id
    known = known_stages(root, config)
    if stage not in known:
        raise pytest.UsageError(
            f"unknown research stage {stage!r}; known stages: {', '.join(sorted(known)) or 'none'} "
            "(from prereg_plans in pytest.ini)"
        )
    refused = options.refused_options(
        config.option,
        rootpath=root,
        args_from_command_line=config.args_source == pytest.Config.ArgsSource.ARGS,
        typed=[
            *shlex.split(os.environ.get("PYTEST_ADDOPTS", "")),
            *config.getini("addopts"),
            *config.invocation_params.args,
        ],
        installed_plugins=hermetic.installed_plugins(),
    )
    if not listing and refused:
        raise pytest.UsageError(options.refusal_message(stage, refused))
    try:
        record = approvals.find_approval(checkout, stage, run_id)
    except (approvals.ApprovalError, ValueError) as err:
        if run_id is not None and not listing:
            approvals.write_refusal(
                checkout, None, stage, run_id, [approvals.Refusal("approval", str(err))]
            )
        raise pytest.UsageError(f"research stage {stage} refused: {err}") from None
    plan_path = record.data["plan"]["path"]
    try:
        plan = load_plan(root / plan_path)
        spec = plan.stage(stage)
    except (ValueError, KeyError, FileNotFoundError) as err:
        raise pytest.UsageError(f"research stage {stage} refused: {err}") from None
    threads = spec["threads_per_worker"]
    provenance.set_thread_environment(threads)  # inherited by xdist workers started later
    if not listing:
        config.option.xmlpath = str(RunLayout(checkout, record.run_id).junit)
    return Settings(
        root=str(root),
        checkout=str(checkout) if checkout != root else None,
        stage=stage,
        run_id=record.run_id,
        approval_path=str(record.path),
        plan_path=plan_path,
        plan_sha256=record.data["plan"]["sha256"],
        module=spec["module"],
        threads=threads,
        seed_namespace=spec.get("seed_namespace"),
        inputs=record.data["inputs"],
        required_runs={stage: bound["run_id"] for stage, bound in record.data["requires"].items()},
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    settings = config.stash.get(SETTINGS, None)
    if settings is None:
        return None
    root = Path(settings.root)
    research_roots = [root / p for p in config.getini("prereg_research_paths")]
    if not any(collection_path == r or r in collection_path.parents for r in research_roots):
        return None
    if not settings.research:
        return True  # a software run never collects research stages
    if collection_path.is_file() and collection_path.suffix == ".py":
        return collection_path != root / settings.module or None
    return None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    settings = config.stash[SETTINGS]
    module = Path(settings.root) / settings.module if settings.research else None
    keep, drop = [], []
    for item in items:
        marker = item.get_closest_marker("research_stage")
        item_stage = marker.args[0] if marker and marker.args else None
        # A research item counts only from the module its plan names.
        selected = item_stage == settings.stage and (module is None or item.path == module)
        (keep if selected else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if settings.research and config.option.prereg_list_items:
        Path(config.option.prereg_list_items).write_text(json.dumps([i.nodeid for i in items]))


# -- per item (serial process or xdist worker) --------------------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    settings = item.config.stash[SETTINGS]
    if settings.research:
        item.stash[ITEM_RECORD] = {"nodeid": item.nodeid, "output_dir": item_dir_name(item.nodeid)}
        item.stash[PEAK] = provenance.PeakScope().start()


@pytest.fixture(scope="session")
def _prereg_plan(request: pytest.FixtureRequest) -> dict:
    """The plan, re-checked in this process against the approval (the worker-side gate)."""
    settings = request.config.stash[SETTINGS]
    if not settings.research:
        raise RuntimeError("the research fixture is only available under --research-stage")
    path = Path(settings.root) / settings.plan_path
    if not settings.gate_passed:
        raise RuntimeError("this process did not receive a passed gate from the controller")
    if sha256_file(path) != settings.plan_sha256:
        raise RuntimeError(f"{path} no longer matches the approved plan; the run is void")
    if hasattr(request.config, "workerinput"):  # a worker's own code, checked as the gate did
        proved = request.config.workerinput.get(PROVED_SNAPSHOT) or request.config.workerinput.get(
            PROVED_CHECKOUT
        )
        if proved and os.path.realpath(settings.root) != os.path.realpath(proved):
            raise RuntimeError(
                f"worker {request.config.workerinput.get('workerid')} runs in {settings.root}, "
                f"not in the checkout {proved} it proved before the run: give its --tx spec "
                "chdir=<the top of that checkout>"
            )
        plugins = request.config.pluginmanager.list_name_plugin()
        snapshot = None
        if settings.checkout:  # a worker of a hermetic session (a remote one: its own snapshot)
            snapshot = snapshots.prove(
                Path(settings.root), "", gitrepo.object_format(settings.project)
            )
            if snapshot.tree != settings.snapshot_tree:
                head = gitrepo.head_commit(settings.project)
                changed = snapshots.differences(Path(settings.root), settings.project, head)
                raise RuntimeError(
                    f"worker {request.config.workerinput.get('workerid')} runs from "
                    f"{settings.root}, whose tree {snapshot.tree} is not the run's snapshot "
                    f"{settings.snapshot_tree} ({', '.join(changed[:8])}): the snapshot changed, "
                    "or the worker was started elsewhere"
                )
        request.config.stash[CODE] = (Path(settings.root), snapshot)
        problems = execution.problems(Path(settings.root), plugins, worker=True, snapshot=snapshot)
        if problems:
            raise RuntimeError(
                f"worker {request.config.workerinput.get('workerid')} runs code the approval "
                "does not cover: " + "; ".join(problems)
            )
    return read_json(path, what="plan")


@pytest.fixture
def research(request: pytest.FixtureRequest, _prereg_plan: dict) -> ItemContext:
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
        plan=_prereg_plan,
        outputs=outputs,
        seed_namespace=settings.seed_namespace,
        deadline=_deadline(settings),
        record=record,
        inputs=_verified_inputs(settings),
        required_runs={
            k: RunLayout(settings.project, v).folder
            for k, v in (settings.required_runs or {}).items()
        },
        progress_log=None if settings.ship_outputs else settings.layout.progress_log,
    )
    context.check_budget()
    record["thread_settings"] = provenance.apply_thread_limits(settings.threads)
    return context


def _deadline(settings: Settings) -> float | None:
    """An enforced budget counts from the spend (``start.json``'s ``started_at``), read from
    the run folder where this process can see it; a remote worker uses the gate's time."""
    if settings.budget_seconds is None or settings.ship_outputs:
        return settings.deadline
    started = read_json(settings.layout.start, what="start record")["started_at"]
    return datetime.fromisoformat(started).timestamp() + settings.budget_seconds


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
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
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if hasattr(config, "workeroutput") and config.stash[SETTINGS].research:
        ran = config.stash.get(CODE, None)  # None: no item ran here
        config.workeroutput[PROPERTY] = {
            "packages_imported": provenance.imported_packages(),
            "execution_at_end": [] if ran is None else _execution_at_end(config, *ran),
        }


def _execution_at_end(config: pytest.Config, root: Path, snapshot) -> list[str]:
    """The execution condition judged again when the items have run: code an item imported
    (an installed module loaded late, a folder it put on sys.path) or a loaded file changed
    during the run (an installed package edited in place) is named."""
    plugins = config.pluginmanager.list_name_plugin()
    worker = hasattr(config, "workeroutput")
    try:
        return execution.problems(root, plugins, worker=worker, snapshot=snapshot)
    except Exception as err:  # noqa: BLE001 -- what could not be judged is itself a problem
        return [f"the loaded code could not be judged: {manifest.describe(err)}"]


# -- the controller ------------------------------------------------------------------------------


class Controller:
    """Runs the gate, spends the run id, gathers item records, writes the manifest."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.root = settings.project  # the checkout: approvals, refusals, runs/, git
        self.code_root = Path(settings.root)  # where the code runs from (a session's snapshot)
        self.layout = settings.layout
        self.run_dir = self.layout.folder
        self.entries: dict[str, dict] = {}
        self.expected: list[str] = []
        self.worker_data: list[dict] = []
        self.workers = 0
        self.gateways: dict[str, dict] = {}  # gateway id -> its spec, description, problems
        self.started = 0.0
        self.interrupted: str | None = None
        self.plan: Plan | None = None
        self.session: pytest.Session | None = None
        self.snapshot: snapshots.Snapshot | None = None

    def check_gate(self) -> gate.Gathered:
        """Gather the facts and check every run condition; refuse (usage error) if one fails.

        A hermetic session (code in a snapshot) first proves its snapshot: the tree id of its
        folder, recomputed from the bytes on disk, must be HEAD's tree."""
        settings = self.settings
        record = approvals.load_approval(Path(settings.approval_path))
        self.approval = record
        snapshot = None
        try:
            if self.config.option.prereg_checkout:  # a session: its code must be a snapshot
                snapshot = _proved_snapshot(self.root, self.code_root)
            self.snapshot = snapshot
            gathered = gate.gather(
                self.root,
                record.data,
                record.path,
                stage=settings.stage,
                run_id_asked=self.config.option.prereg_run_id,
                plugins=self.config.pluginmanager.list_name_plugin(),
                snapshot=snapshot,
            )
        except gitrepo.GitError as err:
            self.refuse([gate.Refusal("git", f"{err}. {GIT_FIX}")])
        self.refuse(gate.check(gathered.facts))
        return gathered

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """The gate, before xdist starts a worker; the run id is spent only once the items
        about to run are known to be the stage's full item set (:meth:`_verify_and_spend`)."""
        self.session = session
        settings = self.settings
        gathered = self.check_gate()
        self.execution = gathered.execution or execution.record(
            self.code_root, self.config.pluginmanager.list_name_plugin(), snapshot=self.snapshot
        )
        from prereg.stages import load_kind

        self.plan = gathered.plan
        spec = self.plan.stage(settings.stage)
        self.kind = load_kind(spec["kind"])
        self.listing = _Listing(self.code_root, settings, self.config)
        gate_passed_at = time.time()
        deadline = gate_passed_at + spec["budget_seconds"] if spec["budget_enforced"] else None
        self.settings = settings = Settings(
            **{
                **asdict(settings),
                "deadline": deadline,
                "budget_seconds": spec["budget_seconds"] if spec["budget_enforced"] else None,
                "gate_passed": True,
                "snapshot_tree": self.snapshot.tree if self.snapshot is not None else None,
            }
        )
        self.config.stash[SETTINGS] = settings

    def refuse(self, refusals: list[gate.Refusal]) -> None:
        """Record the refusals and stop with a usage error; the run id stays unspent."""
        if not refusals:
            return
        settings, record = self.settings, self.approval
        where = approvals.write_refusal(self.root, record, settings.stage, record.run_id, refusals)
        _drop_junit_report(self.config)  # the refused run gets no runs/<run-id>/junit.xml
        raise pytest.UsageError(
            f"research stage {settings.stage} refused (run {record.run_id}; the run id is not "
            f"spent; refusal recorded in {where.relative_to(self.root)}):\n  "
            + "\n  ".join(str(r) for r in refusals)
        )

    def _verify_and_spend(self, about_to_run: list[str]) -> None:
        """Compare the items about to run with the stage's full item set, then spend the run id:
        in git first (atomic, once), then the run folder."""
        if self.started:
            return
        self.refuse(self._worker_refusals())
        # Collection imported the stage's modules and whatever they import: that code must be
        # accounted for too, before the run id is spent.
        plugins = self.config.pluginmanager.list_name_plugin()
        problems = execution.problems(self.code_root, plugins, snapshot=self.snapshot)
        self.refuse([gate.Refusal("execution", f"at collection: {p}") for p in problems])
        expected = self.listing.wait()
        if isinstance(expected, str):
            self.refuse([gate.Refusal("whole-stage", expected)])
        self.refuse(gate.item_set(expected, about_to_run))
        self.expected = list(expected)
        record, settings = self.approval, self.settings
        if self.run_dir.exists():
            self.refuse([gate.Refusal(
                "run-id-unused",
                f"{self.run_dir.relative_to(self.root)} exists although no start is recorded; move "
                "it out of runs/ (it is not a run of this approval) and run again",
            )])  # fmt: skip
        started_at = manifest.utc_now()
        start = manifest.start_record(
            stage=settings.stage,
            run_id=record.run_id,
            approval_path=record.path,
            plan_sha256=record.data["plan"]["sha256"],
            started_at=started_at,
            root=self.root,
        )
        single = self.plan.stage(settings.stage)["single_attempt"]
        try:
            ledger.spend(
                self.root,
                record.run_id,
                canonical_json(start).encode(),
                single_attempt_stage=settings.stage if single else None,
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
        self.started = time.time()
        self.started_at = started_at
        progress = self.layout.progress_log
        progress.parent.mkdir(parents=True, exist_ok=True)
        progress.touch()
        self.saved_handlers = _install_signal_handlers()  # restored when the manifest is written
        self.reserve = manifest.reserve_space(self.root, record.run_id, len(self.expected))

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        log = self.layout.progress_log.relative_to(self.root)
        return [
            f"prereg: run {self.settings.run_id} of stage {self.settings.stage}; follow it with tail -f {log}"
        ]

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_setupnodes(self, config: pytest.Config, specs) -> None:
        """No implicit rsync: xdist would copy pytest into a remote worker's checkout."""
        dsession = config.pluginmanager.getplugin("dsession")
        if any(remote.is_remote(s) for s in specs) and dsession is not None:
            dsession.nodemanager.roots = []
            # A restarted worker would join after the run id is spent: none is restarted.
            dsession._max_worker_restart = 0

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_newgateway(self, gateway) -> None:
        """Describe every gateway; a remote one also proves its state against the approval,
        in the interpreter that then runs the worker, before the run id is spent."""
        spec = gateway.spec
        entry = {
            "id": gateway.id,
            "spec": remote.spec_text(spec),
            "remote": remote.is_remote(spec),
            "problems": [],
        }
        self.gateways[gateway.id] = entry
        try:
            if remote.is_remote(spec):
                kind = self.plan.stage(self.settings.stage)["kind"]
                state = remote.run_on_gateway(
                    gateway,
                    remote.PROVE_SOURCE,
                    {
                        "approval_rel": self.approval.path.relative_to(self.root).as_posix(),
                        "approval_sha256": sha256_file(self.approval.path),
                        "stage": self.settings.stage,
                        "package": remote.package_files(),
                        "kind": {"name": kind, **remote.kind_file(kind)},
                        "variables": {n: os.environ.get(n) for n in remote.LOADING_VARIABLES},
                        "threads": self.settings.threads,
                        **(
                            {"commit": self.snapshot.commit, "tree": self.snapshot.tree}
                            if self.snapshot is not None
                            else {}
                        ),
                    },
                )
            else:
                state = remote.run_on_gateway(gateway, remote.DESCRIBE_SOURCE, list(sys.path))
        except Exception as err:  # noqa: BLE001 -- a worker that cannot prove its state is refused
            state = {"problems": [f"its proof did not run: {manifest.describe(err)}"]}
        entry.update(state)
        if self.started and entry["problems"]:  # joined after spending: the run is void
            self._interruption(str(self._worker_refusals()[-1]))
            self.session.shouldstop = f"worker {gateway.id} could not prove its state"

    def _worker_refusals(self) -> list[gate.Refusal]:
        return [
            gate.Refusal(
                "worker",
                f"worker {e['id']} (--tx {e['spec']}, host {e.get('host', '?')}, checkout "
                f"{e.get('checkout', '?')}): {problem}",
            )
            for e in self.gateways.values()
            for problem in e["problems"]
        ]

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        ship = remote.is_remote(node.gateway.spec)
        node.workerinput[PROPERTY] = asdict(self.settings) | {"ship_outputs": ship}
        if ship:
            proved = self.gateways[node.gateway.id]
            node.workerinput[PROVED_CHECKOUT] = proved.get("checkout")
            node.workerinput[PROVED_SNAPSHOT] = (proved.get("snapshot") or {}).get("folder")
        self.workers += 1

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: list[str]) -> None:
        self._verify_and_spend(list(ids))  # before xdist schedules any item

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        data = getattr(node, "workeroutput", {}).get(PROPERTY)
        if data:
            self.worker_data.append(data)
        if error:
            self._interruption(f"worker {node.gateway.id} went down: {error}")

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not hasattr(self.config, "workerinput") and not _distributed(self.config):
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
            entry["outcome"] = _outcome(entry["phases"])
            problem = manifest.append_item(self.run_dir, entry)
            if problem:
                entry["log_error"] = problem  # a reason in the manifest; the run goes on
            self._announce_finished(entry)
        spec = self.plan.stage(self.settings.stage)
        if spec["budget_enforced"] and time.time() > self.started + spec["budget_seconds"]:
            self.session.shouldstop = "the stage's wall-time budget is exhausted"

    def _announce_finished(self, entry: dict) -> None:
        """One line per finished item with an ETA (:mod:`prereg.eta`), on the terminal
        (also under -n 2: the controller writes it) and in the run's progress log."""
        from prereg import eta

        try:
            done = sum(1 for e in self.entries.values() if "outcome" in e)
            line = eta.finished_line(
                nodeid=entry["nodeid"],
                outcome=entry["outcome"],
                seconds=entry["elapsed_seconds"],
                done=done,
                total=max(len(self.expected), done),
                elapsed=time.time() - self.started,
            )
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.ensure_newline()
                if getattr(reporter._tw, "width_of_current_line", 0):  # -n 2's progress dots
                    reporter._tw.line()
                reporter.write_line(line)
            eta.append(self.layout.progress_log, line)
        except Exception:  # noqa: BLE001, S110 -- a progress line never costs the run
            pass

    def _receive_outputs(self, report: pytest.TestReport, entry: dict) -> None:
        """A remote worker's outputs: written into the item folder, hashed as a local
        worker's are, and compared with the hashes the worker took."""
        chunks = [v for n, v in report.user_properties if n == remote.OUTPUT_PROPERTY]
        if not chunks:
            return
        report.user_properties[:] = [
            p for p in report.user_properties if p[0] != remote.OUTPUT_PROPERTY
        ]
        folder = self.layout.item_dir(item_dir_name(report.nodeid))
        try:
            problems = remote.unpack(chunks, contained(self.root, folder))
            if not problems and file_entries(folder) != entry.get("outputs"):
                problems = ["the outputs written differ from the hashes the worker sent"]
        except Exception as err:  # noqa: BLE001 -- a reason in the manifest; the run goes on
            problems = [manifest.describe(err)]
        if problems:
            entry["record_error"] = f"outputs from worker {entry.get('worker')}: " + "; ".join(
                problems
            )

    def pytest_keyboard_interrupt(self, excinfo) -> None:
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
        during = _defer_signals(late) if self.started else {}  # a second Ctrl-C loses nothing
        failure = result = None
        try:
            if self.started:
                manifest.release_space(getattr(self, "reserve", None))  # for junit.xml, manifest
                self._drain_xdist_events(session)  # before junit.xml is written
            try:
                result = yield
            except BaseException as err:  # noqa: BLE001 -- re-raised once the manifest is written
                failure = err
            if self.started:
                self._finish(session, failure)
        finally:
            _restore_signals(during)
            _restore_signals(getattr(self, "saved_handlers", {}))
            self.finish_notes = getattr(self, "finish_notes", []) + late
        if failure is not None:
            raise failure
        return result

    def _finish(self, session: pytest.Session, failure: BaseException | None) -> None:
        """The final manifest, or a minimal ``incomplete`` one if it fails; then its git record."""
        data, errors = manifest.write_final(
            self.run_dir,
            lambda: self._full_manifest(session, failure),
            self._minimal_manifest,
        )
        self.finish_notes = getattr(self, "finish_notes", []) + errors
        self.status = json.loads(data)["status"] if data is not None else "without a manifest"
        if data is not None:
            try:
                ledger.record_manifest(self.root, self.settings.run_id, data)
            except Exception as err:  # noqa: BLE001 -- the manifest file stays; the audit sees no ref
                self.finish_notes.append(
                    f"the manifest's SHA-256 could not be recorded in git "
                    f"({ledger.manifest_ref(self.settings.run_id)}): {manifest.describe(err)}"
                )
        if self.status != manifest.COMPLETE and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if data is None:
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

    def _drain_xdist_events(self, session: pytest.Session) -> None:
        """Hand on the item reports xdist received but did not pass on before an interruption.

        Interrupted, the controller stops reading xdist's event queue, while its workers
        run on until they are stopped (xdist gives them seconds): reports of items that
        finished wait in the queue. So the workers are stopped here, before junit.xml is
        written, and every waiting report goes through ``pytest_runtest_logreport`` as
        usual: each finished item keeps its true outcome (not "not run"), in the manifest
        and in junit.xml, marked ``reported_after_interruption``.
        """
        import queue

        dsession = self.config.pluginmanager.getplugin("dsession")
        events = getattr(dsession, "queue", None)
        if events is None:
            return
        if self.interrupted or session.exitstatus == pytest.ExitCode.INTERRUPTED:
            try:
                dsession.nodemanager.teardown_nodes()  # xdist's own shutdown; later a no-op
            except Exception as err:  # noqa: BLE001 -- the reports already queued still count
                self.finish_notes = [f"stopping the workers failed: {manifest.describe(err)}"]
        while True:
            try:
                name, kwargs = events.get_nowait()
            except queue.Empty:
                return
            if name == "testreport":
                report = kwargs["rep"]
                report.node = kwargs["node"]  # as xdist's own handler does
                self.config.hook.pytest_runtest_logreport(report=report)
                self.entries[report.nodeid]["reported_after_interruption"] = True
            elif name in ("workerfinished", "errordown"):
                self.pytest_testnodedown(kwargs["node"], kwargs.get("error"))

    def _items(self) -> list[dict]:
        """Every item of the stage with its outcome, and the hashes of every item folder."""
        items = []
        for nodeid in sorted(set(self.expected) | set(self.entries)):
            entry = self.entries.get(nodeid, {"nodeid": nodeid, "phases": {}})
            entry["outcome"] = _outcome(entry["phases"])
            items.append(entry)
        items = manifest.hash_item_folders(self.run_dir, items, item_dir_name)
        for item in items:
            if item["outcome"] == "not run" and "outputs" in item:
                item["outcome"] = "interrupted"  # no report came, but its folder shows it started
        return items

    def _reasons(self, session: pytest.Session, items: list[dict], failure) -> list[str]:
        reasons = []
        if self.interrupted or session.exitstatus == pytest.ExitCode.INTERRUPTED:
            reasons.append(self.interrupted or "interrupted")
        if isinstance(session.shouldstop, str):
            reasons.append(f"stopped: {session.shouldstop}")
        if failure is not None:
            reasons.append(f"a plugin failed as the session ended: {manifest.describe(failure)}")
        bad = [i["nodeid"] for i in items if i["outcome"] != "passed"]
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

    def execution_at_end(self) -> list[str]:
        """The execution condition judged again after the items ran: in this process when it
        ran them, and as each worker judged itself."""
        if not hasattr(self, "_execution_at_end"):
            found = [] if self.worker_data else _execution_at_end(
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
        if not hasattr(self, "_snapshot_record"):
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
                "threads_per_worker": self.settings.threads,
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
            plan_path=self.settings.plan_path,
            stage_spec=self.plan.stage(self.settings.stage),
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
        except Exception:  # noqa: BLE001 -- the fallback uses what the settings know
            start = None
        try:
            items = self._items()
        except Exception as err:  # noqa: BLE001 -- unhashed items, and the reason why
            items = [dict(e, hash_error=manifest.describe(err)) for e in self.entries.values()]
        return manifest.minimal_manifest(
            run_dir=self.run_dir,
            start=start,
            stage=self.settings.stage,
            run_id=self.settings.run_id,
            plan_path=self.settings.plan_path,
            items=items,
            expected=self.expected,
            reasons=[self.interrupted] if self.interrupted else [],
            error=error,
            ended_at=manifest.utc_now(),
        )

    def view(self, items: list[dict]):
        from prereg.stages import RunView

        return RunView(
            root=self.root,
            run_dir=self.run_dir,
            plan=self.plan,
            stage=self.settings.stage,
            items=tuple(items),
        )

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.started:
            terminalreporter.write_sep(
                "=", f"prereg: run {self.settings.run_id} {getattr(self, 'status', '?')}"
            )
            for note in getattr(self, "finish_notes", []):
                terminalreporter.write_line(f"WARNING: {note}", red=True, bold=True)
            written = self.layout.manifest.is_file()
            terminalreporter.write_line(
                f"manifest: {self.layout.manifest}"
                + ("" if written else " was NOT written (see the warnings above)")
            )
            terminalreporter.write_line(f"progress log: {self.layout.progress_log}")
            terminalreporter.write_line(
                f"audit it: prereg audit {self.run_dir.relative_to(self.root)}"
            )


GIT_FIX = (
    "prereg reads git without the user's or the system's configuration, so a safe.directory "
    "setting does not apply: run as the user who owns the checkout (or chown it), and make "
    "sure its objects are intact (git fsck)"
)


def _proved_snapshot(checkout: Path, folder: Path) -> snapshots.Snapshot:
    """This session's code folder as it is, claimed to be a snapshot of the checkout's HEAD."""
    return snapshots.prove(folder, gitrepo.head_commit(checkout), gitrepo.object_format(checkout))


def _distributed(config: pytest.Config) -> bool:
    """xdist workers collect and run the items; this controller collects none."""
    return config.pluginmanager.has_plugin("dsession")


def _drop_junit_report(config: pytest.Config) -> None:
    from _pytest.junitxml import xml_key

    xml = config.stash.get(xml_key, None)
    if xml is not None:  # as pytest's own junitxml unconfigure does
        del config.stash[xml_key]
        config.pluginmanager.unregister(xml)


class _Listing:
    """The stage's full item set, listed at the gate by a clean session started like this one
    (:mod:`prereg.hermetic`: the snapshot, its environment, the approved plugins) but without
    its options, PYTEST_ADDOPTS, xdist or the stepwise and cache plugins."""

    def __init__(self, root: Path, settings: Settings, config: pytest.Config) -> None:
        handle, self.path = tempfile.mkstemp(prefix="prereg-items-", suffix=".json")
        os.close(handle)
        env = {k: v for k, v in os.environ.items() if k not in LISTING_DROPS}
        loaded, blocked = _entry_point_plugins(config)
        command = hermetic.command(
            checkout=settings.project,
            folder=root,
            source=root,
            args=[
                f"{STAGE_OPTION}={settings.stage}", f"{RUN_ID_OPTION}={settings.run_id}",
                f"{LIST_OPTION}={self.path}", "-q", f"--rootdir={root}",
            ],
            plugins=hermetic.plugin_arguments(loaded, [*blocked, "xdist", "randomly"]),
        )  # fmt: skip
        self.process = subprocess.Popen(
            command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    def wait(self) -> list[str] | str:
        """The node ids, or a sentence saying why the stage's items could not be listed."""
        output, _ = self.process.communicate()
        try:
            listed = json.loads(Path(self.path).read_text() or "null")
        finally:
            Path(self.path).unlink(missing_ok=True)
        if self.process.returncode not in (0, 5) or not isinstance(listed, list):
            tail = "\n    ".join(output.strip().splitlines()[-15:])
            return (
                "the stage's full item set could not be listed in a clean process "
                f"(exit {self.process.returncode}):\n    {tail}"
            )
        return listed


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


def _outcome(phases: dict[str, str]) -> str:
    if not phases:
        return "not run"
    if any(v == "failed" for v in phases.values()):
        return "failed" if phases.get("call") == "failed" else "error"
    if phases.get("call") == "skipped" or phases.get("setup") == "skipped":
        return "skipped"
    return "passed" if phases.get("call") == "passed" and "teardown" in phases else "interrupted"


# Signals that end a run from outside; each ends it as an interruption, manifest written.
ENDING_SIGNALS = ("SIGTERM", "SIGHUP")


def _install_signal_handlers() -> dict:
    """SIGTERM and SIGHUP raise KeyboardInterrupt naming themselves; returns what to restore.

    A signal the run was started ignoring stays ignored: ``nohup pytest --research-stage=...``
    asks that a closed terminal (SIGHUP) not end the run."""
    saved = {}
    for name in ENDING_SIGNALS:
        number = getattr(signal, name, None)
        if number is not None and signal.getsignal(number) is not signal.SIG_IGN:
            saved[number] = signal.signal(number, _raise_keyboard_interrupt)
    return saved


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt(f"{signal.Signals(signum).name} received (signal {signum})")


def _defer_signals(late: list[str]) -> dict:
    """While the manifest is written, SIGINT, SIGTERM and SIGHUP are noted, not obeyed."""

    def note(signum, frame):
        late.append(
            f"{signal.Signals(signum).name} arrived while the manifest was written; noted, not obeyed"
        )

    saved = {}
    for name in ("SIGINT", *ENDING_SIGNALS):
        number = getattr(signal, name, None)
        if number is not None:
            try:
                saved[number] = signal.signal(number, note)
            except ValueError:  # not the main thread: nothing to defer
                pass
    return saved


def _restore_signals(saved: dict) -> None:
    for number, handler in saved.items():
        try:
            signal.signal(number, signal.SIG_DFL if handler is None else handler)
        except ValueError:
            pass
