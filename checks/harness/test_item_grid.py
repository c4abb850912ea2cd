"""What an item derives from the plan is judged before a run id is spent: a kind's item grid
(``StageKind.cells``) and each cell's seed coordinates (``StageKind.seed_coords``) are
checked by ``StageKind.check`` (prereg approve, the gate, a rehearsal and the project's
software check call it); and a complete run's one-line result (``StageKind.headline``) is
shown in the index of runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prereg import api
from prereg.base import seeds
from prereg.commands.report.render import headline, index_rows
from prereg.kinds import stages
from prereg.kinds.plans import Plan
from prereg.kinds.report.model import RunRecord
from prereg.records.runs import RunFolder
from prereg.rp002a import DEMO_PLAN, calibration_stage

pytestmark = pytest.mark.software

STAGE = "s"


def _plan(namespace: str | None = "ns-1.0", replicates: int = 3) -> Plan:
    data = {
        "plan_id": "P",
        "stages": {STAGE: {"seed_namespace": namespace, "parameters": {"n": replicates}}},
    }
    return Plan(path=Path("PLAN.json"), sha256="0" * 64, data=data)


def _kind(*, cells=None, seed_coords=None, **fields) -> stages.StageKind:
    def settings(plan_data: dict, stage: str) -> int:
        return plan_data["stages"][stage]["parameters"]["n"]

    return stages.StageKind(
        name="test.grid", settings=settings, cells=cells, seed_coords=seed_coords, **fields
    )


def _grid(n: int) -> dict[str, int]:
    return {f"r{r}": r for r in range(n)}


def test_a_grid_whose_every_cell_derives_a_seed_passes():
    _kind(cells=_grid, seed_coords=lambda r: ("replicate", r)).check(_plan(), STAGE)


def test_a_kind_without_cells_is_not_judged_on_a_grid():
    _kind().check(_plan(replicates=0), STAGE)


def test_an_empty_grid_is_refused_naming_the_plan_and_stage():
    with pytest.raises(api.SchemaError) as refused:
        _kind(cells=_grid).check(_plan(replicates=0), STAGE)
    assert str(refused.value).startswith(
        "PLAN.json: stages.s: the item grid of kind 'test.grid' cannot be run: it has no cell"
    )


def test_a_grid_that_is_not_a_mapping_is_refused():
    with pytest.raises(api.SchemaError, match="returned list, not a mapping"):
        _kind(cells=lambda n: list(range(n))).check(_plan(), STAGE)


def test_seeded_cells_without_a_seed_namespace_are_refused():
    kind = _kind(cells=_grid, seed_coords=lambda r: ("replicate", r))
    with pytest.raises(api.SchemaError, match="has no seed_namespace: set one"):
        kind.check(_plan(namespace=None), STAGE)


def test_every_cell_whose_seed_cannot_be_derived_is_named():
    labels = {0: "a", 1: "b/c", 2: ""}
    kind = _kind(cells=_grid, seed_coords=lambda r: ("model", labels[r]))
    with pytest.raises(api.SchemaError) as refused:
        kind.check(_plan(), STAGE)
    message = str(refused.value)
    assert "cell 'r1' seeds from ('model', 'b/c'), which has no derivation" in message
    assert "cell 'r2' seeds from ('model', ''), which has no derivation" in message
    assert "'r0'" not in message


def test_a_grid_or_seed_function_that_raises_is_a_problem_naming_it():
    def broken(n):
        raise KeyError("n")

    with pytest.raises(api.SchemaError, match=r"cells\(settings\) raised KeyError: 'n'"):
        _kind(cells=broken).check(_plan(), STAGE)
    kind = _kind(cells=_grid, seed_coords=lambda r: r)  # an int, not a tuple
    with pytest.raises(api.SchemaError, match="seed_coords of cell 'r0' raised TypeError"):
        kind.check(_plan(), STAGE)


@given(st.lists(st.text(max_size=4), min_size=1, max_size=4))
def test_a_grid_is_refused_exactly_when_a_cells_derivation_would_fail(labels):
    kind = _kind(cells=lambda n: dict(enumerate(labels)), seed_coords=lambda label: (label,))
    failing = []
    for label in labels:
        try:
            seeds.derivation("ns-1.0", label)
        except seeds.SeedCoordinateError:
            failing.append(label)
    problems = stages.grid_problems(kind, None, "ns-1.0")
    assert len(problems) == len(failing)


def test_the_calibration_grid_of_the_demo_plan_is_every_cell_each_with_its_items_seed():
    plan = api.load_plan(Path(__file__).resolve().parents[2] / DEMO_PLAN)
    kind = calibration_stage.KIND
    kind.check(plan, "calibration")
    settings = kind.settings(plan.data, "calibration")
    sim, bench = settings.simulation, settings.bootstrap
    grid = kind.cells(settings)
    assert len(grid) == len(sim.n) * len(sim.laws) * len(sim.rho) * len(sim.within_fraction) + len(
        bench.n
    ) * len(bench.laws) * len(bench.within_fraction)
    namespace = plan.stage("calibration")["seed_namespace"]
    derivations = {seeds.derivation(namespace, *kind.seed_coords(c)) for c in grid.values()}
    assert len(derivations) == len(grid)  # no two cells draw from one seed


# -- the headline of a complete run -----------------------------------------------------------


def _complete_run(root: Path, summary: object, kind_name: str) -> RunRecord:
    root.mkdir(exist_ok=True)
    (root / "PLAN.json").write_text(
        json.dumps({"plan_id": "P", "stages": {STAGE: {"kind": kind_name}}}), encoding="utf-8"
    )
    folder = RunFolder(root / "runs" / "s-1")
    folder.summary_dir.mkdir(parents=True)
    api.save_json(folder.summary_dir / "summary.json", summary)
    return RunRecord(
        run_id="s-1",
        path=folder.folder,
        stage=STAGE,
        status="complete",
        start=None,
        manifest={"plan": {"path": "PLAN.json"}},
        items=(),
    )


@pytest.fixture
def registered(monkeypatch):
    """Kinds registered in this check only."""
    monkeypatch.setattr(stages.KIND_POINT, "_loaded", {})
    return stages.register_kind


@pytest.fixture
def headline_kind(registered):
    kind = stages.StageKind(
        name="test.headline",
        headline=api.headline_from("summary.json", "decision: {decision} ({n[low]})"),
    )
    registered(kind)
    return kind


def test_a_complete_runs_headline_is_the_kinds_line_from_its_summary(tmp_path, headline_kind):
    record = _complete_run(tmp_path, {"decision": "B better", "n": {"low": 2}}, "test.headline")
    assert headline(tmp_path, record) == "decision: B better (2)"
    [row] = index_rows(tmp_path, [record], audit="none")
    assert row["headline"] == "decision: B better (2)"


def test_a_headline_that_cannot_be_filled_says_so_in_its_place(tmp_path, headline_kind):
    record = _complete_run(tmp_path, {"verdict": "B better"}, "test.headline")
    assert headline(tmp_path, record) == "headline unreadable: KeyError: 'decision'"
    record = _complete_run(tmp_path / "list", [1, 2], "test.headline")
    assert headline(tmp_path / "list", record).startswith(
        "headline unreadable: TypeError: summary file summary.json holds no JSON object"
    )


def test_a_headline_that_is_not_text_says_so(tmp_path, registered):
    kind = stages.StageKind(name="test.headline-dict", headline=lambda context: {"a": 1})
    registered(kind)
    record = _complete_run(tmp_path, {}, kind.name)
    assert headline(tmp_path, record) == (
        "headline unreadable: the kind's headline returned dict, not a str"
    )


def test_an_incomplete_run_or_a_kind_without_headline_has_none(tmp_path, headline_kind):
    record = _complete_run(tmp_path, {"decision": "x", "n": {"low": 0}}, "test.headline")
    incomplete = RunRecord(**{**record.__dict__, "status": "incomplete"})
    assert headline(tmp_path, incomplete) is None
    plain = _complete_run(tmp_path / "plain", {"decision": "x"}, "plain")
    assert headline(tmp_path / "plain", plain) is None
