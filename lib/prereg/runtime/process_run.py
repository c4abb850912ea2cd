"""The run a process belongs to: :class:`ProcessRun`, the stash keys, and the
helpers experiments call (:func:`project_root`, :func:`stage_plan`, :func:`stage_inputs`).

Every other runtime module reads the run its process belongs to from ``config.stash[PROCESS_RUN]``.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
from _pytest.assertion import rewrite

from prereg.base import provenance, seeds
from prereg.base.hashing import canonical_json, sha256_file
from prereg.base.typed_settings import to_json
from prereg.decisions import approval as approvals
from prereg.decisions import bindings
from prereg.evidence import hermetic, imports
from prereg.kinds.plans import Plan, load_plan, rehearsal_data
from prereg.kinds.stages import confine_project_kinds
from prereg.records import snapshot as snapshots
from prereg.records.runs import (
    RehearsalLayout,
    RunLayout,
    new_rehearsal_name,
    valid_run_id,
    whole_rehearsals,
)
from prereg.runtime import option_policy
from prereg.runtime.roles import PROPERTY, REHEARSE_OPTION, STAGE_OPTION

# Environment variables a clean listing of the stage's items does not inherit.
LISTING_DROPS = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_CURRENT_TEST")


@dataclass(frozen=True)
class ProcessRun:
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
    # A rehearsal at its plan's rehearsal scale: {"plan": the plan's path and sha256,
    # "parameters": the rehearsal_parameters}; plan_path is then the scaled plan it reads.
    rehearsal_scale: dict | None = None
    # A remote worker (xdist socket=/ssh= gateway): outputs go back through the item report.
    ship_outputs: bool = False
    # The checkout whose runs/ the run writes and whose git records it (None: root itself).
    checkout: str | None = None
    snapshot_tree: str | None = None  # a hermetic session's tree, proved again by each worker
    # A rehearsal's folder name under runs/rehearsals/: no approval, no gate, nothing spent.
    rehearsal: str | None = None

    @property
    def research(self) -> bool:
        return self.stage is not None

    @property
    def project(self) -> Path:
        """The checkout: runs/, plans/approvals/, git, caches (not the snapshot)."""
        return Path(self.checkout or self.root)

    @property
    def layout(self) -> RunLayout | RehearsalLayout:
        """Every path of this run (its folder, records, progress log), or of this rehearsal."""
        if self.rehearsal is not None:
            return RehearsalLayout(self.project, self.rehearsal)
        return RunLayout(self.project, self.run_id)


PROCESS_RUN = pytest.StashKey[ProcessRun]()
ITEM_RECORD = pytest.StashKey[dict]()
PEAK = pytest.StashKey[provenance.PeakScope]()
SHIPPED = pytest.StashKey[Path]()  # a remote worker's private output folder of an item
CODE = pytest.StashKey[tuple]()  # a worker's code folder and the snapshot it proved
PROVED_CHECKOUT = "prereg_proved_checkout"  # workerinput: the checkout a remote worker proved
PROVED_SNAPSHOT = "prereg_proved_snapshot"  # workerinput: the snapshot it wrote and runs from
# The node id of the collect report by which a worker tells the controller, before the run id
# is spent, why its code is not the approved code (xdist sends a worker's failed collect
# reports to the controller ahead of its collection).
WORKER_GATE = "prereg-worker-gate"


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


ONLY_IN_A_RUN = (
    f"is only available in a research run ({STAGE_OPTION}=NAME) or a rehearsal of one "
    f"({STAGE_OPTION}=NAME {REHEARSE_OPTION}, which needs no approval and spends nothing)"
)


def known_plan(root: Path, config: pytest.Config, stage: str) -> str:
    """The plan (relative to ``root``) of a stage pytest.ini's ``prereg_plans`` knows."""
    known = known_stages(root, config)
    if stage not in known:
        raise pytest.UsageError(
            f"unknown research stage {stage!r}; known stages: {', '.join(sorted(known)) or 'none'} "
            "(from prereg_plans in pytest.ini)"
        )
    return known[stage]


