"""Decision regions: partition, strict boundaries, kinds, zero SD, scale/translation invariance."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prereg.rp002a.stats._validation import StatsInputError
from prereg.rp002a.stats.decisions import (
    ANALYSIS_FAILURE,
    ANALYSIS_FAILURE_CODE,
    BENEFIT,
    BENEFIT_CODE,
    EQUIVALENCE,
    EQUIVALENCE_CODE,
    INDETERMINATE,
    INDETERMINATE_CODE,
    OUTCOME_NAMES,
    contrast_verdict,
    contrast_verdicts,
    decision_region,
    decision_regions,
)
from prereg.rp002a.stats.intervals import replicate_mean_t_interval, replicate_mean_t_intervals

pytestmark = pytest.mark.software

FAST = settings(max_examples=200, deadline=None)

# Dyadic grid values keep every translation and power-of-two scaling exact.
grid = st.integers(-4096, 4096).map(lambda k: k / 256.0)
margins = st.integers(1, 1024).map(lambda k: k / 256.0)


@st.composite
def intervals(draw):
    a, b = draw(grid), draw(grid)
    return min(a, b), max(a, b)


def reference_region(low: float, high: float, margin: float) -> str:
    """The protocol sentences, written independently of the implementation."""
    entire_below = high < -margin  # "entire adjusted interval strictly below -.01"
    entire_inside = -margin < low and high < margin  # "strictly inside [-.01, +.01]"
    assert not (entire_below and entire_inside)
    if entire_below:
        return BENEFIT
    if entire_inside:
        return EQUIVALENCE
    return INDETERMINATE


@FAST
@given(intervals(), margins)
def test_regions_partition_the_line(bounds, margin):
    low, high = bounds
    region = decision_region(low, high, margin=margin)
    assert region == reference_region(low, high, margin)
    memberships = [high < -margin, -margin < low and high < margin]
    memberships.append(not any(memberships))
    assert sum(memberships) == 1


@FAST
@given(intervals(), margins, grid, st.integers(-6, 6))
def test_invariant_under_joint_translation_and_scaling(bounds, margin, shift, power):
    low, high = bounds
    scale = 2.0**power
    # Data and margin scaled together: the verdict is unchanged.
    assert decision_region(low * scale, high * scale, margin=margin * scale) == decision_region(
        low, high, margin=margin
    )
    # Data translated by `shift`: same verdict as the original interval against
    # the boundaries translated by -shift (the calibration's boundary construction).
    moved = decision_region(low + shift, high + shift, margin=margin)
    lo_b, hi_b = -margin - shift, margin - shift
    if high < lo_b:
        expected = BENEFIT
    elif lo_b < low and high < hi_b:
        expected = EQUIVALENCE
    else:
        expected = INDETERMINATE
    assert moved == expected


def test_boundaries_are_strict():
    assert decision_region(-0.03, -0.01, margin=0.01) == INDETERMINATE
    assert decision_region(-0.03, -0.0100001, margin=0.01) == BENEFIT
    assert decision_region(-0.01, 0.005, margin=0.01) == INDETERMINATE
    assert decision_region(-0.005, 0.01, margin=0.01) == INDETERMINATE
    assert decision_region(-0.0099, 0.0099, margin=0.01) == EQUIVALENCE
    assert decision_region(-0.02, 0.02, margin=0.01) == INDETERMINATE


@FAST
@given(st.lists(grid, min_size=2, max_size=12), margins, st.sampled_from([BENEFIT, EQUIVALENCE]))
def test_single_and_batched_verdicts_agree(values, margin, kind):
    interval = replicate_mean_t_interval(values, alpha=0.05, family_size=7, inflation=2)
    verdict = contrast_verdict(interval, kind=kind, margin=margin)
    batch = replicate_mean_t_intervals(
        [interval.mean], [interval.sd], n=interval.n, alpha=0.05, family_size=7, inflation=2
    )
    assert OUTCOME_NAMES[int(contrast_verdicts(batch, kinds=kind, margin=margin)[0])] == verdict
    if interval.sd == 0:
        assert verdict == ANALYSIS_FAILURE
    else:
        region = decision_region(interval.low, interval.high, margin=margin)
        assert verdict == (kind if region == kind else INDETERMINATE)


def test_kind_decides_which_claim_is_possible():
    benefit_like = replicate_mean_t_interval(
        [-0.030, -0.031, -0.029], alpha=0.05, family_size=7, inflation=2
    )
    assert contrast_verdict(benefit_like, kind="benefit", margin=0.01) == BENEFIT
    assert contrast_verdict(benefit_like, kind="equivalence", margin=0.01) == INDETERMINATE
    null_like = replicate_mean_t_interval(
        [0.0001, -0.0001, 0.0002], alpha=0.05, family_size=7, inflation=2
    )
    assert contrast_verdict(null_like, kind="equivalence", margin=0.01) == EQUIVALENCE
    assert contrast_verdict(null_like, kind="benefit", margin=0.01) == INDETERMINATE


def test_zero_sd_is_an_analysis_failure_never_a_claim():
    flat = replicate_mean_t_interval([0.0, 0.0, 0.0], alpha=0.05, family_size=7, inflation=2)
    assert flat.sd == 0.0
    assert contrast_verdict(flat, kind="equivalence", margin=0.01) == ANALYSIS_FAILURE
    low = replicate_mean_t_interval([-1.0] * 5, alpha=0.05, family_size=7, inflation=2)
    assert contrast_verdict(low, kind="benefit", margin=0.01) == ANALYSIS_FAILURE
    batch = replicate_mean_t_intervals(
        [[0.0, -1.0, 0.0]], [[0.0, 0.0, 0.001]], n=5, alpha=0.05, family_size=7, inflation=2
    )
    codes = contrast_verdicts(batch, kinds=["equivalence", "benefit", "equivalence"], margin=0.01)
    assert codes.tolist() == [[ANALYSIS_FAILURE_CODE, ANALYSIS_FAILURE_CODE, EQUIVALENCE_CODE]]


def test_per_contrast_kinds_follow_the_protocol_table():
    kinds = [BENEFIT, BENEFIT] + [EQUIVALENCE] * 4 + [BENEFIT]
    means = np.array([[-0.05, 0.0, 0.0, -0.05, 0.0, 0.0, -0.05]])
    batch = replicate_mean_t_intervals(
        means, np.full((1, 7), 0.001), n=20, alpha=0.05, family_size=7, inflation=2
    )
    codes = contrast_verdicts(batch, kinds=kinds, margin=0.01)[0].tolist()
    assert codes == [
        BENEFIT_CODE,
        INDETERMINATE_CODE,
        EQUIVALENCE_CODE,
        INDETERMINATE_CODE,
        EQUIVALENCE_CODE,
        EQUIVALENCE_CODE,
        BENEFIT_CODE,
    ]


def test_bad_inputs_raise():
    with pytest.raises(StatsInputError, match="kind"):
        contrast_verdict(
            replicate_mean_t_interval([1.0, 2.0], alpha=0.05, family_size=1, inflation=1),
            kind="superiority",
            margin=0.01,
        )
    with pytest.raises(StatsInputError, match="low must be <= high"):
        decision_regions([1.0], [0.0], margin=0.01)
    with pytest.raises(StatsInputError, match="margin"):
        decision_region(0.0, 0.0, margin=0.0)
    batch = replicate_mean_t_intervals(
        [[0.0, 0.0]], [[1.0, 1.0]], n=5, alpha=0.05, family_size=2, inflation=2
    )
    with pytest.raises(StatsInputError, match="one kind per contrast"):
        contrast_verdicts(batch, kinds=[BENEFIT], margin=0.01)
