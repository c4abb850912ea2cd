"""prereg.api, the one module a stage kind imports: docs/API.md names exactly its
``__all__``; the settings parser names every bad field by its path; result files are
byte-deterministic and finite; the replay comparison names item, file and field; the default
summary, replay and report work on a run folder; torch seeding is reproducible and leaves
the global generator as it was."""

from __future__ import annotations

import copy
import json
import math
import re
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from prereg import api
from prereg.base.schema import SchemaError

pytestmark = pytest.mark.software

REPO = Path(__file__).resolve().parents[2]
STAGE = "toy"
NAMESPACE = "toy-1.0"


# -- docs/API.md ------------------------------------------------------------------------------


def documented_names() -> list[str]:
    """The names in the first column of the table of docs/API.md's section "prereg.api"."""
    text = (REPO / "docs" / "API.md").read_text(encoding="utf-8")
    match = re.search(r"^## `prereg\.api`$(.*?)(?=^## |\Z)", text, re.DOTALL | re.MULTILINE)
    assert match, "docs/API.md has no section '## `prereg.api`'"
    rows = [line for line in match.group(1).splitlines() if line.startswith("| `")]
    return [name for row in rows for name in re.findall(r"`(\w+)`", row.split("|")[1])]


def test_docs_api_names_exactly_the_public_names():
    names = documented_names()
    assert len(names) == len(set(names)), (
        f"named twice: {sorted(n for n in names if names.count(n) > 1)}"
    )
    assert set(names) == set(api.__all__), (
        f"in __all__ but not in docs/API.md: {sorted(set(api.__all__) - set(names))}; "
        f"in docs/API.md but not in __all__: {sorted(set(names) - set(api.__all__))}"
    )
    assert all(hasattr(api, name) for name in api.__all__)


# The layers above the kind API: the decisions, the pytest runtime, the commands and the faces
# that use them.
ABOVE_THE_API = (
    "prereg.decisions",
    "prereg.runtime",
    "prereg.commands",
    "prereg.cli",
    "prereg.plugin",
)


