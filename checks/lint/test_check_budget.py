"""The software suite's time is budgeted: ``checks/check_seconds.json`` records each unit of
work's seconds in a full run (``benchmarks/check_units.py`` refreshes them from a run's
``--durations=0``), and their sum, with every unrecorded check module counted at
``UNRECORDED_SECONDS`` a check, must fit ``budget_seconds``. A new slow check fits the budget
or makes room for itself by what it replaces, and says so in the record's ``about``; a
faster suite lowers the budget. ``goal_seconds`` is the worker time two workers have in the
README's ten minutes, which the budget comes down to."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from support.suite import checks_conftest

pytestmark = pytest.mark.software

RULES = checks_conftest()
UNIT_SECONDS, UNRECORDED_SECONDS, unit_of = (
    RULES.UNIT_SECONDS,
    RULES.UNRECORDED_SECONDS,
    RULES.unit_of,
)

CHECKS = Path(__file__).resolve().parents[1]
REPO = CHECKS.parent
WORKERS = 2  # the README's test command: -n 2
SUITE_SECONDS = 600  # the README's goal: the suite within ten minutes on two cores


def _record() -> dict:
    return json.loads(UNIT_SECONDS.read_text())


def _checks_in(module: Path) -> int:
    """The test functions a check module defines (before parametrization)."""
    tree = ast.parse(module.read_text())
    return sum(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")
        for node in ast.walk(tree)
    )


def budgeted_seconds(record: dict) -> tuple[float, dict[str, float]]:
    """The recorded units' sum plus the estimate of every check module no unit records."""
    units = record["units"]
    unrecorded: dict[str, float] = {}
    for module in sorted(CHECKS.rglob("test_*.py")):
        unit = unit_of(module.relative_to(REPO).as_posix())
        if unit not in units:
            unrecorded[unit] = unrecorded.get(unit, 0.0) + UNRECORDED_SECONDS * _checks_in(module)
    return sum(units.values()) + sum(unrecorded.values()), unrecorded


def test_the_goal_is_the_worker_time_of_the_readmes_ten_minutes():
    record = _record()
    assert record["goal_seconds"] == WORKERS * SUITE_SECONDS <= record["budget_seconds"]


def test_the_recorded_units_fit_the_budget():
    record = _record()
    total, unrecorded = budgeted_seconds(record)
    largest = sorted(record["units"].items(), key=lambda pair: -pair[1])[:8]
    assert total <= record["budget_seconds"], (
        f"the suite's units sum to {total:.0f} worker seconds, over the budget of "
        f"{record['budget_seconds']} in checks/check_seconds.json: make the new checks cheaper "
        f"(build a run once per session and copy it, judge recorded facts instead of running "
        f"a stage) or replace slower ones, and say so in the record. Largest units: {largest}; "
        f"unrecorded, estimated: {unrecorded}"
    )


def test_every_recorded_unit_exists():
    """A unit whose module or folder was removed or renamed no longer counts."""
    missing = [unit for unit in _record()["units"] if not _unit_exists(unit)]
    assert not missing, f"check_seconds.json records units that are gone: {missing}"


def _unit_exists(unit: str) -> bool:
    return all((REPO / part).exists() for part in unit.split("+"))
