"""A toy stage in a scratch project: the plan, the experiment module and the project the
checks drive (:class:`ToyRepo`, :func:`make_toy_repo`)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from prereg.records import ledger
from prereg.records.runs import refusals_dir
from prereg.testing import ScratchProject

# Installed pytest plugins no toy (or E04 check) stage uses, blocked in their pytest.ini: each
# would be imported by every process of every research run (the launcher, the session, the
# clean listing, each worker), about half a second of CPU per toy run.
UNUSED_PLUGINS = ("anyio", "hypothesispytest")

PINS = {
    "python": "3.9.6",
    "numpy": "2.0.2",
    "torch": "2.8.0",
    "scipy": "1.13.1",
    "platform": "macOS-arm64",
    "cpu_threads": 2,
}

EXPERIMENT = """
import json, os, signal, time
import pytest
from prereg.plugin import stage_plan

pytestmark = pytest.mark.research_stage("{stage}")
TO_CONTROLLER = ("sigterm-controller", "sighup-controller", "sigint-controller", "sigxcpu-controller")


def pytest_generate_tests(metafunc):
    if "cell" in metafunc.fixturenames:
        params = stage_plan(metafunc.config).stage("{stage}")["parameters"]
        metafunc.parametrize("cell", range(params["cells"]), ids=lambda c: f"cell{{c}}")


def test_cell(cell, research):
    research.coords(cell=cell)
    rng = research.numpy_generator("cell", cell)
    (research.outputs / "result.json").write_text(json.dumps({{"x": rng.standard_normal(3).tolist()}}))
    bad = research.parameters["misbehave"]
    if cell == bad["cell"]:
        (research.outputs / "partial.txt").write_text("written before the failure")
        if bad["how"] == "raise":
            raise RuntimeError("cell failed on purpose")
        if bad["how"] == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
        if bad["how"] == "exit":
            os._exit(3)
        if bad["how"] == "nonfinite":
            research.coords(score=float("nan"))
        if bad["how"] in TO_CONTROLLER:
            # The run's controller: this process when serial, the parent of an xdist worker.
            controller = os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()
            os.kill(controller, getattr(signal, bad["how"].split("-")[0].upper()))
            (research.outputs / "signalled.txt").write_text("the controller was signalled")
            time.sleep(600)  # still running when the controller ends the run
        if bad["how"] == "ctrl-c":
            # Ctrl-C: SIGINT to the run's whole process group, only when the controller leads
            # one of its own (started with start_new_session); otherwise to the controller.
            controller = os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()
            if os.getpgid(0) == controller:
                os.killpg(controller, signal.SIGINT)
            else:
                os.kill(controller, signal.SIGINT)
            time.sleep(600)
    elif bad["how"] in TO_CONTROLLER and os.environ.get("PYTEST_XDIST_WORKER"):
        # The other worker's items finish just after the controller was signalled.
        signalled = research.outputs.parent / f"test_cell[cell{{bad['cell']}}]" / "signalled.txt"
        for _ in range(600):
            if signalled.exists():
                break
            time.sleep(0.1)
        time.sleep(0.5)
"""


def stage_spec(stage: str, **overrides) -> dict:
    spec = {
        "kind": "plain",
        "module": f"experiments/test_{stage}.py",
        "budget_seconds": 600,
        "budget_enforced": False,
        "requires": [],
        "seed_namespace": f"{stage}-1.0",
        "single_attempt": False,
        "threads_per_worker": 1,
        "inputs": [],
        "parameters": {"cells": 4, "misbehave": {"cell": -1, "how": "none"}},
    }
    spec.update(overrides)
    return spec


class ToyRepo(ScratchProject):
    """A scratch project holding toy stages (plan TOY_PLAN.json, experiments from EXPERIMENT)."""

    def refusals(self) -> list[dict]:
        folder = refusals_dir(self.root)
        return (
            [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
            if folder.exists()
            else []
        )

    def write_plan(self, stages: dict) -> None:
        plan = {
            "plan_id": "toy-1.0",
            "protocol": "toy protocol for the harness checks",
            "environment_pins": PINS,
            "stages": stages,
        }
        (self.root / "plans" / "TOY_PLAN.json").write_text(json.dumps(plan, indent=2))
        for stage, spec in stages.items():
            (self.root / spec["module"]).write_text(EXPERIMENT.format(stage=stage))


def make_toy_repo(root: Path, stages: dict | None = None) -> ToyRepo:
    repo = ToyRepo(root)
    repo.init(
        plans=["plans/TOY_PLAN.json"],
        testpaths="checks experiments",
        blocked_plugins=UNUSED_PLUGINS,
    )
    (root / "checks").mkdir()
    (root / "checks" / "test_soft.py").write_text(
        "import pytest\n\n@pytest.mark.software\ndef test_software():\n    assert 1 + 1 == 2\n\n"
        "@pytest.mark.research_stage('toy')\ndef test_stray_research_item():\n    raise AssertionError('never runs')\n"
    )
    repo.write_plan(stages or {"toy": stage_spec("toy")})
    repo.commit("Toy project")
    return repo


def private_tmp(folder: Path) -> dict[str, str]:
    """The environment that gives a run ``folder`` (made here) as its temporary folder."""
    folder.mkdir(parents=True)
    return {"TMPDIR": str(folder)}


def left_behind(folder: Path) -> list[str]:
    """What runs left in their temporary ``folder``, without pytest's own base folder of
    ``tmp_path``s (pytest keeps it by design; xdist makes one for its workers)."""
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("pytest-of-"))


# -- runs the audit checks tamper with ---------------------------------------------------------


def recorded_in_git(toy: ToyRepo, run_id: str) -> None:
    """The controller recorded start.json and manifest.json in git, byte for byte."""
    run = toy.run_dir(run_id)
    for name, ref in (
        ("start.json", ledger.start_ref(run_id)),
        ("manifest.json", ledger.manifest_ref(run_id)),
    ):
        assert ledger.read(toy.root, ref) == (run / name).read_bytes(), ref


def honest_repo(root: Path, spec: dict, *runs: tuple[str, tuple[str, ...]]) -> ToyRepo:
    """A toy repository with ``spec`` as stage ``toy`` and each run of ``runs`` (its id and
    pytest arguments) approved and run, its records in git."""
    toy = make_toy_repo(root, {"toy": spec})
    for run_id, args in runs:
        toy.approve("toy", run_id)
        toy.pytest("--research-stage=toy", f"--run-id={run_id}", *args)
        assert (toy.run_dir(run_id) / "manifest.json").is_file()
        recorded_in_git(toy, run_id)
    return toy


def clone(toy: ToyRepo, tmp_path: Path) -> ToyRepo:
    """A private copy of a repository with its runs (and its git records)."""
    target = tmp_path / "copy"
    shutil.copytree(toy.root, target, symlinks=True, ignore=shutil.ignore_patterns("audits"))
    return ToyRepo(target)


def assert_finding(done: subprocess.CompletedProcess, *fragments: str) -> None:
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("  - ")]
    for fragment in fragments:
        assert any(fragment in line for line in lines), (fragment, done.stdout)