def test_importing_the_api_loads_no_decision_runtime_or_command_module():
    done = subprocess.run(
        [sys.executable, "-c", "import sys, prereg.api; print(*sorted(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = done.stdout.split()
    assert "prereg.api" in loaded and "prereg.kinds.stages" in loaded, loaded
    above = [m for m in loaded if any(m == a or m.startswith(a + ".") for a in ABOVE_THE_API)]
    assert above == [], f"import prereg.api loaded {above}"


def test_a_kind_refuses_inputs_by_the_api_type_and_the_old_name_still_resolves_with_a_warning():
    from prereg.decisions.approval import ApprovalError

    refused = api.InputsRefused("2 problems", ["input a: missing", "input b: changed"])
    assert isinstance(refused, ValueError) and refused.problems == (
        "input a: missing",
        "input b: changed",
    )
    assert api.InputsRefused("1 problem", [Path("tasks.json")]).problems == ("tasks.json",)
    with pytest.warns(DeprecationWarning, match="InputsRefused"):
        assert api.ApprovalError is ApprovalError
    with pytest.raises(AttributeError, match="no_such_name"):
        api.no_such_name  # noqa: B018


# -- the settings parser ----------------------------------------------------------------------


@dataclass(frozen=True)
class Model:
    name: str
    width: int = api.bounded(minimum=1)
    dropout: float | None = None


@dataclass(frozen=True)
class Params(api.StageSettings):
    models: tuple[Model, ...]
    rate: float = api.bounded(above=0, below=1)
    shuffle: bool
    mode: Literal["fast", "slow"]
    pair: tuple[int, str]

    def __post_init__(self) -> None:
        if len({m.name for m in self.models}) != len(self.models):
            raise ValueError("models: two models share a name")


parse = api.settings_parser(Params)
texts = st.text(st.characters(codec="ascii"), max_size=8)
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
models = st.builds(
    Model,
    name=texts,
    width=st.integers(1, 10**6),
    dropout=st.none() | st.floats(0, 1),
)
params = st.builds(
    Params,
    stage=st.just(STAGE),
    seed_namespace=st.just(NAMESPACE),
    models=st.lists(models, max_size=4, unique_by=lambda m: m.name).map(tuple),
    rate=st.floats(0, 1, exclude_min=True, exclude_max=True),
    shuffle=st.booleans(),
    mode=st.sampled_from(["fast", "slow"]),
    pair=st.tuples(st.integers(), texts),
)


def plan_of(parameters: dict) -> dict:
    return {"stages": {STAGE: {"seed_namespace": NAMESPACE, "parameters": parameters}}}


@given(params)
def test_parameters_round_trip_through_json(value):
    text = json.dumps(api.parameters_of(value))
    assert parse(plan_of(json.loads(text)), STAGE) == value


def leaves(data, path=""):
    """(path, value) of every value and object inside ``data``, as the parser names them."""
    yield path, data
    items = (
        data.items()
        if isinstance(data, dict)
        else enumerate(data)
        if isinstance(data, list)
        else ()
    )
    for key, value in items:
        yield from leaves(value, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}")


def wrong_for(value):
    """A value of another JSON kind than ``value`` (so the field's type refuses it)."""
    if isinstance(value, str):
        return 7
    if isinstance(value, bool):
        return "yes"
    return "x"


def put(data, path, value):
    parts = re.findall(r"\.([A-Za-z_]+)|\[(\d+)\]", path)
    keys = [name or int(index) for name, index in parts]
    target = data
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value


@given(params, st.data())
def test_every_wrong_value_is_refused_naming_its_path(value, data):
    parameters = api.parameters_of(value)
    path, original = data.draw(st.sampled_from([p for p in leaves(parameters) if p[0]]))
    broken = copy.deepcopy(parameters)
    put(broken, path, wrong_for(original))
    with pytest.raises(api.SettingsError) as refused:
        parse(plan_of(broken), STAGE)
    where = f"stages.{STAGE}.parameters{path}"
    assert str(refused.value).startswith(f"{where}: "), str(refused.value)
    assert refused.value.path == where


@given(params, st.data())
def test_unknown_and_missing_fields_are_named(value, data):
    parameters = api.parameters_of(value)
    objects = [(p, v) for p, v in leaves(parameters) if isinstance(v, dict)]
    path, target = data.draw(st.sampled_from(objects))
    where = f"stages.{STAGE}.parameters{path}"
    added = copy.deepcopy(parameters)
    (added if not path else dict(leaves(added))[path])["extra_field"] = 1
    with pytest.raises(
        api.SettingsError, match=re.escape(f"{where}: unknown field(s) ['extra_field']")
    ):
        parse(plan_of(added), STAGE)
    required = [k for k in target if k != "dropout"]  # dropout has a default
    name = data.draw(st.sampled_from(required))
    removed = copy.deepcopy(parameters)
    del (removed if not path else dict(leaves(removed))[path])[name]
    with pytest.raises(api.SettingsError, match=re.escape(f"{where}: missing field(s) [{name!r}]")):
        parse(plan_of(removed), STAGE)


GOOD = {
    "models": [{"name": "a", "width": 3}, {"name": "b", "width": 4, "dropout": 0.5}],
    "rate": 0.1,
    "shuffle": True,
    "mode": "fast",
    "pair": [1, "x"],
}


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (".models[1].width", "x", ".models[1].width: expected an integer, got 'x'"),
        (".models[1].width", True, ".models[1].width: expected an integer, got True"),
        (".models[0].width", 0, ".models[0].width: must be >= 1, got 0"),
        (".rate", 1.0, ".rate: must lie in (0, 1), got 1.0"),
        (".rate", float("nan"), ".rate: expected a finite number, got nan"),
        (".shuffle", 1, ".shuffle: expected true or false, got 1"),
        (".mode", "medium", ".mode: expected one of ['fast', 'slow'], got 'medium'"),
        (".pair", [1], ".pair: expected an array of 2, got 1 values"),
        (".models[1].name", "a", ": models: two models share a name"),
    ],
)
def test_refusals_name_the_field_and_the_value(path, value, message):
    broken = copy.deepcopy(GOOD)
    put(broken, path, value)
    with pytest.raises(api.SettingsError) as refused:
        parse(plan_of(broken), STAGE)
    assert str(refused.value) == f"stages.{STAGE}.parameters{message}"


