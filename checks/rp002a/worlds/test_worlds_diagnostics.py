import pytest
from planlaws import reference_law_registry

pytestmark = pytest.mark.software

import json
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from prereg.rp002a.diagnostics import (
    EQUAL_REPLICATE_LABEL,
    DiagnosticsError,
    SecondaryDiagnostics,
    confidence_bin_edges,
    confidence_bins,
    equal_replicate_mean,
    multiclass_brier,
    secondary_diagnostics,
)
from prereg.rp002a.ideal import ideal_predictions
from prereg.rp002a.laws import generate_episodes

CLIP, BINS, ERASED = 1e-8, 10, 4


def diagnose(probs, targets, observations, ideal=None, **kwargs) -> SecondaryDiagnostics:
    options = {
        "information_set": "current",
        "clip": CLIP,
        "erasure_symbol": ERASED,
        "n_confidence_bins": BINS,
        **kwargs,
    }
    return secondary_diagnostics(
        probs, targets, observations, probs if ideal is None else ideal, **options
    )


# A tiny hand-computed case: one episode, three timepoints, K = 4.
PROBS = np.array([[[0.7, 0.2, 0.1, 0.0], [0.25, 0.25, 0.25, 0.25], [0.0, 1.0, 0.0, 0.0]]])
TARGETS = np.array([[0, 3, 0]])
OBS = np.array([[0, 4, 1]])
IDEAL = np.full((1, 3, 4), 0.25)


def test_hand_computed_diagnostics() -> None:
    d = diagnose(PROBS, TARGETS, OBS, IDEAL)
    # Brier: 0.3^2+0.2^2+0.1^2 = 0.14; 3*0.0625+0.5625 = 0.75; 1+1 = 2.
    assert d.brier == pytest.approx((0.14 + 0.75 + 2.0) / 3, abs=1e-15)
    losses = [-math.log(0.7), math.log(4), -math.log(CLIP)]
    assert d.log_loss == pytest.approx(sum(losses) / 3, rel=1e-15)
    assert d.log_loss_erased == pytest.approx(math.log(4)) and d.n_erased == 1
    assert d.log_loss_visible == pytest.approx((losses[0] + losses[2]) / 2) and d.n_visible == 2
    assert d.clipped_fraction == pytest.approx(1 / 3)
    assert d.unclipped_log_loss is None  # the third target probability is 0
    assert d.ideal_log_loss == pytest.approx(math.log(4))
    assert d.gap_to_ideal == pytest.approx(sum(losses) / 3 - math.log(4), rel=1e-14)
    counts = [b.count for b in d.confidence_bins]
    # Confidences 0.7 -> bin 7, 0.25 -> bin 2, 1.0 -> last bin (includes 1).
    assert counts == [0, 0, 1, 0, 0, 0, 0, 1, 0, 1]
    assert d.confidence_bins[7].mean_confidence == pytest.approx(0.7)
    assert d.confidence_bins[7].accuracy == 1.0  # argmax 0 == target 0
    assert d.confidence_bins[2].accuracy == 0.0  # tie -> label 0, target 3
    assert d.confidence_bins[9].accuracy == 0.0 and d.confidence_bins[9].includes_upper
    assert d.confidence_bins[0].mean_confidence is None and d.confidence_bins[0].accuracy is None


def test_unclipped_loss_when_all_target_probabilities_are_positive() -> None:
    probs = PROBS.copy()
    probs[0, 2] = [0.1, 0.6, 0.2, 0.1]
    d = diagnose(probs, TARGETS, OBS)
    expected = (-math.log(0.7) + math.log(4) - math.log(0.1)) / 3
    assert d.unclipped_log_loss == pytest.approx(expected, rel=1e-14)
    assert d.clipped_fraction == 0.0 and d.gap_to_ideal == 0.0


def test_empty_strata_are_null_and_records_are_strict_json() -> None:
    d = diagnose(PROBS, TARGETS, np.array([[0, 1, 2]]))
    assert d.log_loss_erased is None and d.n_erased == 0
    record = d.to_record()
    text = json.dumps(record, allow_nan=False)
    assert json.loads(text)["log_loss_erased"] is None
    assert record["confidence_bins"][0] == {
        "lower": 0.0,
        "upper": 0.1,
        "includes_upper": False,
        "count": 0,
        "mean_confidence": None,
        "accuracy": None,
    }


def test_bin_edges_are_exact_at_tenths() -> None:
    # 0.3, 0.6 and 0.7 times 10 are not integers in binary floating point; the
    # bins must still place the float 0.3 in [0.3, 0.4), etc.
    edges = confidence_bin_edges(10)
    assert edges[3] == 0.3 and edges[10] == 1.0
    for b in range(3, 10):
        c = b / 10
        probs = np.array([[[c, 1 - c]]]) if c >= 0.5 else np.array([[[c] + [(1 - c) / 3] * 3]])
        bins = confidence_bins(probs, np.array([[0]]), 10)
        assert bins[b].count == 1, (b, c)


@st.composite
def cases(draw: st.DrawFn):
    e, t = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    raw = draw(hnp.arrays(np.float64, (e, t, 4), elements=st.floats(0.0, 1.0)))
    raw[..., 0] += raw.sum(axis=-1) == 0
    probs = raw / raw.sum(axis=-1, keepdims=True)
    targets = draw(hnp.arrays(np.int64, (e, t), elements=st.integers(0, 3)))
    observations = draw(hnp.arrays(np.int64, (e, t), elements=st.integers(0, 4)))
    return probs, targets, observations


