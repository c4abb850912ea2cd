"""The stages ``prereg demo`` runs, in order, with their demo plans and prepared inputs."""

from __future__ import annotations

from prereg.demo import DemoStep

RP002A_DEMO = "plans/demo/STATISTICAL_PIPELINE_PLAN.json"

STEPS = [
    DemoStep(stage="calibration", plan=RP002A_DEMO),
]