def test_the_parser_is_a_stage_kinds_settings_and_reads_the_stage_entry(tmp_path):
    parsed = parse(plan_of(GOOD), STAGE)
    assert (parsed.stage, parsed.seed_namespace) == (STAGE, NAMESPACE)
    assert parsed.models[1] == Model("b", 4, 0.5) and parsed.models[0].dropout is None
    assert api.field_tree(Model) == {"name": None, "width": None, "dropout": None}
    assert set(api.field_tree(Params)) == {"models", "rate", "shuffle", "mode", "pair"}
    plan = plan_of(GOOD)
    plan["stages"][STAGE]["seed_namespace"] = None
    with pytest.raises(api.SettingsError, match=r"stages\.toy\.seed_namespace: expected a string"):
        parse(plan, STAGE)
    kind = api.StageKind(name="toy.kind", settings=parse)
    broken = copy.deepcopy(GOOD)
    broken["rate"] = 2
    plan_file = tmp_path / "PLAN.json"
    with pytest.raises(SchemaError, match=re.escape(f"{plan_file}: stages.toy.parameters.rate")):
        kind.check(api.Plan(path=plan_file, sha256="", data=plan_of(broken)), STAGE)


# -- result files -----------------------------------------------------------------------------


def stamped_zip(path: Path) -> bytes:
    """A zip entry written by name only, as ``numpy.savez`` writes them: stamped ``now``."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("weights.npy", b"same bytes")
    return path.read_bytes()


def test_save_npz_bytes_depend_on_the_arrays_alone(tmp_path, monkeypatch):
    arrays = {"weights": np.arange(12, dtype=np.float32).reshape(3, 4), "labels": np.array([1, 0])}
    first = api.save_npz(tmp_path / "a.npz", **arrays).read_bytes()
    stamped = [stamped_zip(tmp_path / "stamped-a.zip")]
    monkeypatch.setattr(time, "time", lambda: 2_000_000_000.0)  # another day, another stamp
    second = api.save_npz(tmp_path / "b.npz", labels=arrays["labels"], weights=arrays["weights"])
    stamped.append(stamped_zip(tmp_path / "stamped-b.zip"))
    assert second.read_bytes() == first
    assert stamped[0] != stamped[1], "the clock moved: an entry written by name is stamped"
    with zipfile.ZipFile(second) as archive:
        assert {i.date_time for i in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    loaded = api.load_npz(second)
    assert set(loaded) == set(arrays)
    for name, array in arrays.items():
        assert loaded[name].dtype == array.dtype and np.array_equal(loaded[name], array)
    other = api.save_npz(tmp_path / "c.npz", labels=arrays["labels"], weights=arrays["weights"] + 1)
    assert other.read_bytes() != first


def nested():
    scalars = st.none() | st.booleans() | st.integers() | finite | st.text(max_size=4)
    keys = st.text(st.characters(codec="ascii", categories=["L"]), min_size=1, max_size=4)
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    )


@given(nested(), st.data(), st.sampled_from([math.nan, math.inf, -math.inf]))
def test_save_json_refuses_a_non_finite_number_naming_its_key_path(value, data, bad):
    document = {"result": value}
    path, _ = data.draw(st.sampled_from(list(leaves(document))[1:]))
    put(document, path, bad)
    with pytest.raises(ValueError) as refused:
        api.json_value(document, file="out.json")
    assert f"out.json: field {path.lstrip('.')!r} is {bad!r}" in str(refused.value)


def test_save_json_is_canonical_and_converts_numpy(tmp_path):
    path = api.save_json(tmp_path / "deep" / "out.json", {"b": np.float64(0.5), "a": np.arange(3)})
    assert path.read_text() == '{\n  "a": [\n    0,\n    1,\n    2\n  ],\n  "b": 0.5\n}\n'
    assert api.load_json(path) == {"a": [0, 1, 2], "b": 0.5}
    with pytest.raises(ValueError, match=r"out\.json: field 'loss\[1\]' is nan"):
        api.save_json(tmp_path / "out.json", {"loss": [0.1, float("nan")]})
    assert not (tmp_path / "out.json").exists()
    with pytest.raises(TypeError, match=r"field 'when' is of type object, which JSON cannot hold"):
        api.save_json(tmp_path / "out.json", {"when": object()})


# -- the replay comparison --------------------------------------------------------------------


def test_compare_names_item_file_and_field():
    assert api.compare("item r1", "out.json", {"loss": 0.5}, {"loss": 0.5001}, rtol=1e-9) == [
        "item r1 out.json.loss: recorded 0.5, recomputed 0.5001 (relative tolerance 1e-09)"
    ]
    assert (
        api.compare("item r1", "out.json", {"loss": 0.5}, {"loss": 0.5 * (1 + 1e-12)}, rtol=1e-9)
        == []
    )
    assert api.compare("item r1", "out.json", {"loss": 0.5}, {"loss": 0.5 + 1e-16}) == [
        f"item r1 out.json.loss: recorded 0.5, recomputed {0.5 + 1e-16!r}"
    ]
    found = api.compare(
        "item r2",
        "out.json",
        {"x": [1, 2], "old": 1, "flag": True},
        {"x": [1, 2, 3], "new": 2, "flag": 1},
    )
    assert found == [
        "item r2 out.json.flag: recorded True, recomputed 1",
        "item r2 out.json.new: not recorded; the replay computes 2",
        "item r2 out.json.old: recorded, but the replay computes no such field",
        "item r2 out.json.x: recorded 2 values, recomputed 3",
    ]
    recorded = {"w": np.zeros((2, 2))}
    recomputed = {"w": np.array([[0.0, 1.0], [0.0, 0.0]])}
    assert api.compare("item r3", "a.npz", recorded, recomputed) == [
        "item r3 a.npz.w[0][1]: recorded 0.0, recomputed 1.0"
    ]
    many = api.compare("summary", "s.json", list(range(15)), [v + 1 for v in range(15)], limit=3)
    assert len(many) == 4 and many[-1] == "summary s.json: 12 more difference(s) not listed"


@given(nested(), st.data())
def test_a_changed_value_is_one_finding_naming_its_path(value, data):
    document = {"result": value}
    assert api.compare("item k", "f.json", document, copy.deepcopy(document)) == []
    path, _ = data.draw(st.sampled_from(list(leaves(document))[1:]))
    changed = copy.deepcopy(document)
    put(changed, path, "a changed value")  # longer than any drawn text
    found = api.compare("item k", "f.json", document, changed)
    assert len(found) == 1 and found[0].startswith(f"item k f.json{path}: "), found


# -- a kind built on the API: summary, replay and report on a run folder ----------------------


@dataclass(frozen=True)
class ToySettings(api.StageSettings):
    cells: int = api.bounded(minimum=1)


def toy_cells(parsed):
    return {f"cell{i}": i for i in range(parsed.cells)}


def toy_item(research, cell):
    research.coords(cell=cell)
    rng = research.numpy_generator("cell", cell)
    draws = rng.standard_normal(5)
    api.save_json(research.outputs / "out.json", {"cell": cell, "mean": float(draws.mean())})
    api.save_npz(research.outputs / "draws.npz", draws=draws)


TOY = api.StageKind(
    name="toy.api",
    settings=api.settings_parser(ToySettings),
    item_key=lambda coords: f"cell{coords['cell']}",
    summarise=api.summarise_items("summary.json", "out.json", cells=toy_cells),
    replay=api.rerun_replay(toy_item, toy_cells),
    render=api.render_summary("Toy", "summary.json", section_id="toy"),
)


def toy_run(tmp_path: Path, cells: int = 3) -> api.RunView:
    """A run folder as a run leaves it: each item's files and record, then the summary."""
    data = {
        "stages": {
            STAGE: {"seed_namespace": NAMESPACE, "requires": [], "parameters": {"cells": cells}}
        }
    }
    plan = api.Plan(path=tmp_path / "PLAN.json", sha256="", data=data)
    run_dir, items = tmp_path / "runs" / "toy-20261202-001", []
    for cell in range(cells):
        output_dir = f"test_cell[{cell}]"
        record = {"nodeid": f"test_toy.py::test_cell[{cell}]", "output_dir": output_dir}
        research = api.ItemContext(
            stage=STAGE,
            run_id=run_dir.name,
            plan=data,
            outputs=api.RunFolder(run_dir).item_dir(output_dir),
            seed_namespace=NAMESPACE,
            deadline=None,
            record=record,
        )
        research.outputs.mkdir(parents=True)
        research.__dict__["settings"] = TOY.settings(data, STAGE)
        toy_item(research, cell)
        items.append(record)
    view = api.RunView(
        root=tmp_path, run_dir=run_dir, plan=plan, stage=STAGE, items=tuple(items), kind=TOY
    )
    TOY.summarise(view)
    return view