@settings(max_examples=150, deadline=None)
@given(case=cases(), n_bins=st.integers(1, 12))
def test_diagnostic_properties(case: tuple, n_bins: int) -> None:
    probs, targets, observations = case
    d = diagnose(probs, targets, observations, n_confidence_bins=n_bins)
    assert 0.0 <= d.brier <= 2.0
    assert sum(b.count for b in d.confidence_bins) == targets.size
    assert len(d.confidence_bins) == n_bins
    for b in d.confidence_bins:
        if b.count:
            assert b.lower <= b.mean_confidence <= b.upper and 0.0 <= b.accuracy <= 1.0
        else:
            assert b.mean_confidence is None and b.accuracy is None
    assert 0.0 <= d.clipped_fraction <= 1.0
    p = np.take_along_axis(probs, targets[..., None], -1)[..., 0]
    assert (d.unclipped_log_loss is None) == bool(np.any(p == 0))
    if d.unclipped_log_loss is not None and p.min() >= CLIP:
        assert d.unclipped_log_loss == pytest.approx(d.log_loss, rel=1e-12)
    elif d.unclipped_log_loss is not None:
        assert d.unclipped_log_loss > d.log_loss  # a probability below the clip
    assert d.gap_to_ideal == 0.0  # the ideal passed is the model itself
    # The conditional losses recombine into the overall loss.
    parts = [
        (v, n) for v, n in ((d.log_loss_erased, d.n_erased), (d.log_loss_visible, d.n_visible)) if n
    ]
    assert sum(v * n for v, n in parts) / targets.size == pytest.approx(d.log_loss, rel=1e-12)
    json.dumps(d.to_record(), allow_nan=False)


@settings(max_examples=100, deadline=None)
@given(case=cases())
def test_brier_matches_its_definition_and_perfect_is_zero(case: tuple) -> None:
    probs, targets, _ = case
    onehot = np.eye(4)[targets]
    assert multiclass_brier(probs, targets) == pytest.approx(((probs - onehot) ** 2).sum(-1).mean())
    assert multiclass_brier(onehot, targets) == 0.0
    assert multiclass_brier(np.eye(4)[(targets + 1) % 4], targets) == 2.0


def test_gap_to_the_information_matched_ideal_on_e1() -> None:
    law = reference_law_registry().get_law("E1")
    obs, tgt = generate_episodes(law, 64, 129, np.random.default_rng(7))
    current = ideal_predictions(law, obs, "current")
    history = ideal_predictions(law, obs, "history")
    d = diagnose(current, tgt, obs, history, information_set="history")
    assert d.gap_to_ideal == pytest.approx(d.log_loss - d.ideal_log_loss)
    assert d.information_set == "history"
    # On visible steps both ideals know the state, so the conditional loss is equal.
    dh = diagnose(history, tgt, obs, history, information_set="history")
    assert d.log_loss_visible == pytest.approx(dh.log_loss_visible, rel=1e-14)


def test_equal_replicate_mean_is_not_pooled() -> None:
    # Replicate A: one episode with loss ln 4; replicate B: three episodes of
    # loss -ln 0.7. Equal-replicate mean = (ln 4 - ln 0.7)/2; a pooled mean over
    # the four episodes would be (ln 4 - 3 ln 0.7)/4.
    a = diagnose(np.full((1, 1, 4), 0.25), np.array([[0]]), np.array([[4]]))
    probs_b = np.tile(np.array([0.7, 0.1, 0.1, 0.1]), (3, 1, 1))
    b = diagnose(probs_b, np.zeros((3, 1), dtype=int), np.zeros((3, 1), dtype=int))
    agg = equal_replicate_mean([a, b])
    values = dict(agg.scalars)
    assert values["log_loss"].mean == pytest.approx((math.log(4) - math.log(0.7)) / 2)
    assert values["log_loss"].mean != pytest.approx((math.log(4) - 3 * math.log(0.7)) / 4)
    assert values["log_loss_erased"].mean == pytest.approx(math.log(4))
    assert values["log_loss_erased"].n_defined == 1  # B has no erased step
    record = agg.to_record()
    assert (
        record["aggregation"] == EQUAL_REPLICATE_LABEL and "never pooled" in EQUAL_REPLICATE_LABEL
    )
    assert record["n_replicates"] == 2
    bin2, bin7 = record["confidence_bins"][2], record["confidence_bins"][7]
    assert bin2["mean_count"] == 0.5 and bin2["accuracy"] == {"mean": 1.0, "n_defined": 1}
    assert bin7["mean_count"] == 1.5 and record["confidence_bins"][0]["accuracy"]["mean"] is None
    json.dumps(record, allow_nan=False)


def test_argument_errors() -> None:
    with pytest.raises(DiagnosticsError, match="ideal_probabilities shape"):
        diagnose(PROBS, TARGETS, OBS, np.full((1, 3, 2), 0.5))
    with pytest.raises(DiagnosticsError, match="observations must be integers"):
        diagnose(PROBS, TARGETS, OBS[:, :2])
    with pytest.raises(DiagnosticsError, match="n_bins=0"):
        diagnose(PROBS, TARGETS, OBS, n_confidence_bins=0)
    with pytest.raises(DiagnosticsError, match="information_set"):
        diagnose(PROBS, TARGETS, OBS, information_set="")
    with pytest.raises(DiagnosticsError, match="non-empty sequence"):
        equal_replicate_mean([])
    a = diagnose(PROBS, TARGETS, OBS)
    b = diagnose(PROBS, TARGETS, OBS, information_set="history")
    with pytest.raises(DiagnosticsError, match="mix information sets"):
        equal_replicate_mean([a, b])
