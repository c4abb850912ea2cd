"""Real runs to report on, made once per session in a throw-away git repository.

The repository holds the project's calibration experiment module and a tiny copy of the
demo plan (fewer cells and trials). Through the real approve / pytest gate it gets: a
complete calibration run, an incomplete one (a law the library does not know: those items
fail with a traceback), a refusal (dirty tree), and a run whose controller "died" (a start
record and items.jsonl, no manifest).
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from reportruns import COMPLETE, FAILING_CELL, FAILURE_MESSAGE, INCOMPLETE, KILLED

from prereg.testing import ScratchProject

PROJECT = Path(__file__).resolve().parents[2]


class ToyRuns(ScratchProject):
    """The report checks' scratch project; commands fail loudly by default."""

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return super().run(*args, check=check)

    def prereg(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return super().prereg(*args, check=check)


def tiny_calibration_plan() -> dict:
    """The demo plan's calibration stage, shrunk: 2 x 2 x 1 x 2 = 8 cells, 2 benchmark cells."""
    plan = json.loads((PROJECT / "plans" / "demo" / "STATISTICAL_PIPELINE_PLAN.json").read_text())
    stage = copy.deepcopy(plan["stages"]["calibration"])
    sim = stage["parameters"]["simulation"]
    sim.update(n=[5, 20], laws=["normal", "t5"], rho=[0.0], within_fraction=[0.0, 1.0], trials=200)
    stage["parameters"]["monte_carlo_bound"]["statements"] = 8
    stage["parameters"]["bootstrap_benchmark"].update(
        n=[5], laws=["normal"], within_fraction=[0.0, 1.0], trials=3, draws=20
    )
    stage["seed_namespace"] = "calibration-report-check-1.0"
    return {
        "plan_id": "report-check-1.0",
        "protocol": plan["protocol"],
        "environment_pins": plan["environment_pins"],
        "parameters": {"decision": plan["parameters"]["decision"]},
        "stages": {"calibration": stage},
    }


def _write_plan(root: Path, plan: dict) -> None:
    (root / "plans" / "PLAN.json").write_text(json.dumps(plan, indent=2) + "\n")


def _approve(toy: ToyRuns, run_id: str) -> None:
    toy.prereg("approve", "--stage", "calibration", "--run-id", run_id, "--accept-deviations")
    toy.git("add", "-A")
    toy.git("commit", "-q", "-m", f"Approve {run_id}")


def _run_stage(toy: ToyRuns) -> subprocess.CompletedProcess:
    return toy.run(
        sys.executable,
        "-m",
        "pytest",
        "--research-stage=calibration",
        "-p",
        "no:cacheprovider",
        check=False,
    )


def make_toy_runs(root: Path) -> ToyRuns:
    toy = ToyRuns(root)
    toy.init(plans=["plans/PLAN.json"])
    shutil.copy(PROJECT / "experiments" / "test_calibration.py", root / "experiments")
    plan = tiny_calibration_plan()
    _write_plan(root, plan)
    toy.git("add", "-A")
    toy.git("commit", "-q", "-m", "Toy calibration project")

    _approve(toy, COMPLETE)
    done = _run_stage(toy)
    assert done.returncode == 0, done.stdout + done.stderr

    module = root / "experiments" / "test_calibration.py"
    text = module.read_text()
    call = "    calibration.run_simulation_item(research.settings, simulation_cell, rng, research.outputs)\n"
    assert call in text, "experiments/test_calibration.py changed: update the report checks"
    module.write_text(
        text.replace(
            call,
            call
            + (
                "    if calibration.simulation_id(simulation_cell) == " + repr(FAILING_CELL) + ":\n"
                "        raise RuntimeError(" + repr(FAILURE_MESSAGE) + ")\n"
            ),
        )
    )
    toy.git("add", "-A")
    toy.git("commit", "-q", "-m", "One cell fails on purpose")
    _approve(toy, INCOMPLETE)
    (root / "untracked-notes.txt").write_text("makes the tree dirty: the gate refuses")
    refused = _run_stage(toy)
    assert refused.returncode == 4, refused.stdout + refused.stderr
    (root / "untracked-notes.txt").unlink()
    done = _run_stage(toy)
    assert done.returncode != 0, "the run with a failing cell must fail"

    # A controller killed after one item: its start record and item log survive, no manifest.
    killed = toy.run_dir(KILLED)
    killed.mkdir()
    start = json.loads((toy.run_dir(COMPLETE) / "start.json").read_text())
    start.update(run_id=KILLED)
    (killed / "start.json").write_text(json.dumps(start))
    first = (toy.run_dir(COMPLETE) / "items.jsonl").read_text().splitlines()[0]
    (killed / "items.jsonl").write_text(first + "\n")
    return toy


@pytest.fixture(scope="session")
def toy_runs(tmp_path_factory: pytest.TempPathFactory) -> ToyRuns:
    return make_toy_runs(tmp_path_factory.mktemp("report") / "toy")