def project_root(config: pytest.Config) -> Path:
    """The checkout of this run (its ``runs/``, caches and git), wherever the code runs from:
    a research run's code runs from a snapshot, whose folder is ``config.rootpath``."""
    return config.stash[PROCESS_RUN].project


def stage_plan(config: pytest.Config) -> Plan:
    """The approved plan of this research run (for ``pytest_generate_tests`` in experiments)."""
    run = config.stash[PROCESS_RUN]
    if not run.research:
        raise RuntimeError(f"stage_plan() {ONLY_IN_A_RUN}")
    return load_plan(Path(run.root) / run.plan_path)


def parametrize_items(
    metafunc: pytest.Metafunc, kind: Any, stage: str, argname: str | None = None
) -> None:
    """One item per cell of the approved plan's grid, for an experiments module's
    ``pytest_generate_tests``: a test that takes ``argname`` (default: the coordinate of
    ``kind.grid``) gets each cell of ``kind.cells(settings)``, its id the item key."""
    name = argname or (kind.grid.coordinate if kind.grid is not None else None)
    if name is None:
        raise TypeError(f"stage kind {kind.name!r} has no grid: pass the argument's name")
    if name in metafunc.fixturenames:
        cells = kind.cells(kind.settings(stage_plan(metafunc.config).data, stage))
        metafunc.parametrize(name, list(cells.values()), ids=list(cells))


def stage_inputs(config: pytest.Config) -> dict[str, Path]:
    """The inputs this research run's approval binds, by name (``prereg approve --input``),
    each re-hashed against the approval now: an input edited after the gate is refused."""
    run = config.stash[PROCESS_RUN]
    if not run.research:
        raise RuntimeError(f"stage_inputs() {ONLY_IN_A_RUN}")
    return verified_inputs(run)


class InputChanged(RuntimeError):
    """A bound input no longer matches the approval (edited after the gate passed)."""


def verified_inputs(run: ProcessRun) -> dict[str, Path]:
    """The bound inputs as the run reads them: a file where it is (hashed again now), a git
    repository as a clone at its bound commit in this process's temporary folder (shared by
    the run's workers), never its working tree
    (:func:`prereg.records.snapshot.input_checkout`)."""
    bound = run.inputs or {}
    problems = bindings.input_problems(bound)
    if problems:
        raise InputChanged(
            "; ".join(problems) + f"; the run {run.run_id} cannot use it: restore the "
            "approved input (the run ends incomplete), or approve the new input under a new run id"
        )
    paths = {}
    for name, entry in bound.items():
        paths[name] = Path(entry["path"])
        if entry["kind"] == "git":
            folder = Path(tempfile.gettempdir(), f"prereg-input-{name}-{entry['commit']}")
            try:
                paths[name] = snapshots.input_checkout(paths[name], entry["commit"], folder)
            except snapshots.SnapshotError as err:
                raise InputChanged(f"input {name}: {err}") from None
    return paths


def worker_process_run(config: pytest.Config) -> ProcessRun:
    """An xdist worker's run: the controller's, in the worker's own checkout (a remote
    worker's differs from the controller's)."""
    root = Path(config.rootpath)
    data = config.workerinput.get(PROPERTY)
    run = ProcessRun(**{**data, "root": str(root)}) if data else ProcessRun(root=str(root))
    if run.ship_outputs:  # a remote worker: its own checkout, and its snapshot if any
        ran_from = config.workerinput.get(PROVED_SNAPSHOT)
        own = config.workerinput.get(PROVED_CHECKOUT) if ran_from else None
        run = ProcessRun(**{**asdict(run), "checkout": own})
    if run.research:
        provenance.set_thread_environment(run.threads)  # remote workers inherit none
        confine_project_kinds(root)
    return run