def test_the_default_summary_replay_and_report(tmp_path):
    view = toy_run(tmp_path)
    summary = api.load_json(view.summary_dir / "summary.json")
    assert sorted(summary) == ["cell0", "cell1", "cell2"] and summary["cell1"]["cell"] == 1
    assert view.items[0]["seeds"] == [f"{NAMESPACE}/cell/0"]
    assert TOY.replay(view) == []

    class Context:
        def summary_json(self, name):
            return api.load_json(view.summary_dir / name)

    page = TOY.render(Context())
    assert '<section id="toy">' in page and "<th>mean</th>" in page and "cell2" in page


def tamper_json(path: Path, change) -> None:
    data = api.load_json(path)
    change(data)
    api.save_json(path, data)


def test_the_replay_names_each_tampered_item_file_field_and_seed(tmp_path):
    view = toy_run(tmp_path)
    item = view.item_dir(view.items[1])
    tamper_json(item / "out.json", lambda d: d.update(mean=d["mean"] + 1e-6))
    draws = api.load_npz(item / "draws.npz")["draws"]
    draws[3] += 1.0
    api.save_npz(item / "draws.npz", draws=draws)
    tamper_json(view.summary_dir / "summary.json", lambda d: d["cell2"].update(cell=7))
    findings = TOY.replay(view)
    assert any(f.startswith("item cell1 out.json.mean: recorded ") for f in findings), findings
    assert any(f.startswith("item cell1 draws.npz.draws[3]: recorded ") for f in findings), findings
    assert "summary summary.json.cell2.cell: recorded 7, recomputed 2" in findings, findings

    seeded = copy.deepcopy(list(view.items))
    seeded[0]["seeds"] = [f"{NAMESPACE}/cell/9"]
    (view.item_dir(seeded[2]) / "stray.txt").write_text("left behind")
    moved = api.RunView(view.root, view.run_dir, view.plan, STAGE, tuple(seeded), kind=TOY)
    findings = TOY.replay(moved)
    assert any(f.startswith("item cell0: recorded seeds ['toy-1.0/cell/9']") for f in findings)
    assert "item cell2 stray.txt: recorded, but the replay writes no such file" in findings

    missing = api.RunView(view.root, view.run_dir, view.plan, STAGE, view.items[:2], kind=TOY)
    assert "cell 'cell2' of the plan has no item in the manifest" in TOY.replay(missing)


