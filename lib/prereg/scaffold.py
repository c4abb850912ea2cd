"""``prereg init [DIR]``: lay out a new preregistered project.

What it writes (nothing else, and never over an existing file):

``pytest.ini``
    the markers (``software``, ``research_stage``, ``slow``), strict markers and config,
    xunit2 JUnit, ``prereg_plans`` (empty: name each plan you write there) and
    ``prereg_research_paths = experiments``.
``conftest.py``
    ``pytest_plugins = ("prereg.plugin",)``: a no-op while prereg's ``pytest11`` entry point
    loads the plugin, and what loads it under ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``.
``plans/BASELINE.json``
    the immutable historical files the gate checks: none yet (``"files": {}``).
``plans/approvals/``, ``experiments/``
    empty folders (a ``.gitkeep`` each, so git keeps them).
``checks/test_project.py``
    a software check: every plan in pytest.ini loads and validates (its stage kinds are
    installed, their settings parse, each stage's module exists), seed namespaces are not
    shared, and the baseline holds. ``pytest -m software`` passes at once.
``.gitignore``
    ``runs/`` (run folders live outside git; their records are git refs), caches, venvs.

The folder becomes a git repository (``git init``) unless it already is the top of one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
"""

CONFTEST = """\
# prereg's pytest plugin. Installing prereg already loads it (entry point pytest11
# "prereg.plugin"); this line is then a no-op, and loads it under PYTEST_DISABLE_PLUGIN_AUTOLOAD.
pytest_plugins = ("prereg.plugin",)
"""

BASELINE = """\
{
  "description": "Immutable historical files (earlier configs and outcomes). The gate refuses any run while one of them differs from the SHA-256 listed here.",
  "files": {}
}
"""

CHECK = '''\
"""The project's own software check: its plans load and validate, and the baseline holds."""

from pathlib import Path

import pytest

from prereg.approval import baseline_problems
from prereg.plans import load_plan, validate_stage

pytestmark = pytest.mark.software


def test_every_plan_in_pytest_ini_loads_and_validates(pytestconfig):
    root = Path(pytestconfig.rootpath)
    namespaces = {}
    for rel in pytestconfig.getini("prereg_plans"):
        plan = load_plan(root / rel)
        for stage, spec in plan.stages.items():
            validate_stage(plan, stage)  # the stage kind is installed and its settings parse
            assert (root / spec["module"]).is_file(), f"{rel}: stage {stage}: no {spec['module']}"
            namespace = spec["seed_namespace"]
            if namespace is not None:
                assert namespace not in namespaces, (
                    f"{rel}: stage {stage} shares seed namespace {namespace!r} with "
                    f"{namespaces[namespace]}"
                )
                namespaces[namespace] = f"{rel}: stage {stage}"


def test_the_baseline_holds(pytestconfig):
    assert baseline_problems(Path(pytestconfig.rootpath)) == []
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


def init_project(folder: Path) -> tuple[list[str], bool]:
    """Lay out a prereg project in ``folder``: the files written (relative paths), and
    whether it ran ``git init`` (False: ``folder`` was already the top of a checkout).

    Refuses, writing nothing, when any file it would write exists, or when ``folder`` lies
    inside a git work tree without being its top (prereg's root is the checkout's root).
    """
    folder = Path(folder).resolve()
    if folder.exists() and not folder.is_dir():
        raise InitRefused(f"{folder} exists and is not a folder")
    existing = [rel for rel in FILES if (folder / rel).exists() or (folder / rel).is_symlink()]
    if existing:
        raise InitRefused(
            f"{folder} already holds {', '.join(existing)}; prereg init never overwrites a file "
            "and wrote nothing. Move those files aside (or merge them by hand with what "
            "`prereg init` writes into an empty folder), or run `prereg init NEW_FOLDER`"
        )
    linked = sorted(
        {
            parent.relative_to(folder).as_posix()
            for rel in FILES
            for parent in (folder / rel).parents
            if parent != folder and folder in parent.parents and parent.is_symlink()
        }
    )
    if linked:
        raise InitRefused(
            f"{folder} holds the symbolic link(s) {', '.join(linked)}, through which prereg "
            "init would write outside the folder and wrote nothing; remove them (a prereg "
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
    folder.mkdir(parents=True, exist_ok=True)
    for rel, text in FILES.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    if top is None:
        done = _git(folder, "init", "-q")
        if done.returncode != 0:
            raise InitRefused(f"git init failed in {folder}: {done.stderr.strip()}")
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
        "     with src/mylab/kind.py and 'pythonpath = src' in pytest.ini (no install needed)",
        "  3. commit, then approve one run and commit the approval:",
        f"     {prereg} approve --stage STAGE --run-id {run_id} --accept-deviations",
        f"     git add plans/approvals && git commit -m 'Approve {run_id}'",
        f"  4. {pytest} --research-stage=STAGE        # add -n 2 for two workers",
        f"  5. {prereg} audit runs/{run_id}",
        f"     {prereg} report runs/{run_id}",
    ]
    return "\n".join(lines)
