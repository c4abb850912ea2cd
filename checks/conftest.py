"""Check modules that need an optional extra are not collected where it is absent.

The core (harness, statistics, the calibration stage) installs on the protocol's Python 3.9
without the ``training`` extra (torch) and the ``e04`` extra (Python >= 3.10 only); see
docs/how-to/pinned-python-3.9.md. A check module (or a folder's conftest.py) importing one of
those packages at module level would fail to collect there, and a collection error also
stops every research run, whose gate lists the whole collection. So a module or folder
whose module-level imports fail exactly because one of these packages is not installed is
not collected, and the terminal summary names it and the extra (nothing enters a research
run's junit.xml). Any other import error, or a missing package that is installed after all,
stays pytest's collection error. With every extra installed (``bash install.sh``, what CI
runs) everything is collected.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from packaging.requirements import Requirement

try:
    import tomllib
except ImportError:  # Python 3.9 and 3.10: pytest's own TOML reader
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
# The extras of pyproject.toml whose absence keeps check modules out of the collection.
OPTIONAL_EXTRAS = ("training", "e04")
# Distributions whose top-level module is not their normalised name with "-" as "_".
IMPORT_NAMES = {"faiss-cpu": "faiss"}


def distribution_name(requirement: str) -> str:
    """The normalised (PEP 503) distribution name of a requirement string."""
    return re.sub(r"[-_.]+", "-", Requirement(requirement).name).lower()


def import_name(distribution: str) -> str:
    """The top-level module a distribution of an extra provides."""
    return IMPORT_NAMES.get(distribution, distribution.replace("-", "_"))


def extra_distributions(pyproject: Path = PYPROJECT) -> dict[str, list[str]]:
    """extra -> its distributions (normalised names), for each of OPTIONAL_EXTRAS, as
    ``[project.optional-dependencies]`` of ``pyproject`` lists them."""
    with pyproject.open("rb") as file:
        table = tomllib.load(file)["project"]["optional-dependencies"]
    return {extra: [distribution_name(r) for r in table[extra]] for extra in OPTIONAL_EXTRAS}


# Top-level modules provided by an optional extra, and that extra.
OPTIONAL_MODULES = {
    import_name(distribution): extra
    for extra, distributions in extra_distributions().items()
    for distribution in distributions
}


def absent_optional(module: str) -> tuple[str, str] | None:
    """``(module, extra)`` when ``module`` belongs to an extra and is not installed."""
    module = module.split(".")[0]
    if module not in OPTIONAL_MODULES or importlib.util.find_spec(module) is not None:
        return None
    return module, OPTIONAL_MODULES[module]


def imports_missing_extra(source: Path) -> tuple[str, str] | None:
    """``(module, extra)`` when a module-level import of ``source`` needs an absent extra."""
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # "from package import module" imports the submodule too (an attribute is no
            # module: its import fails naming a project module, which is not an extra)
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            try:
                importlib.import_module(name)
            except ModuleNotFoundError as error:
                missing = absent_optional(error.name or "")
                if missing:
                    return missing
            except Exception:  # noqa: BLE001, S112 - any other error is pytest's to report
                continue
    return None


_NOT_COLLECTED: list[str] = []


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    if collection_path.is_dir():
        source, what = collection_path / "conftest.py", "its conftest.py"
    else:
        source, what = collection_path, "it"
    if not (source.is_file() and source.name.endswith(".py")):
        return None
    missing = imports_missing_extra(source)
    if missing is None:
        return None
    module, extra = missing
    _NOT_COLLECTED.append(
        f"{collection_path.relative_to(config.rootpath)}: not collected, {what} needs {module} "
        f"from the optional extra {extra}, not installed here"
    )
    return True


def pytest_terminal_summary(terminalreporter) -> None:
    for line in _NOT_COLLECTED:
        terminalreporter.write_line(f"SKIPPED {line}")


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A temporary site-packages folder that prereg.evidence.execution takes for the only one."""
    from prereg.evidence import execution

    folder = (tmp_path / "site-packages").resolve()
    folder.mkdir()
    monkeypatch.setattr(execution, "site_dirs", lambda: [str(folder)])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))  # its kept readings
    return folder


# The run id the shared toy approval is for.
APPROVED_RUN = "toy-20261130-001"


def copy_project(source: Path, target: Path):
    """A private copy of a scratch project: its tree, git records and runs
    (:class:`support.toy.ToyRepo`)."""
    from support.toy import ToyRepo

    shutil.copytree(source, target, symlinks=True, ignore=shutil.ignore_patterns("audits"))
    return ToyRepo(target)


@pytest.fixture(scope="session")
def toy_template(tmp_path_factory):
    """The toy project of :func:`support.toy.make_toy_repo` (its one stage ``toy``, nothing
    approved); read-only: checks use :func:`toy` (or :func:`copy_project`)."""
    from support.toy import make_toy_repo

    return make_toy_repo(tmp_path_factory.mktemp("toy-template") / "toy")


@pytest.fixture
def toy(toy_template, tmp_path):
    """A private copy of the toy project at ``tmp_path / "toy"``: the same tree and commit as
    a fresh ``make_toy_repo(tmp_path / "toy")``."""
    return copy_project(toy_template.root, tmp_path / "toy")