def registered_options(parser) -> dict[str, tuple[tuple[str, ...], Any]]:
    """Every option pytest and the loaded plugins registered in ``parser`` (a configured
    pytest's ``config._parser``): its namespace field -> (its spellings, its default as
    argparse applies it, the first registration's)."""
    found: dict[str, tuple[tuple[str, ...], Any]] = {}
    for action in parser.optparser._actions:  # pytest's argparse parser
        spellings, default = found.get(action.dest, ((), action.default))
        found[action.dest] = ((*spellings, *action.option_strings), default)
    return found


# A rehearsal's own options, which a run does not take and a rehearsal's prediction ignores.
REHEARSAL_OPTIONS = (
    "prereg_rehearse", "prereg_rehearse_full_scale", "prereg_rehearse_plan",
    "prereg_rehearse_inputs", "prereg_rehearse_use_runs",
)  # fmt: skip


def refused_by_a_run(config: pytest.Config, root: Path, registered: dict | None = None) -> list:
    """Why a research run would refuse this command line's options (the option policy,
    :func:`prereg.runtime.option_policy.refused_options`), a rehearsal's own aside."""
    if registered is None:
        registered = registered_options(config._parser)
    for dest in REHEARSAL_OPTIONS:
        registered.pop(dest, None)
    return option_policy.refused_options(
        config.option,
        rootpath=root,
        args_from_command_line=config.args_source == pytest.Config.ArgsSource.ARGS,
        typed=[
            *shlex.split(os.environ.get("PYTEST_ADDOPTS", "")),
            *config.getini("addopts"),
            *config.invocation_params.args,
        ],
        installed_plugins=hermetic.installed_plugins(),
        registered=registered,
    )


def resolve_research_run(config: pytest.Config, root: Path, listing: bool = False) -> ProcessRun:
    """The run asked for: ``root`` holds the code (a session's snapshot), the approval and
    the run folder belong to the checkout (``--prereg-checkout``, else ``root``)."""
    checkout = Path(config.option.prereg_checkout or root)
    stage = config.option.research_stage
    run_id = config.option.prereg_run_id
    confine_project_kinds(root)  # the code the run executes: the snapshot, in a session
    registered = registered_options(config._parser)
    if config.option.prereg_checkout:  # a session: the launcher judged the command line, and
        for dest in hermetic.OUTPUT_OPTIONS:  # passes pytest.ini's output files resolved
            registered.pop(dest, None)
    refused = refused_by_a_run(config, root, registered) + option_policy.refused_variables(
        os.environ
    )
    if not listing and refused:  # before the plan is looked for: --rootdir moves it
        raise pytest.UsageError(option_policy.refusal_message(stage, refused))
    known_plan(root, config, stage)
    try:
        record = approvals.find_approval(checkout, stage, run_id)
    except (approvals.ApprovalError, ValueError) as err:
        if run_id is not None and not listing:
            approvals.write_refusal(
                checkout, None, stage, run_id, [approvals.Refusal("approval", str(err))]
            )
        raise pytest.UsageError(f"research stage {stage} refused: {err}") from None
    approved = record.record
    plan_path = approved.plan.path
    try:
        plan = load_plan(root / plan_path)
        spec = plan.stage(stage)
    except (ValueError, KeyError, FileNotFoundError) as err:
        raise pytest.UsageError(f"research stage {stage} refused: {err}") from None
    threads = spec["threads_per_worker"]
    provenance.set_thread_environment(threads)  # inherited by xdist workers started later
    if not listing:
        config.option.xmlpath = str(RunLayout(checkout, record.run_id).junit)
    return ProcessRun(
        root=str(root),
        checkout=str(checkout) if checkout != root else None,
        stage=stage,
        run_id=record.run_id,
        approval_path=str(record.path),
        plan_path=plan_path,
        plan_sha256=approved.plan.sha256,
        module=spec["module"],
        threads=threads,
        seed_namespace=spec.get("seed_namespace"),
        inputs=to_json(approved.inputs),
        required_runs={stage: bound.run_id for stage, bound in approved.requires.items()},
    )


