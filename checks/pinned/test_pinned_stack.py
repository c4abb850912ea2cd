"""The protocol's pinned stack (Python 3.9, NumPy and SciPy at the plan's pins) on this machine.

A venv is built once with ``install.sh --pinned`` under ``cache/pinned-venv`` (git-ignored)
and rebuilt when install.sh, constraints/pinned.txt, pyproject.toml or the interpreter
change. On it: the versions are the plan's, the statistics and harness checks pass, and the
calibration stage on the demo plan (a tenth of its simulation trials) approves naming only
the deviations that remain (platform, Python patch release, torch), runs, audits clean, and
its results match this project's stack file by file within the tolerance
docs/how-to/pinned-python-3.9.md states.
Skipped only when no Python of the plan's minor version is on this machine.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pinnedrun
import pytest
from pinnedcompare import compare_runs

from prereg.testing import outer_environment
from support.suite import checks_conftest

pytestmark = [pytest.mark.software, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PLAN = "plans/demo/STATISTICAL_PIPELINE_PLAN.json"
VENV = REPO / "cache" / "pinned-venv"
PINS = json.loads((REPO / PLAN).read_text())["environment_pins"]
# The two calibration runs compared across the stacks: the demo plan with a tenth of its
# simulation trials per cell (every cell, law and width quantile of it; fewer draws of each).
CHECK_PLAN = "plans/demo/PINNED_CHECK_PLAN.json"
TRIALS_DIVISOR = 10


def check_plan() -> dict:
    plan = json.loads((REPO / PLAN).read_text())
    plan["plan_id"] += "-pinned-check"
    plan["stages"]["calibration"]["parameters"]["simulation"]["trials"] //= TRIALS_DIVISOR
    return plan


MINOR = ".".join(PINS["python"].split(".")[:2])

# The checks run on the pinned stack: the statistics core, plans and seeds, and the research
# loop end to end on the toy project (approve, run serially and on two workers, audit,
# provenance); the attack checks (marked ``attack``) are left out. Every other module of
# prereg is imported there (test_every_core_module_imports_on_the_pinned_stack), and ruff
# reads the code as Python 3.9 (requires-python); the gate's, the options' and the
# rehearsal's own checks run once, on this project's stack.
PINNED_CHECKS = (
    "checks/rp002a/stats",
    "checks/plans/test_item_grid.py",
    "checks/plans/test_seeds_and_plans.py",
    "checks/plans/test_stage_keys.py",
    "checks/run/test_provenance.py",
    "checks/run/test_workflow.py",
)
# Every module of prereg imports on the pinned stack, but those of an extra it lacks (torch
# where no CPU build of the plan's torch can be installed, E04's packages on Python 3.9).
IMPORT_EVERY_MODULE = """
import importlib, json, pkgutil, sys
import prereg

extras = set(json.loads(sys.argv[1]))
skipped, failed = [], []
for module in pkgutil.walk_packages(prereg.__path__, "prereg."):
    try:
        importlib.import_module(module.name)
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] in extras:
            skipped.append(module.name)
        else:
            failed.append(f"{module.name}: {error!r}")
    except Exception as error:
        failed.append(f"{module.name}: {error!r}")
