from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from prereg.base import seeds
from prereg.base.hashing import canonical_json
from prereg.base.schema import SchemaError
from prereg.decisions import approval
from prereg.kinds.plans import load_plan

pytestmark = pytest.mark.software

coordinate = st.one_of(
    st.integers(-(10**6), 10**6),
    st.text(
        st.characters(exclude_characters="/", exclude_categories=("Cs",)), min_size=1, max_size=8
    ),
)


def test_recorded_reference_values_stay_fixed():
    # Recorded when the seed function was written (SHA-256 of "calibration-1.0/sim/20"):
    # changing the derivation would silently change every dataset.
    assert seeds.seed("calibration-1.0", "sim", 20) == 1665457293865313057
    assert (
        seeds.derivation("target-variance-1.0", "E1", 3, "train")
        == "target-variance-1.0/E1/3/train"
    )


@given(st.lists(coordinate, max_size=4), st.lists(coordinate, max_size=4))
def test_distinct_coordinates_give_distinct_seeds(a, b):
    strings = [str(x) for x in a], [str(x) for x in b]
    if strings[0] != strings[1]:
        assert seeds.seed("ns", *a) != seeds.seed("ns", *b)
    else:
        assert seeds.seed("ns", *a) == seeds.seed("ns", *b)


@given(st.lists(coordinate, max_size=3))
def test_generators_are_reproducible(coords):
    a = seeds.numpy_generator("ns", *coords).integers(0, 2**63, size=4)
    b = seeds.numpy_generator("ns", *coords).integers(0, 2**63, size=4)
    assert np.array_equal(a, b)
    assert 0 <= seeds.seed("ns", *coords) < 2**64


def test_torch_generator_matches_the_seed():
    generator = seeds.torch_generator("ns", "x", 1)
    assert generator.initial_seed() == seeds.seed("ns", "x", 1)


@pytest.mark.parametrize("bad", ["", "a/b", "x\ud800"])
def test_ambiguous_coordinates_are_refused(bad):
    with pytest.raises(seeds.SeedCoordinateError, match="derivation|surrogate"):
        seeds.seed("ns", bad)


def _plan(tmp_path, mutate):
    from support.toy import PINS, stage_spec

    plan = {
        "plan_id": "p",
        "protocol": "x",
        "environment_pins": dict(PINS),
        "stages": {"s": stage_spec("s")},
    }
    mutate(plan)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return path


def test_a_plan_missing_a_field_is_refused_naming_its_path(tmp_path):
    path = _plan(tmp_path, lambda p: p["stages"]["s"].pop("budget_seconds"))
    with pytest.raises(SchemaError, match=r"plan.json: missing field stages\.s\.budget_seconds"):
        load_plan(path)


def test_a_plan_with_an_unknown_field_is_refused_naming_its_path(tmp_path):
    path = _plan(tmp_path, lambda p: p["environment_pins"].update(gpu="none"))
    with pytest.raises(SchemaError, match=r"unknown field environment_pins\.gpu"):
        load_plan(path)


def test_a_wrongly_typed_field_is_refused(tmp_path):
    path = _plan(tmp_path, lambda p: p["stages"]["s"].update(threads_per_worker="one"))
    with pytest.raises(SchemaError, match=r"stages\.s\.threads_per_worker must be an integer"):
        load_plan(path)


@given(
    namespace=st.text(st.characters(exclude_categories=("Cs",)), max_size=6).filter(
        lambda n: "/" in n or not n
    )
)
def test_a_seed_namespace_no_item_could_derive_from_is_refused_at_load(tmp_path_factory, namespace):
    """A namespace with '/' (or empty) passes the schema, but every item's seed derivation
    would fail after the run id is spent: the plan is refused at load (prereg approve and the
    gate load it), naming the field."""
    path = _plan(
        tmp_path_factory.mktemp("plan"), lambda p: p["stages"]["s"].update(seed_namespace=namespace)
    )
    with pytest.raises(SchemaError, match=r"stages\.s\.seed_namespace .* cannot start a seed"):
        load_plan(path)


@given(stem=st.text(st.characters(exclude_categories=("Cs",), exclude_characters="/"), min_size=1))
def test_a_seed_namespace_a_rehearsal_could_reach_is_refused_at_load(tmp_path_factory, stem):
    """A rehearsal draws from its plan's namespace + the rehearsal suffix: a stage whose
    namespace ends with the suffix could have its seeds drawn by a rehearsal under a plan
    naming the stem, so such a plan is refused; the stem's rehearsal namespace is never it."""
    reachable = stem + seeds.REHEARSAL_SUFFIX
    path = _plan(
        tmp_path_factory.mktemp("plan"), lambda p: p["stages"]["s"].update(seed_namespace=reachable)
    )
    with pytest.raises(SchemaError, match=r"stages\.s\.seed_namespace .* ends with '~rehearsal'"):
        load_plan(path)
    assert seeds.rehearsal_namespace(stem) == reachable


@given(rehearsed=st.text(min_size=1), planned=st.text(min_size=1))
def test_no_rehearsal_draws_from_a_namespace_a_plan_may_name(rehearsed, planned):
    """Whatever plan a rehearsal runs under, its items' namespace is none a loadable plan names."""
    assume(not planned.endswith(seeds.REHEARSAL_SUFFIX))  # refused at load (above)
    assert seeds.rehearsal_namespace(rehearsed) != planned
    assert seeds.rehearsal_namespace(None) is None


def test_a_null_or_plain_seed_namespace_loads(tmp_path):
    for namespace in (None, "toy-1.0"):
        path = _plan(tmp_path, lambda p, n=namespace: p["stages"]["s"].update(seed_namespace=n))
        assert load_plan(path).stage("s")["seed_namespace"] == namespace


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text("ab", max_size=2), inner, max_size=3)
    ),
    max_leaves=8,
)


_ABSENT = object()


def _at(value, field: str):
    """The value at a dotted field (keys here hold no '.'), or _ABSENT."""
    for key in field.split(".") if field != "(the plan)" else ():
        value = value.get(key, _ABSENT) if isinstance(value, dict) else _ABSENT
    return value


@given(
    old=st.dictionaries(st.sampled_from("xyz"), JSON, max_size=3),
    new=st.dictionaries(st.sampled_from("xyz"), JSON, max_size=3),
)
def test_an_amendments_fields_are_exactly_where_two_plans_differ(old, new):
    """No field reported for equal plans; some field for differing ones; each reported
    field holds its 'from' value in the old plan and its 'to' value in the new."""
    changes = approval.plan_differences(old, new)
    assert approval.plan_differences(old, old) == []
    assert bool(changes) == (canonical_json(old) != canonical_json(new))
    for change in changes:
        before, after = _at(old, change["field"]), _at(new, change["field"])
        assert (before is _ABSENT, after is _ABSENT) == {
            "added": (True, False),
            "removed": (False, True),
            "changed": (False, False),
        }[change["change"]]
        if change["change"] == "changed":
            assert canonical_json(before) == canonical_json(change["from"])
            assert canonical_json(after) == canonical_json(change["to"])
            assert canonical_json(before) != canonical_json(after)
