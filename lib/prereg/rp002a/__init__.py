"""RP002A: the statistical pipeline's worlds, models, training and analysis.

:data:`DEMO_STEPS` are RP002A's stages in ``prereg demo``, in order, on the demo plan
(:data:`prereg.commands.demo_steps.PROTOCOL_DEMOS` names them). This module imports nothing of
prereg at import time, so importing an RP002A module costs no more than the module itself.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

DEMO_PLAN = "plans/demo/STATISTICAL_PIPELINE_PLAN.json"
FROZEN_CONFIG = "plans/CONFIRMATORY_CONFIG.json"


def show_summary(clone: Path, run_id: str) -> None:
    """Print the run's ``summary/SUMMARY.md`` (what the stage found)."""
    # prereg.api on call: importing prereg.rp002a imports nothing of prereg (see above)
    from prereg.api import RunLayout

    print((RunLayout(clone, run_id).summary_dir / "SUMMARY.md").read_text(encoding="utf-8"))


def commit_frozen_config(clone: Path, run_id: str) -> None:
    """What the researcher does after stage 3: print and commit the derived configuration."""
    print((Path(clone) / FROZEN_CONFIG).read_text(encoding="utf-8"))
    message = f"Freeze the confirmatory configuration derived by {run_id}"
    for args in (["add", FROZEN_CONFIG], ["commit", "-q", "-m", message]):
        done = subprocess.run(
            ["git", *args], cwd=clone, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"git {' '.join(args)} failed in {clone} (exit {done.returncode}): "
                f"{done.stderr.strip()}; the stage's {FROZEN_CONFIG} is there to commit by hand"
            )


# Each entry: the fields of a prereg.commands.demo_steps.DemoStep.
DEMO_STEPS = (
    {"stage": "calibration", "plan": DEMO_PLAN, "after": show_summary},
    {"stage": "target-variance", "plan": DEMO_PLAN, "after": show_summary},
    {
        "stage": "confirmatory-config",
        "plan": DEMO_PLAN,
        "workers": 1,
        "after": commit_frozen_config,
    },
    {"stage": "confirmatory", "plan": DEMO_PLAN, "after": show_summary},
)
