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


# -- api.Grid: a one-coordinate grid declared in one line ----------------------------------

GRID_VALUES = st.one_of(
    st.lists(st.integers(-(10**6), 10**6), unique=True, min_size=1, max_size=8),
    st.lists(st.text(min_size=1, max_size=6), unique=True, min_size=1, max_size=8),
)


@given(GRID_VALUES)
def test_a_grids_cells_have_one_key_each_and_an_item_key_reads_it_back(values):
    """Every value gets its own key, and the key of the coordinates an item records (what
    Grid.start records) is that key; a string that would read as an int's key is refused."""
    grid = api.Grid("replicate", lambda settings: values)
    try:
        cells = grid.cells(None)
    except ValueError as refused:
        assert "would read as an int value's key" in str(refused)
        assert any(isinstance(v, str) and grid_int_like(v) for v in values)
        return
    assert not any(isinstance(v, str) and grid_int_like(v) for v in values)
    assert list(cells.values()) == values and len(set(cells)) == len(values)
    for key, value in cells.items():
        assert grid.item_key({"replicate": value}) == key
        assert grid.seed_coords(value) == ("replicate", value)


def grid_int_like(text: str) -> bool:
    """``text`` is "replicate", an optional minus and ASCII digits."""
    if not text.startswith("replicate"):
        return False
    digits = text[len("replicate") :].removeprefix("-")
    return digits != "" and all(c in "0123456789" for c in digits)


@given(st.integers(-(10**6), 10**6), st.integers(-(10**6), 10**6))
def test_an_int_and_a_string_never_share_a_key(number, other):
    grid = api.Grid("replicate", lambda settings: [number, f"replicate{other}"])
    with pytest.raises(ValueError, match="would read as an int value's key"):
        grid.cells(None)
    assert api.Grid("r", lambda settings: [number, str(number)]).cells(None) == {
        f"r{number}": number,
        str(number): str(number),
    }


@pytest.mark.parametrize(
    "coords",
    [{"replicate": True}, {"replicate": 1.0}, {}, {"replicate": 1, "x": 0}, {"other": 1}],
)
def test_coordinates_that_name_no_cell_of_a_grid_are_refused(coords):
    with pytest.raises(ValueError, match="replicate"):
        api.Grid("replicate", lambda settings: range(3)).item_key(coords)


def test_a_grid_whose_values_are_a_set_is_refused_by_the_kinds_check():
    """A set of strings iterates in another order in each process (hash randomisation):
    the workers would list the stage's items in different orders."""
    kind = api.StageKind(
        name="test.grid",
        settings=lambda plan_data, stage: 2,
        grid=api.Grid("cell", lambda n: {"a", "b"}),
    )
    with pytest.raises(api.SchemaError, match="its values are a set, whose order differs"):
        kind.check(_plan(), STAGE)


def test_a_value_repeated_by_the_grid_is_refused_by_the_kinds_check():
    kind = api.StageKind(
        name="test.grid",
        settings=lambda plan_data, stage: 2,
        grid=api.Grid("replicate", lambda n: [*range(n), 0]),
    )
    with pytest.raises(api.SchemaError, match="values 0 and 0 share the item key 'replicate0'"):
        kind.check(_plan(), STAGE)


def test_a_kind_with_a_grid_takes_its_cells_seeds_and_keys_and_refuses_them_twice():
    grid = api.Grid("replicate", lambda n: range(n))
    kind = api.StageKind(name="test.grid", settings=lambda plan_data, stage: 3, grid=grid)
    assert (kind.cells, kind.seed_coords, kind.item_key) == (
        grid.cells,
        grid.seed_coords,
        grid.item_key,
    )
    kind.check(_plan(), STAGE)
    with pytest.raises(api.SchemaError, match="has no seed_namespace: set one"):
        kind.check(_plan(namespace=None), STAGE)
    unseeded = api.StageKind(
        name="test.grid", grid=api.Grid("cell", lambda settings: ["decision"], seeded=False)
    )
    assert unseeded.seed_coords is None and unseeded.cells(None) == {"decision": "decision"}
    with pytest.raises(TypeError, match="its grid gives cells; give either grid or those"):
        api.StageKind(name="test.grid", grid=grid, cells=_grid)
    with pytest.raises(TypeError, match="a grid's coordinate is a Python name"):
        api.Grid("two words", lambda n: range(n))


def test_an_items_start_records_its_cell_and_seeds_its_generator_from_it(tmp_path):
    plan = _plan()
    research = api.ItemContext(STAGE, "check", plan.data, tmp_path, "ns-1.0", None)
    rng = api.Grid("replicate", lambda n: range(n)).start(research, 2)
    assert research.record["coords"] == {"replicate": 2}
    assert research.record["seeds"] == [api.derivation("ns-1.0", "replicate", 2)]
    expected = seeds.numpy_generator("ns-1.0", "replicate", 2).random(3)
    assert list(rng.random(3)) == list(expected)
    quiet = api.ItemContext(STAGE, "check", plan.data, tmp_path, None, None)
    assert api.Grid("cell", lambda s: ["d"], seeded=False).start(quiet, "d") is None
    assert quiet.record["coords"] == {"cell": "d"} and not quiet.record.get("seeds")


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
