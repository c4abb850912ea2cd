"""The E04 demo step (:data:`DEMO_STEPS`) and its inputs: the synthetic Go repository, tasks
and reformulations.

The inputs are written into the demo output folder (beside the scratch clone, never inside
it, so the clone stays clean for the gate). Everything is labelled synthetic.
"""

from __future__ import annotations

from pathlib import Path

from prereg.api import RunLayout, numpy_generator, read_json
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


def show_summary(clone: Path, run_id: str) -> None:
    """Print the run's ``summary/SUMMARY.md`` (what the stage found)."""
    print((RunLayout(clone, run_id).summary_dir / "SUMMARY.md").read_text(encoding="utf-8"))


# E04's stage in ``prereg demo`` (:data:`prereg.commands.demo_steps.PROTOCOL_DEMOS` names it); each
# entry: the fields of a prereg.commands.demo_steps.DemoStep.
DEMO_STEPS = (
    {"stage": "e04", "plan": DEMO_PLAN, "prepare": prepare_e04_demo, "after": show_summary},
)