def watch_snapshot_imports(config: pytest.Config) -> None:
    """A research session, its listing and its workers, and a rehearsal's session, which run
    from a snapshot (or a rehearsal's copy), record what their loaders compile from it from
    now on (:mod:`prereg.evidence.imports`), before any conftest.py or test module is
    imported."""
    args = config.known_args_namespace
    if not getattr(args, "research_stage", None):
        return
    if Path(config.rootpath).name.startswith(snapshots.PREFIX):
        imports.watch(config.rootpath, rewriter=rewrite)


def refuse_early_outputs(config: pytest.Config) -> None:
    """``--debug`` writes its file as soon as pytest has parsed the command line, before any
    plugin is configured: judged here, for a research run (an option it does not take) and
    for a rehearsal (a path over the project's records)."""
    args = config.known_args_namespace
    debug, stage = getattr(args, "debug", None), getattr(args, "research_stage", None)
    if not stage or not debug or debug == os.devnull:
        return
    if not getattr(args, "prereg_rehearse", False):
        refused = [f"--debug {option_policy.NOT_TAKEN}"]
        raise pytest.UsageError(option_policy.refusal_message(stage, refused))
    _refuse_outputs_over_records(config, {"debug": debug}, stage)


def _refuse_outputs_over_records(config: pytest.Config, values: dict, stage: str) -> None:
    destructive = option_policy.outputs_over_records(
        values,
        spellings=hermetic.OUTPUT_OPTIONS,
        cwd=Path(config.invocation_params.dir),
        root=Path(config.rootpath),
    )
    if destructive:
        raise pytest.UsageError(
            f"rehearsal of stage {stage} refused (nothing ran):\n  " + "\n  ".join(destructive)
        )


def check_rehearsal_command(config: pytest.Config, root: Path) -> None:
    """What a rehearsal's command line may not do, judged before anything is copied or run
    (and again in its session): name an output over the project's records, have pytest read
    another ini file than ``root``'s pytest.ini, or set a variable the run's session would
    not receive (the rehearsal's session does not either)."""
    stage = config.option.research_stage
    _refuse_outputs_over_records(config, hermetic.output_values(config), stage)
    for why in option_policy.refused_variables(os.environ):
        raise pytest.UsageError(f"rehearsal of stage {stage} refused (nothing ran): {why}")
    ini = config.inipath
    if ini is not None and ini.resolve() != (root / "pytest.ini").resolve():
        raise pytest.UsageError(
            f"{STAGE_OPTION}={stage} {REHEARSE_OPTION}: pytest's root is {root} and it reads "
            f"{ini} (--rootdir, -c), not the project's pytest.ini at its root, which names the "
            "plans; a rehearsal, as a run, reads that file from that folder: drop --rootdir "
            "and -c"
        )


