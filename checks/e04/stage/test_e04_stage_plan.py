import pytest

pytestmark = pytest.mark.software

import copy
import json
from pathlib import Path

from prereg.base.schema import SchemaError
from prereg.e04.plan import E04PlanError, grid, settings_from_parameters
from prereg.kinds.plans import load_plan, validate_stage
from prereg.kinds.stages import load_kind

PROJECT = Path(__file__).resolve().parents[3]
REAL = PROJECT / "plans" / "E04_PLAN.json"
DEMO = PROJECT / "plans" / "demo" / "E04_PLAN.json"


def _params(path: Path = REAL) -> dict:
    return copy.deepcopy(json.loads(path.read_text())["stages"]["e04"]["parameters"])


def test_both_plans_validate_through_the_registered_kind():
    for path in (REAL, DEMO):
        plan = load_plan(path)
        assert plan.stage("e04")["kind"] == "e04.robustness"
        validate_stage(plan, "e04")
    assert load_kind("e04.robustness").check_inputs is not None
    assert "plans/E04_PLAN.json" in (PROJECT / "pytest.ini").read_text()


def test_the_research_plan_states_the_protocol_values():
    # values from the E04 protocol and DESIGN.md ("E04 reference harnesses")
    real = json.loads(REAL.read_text())
    stage = real["stages"]["e04"]
    assert real["plan_id"] == "e04-robustness-1.0"
    assert stage["seed_namespace"] == "e04-1.0" and stage["threads_per_worker"] == 1
    assert stage["inputs"] == ["repository", "tasks", "reformulations"]
    s = settings_from_parameters(stage["parameters"])
    assert s.allow_synthetic is False and s.task_count == 15
    assert s.harness_order == ("H000", "H008", "H010")
    assert s.censored_rank == 201 and s.max_dose == 10
    assert s.doses == ((0, 1), (1, 5), (2, 10))
    assert s.distractor_prefix == "__harness_distractors__/"
    assert s.recall_ks == (1, 5, 10) and s.ndcg_k == 10 and s.retention_k == 10
    assert s.code_revision == "1a7066f6c7682793b6f04445c776a93cc4fac895"
    h000, h008, h010 = (s.harnesses[h] for h in s.harness_order)
    assert (h000.bm25.variant, h000.bm25.k1, h000.bm25.b) == ("lucene", 1.2, 0.75)
    assert h000.candidate_limit == h008.candidate_limit == 200
    assert h008.rrf_k == 60 and h010.query_source == "e02-reformulation"
    assert {k: v for k, v in h010.to_plan().items() if k != "query_source"} == {
        k: v for k, v in h008.to_plan().items() if k != "query_source"
    }
    assert s.embedding["backend"] == "minilm"
    demo = settings_from_parameters(_params(DEMO))
    assert demo.allow_synthetic is True
    assert json.loads(DEMO.read_text())["stages"]["e04"]["seed_namespace"] != "e04-1.0"


def test_the_grid_is_tasks_by_harnesses_by_seed_coordinates():
    s = settings_from_parameters(_params())
    tasks = [f"T{i:02d}" for i in range(1, 16)]
    cells = grid(s, tasks)
    assert len(cells) == 135
    assert [c.item_id for c in cells[:4]] == [
        "T01-H000-s0",
        "T01-H000-s1",
        "T01-H000-s2",
        "T01-H008-s0",
    ]
    assert cells[-1].item_id == "T15-H010-s2" and cells[-1].dose == 10
    assert len({(c.task_id, c.harness) for c in cells}) == 45


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p.update(extra=1), r"unknown field extra"),
        (lambda p: p["metrics"].pop("token_budget"), r"missing field metrics\.token_budget"),
        (lambda p: p.update(censored_rank=200), r"censored_rank is 200.*must be 201"),
        (lambda p: p["doses"][1].update(files=12), r"doses: files \[1, 12, 10\]"),
        (lambda p: p.update(max_dose=5), r"max_dose is 5; the largest dose is 10"),
        (lambda p: p["harnesses"]["H000"].update(rrf_k=60), r"unknown fields \['rrf_k'\]"),
        (lambda p: p.update(harness_order=["H000", "H008"]), r"harness_order"),
        (lambda p: p["embedding"].update(backend="token-hash"), r"identity.backend"),
        (lambda p: p["embedding"]["identity"].update(chunker_version="x"), r"chunker_version"),
    ],
)
def test_inconsistent_parameters_are_refused_naming_the_field(edit, message):
    params = _params()
    edit(params)
    with pytest.raises(SchemaError, match=message):
        settings_from_parameters(params, source="plans/E04_PLAN.json")


def test_the_software_check_backend_is_refused_in_a_research_plan():
    params = _params()
    params["embedding"]["backend"] = params["embedding"]["identity"]["backend"] = "token-hash"
    with pytest.raises(E04PlanError, match=r"token-hash.*allow_synthetic false"):
        settings_from_parameters(params)