print(json.dumps({"skipped": skipped, "failed": failed}))
"""
# Stated tolerance for results that are not byte-identical (docs/how-to/pinned-python-3.9.md):
# every string, integer, boolean and count equal; floats within this relative difference.
# Measured here: at most 1.3e-11 (t quantiles, widths, Clopper-Pearson bounds from SciPy).
RELATIVE_TOLERANCE = 1e-9
# Checks whose tolerance is tighter than SciPy 1.13.1's t quantile (measured: 1.2e-11
# relative on t(0.975, 2), 3e-13 on its CDF), and the one that needs torch.
DESELECT_ON_PINNED = (
    "checks/rp002a/stats/test_stats_intervals.py::test_hand_computed_reference",
    "checks/rp002a/stats/test_stats_intervals.py::test_rp002a_primary_critical_value",
    "checks/plans/test_seeds_and_plans.py::test_torch_generator_matches_the_seed",
)


def find_pinned_python() -> str | None:
    """A Python of the plan's minor version: $PREREG_PINNED_PYTHON, pyenv's, or on PATH."""
    candidates = [os.environ.get("PREREG_PINNED_PYTHON", "")]
    pyenv = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    found = sorted(glob.glob(f"{pyenv}/versions/{MINOR}.*/bin/python"))
    exact = [p for p in found if f"/versions/{PINS['python']}/" in p]
    candidates += exact + found[::-1] + [shutil.which(f"python{MINOR}") or ""]
    for candidate in filter(None, candidates):
        done = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode == 0 and done.stdout.strip() == MINOR:
            return candidate
    return None


def _stamp(python: str) -> str:
    digest = hashlib.sha256(python.encode())
    for name in ("install.sh", "constraints/pinned.txt", "pyproject.toml"):
        digest.update((REPO / name).read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="session")
def pinned_python() -> str:
    python = find_pinned_python()
    if python is None:
        pytest.skip(
            f"no Python {MINOR} here (the plan pins {PINS['python']}): install it (pyenv install "
            f"{PINS['python']}) or set PREREG_PINNED_PYTHON"
        )
    VENV.parent.mkdir(exist_ok=True)
    stamp_file = VENV / ".prereg-pinned-stamp"
    with open(VENV.parent / "pinned-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = _stamp(python)
        if not stamp_file.exists() or stamp_file.read_text() != stamp:
            shutil.rmtree(VENV, ignore_errors=True)
            done = subprocess.run(
                ["bash", "install.sh", "--pinned", "--venv", str(VENV)],
                cwd=REPO,
                env={**os.environ, "PYTHON": python},
                capture_output=True,
                text=True,
                check=False,
            )
            assert done.returncode == 0, (
                f"install.sh --pinned failed:\n{done.stdout}\n{done.stderr}"
            )
            assert "prereg installed in" in done.stdout and "met: numpy" in done.stdout
            stamp_file.write_text(stamp)
    return str(VENV / "bin" / "python")


PRINT_PINS_VIEW = (
    "import json; from prereg import provenance; print(json.dumps(provenance.pinned_environment()))"
)


def test_the_pinned_venv_has_the_plans_versions(pinned_python):
    done = subprocess.run(
        [pinned_python, "-c", PRINT_PINS_VIEW],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    here = json.loads(done.stdout)
    assert here["numpy"] == PINS["numpy"] and here["scipy"] == PINS["scipy"]
    assert here["python"].startswith(MINOR + ".")
    assert here["torch"] in (None, PINS["torch"])  # never another torch than the plan's
    constraints = (REPO / "constraints" / "pinned.txt").read_text().splitlines()
    assert f"numpy=={PINS['numpy']}" in constraints and f"scipy=={PINS['scipy']}" in constraints


def test_statistics_and_harness_checks_pass_on_the_pinned_stack(pinned_python):
    env = outer_environment()
    args = ["-m", "software and not attack", "-p", "no:cacheprovider", "-q", "-n", "2"]
    for nodeid in DESELECT_ON_PINNED:
        args += ["--deselect", nodeid]
    done = subprocess.run(
        [pinned_python, "-m", "pytest", *args, *PINNED_CHECKS],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_every_core_module_imports_on_the_pinned_stack(pinned_python):
    """What the checks above do not run is at least imported there: code that needs a newer
    Python at import (a 3.10 annotation evaluated, a newer standard-library name) fails."""
    extras = sorted(checks_conftest().OPTIONAL_MODULES)
    done = subprocess.run(
        [pinned_python, "-c", IMPORT_EVERY_MODULE, json.dumps(extras)],
        cwd=REPO, env=outer_environment(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["failed"] == [], found["failed"]
    assert "prereg.runtime.launcher" not in found["skipped"], found  # the core is never skipped


@pytest.fixture(scope="module")
def two_runs(pinned_python, tmp_path_factory) -> tuple[Path, Path]:
    """The calibration stage on :func:`check_plan`: this project's stack, then the pinned one."""
    runs = []
    for name, python in (("main", sys.executable), ("pinned", pinned_python)):
        root = pinnedrun.clone(tmp_path_factory.mktemp(name), check_plan(), CHECK_PLAN)
        runs.append(pinnedrun.run_stage(root, python, "calibration", CHECK_PLAN))
    return runs[0], runs[1]


def test_the_pinned_run_names_only_the_deviations_that_remain(two_runs):
    _, pinned = two_runs
    manifest = json.loads((pinned / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    fields = {d["field"] for d in manifest["deviations"]}
    here = manifest["environment"]["pins_view"]
    # Exactly the pinned fields that truly differ here; numpy and scipy meet their pins, so
    # on this machine kind the list is platform, Python patch release and torch.
    assert fields == {f for f, pin in PINS.items() if here[f] != pin}
    assert not fields & {"numpy", "scipy"}
    assert "torch" in fields or here["torch"] == PINS["torch"]


def test_calibration_results_match_across_the_stacks_file_by_file(two_runs):
    main, pinned = two_runs
    diffs = compare_runs(main, pinned)
    assert diffs, "no result files compared"
    broken = [d for d in diffs if d.kind in ("missing", "different")]
    assert not broken, [(d.path, d.kind, d.other[:3]) for d in broken]
    # Byte-identical: every per-trial diagnostic, the bootstrap cells, the summary text.
    for d in diffs:
        if d.path.endswith((".npz", ".md")) or "test_bootstrap_cell" in d.path:
            assert d.kind == "identical", d.path
    # Numeric differences only, within the stated tolerance.
    worst = max((d.max_rel for d in diffs), default=0.0)
    assert worst <= RELATIVE_TOLERANCE, [(d.path, d.max_rel) for d in diffs if d.max_rel > 1e-9]
