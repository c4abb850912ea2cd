"""Clopper-Pearson bounds against scipy.stats.binomtest and closed forms; Monte Carlo SE."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from prereg.rp002a.stats._validation import StatsInputError
from prereg.rp002a.stats.binomial import (
    binomial_mc_standard_error,
    clopper_pearson_interval,
    clopper_pearson_upper,
)

pytestmark = pytest.mark.software

FAST = settings(max_examples=150, deadline=None)


@st.composite
def counts(draw, max_trials=5000):
    n = draw(st.integers(1, max_trials))
    return draw(st.integers(0, n)), n


alphas = st.floats(1e-5, 0.5)
# binomtest's "exact" interval is found by root finding on the binomial CDF, good to
# about 1e-12 absolute; ours uses beta quantiles. Hence the 1e-11 absolute tolerance.


@FAST
@given(counts(), alphas)
def test_upper_matches_scipy_one_sided_exact(xn, alpha):
    x, n = xn
    ci = stats.binomtest(x, n, alternative="less").proportion_ci(1 - alpha, method="exact")
    assert clopper_pearson_upper(x, n, alpha) == pytest.approx(ci.high, rel=1e-9, abs=1e-11)


@FAST
@given(counts(), alphas)
def test_two_sided_matches_scipy_exact(xn, alpha):
    x, n = xn
    ci = stats.binomtest(x, n).proportion_ci(1 - alpha, method="exact")
    ours = clopper_pearson_interval(x, n, alpha)
    assert ours.low == pytest.approx(ci.low, rel=1e-9, abs=1e-11)
    assert ours.high == pytest.approx(ci.high, rel=1e-9, abs=1e-11)


@FAST
@given(st.integers(1, 10**6), alphas)
def test_zero_count_closed_form(n, alpha):
    upper = clopper_pearson_upper(0, n, alpha)
    assert upper == 1 - alpha ** (1 / n)
    # Defining property: P(X = 0 | p = upper) = (1 - upper)^n = alpha.
    assert math.exp(n * math.log1p(-upper)) == pytest.approx(alpha, rel=1e-6)
    assert clopper_pearson_interval(0, n, alpha).high == 1 - (alpha / 2) ** (1 / n)
    assert clopper_pearson_interval(n, n, alpha).low == (alpha / 2) ** (1 / n)
    assert clopper_pearson_upper(n, n, alpha) == 1.0


def test_calibration_reference_values():
    # 0 of 20,000 at one-sided .05/90: 1 - (.05/90)^(1/20000), by hand with
    # log(.000555...) = -7.49554, 1 - exp(-7.49554 / 20000) = 3.7471e-4.
    assert clopper_pearson_upper(0, 20000, 0.05 / 90) == pytest.approx(3.7471e-4, rel=1e-4)
    # 5 of 20 at 95% two-sided: R binom.test(5, 20)$conf.int = 0.08657147 0.49104587.
    ci = clopper_pearson_interval(5, 20, 0.05)
    assert (ci.low, ci.high) == pytest.approx((0.08657147, 0.49104587), abs=1e-8)


@FAST
@given(counts(2000), alphas, alphas)
def test_upper_monotone(xn, a1, a2):
    x, n = xn
    lo, hi = sorted((a1, a2))
    assert clopper_pearson_upper(x, n, lo) >= clopper_pearson_upper(x, n, hi)
    if x < n:
        assert clopper_pearson_upper(x + 1, n, lo) >= clopper_pearson_upper(x, n, lo)
    assert clopper_pearson_upper(x, n + 1, lo) <= clopper_pearson_upper(x, n, lo)


def test_mc_standard_error():
    # sqrt(.5 * .5 / 100) = .05 and sqrt(.1 * .9 / 10000) = .003, by hand.
    assert binomial_mc_standard_error(0.5, 100) == pytest.approx(0.05)
    assert binomial_mc_standard_error(0.1, 10000) == pytest.approx(0.003)
    assert binomial_mc_standard_error(0.0, 10) == 0.0
    se = binomial_mc_standard_error(np.array([0.5, 1.0]), 100)
    assert se.tolist() == pytest.approx([0.05, 0.0])


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ((3, 2, 0.05), "successes"),
        ((-1, 2, 0.05), "successes"),
        ((0, 0, 0.05), "trials"),
        ((1, 2, 0.0), "alpha"),
        ((1, 2, 1.0), "alpha"),
    ],
)
def test_bad_counts_raise(args, name):
    with pytest.raises(ValueError, match=name):
        clopper_pearson_upper(*args)
    with pytest.raises(ValueError, match=name):
        clopper_pearson_interval(*args)


def test_bad_rate_raises():
    with pytest.raises(StatsInputError, match="rate"):
        binomial_mc_standard_error(1.5, 10)