def test_the_default_summary_refuses_items_that_are_not_the_plans_cells(tmp_path):
    view = toy_run(tmp_path, cells=2)
    short = api.RunView(view.root, view.run_dir, view.plan, STAGE, view.items[:1], kind=TOY)
    with pytest.raises(ValueError, match="cell 'cell1' of the plan has no item"):
        TOY.summarise(short)


# -- torch seeding ----------------------------------------------------------------------------


def test_torch_seeded_reproduces_init_and_shuffling_and_restores_the_generator(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    def build(source, *coords):
        with api.torch_seeded(source, *coords):
            layer = torch.nn.Linear(4, 3)
            loader = DataLoader(TensorDataset(torch.arange(20)), batch_size=5, shuffle=True)
            order = [batch[0].tolist() for batch in loader]
        return layer.weight.detach().clone(), order

    torch.manual_seed(1234)
    before = torch.get_rng_state()
    research = api.ItemContext(
        stage=STAGE, run_id="r", plan={}, outputs=tmp_path, seed_namespace=NAMESPACE, deadline=None
    )
    weights, order = build(research, "init", 0)
    again_weights, again_order = build(NAMESPACE, "init", 0)  # a replay: the namespace
    assert torch.equal(weights, again_weights) and order == again_order
    assert research.record["seeds"] == [f"{NAMESPACE}/init/0"]
    assert torch.equal(torch.get_rng_state(), before), "the global generator is restored"
    other_weights, other_order = build(NAMESPACE, "init", 1)
    assert not torch.equal(weights, other_weights) and order != other_order


def test_torch_seeded_without_torch_says_what_to_do(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    seeded = api.torch_seeded(NAMESPACE, "init")
    with pytest.raises(ModuleNotFoundError, match="needs torch, which is not installed"):
        seeded.__enter__()
