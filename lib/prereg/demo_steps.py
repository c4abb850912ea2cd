"""The stages ``prereg demo`` runs, in order, with their demo plans and prepared inputs."""

from __future__ import annotations

from pathlib import Path

from prereg import gitrepo
from prereg.demo import DemoStep
from prereg.e04.demo_inputs import DEMO_PLAN as E04_DEMO
from prereg.e04.demo_inputs import prepare_e04_demo

RP002A_DEMO = "plans/demo/STATISTICAL_PIPELINE_PLAN.json"


def _show(name: str) -> object:
    def show(clone: Path, run_id: str) -> None:
        print((clone / "runs" / run_id / "summary" / name).read_text(encoding="utf-8"))

    return show


def _commit_frozen_config(clone: Path, run_id: str) -> None:
    """What the researcher does after stage 3: commit the derived configuration."""
    print((clone / "plans" / "CONFIRMATORY_CONFIG.json").read_text(encoding="utf-8"))
    gitrepo.git(clone, "add", "plans/CONFIRMATORY_CONFIG.json")
    gitrepo.git(
        clone, "commit", "-q", "-m", f"Freeze the confirmatory configuration derived by {run_id}"
    )


STEPS = [
    DemoStep(stage="calibration", plan=RP002A_DEMO, after=_show("SUMMARY.md")),
    DemoStep(stage="target-variance", plan=RP002A_DEMO, after=_show("SUMMARY.md")),
    DemoStep(stage="confirmatory-config", plan=RP002A_DEMO, workers=1, after=_commit_frozen_config),
    DemoStep(stage="confirmatory", plan=RP002A_DEMO, after=_show("SUMMARY.md")),
    DemoStep(stage="e04", plan=E04_DEMO, prepare=prepare_e04_demo, after=_show("SUMMARY.md")),
]
