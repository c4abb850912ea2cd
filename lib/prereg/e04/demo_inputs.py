"""Inputs of the E04 demo step: the project's synthetic Go repository, tasks and reformulations.

Written into the demo output folder (beside the scratch clone, never inside it, so the
clone stays clean for the gate). Everything is labelled synthetic.
"""

from __future__ import annotations

from pathlib import Path

from prereg.api import numpy_generator, read_json
from prereg.e04.synthetic import make_synthetic_repository

DEMO_PLAN = "plans/demo/E04_PLAN.json"
FIXTURE_SEED_NAMESPACE = "e04-demo-fixture"


def prepare_e04_demo(out: Path) -> dict[str, Path]:
    """Build the synthetic fixture under ``out/e04-inputs``; return the stage's --input pairs.

    The number of tasks and the E02 code revision are read from the demo plan in the
    clone (``out/repo``), so the fixture always matches the plan it is approved with.
    """
    plan = read_json(Path(out) / "repo" / DEMO_PLAN, what="E04 demo plan")
    params = plan["stages"]["e04"]["parameters"]
    fixture = make_synthetic_repository(
        Path(out) / "e04-inputs",
        rng=numpy_generator(FIXTURE_SEED_NAMESPACE, plan["plan_id"]),
        tasks=params["tasks"]["count"],
        code_revision=params["reformulations"]["expected_code_revision"],
    )
    return {
        "repository": fixture.repository,
        "tasks": fixture.tasks_file,
        "reformulations": fixture.reformulations_file,
    }
