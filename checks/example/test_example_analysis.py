"""Properties of the paired-models example's settings, models, interval and decision rule
(examples/prereg-paired-models; installed by install.sh)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import stats

pytest.importorskip("prereg_paired_models", reason="bash install.sh installs examples/")
from prereg.base import seeds
from prereg_paired_models import analysis, kind, models
from prereg_paired_models.settings import FIELDS, SettingsError, parse_settings

pytestmark = pytest.mark.software

REPO = Path(__file__).resolve().parents[2]
PLAN = json.loads(
    (REPO / "examples/prereg-paired-models/project/plans/PAIRED_MODELS_PLAN.json").read_text()
)
STAGE = "paired-models"

differences = st.lists(
    st.floats(min_value=-10, max_value=10, allow_nan=False), min_size=2, max_size=40
)
confidences = st.floats(min_value=0.5, max_value=0.999)


@given(differences, confidences)
def test_the_interval_is_scipys_one_sample_t_interval(values, confidence):
    assume(np.std(values) > 1e-6)
    interval = analysis.paired_t_interval(values, confidence)
    reference = stats.ttest_1samp(values, 0.0).confidence_interval(confidence)
    assert math.isclose(interval.lower, reference.low, rel_tol=1e-9, abs_tol=1e-9)
    assert math.isclose(interval.upper, reference.high, rel_tol=1e-9, abs_tol=1e-9)
    assert interval.lower <= interval.mean <= interval.upper and interval.n == len(values)


@given(differences, confidences, st.floats(min_value=-5, max_value=5))
def test_shifting_every_difference_shifts_the_interval(values, confidence, shift):
    base = analysis.paired_t_interval(values, confidence)
    moved = analysis.paired_t_interval([v + shift for v in values], confidence)
    assert math.isclose(moved.mean, base.mean + shift, abs_tol=1e-9)
    assert math.isclose(moved.half_width, base.half_width, rel_tol=1e-6, abs_tol=1e-9)


@given(differences, confidences, confidences)
def test_a_higher_confidence_never_narrows_the_interval(values, first, second):
    low, high = sorted((first, second))
    assert (
        analysis.paired_t_interval(values, low).half_width
        <= analysis.paired_t_interval(values, high).half_width
    )


@given(differences, confidences)
def test_the_decision_is_the_preregistered_rule_and_symmetric(values, confidence):
    interval = analysis.paired_t_interval(values, confidence)
    decision = analysis.decide(interval)
    assert (decision == analysis.B_BETTER) == (interval.upper < 0)
    assert (decision == analysis.A_BETTER) == (interval.lower > 0)
    assert decision in (analysis.A_BETTER, analysis.B_BETTER, analysis.INCONCLUSIVE)
    swapped = {analysis.A_BETTER: analysis.B_BETTER, analysis.B_BETTER: analysis.A_BETTER}
    mirrored = analysis.decide(analysis.paired_t_interval([-v for v in values], confidence))
    assert mirrored == swapped.get(decision, analysis.INCONCLUSIVE)


@pytest.mark.parametrize("bad", [[0.5], [], [1.0, float("nan")]])
def test_the_interval_refuses_what_it_cannot_estimate(bad):
    with pytest.raises(ValueError):
        analysis.paired_t_interval(bad, 0.95)


def test_the_example_plan_parses_into_frozen_settings():
    parsed = parse_settings(PLAN, STAGE)
    params = PLAN["stages"][STAGE]["parameters"]
    assert parsed.replicates == params["replicates"]
    assert parsed.neighbours == params["knn"]["neighbours"]
    assert parsed.seed_namespace == PLAN["stages"][STAGE]["seed_namespace"]
    with pytest.raises(AttributeError):
        parsed.replicates = 1  # frozen


FIELD_PATHS = [(name,) for name in FIELDS] + [
    (name, field) for name, fields in FIELDS.items() if fields for field in fields
]


@given(st.sampled_from(FIELD_PATHS), st.sampled_from(["missing", "unknown", "text", "bool"]))
def test_a_bad_field_is_refused_naming_it(path, how):
    plan = copy.deepcopy(PLAN)
    parent = plan["stages"][STAGE]["parameters"]
    for part in path[:-1]:
        parent = parent[part]
    name = path[-1]
    if how == "missing":
        del parent[name]
    elif how == "unknown":
        parent[name + "_extra"] = 1
    else:
        parent[name] = "1" if how == "text" else True
    with pytest.raises(SettingsError) as refused:
        parse_settings(plan, STAGE)
    assert f"stages.{STAGE}.parameters" in str(refused.value)
    assert name in str(refused.value), str(refused.value)


@pytest.mark.parametrize(
    ("path", "value", "phrase"),
    [
        (("replicates",), 1, ">= 2"),
        (("knn", "neighbours"), 10_000, "exceeds"),
        (("analysis", "confidence"), 1.0, "(0, 1)"),
        (("data", "noise_sd"), -0.1, ">= 0"),
        (("ridge", "penalty"), float("inf"), "finite"),
    ],
)
def test_out_of_range_values_are_refused(path, value, phrase):
    plan = copy.deepcopy(PLAN)
    parent = plan["stages"][STAGE]["parameters"]
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = value
    with pytest.raises(SettingsError, match=phrase.replace("(", r"\(").replace(")", r"\)")):
        parse_settings(plan, STAGE)


@settings(max_examples=20, deadline=None)
@given(st.integers(min_value=0, max_value=10_000))
def test_a_replicate_is_a_function_of_its_seed(replicate):
    parsed = parse_settings(PLAN, STAGE)
    coords = kind.GRID.seed_coords(replicate)
    first = kind.compute(parsed, replicate, seeds.numpy_generator(parsed.seed_namespace, *coords))
    again = kind.compute(parsed, replicate, seeds.numpy_generator(parsed.seed_namespace, *coords))
    assert json.dumps(first) == json.dumps(again)
    record = first[0]
    assert record["difference"] == record["loss_b"] - record["loss_a"]
    assert kind.GRID.item_key({"replicate": replicate}) == f"replicate{replicate}"


@pytest.mark.parametrize(
    "coords",
    [{"replicate": True}, {"replicate": 1.7}, {}, {"replicate": 1, "x": 0}],
)
def test_coordinates_that_name_no_replicate_are_refused(coords):
    with pytest.raises(ValueError, match="'replicate'"):
        kind.KIND.item_key(coords)


def test_a_replicate_recorded_as_text_names_no_cell_of_the_grid():
    assert kind.KIND.item_key({"replicate": "1"}) not in kind.KIND.cells(
        parse_settings(PLAN, STAGE)
    )


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_ridge_without_penalty_is_least_squares_and_knn_of_all_points_is_the_mean(seed):
    parsed = parse_settings(PLAN, STAGE)
    data = models.draw(parsed, np.random.default_rng(seed))
    design = np.column_stack([np.ones(len(data.x_train)), data.x_train])
    coef = np.linalg.lstsq(design, data.y_train, rcond=None)[0]
    expected = np.column_stack([np.ones(len(data.x_test)), data.x_test]) @ coef
    assert np.allclose(models.ridge_predict(data, 0.0), expected, rtol=1e-8, atol=1e-10)
    everyone = models.knn_predict(data, len(data.y_train))
    assert np.allclose(everyone, data.y_train.mean(), rtol=1e-12, atol=1e-12)
