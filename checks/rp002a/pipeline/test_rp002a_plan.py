"""The RP002A plan validates, and the confirmatory stage demands a fresh seed namespace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from prereg.kinds.plans import load_plan, validate_stage
from support.checkout import CHECKOUT

pytestmark = pytest.mark.software

PLANS = ["plans/STATISTICAL_PIPELINE_PLAN.json", "plans/demo/STATISTICAL_PIPELINE_PLAN.json"]


@pytest.mark.parametrize("path", PLANS)
def test_every_stage_of_the_plan_validates(path):
    plan = load_plan(CHECKOUT / path)
    for stage in plan.stages:
        validate_stage(plan, stage)


VALIDATE_IN_A_FRESH_INTERPRETER = """
import sys
from prereg.kinds.plans import load_plan, validate_stage
plan = load_plan(sys.argv[1])
for stage in plan.stages:
    validate_stage(plan, stage)
print(sorted(name for name in sys.modules if name.split(".")[0] == "torch")[:3])
"""


def test_validating_every_stage_imports_no_torch():
    """Approval, the gate, the audit and the report validate the plan; torch loads (about
    two seconds and a thousand files for the execution check to account for) only in the
    processes that train."""
    done = subprocess.run(
        [sys.executable, "-c", VALIDATE_IN_A_FRESH_INTERPRETER, str(CHECKOUT / PLANS[1])],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "[]", done.stdout


def test_the_plan_records_the_exact_ideal_figures_it_is_tested_against():
    from prereg.rp002a.ideal import ideal_loss_figures
    from prereg.rp002a.laws import law_registry

    plan = load_plan(CHECKOUT / PLANS[0]).data["parameters"]
    registry = law_registry()
    for world, figures in plan["ideal_figures"].items():
        if world == "averaging":
            continue
        law = registry.law_from_spec(plan["worlds"][world])
        exact = ideal_loss_figures(
            law,
            plan["data"]["n_timepoints"],
            plan["models"]["B1"]["sizes"]["window"],
            plan["training"]["probability_clip"],
        )
        assert exact.opportunity == pytest.approx(figures["opportunity_nats"], abs=5e-10)
        assert exact.window_gap == pytest.approx(figures["window_gap_nats"], abs=5e-12)


def test_a_confirmatory_namespace_shared_with_another_stage_is_refused(tmp_path):
    data = json.loads((CHECKOUT / PLANS[0]).read_text())
    data["stages"]["confirmatory"]["seed_namespace"] = data["stages"]["target-variance"][
        "seed_namespace"
    ]
    path = Path(tmp_path) / "plan.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="share the seed namespace"):
        validate_stage(load_plan(path), "confirmatory")


def test_the_planning_rule_reads_df_alpha_and_family_size_from_their_one_home(tmp_path):
    """df follows the target-variance replicates; alpha and family size are the decisions'."""
    from prereg.rp002a.config_stage import sd_bound

    data = json.loads((CHECKOUT / PLANS[0]).read_text())
    data["stages"]["target-variance"]["parameters"]["replicates"] = 6
    data["parameters"]["decision"]["familywise_alpha"] = 0.01
    assert sd_bound(data) == {
        "df": 5,
        "familywise_alpha": 0.01,
        "family_size": data["parameters"]["decision"]["family_size"],
    }
    data["stages"]["confirmatory-config"]["parameters"]["sd_bound"] = {"df": 4}
    path = Path(tmp_path) / "plan.json"
    path.write_text(json.dumps(data))
    with pytest.raises(
        ValueError, match="unknown field stages.confirmatory-config.parameters.sd_bound"
    ):
        validate_stage(load_plan(path), "confirmatory-config")
