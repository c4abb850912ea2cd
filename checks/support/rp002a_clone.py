"""A scratch clone of this repository with a tiny RP002A plan committed, driven like the demo.

For the software checks (RP002A pipeline, reports, extensions) and for trying a change on
the whole pipeline in seconds: the clone is of the checkout the checks run from
(:data:`support.checkout.CHECKOUT`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from prereg.base import gitrepo
from prereg.commands.demo import DemoStep, run_demo
from prereg.testing import ScratchProject
from support.checkout import CHECKOUT

TINY = "plans/demo/TINY_PLAN.json"


def tiny_plan(**eligibility) -> dict:
    plan = json.loads((CHECKOUT / "plans/demo/STATISTICAL_PIPELINE_PLAN.json").read_text())
    plan["plan_id"] = "statistical-pipeline-1.0-tiny"
    shared = plan["parameters"]
    shared["data"] = {
        "n_timepoints": 9,
        "train_episodes": 32,
        "validation_episodes": 16,
        "assessment_episodes": 24,
    }
    shared["training"].update(
        {"max_epochs": 3, "patience": 2, "final_20_window": 2, "final_five_window": 1}
    )
    for model in ("B1", "B2"):
        sizes = shared["models"][model]["sizes"]
        for key in ("conv_channels", "hidden_channels", "hidden"):
            if key in sizes:
                sizes[key] = 8
    stages = plan["stages"]
    sim = stages["calibration"]["parameters"]["simulation"]
    sim.update(
        {"n": [3, 4], "laws": ["normal"], "rho": [0.0], "within_fraction": [0.0], "trials": 200}
    )
    stages["calibration"]["parameters"]["monte_carlo_bound"]["statements"] = 2
    stages["calibration"]["parameters"]["eligibility"].update({"minimum_n": 3, **eligibility})
    stages["calibration"]["parameters"]["bootstrap_benchmark"].update(
        {
            "n": [3],
            "laws": ["normal"],
            "within_fraction": [0.0],
            "trials": 4,
            "draws": 20,
            "episodes": 2,
        }
    )
    stages["target-variance"]["parameters"]["replicates"] = 3
    stages["confirmatory-config"]["parameters"]["candidate_counts"] = [3, 4]
    return plan


def scratch_clone(base: Path, plan: dict) -> Path:
    clone = base / "repo"
    gitrepo.git(CHECKOUT, "clone", "--quiet", str(CHECKOUT), str(clone))
    gitrepo.git(clone, "remote", "remove", "origin")  # its runs never reach the checkout's ledger
    gitrepo.git(clone, "config", "user.name", "pipeline check")
    gitrepo.git(clone, "config", "user.email", "check@prereg.invalid")
    (clone / TINY).write_text(json.dumps(plan, indent=2) + "\n")
    gitrepo.git(clone, "add", TINY)
    gitrepo.git(clone, "commit", "-q", "-m", "Tiny plan for the pipeline check")
    return clone


def rename_tests(clone: Path, module: str, names: dict[str, str]) -> None:
    """Rename test functions of an experiment module in the clone and commit (old -> new)."""
    path = clone / module
    text = path.read_text(encoding="utf-8")
    for old, new in names.items():
        text, count = re.subn(rf"\bdef {old}\(", f"def {new}(", text)
        if count != 1:
            raise ValueError(f"{module} defines {old}() {count} times, not once")
    path.write_text(text, encoding="utf-8")
    gitrepo.git(clone, "add", module)
    gitrepo.git(clone, "commit", "-q", "-m", f"Rename the test functions of {module}")


def steps(*stages: str, workers: int = 1, after=None) -> list[DemoStep]:
    from prereg.rp002a import commit_frozen_config

    return [
        DemoStep(
            stage=s,
            plan=TINY,
            workers=workers,
            after=commit_frozen_config if s == "confirmatory-config" else None,
        )
        for s in stages
    ]


def run_pipeline(clone: Path, stage_steps: list[DemoStep], *, reports: bool = False) -> Path:
    """run_demo inside the clone (it clones once more, as the demo does); returns the run root.
    ``reports``: also write every report, as ``prereg demo`` does (the tiny pipeline's check
    of the whole demo path); the other pipelines' checks read the runs only."""
    if run_demo(clone, steps=stage_steps, reports=reports) != 0:
        raise RuntimeError(f"the pipeline in {clone} stopped; its demo-output/ keeps what ran")
    (out,) = sorted((clone / "demo-output").iterdir())
    return out / "repo"


def prereg(root: Path, *args: str) -> subprocess.CompletedProcess:
    """A prereg command in the clone ``root``, with the clone's own ``lib/`` first."""
    return ScratchProject(root).run(
        sys.executable, "-m", "prereg.cli", *args, env={"PYTHONPATH": str(root / "lib")}
    )
