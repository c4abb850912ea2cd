"""The E04 gate: the pinned embedding backend must be available before the run id is spent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prereg.e04.stage import gate_check
from prereg.kinds.plans import Plan
from support.e04_project import check_plan

pytestmark = pytest.mark.software

PROJECT = Path(__file__).resolve().parents[3]


def _plan(data: dict) -> Plan:
    return Plan(path=Path("plans/E04_PLAN.json"), sha256="0" * 64, data=data)


def test_the_check_plan_backend_is_available(tmp_path):
    assert gate_check(tmp_path, _plan(check_plan()), "e04", {}) == []


def test_the_embedded_default_passes_when_its_weights_hash_as_pinned(tmp_path):
    plan = json.loads((PROJECT / "plans" / "E04_PLAN.json").read_text())
    assert gate_check(tmp_path, _plan(plan), "e04", {}) == []
    plan["stages"]["e04"]["parameters"]["embedding"]["identity"]["weights_sha256"] = "0" * 64
    (problem,) = gate_check(tmp_path, _plan(plan), "e04", {})
    assert "'minilm' is not available as pinned" in problem and "weights_sha256" in problem


def test_lm_studio_that_is_not_running_is_a_refusal_not_a_spent_run(tmp_path):
    # No LM Studio server runs here: the real SDK fails fast, and the gate must say so.
    plan = json.loads((PROJECT / "plans" / "E04_PLAN.json").read_text())
    embedding = plan["stages"]["e04"]["parameters"]["embedding"]
    embedding["backend"] = "lmstudio"
    embedding["identity"].update(backend="lmstudio", model="text-embedding-pinned-model")
    embedding["lmstudio"] = {"api_host": "127.0.0.1:1", "models_dir": None}
    (problem,) = gate_check(tmp_path, _plan(plan), "e04", {})
    assert "'lmstudio' is not available as pinned" in problem and "LM Studio" in problem
