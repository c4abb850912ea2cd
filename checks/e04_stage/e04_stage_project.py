"""Shared by the E04 stage checks (not a test module): a throw-away project holding the real
E04 experiment module, driven by real subprocesses.

The project copies ``experiments/test_e04.py`` and the demo plan (with the torch-free
``token-hash`` backend and two tasks, so a stage runs in seconds) into a temporary git
repository; the synthetic fixture (repository, tasks, reformulations) lives beside it.
"""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from prereg.e04.backends import TokenHashBackend
from prereg.e04.synthetic import SyntheticFixture, make_synthetic_repository
from prereg.seeds import numpy_generator
from prereg.testing import ScratchProject

PROJECT = Path(__file__).resolve().parents[2]
CODE_REVISION = "1a7066f6c7682793b6f04445c776a93cc4fac895"
TASKS = 2


def check_plan(tasks: int = TASKS) -> dict:
    """The demo plan with the token-hash backend and ``tasks`` tasks (plan id of its own)."""
    plan = json.loads((PROJECT / "plans" / "demo" / "E04_PLAN.json").read_text())
    plan = copy.deepcopy(plan)
    plan["plan_id"] = "e04-robustness-1.0-check"
    stage = plan["stages"]["e04"]
    stage["seed_namespace"] = "e04-check"
    params = stage["parameters"]
    params["tasks"]["count"] = tasks
    params["embedding"]["backend"] = "token-hash"
    params["embedding"]["identity"] = TokenHashBackend(32, "go-function-text-1").identity()
    return plan


def make_fixture(dest: Path, tasks: int = TASKS) -> SyntheticFixture:
    return make_synthetic_repository(
        dest,
        rng=numpy_generator("e04-stage-check", "fixture"),
        tasks=tasks,
        code_revision=CODE_REVISION,
    )


@dataclass
class E04Project(ScratchProject):
    fixture: SyntheticFixture = None

    def inputs(self, **override: Path) -> list[str]:
        paths = {
            "repository": self.fixture.repository,
            "tasks": self.fixture.tasks_file,
            "reformulations": self.fixture.reformulations_file,
            **override,
        }
        return [arg for name, path in paths.items() for arg in ("--input", f"{name}={path}")]

    def approve(self, run_id: str, *extra: str, check: bool = True, **override: Path):
        """Approve stage e04 of plans/E04_PLAN.json with the fixture's inputs (or overrides)."""
        return super().approve(
            "e04",
            run_id,
            "--plan",
            "plans/E04_PLAN.json",
            *self.inputs(**override),
            *extra,
            check=check,
        )


def make_project(root: Path, fixture: SyntheticFixture, plan: dict) -> E04Project:
    project = E04Project(root, fixture)
    project.init(plans=["plans/E04_PLAN.json"], ignore=("cache/",))
    shutil.copy(PROJECT / "experiments" / "test_e04.py", root / "experiments" / "test_e04.py")
    (root / "plans" / "E04_PLAN.json").write_text(json.dumps(plan, indent=2) + "\n")
    project.git("add", "-A")
    project.git("commit", "-q", "-m", "E04 check project")
    return project
