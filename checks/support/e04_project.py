"""A throw-away E04 project for checks: the real E04 experiment module in a scratch git
repository, driven by real subprocesses (:class:`prereg.testing.ScratchProject`).

The project copies ``experiments/test_e04.py`` and the demo plan of the checkout
(:data:`support.checkout.CHECKOUT`; with the torch-free ``token-hash`` backend and two
tasks, so a stage runs in seconds) into a temporary git repository; the synthetic fixture
(repository, tasks, reformulations) lives beside it.
"""

from __future__ import annotations

import copy
import json
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from prereg.base.seeds import numpy_generator
from prereg.e04.backends import TokenHashBackend
from prereg.e04.embeddings import identity_sha256
from prereg.e04.synthetic import SyntheticFixture, make_synthetic_repository
from prereg.records.runs import RunFolder, refusals_dir
from prereg.testing import ScratchProject
from support.checkout import CHECKOUT
from support.toy import UNUSED_PLUGINS

CODE_REVISION = "1a7066f6c7682793b6f04445c776a93cc4fac895"  # the fixture's E02 revision
TASKS = 2
CHECK_DIMENSION = 32  # token-hash buckets of the check plan (no model, no preregistered value)
CACHE = "cache/e04-vectors.sqlite"


def check_plan(tasks: int = TASKS) -> dict:
    """The demo plan with the token-hash backend and ``tasks`` tasks (plan id of its own)."""
    plan = json.loads((CHECKOUT / "plans" / "demo" / "E04_PLAN.json").read_text())
    plan = copy.deepcopy(plan)
    plan["plan_id"] = "e04-robustness-1.0-check"
    stage = plan["stages"]["e04"]
    stage["seed_namespace"] = "e04-check"
    params = stage["parameters"]
    params["tasks"]["count"] = tasks
    params["embedding"]["backend"] = "token-hash"
    params["embedding"]["identity"] = TokenHashBackend(
        CHECK_DIMENSION, params["embedding"]["identity"]["chunker_version"]
    ).identity()
    return plan


def result_files(run_dir: Path) -> dict[str, bytes]:
    """The bytes of a run's result files (:meth:`prereg.records.runs.RunFolder.result_files`)."""
    return {rel: path.read_bytes() for rel, path in RunFolder(run_dir).result_files().items()}


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

    def refusals(self) -> list[dict]:
        """The refusal records under runs/refusals/, oldest first."""
        folder = refusals_dir(self.root)
        return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]

    @property
    def cache(self) -> Path:
        return self.root / CACHE

    def identity(self) -> dict:
        plan = json.loads((self.root / "plans" / "E04_PLAN.json").read_text())
        return plan["stages"]["e04"]["parameters"]["embedding"]["identity"]

    def overwrite_vectors(self, vectors: dict[str, np.ndarray]) -> int:
        """Replace stored vectors (text SHA-256 -> float32 row) under the plan's identity,
        as someone poisoning the cache would; returns how many rows changed."""
        key = identity_sha256(self.identity())
        with sqlite3.connect(self.cache) as db:
            changed = 0
            for text_hash, vector in vectors.items():
                changed += db.execute(
                    "UPDATE vectors SET vector = ? WHERE identity_sha256 = ? AND text_sha256 = ?",
                    (np.asarray(vector, dtype="<f4").tobytes(), key, text_hash),
                ).rowcount
        return changed

    def stored_vector(self, text_hash: str) -> np.ndarray:
        key = identity_sha256(self.identity())
        with sqlite3.connect(self.cache) as db:
            (blob,) = db.execute(
                "SELECT vector FROM vectors WHERE identity_sha256 = ? AND text_sha256 = ?",
                (key, text_hash),
            ).fetchone()
        return np.frombuffer(blob, dtype="<f4").copy()


def make_project(root: Path, fixture: SyntheticFixture, plan: dict) -> E04Project:
    project = E04Project(root, fixture)
    project.init(plans=["plans/E04_PLAN.json"], ignore=("cache/",), blocked_plugins=UNUSED_PLUGINS)
    shutil.copy(CHECKOUT / "experiments" / "test_e04.py", root / "experiments" / "test_e04.py")
    (root / "plans" / "E04_PLAN.json").write_text(json.dumps(plan, indent=2) + "\n")
    project.git("add", "-A")
    project.git("commit", "-q", "-m", "E04 check project")
    return project
