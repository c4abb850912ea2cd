"""Fixed sample-count rule: SD bound against an independent chi-square solve; branches."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, stats

from prereg.rp002a.stats._validation import StatsInputError
from prereg.rp002a.stats.planning import (
    NO_ELIGIBLE_COUNT,
    PRECISE,
    RESOURCE_LIMITED,
    planning_half_width,
    select_sample_count,
    simultaneous_upper_sd_bounds,
)

pytestmark = pytest.mark.software

FAST = settings(max_examples=100, deadline=None)
# The RP002A values, as the lead's plan will pass them.
RULE = {"df": 4, "alpha": 0.05, "family_size": 7, "inflation": 2.0, "target_half_width": 0.005}
CANDIDATES = (20, 30, 50)
ALL_ELIGIBLE = {20: True, 30: True, 50: True}


def chi2_df4_lower_quantile(q: float) -> float:
    """Lower quantile of chi-square(4) from its closed-form CDF 1 - exp(-x/2)(1 + x/2)."""
    return optimize.brentq(lambda x: 1 - math.exp(-x / 2) * (1 + x / 2) - q, 1e-12, 100, xtol=1e-15)


def per_unit_half_width(n: int) -> float:
    """2 * t(1 - .05/14, n - 1) / sqrt(n) * the df-4 bound factor of an SD of 1."""
    factor = math.sqrt(4 / chi2_df4_lower_quantile(0.05 / 7))
    _, high = stats.t.interval(1 - 0.05 / 7, n - 1)
    return 2 * high * factor / math.sqrt(n)


def test_upper_bound_factor_matches_closed_form_chi2():
    bounds = simultaneous_upper_sd_bounds(np.ones(7), df=4, alpha=0.05, family_size=7)
    expected = math.sqrt(4 / chi2_df4_lower_quantile(0.05 / 7))
    assert bounds == pytest.approx(np.full(7, expected), rel=1e-9)
    # Hand: chi2_4 lower quantile at .05/7 is about 0.2345, so the factor is about 4.13.
    assert 4.0 < expected < 4.3


@FAST
@given(st.lists(st.floats(1e-6, 1.0), min_size=7, max_size=7))
def test_bounds_scale_linearly_and_largest_is_used(sds):
    bounds = simultaneous_upper_sd_bounds(sds, df=4, alpha=0.05, family_size=7)
    assert bounds / np.asarray(sds) == pytest.approx(np.full(7, bounds[0] / sds[0]), rel=1e-12)
    decision = select_sample_count(sds, candidates=CANDIDATES, eligibility=ALL_ELIGIBLE, **RULE)
    assert decision.sd_bound == max(bounds)


@FAST
@given(st.floats(1e-6, 1.0), st.floats(1e-6, 1.0), st.integers(2, 200))
def test_half_width_monotone(s1, s2, n):
    kw = {"alpha": 0.05, "family_size": 7, "inflation": 2.0}
    lo, hi = sorted((s1, s2))
    assert planning_half_width(lo, n, **kw) <= planning_half_width(hi, n, **kw)
    assert planning_half_width(lo, n + 1, **kw) < planning_half_width(lo, n, **kw)


def test_half_width_reference():
    # 2 * t(1 - .05/14, 19) * 0.001 / sqrt(20), with the t quantile via scipy.stats.t.interval.
    expected = 2 * stats.t.interval(1 - 0.05 / 7, 19)[1] * 0.001 / math.sqrt(20)
    got = planning_half_width(0.001, 20, alpha=0.05, family_size=7, inflation=2.0)
    assert got == pytest.approx(expected, rel=1e-12)


def sds_with_largest(value: float) -> list[float]:
    return [value * 0.5] * 6 + [value]


def test_branch_precise_at_smallest_count():
    # Largest SD at half of what n = 20 tolerates: precise at 20.
    s = 0.5 * 0.005 / per_unit_half_width(20)
    decision = select_sample_count(
        sds_with_largest(s), candidates=CANDIDATES, eligibility=ALL_ELIGIBLE, **RULE
    )
    assert (decision.branch, decision.n) == (PRECISE, 20)
    assert decision.half_widths[0] == pytest.approx(0.0025, rel=1e-8)


def test_branch_precise_at_middle_count():
    # Between what n = 30 and n = 20 tolerate: 20 misses the target, 30 meets it.
    s = 0.5 * (0.005 / per_unit_half_width(20) + 0.005 / per_unit_half_width(30))
    decision = select_sample_count(
        sds_with_largest(s), candidates=(50, 20, 30), eligibility=ALL_ELIGIBLE, **RULE
    )
    assert (decision.branch, decision.n) == (PRECISE, 30)
    assert decision.candidates == (20, 30, 50)
    assert decision.half_widths[0] > 0.005 >= decision.half_widths[1]


def test_precise_count_must_be_eligible():
    s = 0.5 * 0.005 / per_unit_half_width(20)
    decision = select_sample_count(
        sds_with_largest(s),
        candidates=CANDIDATES,
        eligibility={20: False, 30: True, 50: True},
        **RULE,
    )
    assert (decision.branch, decision.n) == (PRECISE, 30)


def test_branch_resource_limited_takes_largest_eligible():
    s = 2.0 * 0.005 / per_unit_half_width(50)
    decision = select_sample_count(
        sds_with_largest(s), candidates=CANDIDATES, eligibility=ALL_ELIGIBLE, **RULE
    )
    assert (decision.branch, decision.n) == (RESOURCE_LIMITED, 50)
    decision = select_sample_count(
        sds_with_largest(s),
        candidates=CANDIDATES,
        eligibility={20: True, 30: True, 50: False},
        **RULE,
    )
    assert (decision.branch, decision.n) == (RESOURCE_LIMITED, 30)
    assert all(hw > 0.005 for hw in decision.half_widths)


def test_branch_no_eligible_count():
    s = 0.5 * 0.005 / per_unit_half_width(20)
    decision = select_sample_count(
        sds_with_largest(s),
        candidates=CANDIDATES,
        eligibility={20: False, 30: False, 50: False},
        **RULE,
    )
    assert (decision.branch, decision.n) == (NO_ELIGIBLE_COUNT, None)
    assert len(decision.half_widths) == 3


def test_bad_inputs_raise():
    with pytest.raises(StatsInputError, match="analysis failure"):
        simultaneous_upper_sd_bounds([0.0] + [0.01] * 6, df=4, alpha=0.05, family_size=7)
    with pytest.raises(StatsInputError, match="family_size=7"):
        simultaneous_upper_sd_bounds([0.01] * 6, df=4, alpha=0.05, family_size=7)
    with pytest.raises(StatsInputError, match="eligibility"):
        select_sample_count([0.01] * 7, candidates=CANDIDATES, eligibility={20: True}, **RULE)
    with pytest.raises(StatsInputError, match="distinct"):
        select_sample_count([0.01] * 7, candidates=(20, 20), eligibility=ALL_ELIGIBLE, **RULE)
    with pytest.raises(StatsInputError, match="eligibility\\[20\\]"):
        select_sample_count(
            [0.01] * 7, candidates=CANDIDATES, eligibility={20: "yes", 30: True, 50: True}, **RULE
        )
