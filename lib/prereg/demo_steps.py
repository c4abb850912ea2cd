"""The stages ``prereg demo`` runs, in order, with their demo plans and prepared inputs.

:class:`DemoStep` and :data:`STEPS` live here; :mod:`prereg.demo` imports them (this module
imports nothing of the demo runner).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from prereg import gitrepo
from prereg.e04.demo_inputs import DEMO_PLAN as E04_DEMO
from prereg.e04.demo_inputs import prepare_e04_demo
from prereg.runs import RunLayout

RP002A_DEMO = "plans/demo/STATISTICAL_PIPELINE_PLAN.json"


@dataclass(frozen=True)
class DemoStep:
    """One stage of ``prereg demo`` (:func:`prereg.demo.run_demo` runs a list of them)."""

    stage: str
    plan: str
    workers: int = 2
    prepare: Callable[[Path], dict[str, Path]] | None = None  # returns --input NAME=PATH pairs
    after: Callable[[Path, str], None] | None = None  # prints what the stage found


def _show(name: str) -> object:
    def show(clone: Path, run_id: str) -> None:
        print((RunLayout(clone, run_id).summary_dir / name).read_text(encoding="utf-8"))

    return show


def _commit_frozen_config(clone: Path, run_id: str) -> None:
    """What the researcher does after stage 3: commit the derived configuration."""
    print((clone / "plans" / "CONFIRMATORY_CONFIG.json").read_text(encoding="utf-8"))
    gitrepo.git(clone, "add", "plans/CONFIRMATORY_CONFIG.json")
    gitrepo.git(
        clone, "commit", "-q", "-m", f"Freeze the confirmatory configuration derived by {run_id}"
    )


STEPS: list[DemoStep] = [
    DemoStep(stage="calibration", plan=RP002A_DEMO, after=_show("SUMMARY.md")),
    DemoStep(stage="target-variance", plan=RP002A_DEMO, after=_show("SUMMARY.md")),
    DemoStep(stage="confirmatory-config", plan=RP002A_DEMO, workers=1, after=_commit_frozen_config),
    DemoStep(stage="confirmatory", plan=RP002A_DEMO, after=_show("SUMMARY.md")),
    DemoStep(stage="e04", plan=E04_DEMO, prepare=prepare_e04_demo, after=_show("SUMMARY.md")),
]
