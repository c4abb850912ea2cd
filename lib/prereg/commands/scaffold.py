"""``prereg init [DIR]``: lay out a new preregistered project.

What it writes (nothing else, and never over an existing file):

``pytest.ini``
    the markers (``software``, ``research_stage``, ``slow``), strict markers and config,
    xunit2 JUnit, ``prereg_plans`` (empty: name each plan you write there),
    ``prereg_research_paths = experiments`` and ``pythonpath = src`` (the project's code).
``conftest.py``
    ``pytest_plugins = ("prereg.plugin",)``: a no-op while prereg's ``pytest11`` entry point
    loads the plugin, and what loads it under ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``.
``plans/BASELINE.json``
    the immutable historical files the gate checks: none yet (``"files": {}``).
``plans/approvals/``, ``experiments/``
    empty folders (a ``.gitkeep`` each, so git keeps them).
``checks/test_project.py``
    a software check: every plan in pytest.ini loads and validates as ``prereg approve``
    judges it (its stage kinds load, their settings parse, their item grids can be seeded,
    each stage's module is where a run collects it), seed namespaces are not shared, and
    the baseline holds. ``pytest -m software`` passes at once.
``.gitignore``
    ``runs/`` (run folders live outside git; their records are git refs), caches, venvs.

The folder becomes a git repository (``git init``) unless it already is the top of one.

``prereg init --stage NAME`` (:func:`init_stage`) also writes a working stage, in a new
project or in an existing one (then only the stage's files and its line in pytest.ini):

``plans/<NAME>_PLAN.json``
    the plan, with this machine's environment pins; named under ``prereg_plans``.
``src/<package>/kind.py`` (``<package>``: NAME with ``_`` for ``-``)
    the stage kind in the project's own code (``"kind": "<package>.kind:KIND"``,
    ``pythonpath = src``) on ``prereg.api`` alone: commented and working, on a toy seeded
    computation that the replay reruns.
``experiments/test_<package>.py``
    the items, one per replicate, marked ``research_stage(NAME)``.
``checks/test_<package>_kind.py``
    a software check of the kind's settings, seeds, item, summary and replay, no run.

``prereg init --stage NAME --requires OTHER`` (in an existing project) writes a stage that
decides from a run of OTHER instead: no plan of its own (NAME joins OTHER's plan, so its
rule is frozen before OTHER runs; one item, no seed, a single attempt), a kind whose item
reads the summary of the OTHER run its approval binds and applies the plan's rule
(``field``, ``threshold``), its items module and its software check.
"""

from __future__ import annotations

import configparser
import importlib.util
import json
import keyword
import re
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from string import Template

from prereg.base.provenance import pin_form, pinned_environment
from prereg.decisions.approval import list_approvals
from prereg.records import STAGE_NAME, ledger

PYTEST_INI = """\
[pytest]
# Research stages run only behind --research-stage=NAME and a committed approval
# (prereg's pytest plugin); a plain pytest run collects the software checks only.
testpaths = checks experiments
python_files = test_*.py
addopts = -ra --strict-markers --strict-config -p no:randomly
junit_family = xunit2
markers =
    software: software checks (unit, property, integration on small data); what CI runs
    research_stage(name): an item of the named preregistered research stage
    slow: a software check that takes more than a few seconds
# The plans whose stages pytest and prereg know, one a line (e.g. plans/MY_PLAN.json).
prereg_plans =
prereg_research_paths = experiments
# The project's own code (a stage kind's package, src/<package>/), importable by items,
# checks and prereg.
pythonpath = src
"""

CONFTEST = """\
# prereg's pytest plugin. Installing prereg already loads it (entry point pytest11
# "prereg.plugin"); this line is then a no-op, and loads it under
# PYTEST_DISABLE_PLUGIN_AUTOLOAD.
pytest_plugins = ("prereg.plugin",)
"""

BASELINE = """\
{
  "description": "Immutable historical files (earlier configs and outcomes). The gate refuses any run while one of them differs from the SHA-256 listed here.",
  "files": {}
}
"""

CHECK = '''\
"""The project's own software check: its plans load and validate, and the baseline
holds."""

from pathlib import Path

import pytest
from prereg import api

pytestmark = pytest.mark.software


def test_every_plan_in_pytest_ini_loads_and_validates(pytestconfig):
    root = Path(pytestconfig.rootpath)
    namespaces = {}
    for rel in pytestconfig.getini("prereg_plans"):
        plan = api.load_plan(root / rel)
        for stage, spec in plan.stages.items():
            # the kind loads, its settings parse, its grid can be seeded:
            api.validate_stage(plan, stage)
            problem = api.stage_module_problem(root, Path(rel), stage, spec["module"])
            assert problem is None, problem  # as prereg approve judges it
            namespace = spec["seed_namespace"]
            if namespace is not None:
                assert namespace not in namespaces, (
                    f"{rel}: stage {stage} shares seed namespace {namespace!r} with "
                    f"{namespaces[namespace]}"
                )
                namespaces[namespace] = f"{rel}: stage {stage}"


def test_the_baseline_holds(pytestconfig):
    assert api.baseline_problems(Path(pytestconfig.rootpath)) == []
'''