@pytest.fixture(scope="session")
def approved_toy_template(toy_template, tmp_path_factory):
    """The toy project of :func:`toy_template` with run APPROVED_RUN of its stage approved
    and the record committed; read-only: checks use :func:`approved_toy`."""
    toy = copy_project(toy_template.root, tmp_path_factory.mktemp("approved-toy") / "toy")
    toy.approve("toy", APPROVED_RUN)
    return toy


@pytest.fixture
def approved_toy(approved_toy_template, tmp_path):
    """A private copy of the approved toy project at ``tmp_path / "project"``: the same
    commits, approval record and (unspent) run id as a fresh ``make_toy_repo`` and
    ``approve("toy", APPROVED_RUN)``, without running ``prereg approve`` again."""
    return copy_project(approved_toy_template.root, tmp_path / "project")


def _fixture_state(fixture) -> str:
    """SHA-256 of an E04 fixture's task and reformulation files, its repository's refs and
    its work tree's status: what a check that changed the shared fixture would change."""
    digest = hashlib.sha256()
    for path in (fixture.tasks_file, fixture.reformulations_file):
        digest.update(path.read_bytes())
    for args in (("for-each-ref",), ("status", "--porcelain", "--untracked-files=all")):
        done = subprocess.run(
            ["git", "-C", str(fixture.repository), *args],
            capture_output=True,
            check=True,
        )
        digest.update(done.stdout)
    return digest.hexdigest()


@pytest.fixture(scope="session")
def e04_fixture(tmp_path_factory):
    """The E04 synthetic repository, task file and reformulations of
    :func:`support.e04_project.make_fixture`, built once per session (per xdist worker) and
    shared read-only by every E04 check: its teardown fails when a check changed it (a check
    that edits an input writes its own file beside it, as the input checks do)."""
    from support.e04_project import make_fixture

    fixture = make_fixture(tmp_path_factory.mktemp("e04-fixture") / "fixture")
    before = _fixture_state(fixture)
    yield fixture
    if _fixture_state(fixture) != before:
        raise AssertionError(
            f"the shared E04 fixture under {fixture.repository.parent} was changed by a check; "
            "a check must write edited inputs to its own tmp_path, not into e04_fixture"
        )


@pytest.fixture(scope="session")
def tiny_pipeline(tmp_path_factory) -> Path:
    """Every RP002A stage, end to end, on the tiny plan (support.rp002a_clone); the runs'
    repository. Shared by the pipeline and report checks, which only read it (or restore
    what they change)."""
    from support.rp002a_clone import run_pipeline, scratch_clone, steps, tiny_plan

    clone = scratch_clone(tmp_path_factory.mktemp("rp002a"), tiny_plan())
    return run_pipeline(
        clone,
        steps("calibration", "target-variance", "confirmatory-config", "confirmatory"),
        reports=True,
    )


# -- the order of a distributed software run (-n N) ------------------------------------------
#
# xdist's default hands out checks one by one in collection order, so the checks of one
# module land on both workers and each worker builds that module's shared fixtures (a
# project run once and read by many checks) again, and the long checks collected last
# (pinned, pipeline, kernel, wheel) leave one worker idle at the end. Here a software run's
# unit of work is a check module (a folder, for the folders whose checks share a
# session-scoped run built in their conftest.py), so each shared fixture is built on one
# worker only, and the units are handed out longest first, as check_seconds.json records
# them (a unit it does not name counts UNRECORDED_SECONDS per check), so the run ends on
# short units. A research run keeps xdist's default scheduling.

UNIT_SECONDS = Path(__file__).with_name("check_seconds.json")
UNRECORDED_SECONDS = 0.5
# Folders whose checks share a session-scoped fixture: folder -> the unit of work holding it.
SHARED_FOLDERS = {
    "checks/report": "checks/report+checks/rp002a/pipeline",  # tiny_pipeline, toy_runs
    "checks/rp002a/pipeline": "checks/report+checks/rp002a/pipeline",
    "checks/e04/stage": "checks/e04/stage",  # e04_runs
    "checks/wheel": "checks/wheel",  # head_wheel
}


def recorded_unit_seconds() -> dict[str, float]:
    """Seconds each unit of work took in a recorded run; empty without the record."""
    try:
        record = json.loads(UNIT_SECONDS.read_text())
        return {str(unit): float(seconds) for unit, seconds in record["units"].items()}
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        return {}


def unit_of(nodeid: str) -> str:
    """The unit of work of a check: its folder when it is a shared one, else its module."""
    path = nodeid.split("::", 1)[0]
    folder = path.rpartition("/")[0]
    return SHARED_FOLDERS.get(folder, path)


def longest_first(units: dict[str, dict], record: dict[str, float]) -> list[str]:
    """The units (unit -> its checks), longest first; units of equal length keep their order."""
    return sorted(units, key=lambda unit: -record.get(unit, len(units[unit]) * UNRECORDED_SECONDS))


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("research_stage", None) or config.getoption("dist", None) != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LongestUnitFirst(LoadScopeScheduling):
        """xdist's loadscope with :func:`unit_of` as the scope, longest unit first."""

        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not self.ordered:  # the first assignment: the queue holds every unit
                self.ordered = True
                order = longest_first(self.workqueue, recorded_unit_seconds())
                units = [(unit, self.workqueue[unit]) for unit in order]
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

    return LongestUnitFirst(config, log)
