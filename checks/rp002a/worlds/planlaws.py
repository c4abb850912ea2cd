"""The reference laws E0, E1, E2 as the plan states them (their one home), for the checks."""

from __future__ import annotations

import json
from pathlib import Path

from prereg.rp002a.laws import LawRegistry, law_registry

PLAN = Path(__file__).resolve().parents[3] / "plans" / "STATISTICAL_PIPELINE_PLAN.json"
REFERENCE_LAW_SPECS = json.loads(PLAN.read_text())["parameters"]["worlds"]


def reference_law_registry() -> LawRegistry:
    """A registry with the plan's worlds registered by name."""
    registry = law_registry()
    for spec in REFERENCE_LAW_SPECS.values():
        registry.register_law(registry.law_from_spec(spec))
    return registry
