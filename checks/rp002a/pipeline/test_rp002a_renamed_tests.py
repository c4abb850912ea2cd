"""Replay pairs items with the plan's cells by the coordinates they recorded, never by name.

Renaming the test functions of the experiment modules changes every item folder name;
the audit must still be clean (calibration here; target-variance in
test_rp002a_pipeline.py's two-worker run, which renames its ``test_unit``). Conversely,
an item whose recorded coordinates name no cell of the plan, or two items claiming one
cell, are audit findings.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prereg.kinds.plans import load_plan
from prereg.kinds.stages import RunView, load_kind
from prereg.rp002a import calibration_stage, units
from support.rp002a_clone import (
    TINY,
    prereg,
    rename_tests,
    run_pipeline,
    scratch_clone,
    steps,
    tiny_plan,
)

pytestmark = pytest.mark.software


@pytest.fixture(scope="module")
def renamed(tmp_path_factory) -> Path:
    """The calibration stage on the tiny plan, its test functions renamed; the run folder."""
    clone = scratch_clone(tmp_path_factory.mktemp("renamed"), tiny_plan())
    rename_tests(
        clone,
        "experiments/test_calibration.py",
        {"test_simulation_cell": "test_sim", "test_bootstrap_cell": "test_boot"},
    )
    root = run_pipeline(clone, steps("calibration"))  # it audits the run too
    (run,) = [p for p in (root / "runs").iterdir() if (p / "manifest.json").exists()]
    return run


@pytest.mark.slow
def test_renamed_test_functions_run_and_audit_clean(renamed):
    manifest = json.loads((renamed / "manifest.json").read_text())
    assert manifest["status"] == "complete", manifest["incomplete_reasons"]
    folders = {item["output_dir"].split("[")[0] for item in manifest["items"]}
    assert folders == {"test_sim", "test_boot"}, folders  # the rename reached the folders
    done = prereg(renamed.parents[1], "audit", str(renamed))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "clean" in done.stdout and "replayed" in done.stdout, done.stdout


def _calibration_view(run: Path, items: list[dict]) -> RunView:
    root = run.parents[1]
    plan = load_plan(root / TINY)
    return RunView(root=root, run_dir=run, plan=plan, stage="calibration", items=tuple(items))


@pytest.mark.slow
def test_an_item_naming_no_cell_or_two_items_of_one_cell_are_findings(renamed):
    items = json.loads((renamed / "manifest.json").read_text())["items"]
    kind = load_kind("rp002a.calibration")
    honest = _calibration_view(renamed, items)
    assert kind.replay(honest) == []
    sims = [i for i, item in enumerate(items) if item["coords"]["design"] == "simulation"]
    assert len(sims) >= 2

    def doctored(index: int, coords: dict) -> RunView:
        copy = json.loads(json.dumps(items))
        copy[index]["coords"] = coords
        return _calibration_view(renamed, copy)

    first, second = items[sims[0]]["coords"], items[sims[1]]["coords"]
    # a cell the plan's grid does not hold (rho 0.25 is not in the tiny grid)
    findings = kind.replay(doctored(sims[0], {**first, "rho": 0.25}))
    assert any("is not a cell of the plan's grid" in f for f in findings), findings
    assert any("has no item in the manifest" in f for f in findings), findings
    # two items claiming one cell
    findings = kind.replay(doctored(sims[1], dict(first)))
    two = calibration_stage.item_key(first)
    assert any(f"cell {two!r} has two items in the manifest" in f for f in findings), findings
    lost = calibration_stage.item_key(second)
    assert any(f"cell {lost!r} of the plan has no item" in f for f in findings), findings
    # a benchmark cell that records a rho, and an item with no design
    boot = next(i for i, item in enumerate(items) if item["coords"]["design"] == "bootstrap")
    findings = kind.replay(doctored(boot, {**items[boot]["coords"], "rho": 0.0}))
    assert any("name no cell" in f for f in findings), findings
    no_design = {k: v for k, v in first.items() if k != "design"}
    findings = kind.replay(doctored(sims[0], no_design))
    assert any("name no cell" in f for f in findings), findings


def test_item_keys_are_unambiguous_between_designs():
    sim = {"design": "simulation", "n": 5, "law": "normal", "rho": 0.0, "within_fraction": 0.5}
    boot = {"design": "bootstrap", "n": 5, "law": "normal", "within_fraction": 0.5}
    assert calibration_stage.item_key(sim) != calibration_stage.item_key(boot)
    for bad in (
        {**boot, "rho": 0.0},  # a benchmark cell has no rho
        {k: v for k, v in sim.items() if k != "rho"},  # a simulation cell has one
        {k: v for k, v in sim.items() if k != "design"},
        {**sim, "design": "other"},
    ):
        with pytest.raises(ValueError):
            calibration_stage.item_key(bad)
    assert units.unit_key({"world": "E1", "replicate": 3}) == "E1-r003"
    for bad in ({"world": "E1"}, {"world": "E1", "replicate": "3"}, {"world": "E1", "replicate": 3, "x": 1}):  # fmt: skip
        with pytest.raises((TypeError, ValueError)):
            units.unit_key(bad)