GITIGNORE = """\
# Run folders: hashed records checked by prereg audit, kept out of git (git records each
# run id's start and manifest under refs/prereg/*; push those refs with the code).
runs/
__pycache__/
*.py[cod]
.pytest_cache/
.hypothesis/
*.egg-info/
build/
dist/
.venv/
venv/
"""

FILES: dict[str, str] = {
    "pytest.ini": PYTEST_INI,
    "conftest.py": CONFTEST,
    "plans/BASELINE.json": BASELINE,
    "plans/approvals/.gitkeep": "",
    "experiments/.gitkeep": "",
    "checks/test_project.py": CHECK,
    ".gitignore": GITIGNORE,
}


class InitRefused(RuntimeError):
    """``prereg init`` wrote nothing; the message says why and what to do."""


def _git(folder: Path, *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            ["git", "-C", str(folder), *args], capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        raise InitRefused("git is not installed; install it (apt-get install git)") from None


def _git_top(folder: Path) -> Path | None:
    """The top of the git work tree holding ``folder`` (None: none)."""
    probe = folder
    while not probe.exists():
        probe = probe.parent
    done = _git(probe, "rev-parse", "--show-toplevel")
    return Path(done.stdout.strip()).resolve() if done.returncode == 0 else None


def _check_folder(folder: Path, rels: list[str], *, what: str, advice: str) -> Path | None:
    """Refuse, writing nothing, when any of ``rels`` exists under ``folder`` or would be
    written through a symbolic link, or when ``folder`` lies inside a git repository's own
    folder or inside a checkout without being its top; the top of its checkout otherwise."""
    if folder.exists() and not folder.is_dir():
        raise InitRefused(f"{folder} exists and is not a folder")
    existing = [rel for rel in rels if (folder / rel).exists() or (folder / rel).is_symlink()]
    if existing:
        raise InitRefused(
            f"{folder} already holds {', '.join(existing)}; {what} never overwrites a file "
            f"and wrote nothing. {advice}"
        )
    linked = sorted(
        {
            parent.relative_to(folder).as_posix()
            for rel in rels
            for parent in (folder / rel).parents
            if parent != folder and folder in parent.parents and parent.is_symlink()
        }
    )
    if linked:
        raise InitRefused(
            f"{folder} holds the symbolic link(s) {', '.join(linked)}, through which {what} "
            "would write outside the folder and wrote nothing; remove them (a prereg "
            "project's files are the checkout's own), or run `prereg init NEW_FOLDER`"
        )
    probe = folder
    while not probe.exists():
        probe = probe.parent
    if _git(probe, "rev-parse", "--is-inside-git-dir").stdout.strip() == "true":
        raise InitRefused(
            f"{folder} lies inside a git repository's own folder (.git, or a bare repository), "
            "and wrote nothing; run prereg init in a folder outside it"
        )
    top = _git_top(folder)
    if top is not None and top != folder:
        raise InitRefused(
            f"{folder} lies inside the git checkout {top}, but a prereg project is the top of "
            f"its own checkout (the gate, approvals and run records are the checkout's); run "
            f"prereg init in {top}, or in a folder outside it"
        )
    return top


def _write(folder: Path, files: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _git_init(folder: Path) -> None:
    done = _git(folder, "init", "-q")
    if done.returncode != 0:
        raise InitRefused(f"git init failed in {folder}: {done.stderr.strip()}")


def init_project(folder: Path) -> tuple[list[str], bool]:
    """Lay out a prereg project in ``folder``: the files written (relative paths), and
    whether it ran ``git init`` (False: ``folder`` was already the top of a checkout).

    Refuses, writing nothing, when any file it would write exists, or when ``folder`` lies
    inside a git work tree without being its top (prereg's root is the checkout's root).
    """
    folder = Path(folder).resolve()
    top = _check_folder(
        folder,
        list(FILES),
        what="prereg init",
        advice="Move those files aside (or merge them by hand with what `prereg init` writes "
        "into an empty folder), or run `prereg init NEW_FOLDER`",
    )
    _write(folder, FILES)
    if top is None:
        _git_init(folder)
    ledger.fetch_records(folder)  # an existing checkout's remotes: git fetch brings the records
    return list(FILES), top is None


def next_steps(folder: Path, written: list[str], initialised_git: bool) -> str:
    tools = Path(sys.executable).parent
    pytest, prereg = tools / "pytest", tools / "prereg"
    run_id = "STAGE-YYYYMMDD-001"
    lines = [f"prereg init: laid out a prereg project in {folder}"]
    lines += [f"  {rel}" for rel in written]
    if initialised_git:
        lines.append("  (and ran git init)")
    lines += [
        "",
        "next steps (README.md of prereg, 'Preregister your own experiment', walks an example):",
        f"  cd {folder}",
        "  git add -A && git commit -m 'Lay out a prereg project'",
        f"  {pytest} -m software        # the project's checks pass at once",
        "  1. write a plan, plans/MY_PLAN.json, and name it under prereg_plans in pytest.ini",
        "  2. write each stage's experiments module (the plan's 'module', experiments/test_*.py)",
        "     and its stage kind: plain, or one in your code (the plan's kind mylab.kind:KIND)",
        "     in src/mylab/kind.py (src is on pytest.ini's pythonpath; no install needed);",
        "     `prereg init --stage NAME` writes a working stage of that shape to start from",
        "  3. commit, then approve one run and commit the approval:",
        f"     {prereg} approve --stage STAGE --run-id {run_id} --accept-deviations",
        f"     git add plans/approvals && git commit -m 'Approve {run_id}'",
        f"  4. {pytest} --research-stage=STAGE        # add -n 2 for two workers",
        f"  5. {prereg} audit runs/{run_id}",
        f"     {prereg} report runs/{run_id}",
        "  with a git remote, a run pushes its record there (git clone does not copy it); let",
        "  git fetch bring the records other clones pushed (prereg init set this for the",
        "  remotes it found):",
        f"     git config --add remote.origin.fetch '{ledger.FETCH_REFSPEC}'",
    ]
    return "\n".join(lines)


# -- prereg init --stage NAME: a working stage whose kind is the project's own code ----------

KIND_TEMPLATE = '''\
"""The stage kind of stage $stage: what prereg calls beyond the items.

Its plan: $plan. Written by `prereg init --stage` as a toy
that works: each replicate draws normal numbers from its own seed and writes
result.json; the summary collects them; the replay reruns every item from its
recorded seed and compares each file. Replace `compute` and `build_summary` with your
experiment, and the parameters they read in `Settings` and the plan. Keep `compute` a
pure function of the settings and the generator: the auditor's replay reruns it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from prereg import api

STAGE = "$stage"
ITEM_FILE = "result.json"
SUMMARY_FILE = "summary.json"
# The replay reruns the items on the auditor's machine: numbers agree within this
# relative tolerance (another BLAS may round differently); beyond it, a finding.
REPLAY_RTOL = 1e-9


@dataclass(frozen=True)
class Settings(api.StageSettings):
    """The stage's parameters (and its seed_namespace), parsed once; items, summary,
    replay and report use it. `prereg approve` and the software check refuse a bad plan,
    naming the field, before a run id is spent. Add each number you read here and to
    the plan."""

    replicates: int = api.bounded(minimum=1)  # one item each
    draws: int = api.bounded(minimum=1)  # normal numbers per replicate


# The item grid: one item per replicate (keys replicate0, replicate1, ...), each
# seeded from ("replicate", r) after the plan's seed_namespace. `prereg approve`
# refuses an empty grid or a seed that cannot be derived, before a run id is spent.
GRID = api.Grid("replicate", lambda settings: range(settings.replicates))


def compute(settings: Settings, rng) -> dict:
    """One replicate's result from its generator. REPLACE with your experiment."""
    draws = rng.normal(size=settings.draws)
    return {"mean": draws.mean(), "max": draws.max()}


def run_item(research, replicate: int) -> None:
    """The item of one replicate (``research``: its api.ItemContext); the replay reruns
    it, so it writes only to research.outputs and reads no research.inputs (items that
    read inputs need a replay of their own, with api.replay_outputs)."""
    rng = GRID.start(research, replicate)  # records the cell and its own seed first
    result = {"replicate": replicate, **compute(research.settings, rng)}
    api.save_json(research.outputs / ITEM_FILE, result)
    research.progress(f"mean {result['mean']:.4f}")


def build_summary(settings: Settings, results: Mapping[str, dict]) -> dict:
    """The summary of every item's result (by item key). REPLACE with your analysis."""
    ordered = sorted(results.values(), key=lambda r: r["replicate"])
    mean = sum(r["mean"] for r in ordered) / len(ordered)
    return {"replicates": ordered, "mean_of_means": mean}


KIND = api.StageKind(
    name="$kind",
    settings=api.settings_parser(Settings),
    grid=GRID,
    # On the controller, once every item passed: summary/summary.json.
    summarise=api.summarise_items(
        SUMMARY_FILE, ITEM_FILE, cells=GRID.cells, build=build_summary
    ),
    # For `prereg audit`: rerun every item and the summary; one finding per field that
    # differs, naming the item, the file and the field.
    replay=api.rerun_replay(run_item, GRID.cells, rtol=REPLAY_RTOL),
    # The report: the summary's fields, and its replicates as a table.
    render=api.render_summary(
        f"Stage {STAGE}", SUMMARY_FILE, table="replicates", section_id=STAGE
    ),
    # One line for the index of runs (`prereg runs`, the report index).
    headline=api.headline_from(SUMMARY_FILE, "mean of means {mean_of_means:.4f}"),
    doc=__doc__ or "",
)
'''

EXPERIMENTS_TEMPLATE = '''\
"""Stage $stage: one item per replicate of the approved plan. Thin: the work is
in $kind_file, which the summary and the auditor's replay share."""

import pytest
from prereg.plugin import parametrize_items

from $package import kind

pytestmark = pytest.mark.research_stage(kind.STAGE)


def pytest_generate_tests(metafunc):  # the approved plan's grid (or the rehearsed one)
    parametrize_items(metafunc, kind.KIND, kind.STAGE)


def test_replicate(replicate, research):
    kind.run_item(research, replicate)
'''

CHECK_TEMPLATE = '''\
"""Software checks of stage $stage, run by `pytest -m software`: what its items
derive from the plan, and one item, the summary and the replay, without a run."""

import pytest
from prereg import api

from $package import kind

pytestmark = pytest.mark.software


@pytest.fixture
def plan(pytestconfig):
    return api.load_plan(pytestconfig.rootpath / "$plan")


def test_every_cell_of_the_plan_has_its_own_key(plan):
    settings = kind.KIND.settings(plan.data, kind.STAGE)
    grid = kind.GRID.cells(settings)
    assert len(grid) == settings.replicates
    assert [kind.GRID.item_key({"replicate": r}) for r in grid.values()] == list(grid)


def test_a_bad_setting_is_refused_naming_its_field(plan):
    plan.data["stages"][kind.STAGE]["parameters"]["replicates"] = 0
    with pytest.raises(ValueError, match="parameters.replicates: must be >= 1, got 0"):
        kind.KIND.settings(plan.data, kind.STAGE)


def test_an_item_replays_clean_and_a_changed_result_is_found(plan, tmp_path):
    spec = plan.stages[kind.STAGE]
    spec["parameters"]["replicates"] = 1  # a grid of one item
    outputs = tmp_path / "items" / "replicate0"
    outputs.mkdir(parents=True)
    namespace = spec["seed_namespace"]
    research = api.ItemContext(kind.STAGE, "check", plan.data, outputs, namespace, None)
    kind.run_item(research, 0)
    assert research.record["seeds"] == [api.derivation(namespace, "replicate", 0)]
    item = {"nodeid": "replicate0", "output_dir": "replicate0", **research.record}
    view = api.RunView(tmp_path, tmp_path, plan, kind.STAGE, (item,), kind=kind.KIND)
    kind.KIND.summarise(view)
    assert kind.KIND.replay(view) == []

    result = outputs / kind.ITEM_FILE
    api.save_json(result, {**api.load_json(result), "mean": 1e6})
    [finding] = kind.KIND.replay(view)
    assert finding.startswith("item replicate0 result.json.mean: recorded 1000000.0,")
'''


ANALYSIS_KIND_TEMPLATE = '''\
"""A stage kind that decides, by its plan's rule, from a run of the stage it requires.

Stage: $stage
Requires: $requires
Plan: $plan (the rule is frozen there before that stage runs)

Written by `prereg init --stage --requires` as a toy that works: its one item reads
the summary of the required run the approval binds, applies the plan's rule to one
of its fields and writes decision.json; the replay reruns it from that same run.
Replace `decide` with your analysis and rule, and the parameters it reads in
`Settings` and the plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from prereg import api

STAGE = "$stage"
REQUIRES = "$requires"
REQUIRED_SUMMARY = "summary/summary.json"  # in the required run the approval binds
ITEM_FILE = "decision.json"
SUMMARY_FILE = "decision.json"


@dataclass(frozen=True)
class Settings(api.StageSettings):
    """The rule's parameters, as the plan states them."""

    seed_namespace: str | None  # the decision draws no random number
    field: str  # the field of the required stage's summary the rule reads
    threshold: float  # the decision is "above" when that field is above it


# One item, the decision, which draws no random number.
GRID = api.Grid("cell", lambda settings: ["decision"], seeded=False)


def decide(settings: Settings, required: Mapping) -> dict:
    """The decision the rule gives from the required stage's summary. REPLACE it."""
    if settings.field not in required:
        raise KeyError(f"the summary of {REQUIRES} has no field {settings.field!r}")
    value = required[settings.field]
    decision = "above" if value > settings.threshold else "not above"
    return {
        "field": settings.field,
        "value": value,
        "threshold": settings.threshold,
        "decision": decision,
    }


def run_item(research, cell: str) -> None:
    """The decision item: reads only the bound required run, writes decision.json."""
    GRID.start(research, cell)
    required = api.load_json(research.required_runs[REQUIRES] / REQUIRED_SUMMARY)
    result = decide(research.settings, required)
    api.save_json(research.outputs / ITEM_FILE, result)
    research.progress(f"decision: {result['decision']}")


KIND = api.StageKind(
    name="$kind",
    settings=api.settings_parser(Settings),
    grid=GRID,
    summarise=api.summarise_items(
        SUMMARY_FILE,
        ITEM_FILE,
        cells=GRID.cells,
        build=lambda settings, found: found["decision"],
    ),
    # For `prereg audit`: the decision rerun from the same run, compared.
    replay=api.rerun_replay(run_item, GRID.cells),
    render=api.render_summary(f"Stage {STAGE}", SUMMARY_FILE, section_id=STAGE),
    headline=api.headline_from(SUMMARY_FILE, "decision: {decision} ({field} {value})"),
    doc=__doc__ or "",
)
'''

ANALYSIS_EXPERIMENTS_TEMPLATE = '''\
"""The items of a stage that decides from a run of the stage it requires: one item.

Thin: the work is in the stage kind, which the summary and the auditor's replay share.
"""

import pytest
from prereg.plugin import parametrize_items

from $package import kind

pytestmark = pytest.mark.research_stage(kind.STAGE)


def pytest_generate_tests(metafunc):  # the approved plan's grid (or the rehearsed one)
    parametrize_items(metafunc, kind.KIND, kind.STAGE)


def test_decision(cell, research):
    kind.run_item(research, cell)
'''

ANALYSIS_CHECK_TEMPLATE = '''\
"""Software checks of a stage that decides from a run of another, run by `pytest -m
software`: its rule applied to a made-up required summary, its summary and its replay.
"""

import pytest
from prereg import api

from $package import kind

pytestmark = pytest.mark.software


@pytest.fixture
def plan(pytestconfig):
    return api.load_plan(pytestconfig.rootpath / "$plan")


def test_the_decision_replays_clean_and_a_changed_decision_is_found(plan, tmp_path):
    settings = kind.KIND.settings(plan.data, kind.STAGE)
    # A made-up required run, and this stage's run folder whose approval binds it.
    required, run_dir = tmp_path / "runs" / "required", tmp_path / "runs" / "check"
    above = {settings.field: settings.threshold + 1}
    api.save_json(required / kind.REQUIRED_SUMMARY, above)
    bound = {kind.REQUIRES: {"run_id": "required"}}
    api.save_json(run_dir / "approval.json", {"requires": bound})
    outputs = run_dir / "items" / "decision"
    outputs.mkdir(parents=True)
    research = api.ItemContext(
        stage=kind.STAGE,
        run_id="check",
        plan=plan.data,
        outputs=outputs,
        seed_namespace=None,
        deadline=None,
        required_runs={kind.REQUIRES: required},
    )
    kind.run_item(research, "decision")
    assert api.load_json(outputs / kind.ITEM_FILE)["decision"] == "above"
    item = {"nodeid": "decision", "output_dir": "decision", **research.record}
    view = api.RunView(tmp_path, run_dir, plan, kind.STAGE, (item,), kind=kind.KIND)
    kind.KIND.summarise(view)
    assert kind.KIND.replay(view) == []

    result = outputs / kind.ITEM_FILE
    api.save_json(result, {**api.load_json(result), "decision": "not above"})
    [finding] = kind.KIND.replay(view)
    assert "decision.json.decision" in finding
'''


@dataclass(frozen=True)
class StageLayout:
    """Where ``prereg init --stage NAME`` puts a stage's files (paths relative to the root)."""

    stage: str
    code_folder: str = "src"  # a folder pytest.ini's pythonpath names
    research_folder: str = "experiments"  # a folder of prereg_research_paths
    checks_folder: str = "checks"
    requires: str | None = None  # the stage it reads a run of (then it joins that one's plan)
    required_plan: str | None = None  # the plan of that stage, relative to the root

    @property
    def package(self) -> str:
        """The Python package of the stage's kind: the stage name with ``_`` for ``-``."""
        return self.stage.replace("-", "_")

    @property
    def plan(self) -> str:
        return self.required_plan or f"plans/{self.package.upper()}_PLAN.json"

    @property
    def kind(self) -> str:
        return f"{self.package}.kind:KIND"

    @property
    def kind_file(self) -> str:
        return _join(self.code_folder, self.package, "kind.py")

    @property
    def module(self) -> str:
        return _join(self.research_folder, f"test_{self.package}.py")

    @property
    def check(self) -> str:
        # Not test_<package>.py: two test modules of one basename cannot be collected together.
        return _join(self.checks_folder, f"test_{self.package}_kind.py")

    def files(self, pins: dict) -> dict[str, str]:
        """Every new file of the stage, by relative path: its plan (a stage that requires
        another joins that one's plan: :func:`add_stage_to_plan`), kind, items and check."""
        fill = {
            "stage": self.stage,
            "package": self.package,
            "plan": self.plan,
            "kind": self.kind,
            "kind_file": self.kind_file,
            "requires": self.requires or "",
        }
        if self.requires is None:
            templates = (KIND_TEMPLATE, EXPERIMENTS_TEMPLATE, CHECK_TEMPLATE)
            plan = {self.plan: plan_text(self, pins)}
        else:
            templates = (
                ANALYSIS_KIND_TEMPLATE,
                ANALYSIS_EXPERIMENTS_TEMPLATE,
                ANALYSIS_CHECK_TEMPLATE,
            )
            plan = {}
        kind, module, check = (Template(t).substitute(fill) for t in templates)
        return {
            **plan,
            _join(self.code_folder, self.package, "__init__.py"): "",
            self.kind_file: kind,
            self.module: module,
            self.check: check,
        }

    def analysis_entry(self) -> dict:
        """The plan entry of a stage that decides from a run of ``requires``: one item, no
        seed, a single attempt (its outcome decides; no amendment buys a second one)."""
        return {
            "kind": self.kind,
            "module": self.module,
            "description": (
                f"REPLACE: the decision rule, stated before {self.requires} runs. As written by "
                f"prereg init --stage {self.stage} --requires {self.requires}: 'above' when the "
                f"field of {self.requires}'s summary is above the threshold."
            ),
            "budget_seconds": 600,
            "budget_enforced": False,
            "requires": [self.requires],
            "seed_namespace": None,
            "single_attempt": True,
            "threads_per_worker": 1,
            "inputs": [],
            "parameters": {"field": "mean_of_means", "threshold": 0.0},
        }


def _join(*parts: str) -> str:
    return PurePosixPath(*parts).as_posix()


def machine_pins() -> dict:
    """This machine's environment in the fields a plan pins, so approving here names no
    deviation; a package that is not installed is pinned as ``"not installed"``."""
    return {k: pin_form(v) for k, v in pinned_environment().items()}


def plan_text(layout: StageLayout, pins: dict) -> str:
    plan = {
        "plan_id": f"{layout.stage}-1.0",
        "protocol": f"REPLACE: what stage {layout.stage} compares, on which data, and why",
        "description": (
            "Frozen before any run. REPLACE: the outcome each item records, the analysis of "
            "the summary, and the decision rule. As written by prereg init --stage: each "
            "replicate records the mean and maximum of its own seeded normal draws."
        ),
        "environment_pins": pins,
        "stages": {
            layout.stage: {
                "kind": layout.kind,
                "module": layout.module,
                "description": "One item per replicate: draw from its seed, write result.json.",
                "budget_seconds": 600,
                "budget_enforced": False,
                "requires": [],
                "seed_namespace": f"{layout.stage}-1.0",
                "single_attempt": False,
                "threads_per_worker": 1,
                "inputs": [],
                "parameters": {"replicates": 4, "draws": 1000},
            }
        },
    }
    return json.dumps(plan, indent=2) + "\n"


def check_stage_name(stage: str) -> None:
    """Refuse a stage name outside prereg's rule, or whose package would be a keyword."""
    if not re.fullmatch(STAGE_NAME, stage):
        raise InitRefused(
            f"stage name {stage!r} does not match prereg's stage-name rule {STAGE_NAME} "
            "(a lower-case letter, then lower-case letters, digits and '-', as run ids "
            "<stage>-YYYYMMDD-NNN need); choose one such as 'pilot' or 'paired-models'; "
            "wrote nothing"
        )
    package = stage.replace("-", "_")
    if keyword.iskeyword(package):
        raise InitRefused(
            f"stage name {stage!r} would make its kind the package {package!r}, a Python "
            "keyword that cannot be imported; choose another stage name; wrote nothing"
        )


def _check_package_free(layout: StageLayout) -> None:
    """Refuse a package name some module importable here already has (the standard library,
    an installed package): the project's kind would shadow it, or be shadowed."""
    found = importlib.util.find_spec(layout.package)
    if found is not None:
        where = found.origin or ", ".join(found.submodule_search_locations or []) or "built in"
        raise InitRefused(
            f"stage name {layout.stage!r} would make its kind the package {layout.package!r} "
            f"({_join(layout.code_folder, layout.package)}/), but a module {layout.package!r} "
            f"is importable here already ({where}); choose another stage name; wrote nothing"
        )


def add_stage_to_plan(path: Path, stage: str, entry: dict) -> None:
    """Add ``stage`` with its ``entry`` to the plan at ``path`` (rewritten as JSON indented
    by two, its fields in their order)."""
    plan = json.loads(path.read_text(encoding="utf-8"))
    plan["stages"][stage] = entry
    path.write_text(json.dumps(plan, indent=2) + "\n", encoding="utf-8")


def add_plan_to_ini(text: str, plan: str | None, pythonpath: str | None = None) -> str:
    """``text`` (a pytest.ini) with ``plan`` (when given) added as a line of
    ``prereg_plans`` in its ``[pytest]`` section, and the line ``pythonpath = <pythonpath>``
    when given; every other line kept byte for byte."""
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += newline
    header = next((i for i, line in enumerate(lines) if line.strip() == "[pytest]"), None)
    if header is None:
        raise InitRefused(
            "pytest.ini has no [pytest] section; a prereg project's pytest.ini starts with "
            "one (prereg init writes it); wrote nothing"
        )
    end = next((i for i in range(header + 1, len(lines)) if lines[i].startswith("[")), len(lines))
    key = next(
        (i for i in range(header + 1, end) if re.match(r"prereg_plans\s*[=:]", lines[i])), None
    )
    if plan is not None and key is None:
        lines.insert(header + 1, f"prereg_plans ={newline}    {plan}{newline}")
    elif plan is not None:
        after = key + 1
        while after < end and lines[after][:1] in (" ", "\t") and lines[after].strip():
            after += 1
        lines.insert(after, f"    {plan}{newline}")
    if pythonpath is not None:
        lines.insert(header + 1, f"pythonpath = {pythonpath}{newline}")
    return "".join(lines)


@dataclass(frozen=True)
class StageInit:
    """What ``prereg init --stage`` did: the stage's layout, the files it wrote, whether it
    edited an existing pytest.ini (and what it added), and whether it ran ``git init``."""

    folder: Path
    layout: StageLayout
    written: list[str]
    ini_lines: list[str]  # the lines added to an existing pytest.ini ([] in a new project)
    initialised_git: bool


def _read_ini(ini: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    try:
        parser.read_string(ini.read_text(encoding="utf-8"), source=str(ini))
    except (configparser.Error, UnicodeDecodeError) as err:
        raise InitRefused(f"{ini} does not parse ({err}); fix it first; wrote nothing") from None
    if not parser.has_section("pytest"):
        raise InitRefused(
            f"{ini} has no [pytest] section; a prereg project's pytest.ini starts with one "
            "(prereg init writes it); wrote nothing"
        )
    return parser


def _existing_layout(
    folder: Path, stage: str, requires: str | None = None
) -> tuple[StageLayout, str | None]:
    """The stage's layout in an existing project, from its pytest.ini; and the pythonpath
    line to add (``src``) when the ini names none. A stage that ``requires`` another joins
    the plan that has it."""
    ini = folder / "pytest.ini"
    if ini.is_symlink():
        raise InitRefused(f"{ini} is a symbolic link; prereg init --stage edits only a file")
    parser = _read_ini(ini)
    value = {
        key: parser.get("pytest", key, fallback="").split()
        for key in ("pythonpath", "prereg_research_paths", "testpaths", "prereg_plans")
    }
    if not value["prereg_research_paths"]:
        raise InitRefused(
            f"{ini} names no prereg_research_paths, so a software run would collect the stage's "
            "items; add the line `prereg_research_paths = experiments` (prereg init writes it) "
            "and run prereg init --stage again; wrote nothing"
        )
    required_plan = None
    for rel in value["prereg_plans"]:
        try:
            stages = json.loads((folder / rel).read_text(encoding="utf-8")).get("stages", {})
        except (OSError, ValueError, AttributeError):
            continue  # the project's own check names an unreadable plan
        if stage in stages:
            raise InitRefused(
                f"{rel} (in pytest.ini's prereg_plans) already has a stage {stage!r}; choose "
                "another stage name; wrote nothing"
            )
        if requires is not None and requires in stages:
            required_plan = rel
    if requires is not None and required_plan is None:
        raise InitRefused(
            f"--requires {requires}: no plan of pytest.ini's prereg_plans {value['prereg_plans']} "
            f"has a stage {requires!r}; add that stage first (prereg init --stage {requires}); "
            "wrote nothing"
        )
    research = value["prereg_research_paths"]
    for name in ("pythonpath", "prereg_research_paths"):
        first = (value[name] or ["src"])[0]
        if PurePosixPath(first).is_absolute() or ".." in PurePosixPath(first).parts:
            raise InitRefused(
                f"{ini}: {name} names {first} first, outside the checkout; the stage's files go "
                f"in the first folder {name} names: name one inside the checkout first; "
                "wrote nothing"
            )
    tests = [p for p in value["testpaths"] if p not in research]
    layout = StageLayout(
        stage,
        code_folder=(value["pythonpath"] or ["src"])[0],
        research_folder=research[0],
        checks_folder="checks" if "checks" in tests or not tests else tests[0],
        requires=requires,
        required_plan=required_plan,
    )
    return layout, None if value["pythonpath"] else "src"


def init_stage(folder: Path, stage: str, requires: str | None = None) -> StageInit:
    """``prereg init --stage STAGE [--requires OTHER]``: write a working stage into ``folder``.

    In a folder without a pytest.ini, first lay out a new project (:func:`init_project`'s
    files, its pytest.ini naming the plan and ``pythonpath = src``). In an existing project,
    write only the stage's files and add the plan to pytest.ini's ``prereg_plans`` (and
    ``pythonpath = src`` when it names no pythonpath), keeping every other byte. A stage that
    ``requires`` another (in an existing project) decides from a run of it: it joins that
    stage's plan, so its rule is frozen with it. Refuses, writing nothing, a stage name
    outside the rule, a stage some plan already has, a required stage no plan has, and any
    file that exists.
    """
    folder = Path(folder).resolve()
    check_stage_name(stage)
    pins = machine_pins()
    ini = folder / "pytest.ini"
    existing = ini.exists() or ini.is_symlink()
    if requires is not None and not existing:
        raise InitRefused(
            f"--requires {requires}: {folder} has no pytest.ini, so no stage {requires!r} to "
            f"require; run prereg init --stage {requires} there first; wrote nothing"
        )
    if existing:
        layout, pythonpath = _existing_layout(folder, stage, requires)
        files = layout.files(pins)
        what, advice = "prereg init --stage", "Choose another stage name, or move them aside"
    else:
        layout, pythonpath = StageLayout(stage), None
        files = {**FILES, **layout.files(pins)}
        files["pytest.ini"] = add_plan_to_ini(PYTEST_INI, layout.plan)
        what, advice = "prereg init", "Move those files aside, or run `prereg init NEW_FOLDER`"
    top = _check_folder(folder, list(files), what=what, advice=advice)
    _check_package_free(layout)
    ini_lines: list[str] = []
    if existing:  # edited from its bytes, so its line ends stay as they are
        text = ini.read_bytes().decode("utf-8")
        if requires is None:
            edited = add_plan_to_ini(text, layout.plan, pythonpath)
            ini_lines = [f"prereg_plans += {layout.plan}"]
        else:  # its plan is listed already
            edited = add_plan_to_ini(text, None, pythonpath)
        ini_lines += [f"pythonpath = {pythonpath}"] if pythonpath else []
    _write(folder, files)
    if requires is not None:
        add_stage_to_plan(folder / layout.plan, stage, layout.analysis_entry())
        files[layout.plan] = "(its stage added)"
    if existing:
        ini.write_bytes(edited.encode("utf-8"))
    elif top is None:
        _git_init(folder)
    initialised = top is None and not existing
    return StageInit(folder, layout, list(files), ini_lines, initialised)


def stage_next_steps(done: StageInit) -> str:
    """What ``prereg init --stage`` wrote, and the commands from here to an audited run."""
    tools = Path(sys.executable).parent
    pytest, prereg = tools / "pytest", tools / "prereg"
    layout, stage = done.layout, done.layout.stage
    run_id = f"{stage}-{datetime.now(timezone.utc):%Y%m%d}-001"
    roles = {
        layout.plan: "the plan, with this machine's environment pins: describe your experiment",
        layout.kind_file: "the stage kind: replace compute and build_summary with your science",
        layout.module: "the stage's items (one per replicate)",
        layout.check: "the software check of the kind (pytest -m software runs it)",
    }
    if layout.requires is not None:
        roles[layout.plan] = (
            f"{layout.requires}'s plan, with stage {stage} added: state your decision rule"
        )
        roles[layout.kind_file] = "the stage kind: replace decide with your analysis and rule"
        roles[layout.module] = f"the stage's item (the decision from a run of {layout.requires})"
    new = "pytest.ini" in done.written
    lines = [f"prereg init --stage {stage}: wrote a working stage in {done.folder}"]
    lines += [f"  {rel}" + (f"    {roles[rel]}" if rel in roles else "") for rel in done.written]
    lines += [f"  pytest.ini: {line}" for line in done.ini_lines]
    if done.initialised_git:
        lines.append("  (and ran git init)")
    add = "-A" if new else " ".join([*done.written, "pytest.ini"])
    other = layout.requires
    if other is not None and any(a.stage == other for a in list_approvals(done.folder)):
        lines.append(
            f"note: {other} has approvals under its plan, which now holds {stage} too: "
            f'{other}\'s next approval records that as an amendment (--amend "why")'
        )
    lines += ["", "next steps:", f"  cd {done.folder}"]
    lines += [f"  {pytest} -m software        # the stage's check passes as written"]
    if other is not None:
        lines += [
            f"  {pytest} --research-stage={other} --rehearse   # the stage it reads, rehearsed",
            f"  {pytest} --research-stage={stage} --rehearse   # decides from that rehearsal",
            f"  git add {add} && git commit -m 'Add stage {stage}'   # the rule, frozen",
            f"  (approve, run and audit {other} first: {stage} binds its latest complete run)",
        ]
    else:
        lines += [
            f"  {pytest} --research-stage={stage} --rehearse   # try it: not a run, nothing spent",
            f"  git add {add} && git commit -m 'Add stage {stage}'",
        ]
    lines += [
        f"  {prereg} approve --stage {stage} --run-id {run_id}",
        f"  git add plans/approvals && git commit -m 'Approve {run_id}'",
        f"  {pytest} --research-stage={stage}        # add -n 2 for two workers",
        f"  {prereg} audit runs/{run_id}          # the replay recomputes every item",
        f"  {prereg} report runs/{run_id}",
    ]
    return "\n".join(lines)
