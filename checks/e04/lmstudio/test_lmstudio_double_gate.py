"""The E04 gate on the shipped plan switched to LM Studio, with the double as the server.

The gate connects through the plan's ``embedding.lmstudio.api_host`` with the real SDK,
checks residency and hashes the weights file the server reports under ``models_dir``,
before any run id is spent.
"""

import pytest

pytestmark = pytest.mark.software

import json
from pathlib import Path

from prereg.e04.lmstudio_double import LMStudioDouble
from prereg.e04.stage import gate_check
from prereg.kinds.plans import Plan
from support.e04_doubles import KEY, LLM_KEY, OTHER_KEY

PROJECT = Path(__file__).resolve().parents[3]


def _shipped_plan() -> dict:
    return json.loads((PROJECT / "plans" / "E04_PLAN.json").read_text())


@pytest.fixture
def plan_and_double(tmp_path):
    """The shipped E04 plan pinned to KEY on a double serving the plan's lengths."""
    plan = _shipped_plan()
    embedding = plan["stages"]["e04"]["parameters"]["embedding"]
    identity = embedding["identity"]
    with LMStudioDouble(dimension=identity["dimension"], models_dir=tmp_path / "models") as d:
        d.load(KEY, context_length=identity["max_sequence_length"])
        embedding["backend"] = "lmstudio"
        identity.update(backend="lmstudio", model=KEY, weights_sha256=d.weights_sha256(KEY))
        embedding["lmstudio"] = {"api_host": d.api_host, "models_dir": str(d.models_dir)}
        yield plan, d


def _gate(root: Path, plan: dict) -> list[str]:
    return gate_check(root, Plan(Path("plans/E04_PLAN.json"), "0" * 64, plan), "e04", {})


def test_a_plan_pinned_to_lmstudio_passes_the_gate_on_the_double(plan_and_double, tmp_path):
    plan, double = plan_and_double
    assert _gate(tmp_path, plan) == []
    assert double.residency_calls() == []
    assert {c.endpoint for c in double.calls()} <= {"listLoaded", "getModelInfo", "embedString"}


def test_a_wrong_weights_pin_is_refused_at_the_gate(plan_and_double, tmp_path):
    plan, _double = plan_and_double
    plan["stages"]["e04"]["parameters"]["embedding"]["identity"]["weights_sha256"] = "0" * 64
    (problem,) = _gate(tmp_path, plan)
    assert "'lmstudio' is not available as pinned" in problem and "hash to" in problem


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.load(LLM_KEY, kind="llm"), f"llm '{LLM_KEY}'"),
        (lambda d: d.load(OTHER_KEY), f"embedding '{OTHER_KEY}'"),
        (lambda d: d.unload_all(), "loaded: nothing"),
    ],
    ids=["llm-loaded", "two-models", "no-model"],
)
def test_residency_is_checked_at_the_gate(plan_and_double, tmp_path, change, message):
    plan, double = plan_and_double
    change(double)
    (problem,) = _gate(tmp_path, plan)
    assert "'lmstudio' is not available as pinned" in problem and message in problem
    assert double.residency_calls() == []