def resolve_rehearsal(config: pytest.Config, root: Path) -> ProcessRun:
    """A rehearsal of the stage asked for, in its session: ``root`` holds the code (a copy
    of the working tree, :func:`prereg.records.snapshot.working_copy`), the rehearsal folder
    and the runs it reads belong to the checkout (``--prereg-checkout``, else ``root``). The
    plan pytest.ini names for it; the inputs and required runs bound as ``prereg approve``
    would bind them (paths as typed resolve in the folder the command was typed in); a new
    folder name under ``runs/rehearsals/``. No approval is read, nothing is spent."""
    stage = config.option.research_stage
    checkout = Path(config.option.prereg_checkout or root)
    invoked = Path(os.environ.get(hermetic.INVOKED_FROM) or config.invocation_params.dir)
    confine_project_kinds(root)
    check_rehearsal_command(config, root)
    asked = config.option.prereg_rehearse_plan
    plan_path = known_plan(root, config, stage) if asked is None else asked
    try:
        where = Path(invoked if asked else checkout, plan_path).resolve()
        plan_path = where.relative_to(checkout.resolve()).as_posix()
        plan = load_plan(root / plan_path)
        spec = plan.stage(stage)
    except (ValueError, KeyError, OSError) as err:  # outside the checkout, refused, no stage
        what = f"--rehearse-plan {asked}" if asked else f"the plan {plan_path} of stage {stage}"
        raise pytest.UsageError(f"{what}: {err.args[0] if err.args else err}") from None
    inputs = {}
    for name, path in _pairs(config.option.prereg_rehearse_inputs, "--rehearse-input").items():
        if name not in spec["inputs"]:
            raise pytest.UsageError(
                f"--rehearse-input {name}: stage {stage} binds no such input; it binds "
                f"{list(spec['inputs'])}"
            )
        try:
            inputs[name] = approvals.bind_input(Path(invoked, path))
        except approvals.ApprovalError as err:
            raise pytest.UsageError(f"--rehearse-input {name}: {err}") from None
    missing = [name for name in spec["inputs"] if name not in inputs]
    if missing:
        raise pytest.UsageError(
            f"stage {stage} reads the input(s) {missing}: give each as --rehearse-input NAME=PATH"
        )
    use_runs = _pairs(config.option.prereg_rehearse_use_runs, "--rehearse-use-run")
    required = {}
    for need in spec["requires"]:
        rehearsed = whole_rehearsals(checkout, need)  # the newest last
        run_id = (
            use_runs.pop(need, None)
            or approvals.latest_complete_run(checkout, need)
            or (rehearsed[-1] if rehearsed else None)
        )
        if run_id is None:
            raise pytest.UsageError(
                f"stage {stage} requires a run of stage {need}, and there is none, nor a passing "
                f"rehearsal of the whole stage: rehearse {need} first (pytest "
                f"--research-stage={need} --rehearse), or name a run with --rehearse-use-run "
                f"{need}=RUN_ID"
            )
        if not _consumable(checkout, need, run_id):
            raise pytest.UsageError(
                f"--rehearse-use-run {need}={run_id}: no run folder runs/{run_id} with a manifest, "
                f"nor a passing rehearsal of the whole stage {need} under runs/rehearsals/"
            )
        required[need] = run_id
    if use_runs:
        raise pytest.UsageError(
            f"--rehearse-use-run: stage {stage} requires no stage {sorted(use_runs)}; it requires "
            f"{list(spec['requires'])}"
        )
    threads = spec["threads_per_worker"]
    provenance.set_thread_environment(threads)  # inherited by xdist workers started later
    name = new_rehearsal_name(checkout, stage)
    if not config.option.collectonly:  # a listing writes nothing, not even a folder
        config.option.xmlpath = str(RehearsalLayout(checkout, name).junit)
    plan_sha256, scale = sha256_file(root / plan_path), None
    scaled = None if config.option.prereg_rehearse_full_scale else rehearsal_data(plan.data, stage)
    if scaled is not None:  # read by this process and its workers; removed at its end
        scale = {
            "plan": {"path": plan_path, "sha256": plan_sha256},
            "parameters": spec["rehearsal_parameters"],
        }
        handle, scaled_path = tempfile.mkstemp(prefix="prereg-rehearsal-plan-", suffix=".json")
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(canonical_json(scaled))
        plan_path, plan_sha256 = scaled_path, sha256_file(Path(scaled_path))
    return ProcessRun(
        root=str(root),
        checkout=str(checkout) if checkout != root else None,
        stage=stage,
        plan_path=plan_path,
        plan_sha256=plan_sha256,
        rehearsal_scale=scale,
        module=spec["module"],
        threads=threads,
        seed_namespace=seeds.rehearsal_namespace(spec.get("seed_namespace")),
        inputs=inputs,
        required_runs=required,
        rehearsal=name,
    )


def _consumable(root: Path, stage: str, name: str) -> bool:
    """A rehearsal may read a run of ``stage`` (a folder with a manifest), or a passing
    whole-stage rehearsal of it (what a run never reads: its name is no run id)."""
    if valid_run_id(name):
        return RunLayout(root, name).manifest.exists()
    return name in whole_rehearsals(root, stage)


def _pairs(values: list[str], option: str) -> dict[str, str]:
    try:
        return option_policy.name_value_pairs(values, option)
    except ValueError as err:
        raise pytest.UsageError(str(err)) from None
