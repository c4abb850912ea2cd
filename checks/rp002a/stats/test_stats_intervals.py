"""Replicate-mean t intervals against scipy, hand values, monotonicity and input errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from prereg.rp002a.stats._validation import StatsInputError
from prereg.rp002a.stats.intervals import (
    bonferroni_t_critical,
    replicate_mean_t_interval,
    replicate_mean_t_intervals,
)

pytestmark = pytest.mark.software

FAST = settings(max_examples=150, deadline=None)

differences = st.lists(
    st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False), min_size=2, max_size=40
)
alphas = st.floats(1e-4, 0.5)
family_sizes = st.integers(1, 20)
inflations = st.floats(0.25, 4.0)


@FAST
@given(differences, alphas, family_sizes, inflations)
def test_interval_matches_scipy_t_interval(values, alpha, m, f):
    result = replicate_mean_t_interval(values, alpha=alpha, family_size=m, inflation=f)
    x = np.asarray(values)
    n = x.size
    scale = f * x.std(ddof=1) / math.sqrt(n)
    if scale == 0:
        assert result.low == result.high == result.mean
        return
    low, high = stats.t.interval(1 - alpha / m, n - 1, loc=x.mean(), scale=scale)
    assert result.low == pytest.approx(low, rel=1e-10, abs=1e-9)
    assert result.high == pytest.approx(high, rel=1e-10, abs=1e-9)
    assert result.df == n - 1 and result.n == n
    assert result.half_width == pytest.approx(f * result.critical * result.sd / math.sqrt(n))


def test_hand_computed_reference():
    # Three values 1, 2, 3: mean 2, s = 1; t(0.975, 2) = 4.302652729749464 (t tables,
    # e.g. NIST handbook table 1.3.6.7.2 gives 4.303); half-width 4.30265 / sqrt(3) =
    # 4.302652729749464 / 1.7320508075688772 = 2.48413771175.
    result = replicate_mean_t_interval([1.0, 2.0, 3.0], alpha=0.05, family_size=1, inflation=1)
    assert result.critical == pytest.approx(4.302652729749464, rel=1e-12)
    assert result.half_width == pytest.approx(2.4841377117503303, rel=1e-12)
    assert (result.low, result.high) == pytest.approx((-0.4841377117503303, 4.4841377117503303))
    # Twofold inflation doubles the half-width.
    doubled = replicate_mean_t_interval([1.0, 2.0, 3.0], alpha=0.05, family_size=1, inflation=2)
    assert doubled.half_width == pytest.approx(2 * result.half_width, rel=1e-15)


def test_rp002a_primary_critical_value():
    # Bonferroni t at alpha .05 / (2 * 7) with 19 df: its t CDF must be 1 - .05/14
    # (definition of the quantile); tables put t(0.9964, 19) between 3.0 and 3.2.
    critical = bonferroni_t_critical(n=20, alpha=0.05, family_size=7)
    assert stats.t.cdf(critical, 19) == pytest.approx(1 - 0.05 / 14, abs=1e-13)
    assert 3.0 < critical < 3.2


@FAST
@given(st.integers(2, 60), alphas, alphas, family_sizes)
def test_critical_monotone_in_alpha_and_family(n, a1, a2, m):
    lo, hi = sorted((a1, a2))
    assert bonferroni_t_critical(n=n, alpha=lo, family_size=m) >= bonferroni_t_critical(
        n=n, alpha=hi, family_size=m
    )
    assert bonferroni_t_critical(n=n, alpha=lo, family_size=m + 1) >= bonferroni_t_critical(
        n=n, alpha=lo, family_size=m
    )


@FAST
@given(st.integers(2, 200), alphas, family_sizes, inflations, inflations)
def test_half_width_monotone_in_n_and_inflation(n, alpha, m, f1, f2):
    kw = {"alpha": alpha, "family_size": m}
    smaller = replicate_mean_t_intervals([0.0], [1.0], n=n + 1, inflation=f1, **kw)
    larger = replicate_mean_t_intervals([0.0], [1.0], n=n, inflation=f1, **kw)
    assert smaller.half_width[0] < larger.half_width[0]
    lo, hi = sorted((f1, f2))
    a = replicate_mean_t_intervals([0.0], [1.0], n=n, inflation=lo, **kw)
    b = replicate_mean_t_intervals([0.0], [1.0], n=n, inflation=hi, **kw)
    assert a.half_width[0] <= b.half_width[0]


@FAST
@given(st.lists(differences, min_size=1, max_size=5), alphas, family_sizes, inflations)
def test_batch_equals_single(rows, alpha, m, f):
    n = len(rows[0])
    rows = [r[:n] + [0.0] * (n - len(r)) for r in rows]
    singles = [replicate_mean_t_interval(r, alpha=alpha, family_size=m, inflation=f) for r in rows]
    batch = replicate_mean_t_intervals(
        [s.mean for s in singles],
        [s.sd for s in singles],
        n=n,
        alpha=alpha,
        family_size=m,
        inflation=f,
    )
    assert batch.low.tolist() == [s.low for s in singles]
    assert batch.high.tolist() == [s.high for s in singles]
    assert batch.critical == singles[0].critical


@pytest.mark.parametrize("bad", [[], [1.0], [[1.0, 2.0]], [1.0, float("nan")], [1.0, np.inf]])
def test_bad_differences_raise(bad):
    with pytest.raises(StatsInputError, match="differences"):
        replicate_mean_t_interval(bad, alpha=0.05, family_size=7, inflation=2)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"alpha": 0.0, "family_size": 7, "inflation": 2}, "alpha"),
        ({"alpha": 1.5, "family_size": 7, "inflation": 2}, "alpha"),
        ({"alpha": 0.05, "family_size": 0, "inflation": 2}, "family_size"),
        ({"alpha": 0.05, "family_size": 7, "inflation": 0}, "inflation"),
    ],
)
def test_bad_parameters_raise_naming_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        replicate_mean_t_interval([1.0, 2.0, 4.0], **kwargs)


def test_batch_rejects_negative_sd_and_shape_mismatch():
    with pytest.raises(StatsInputError, match="sds"):
        replicate_mean_t_intervals([0.0], [-1.0], n=5, alpha=0.05, family_size=7, inflation=2)
    with pytest.raises(StatsInputError, match="shape"):
        replicate_mean_t_intervals([0.0, 1.0], [1.0], n=5, alpha=0.05, family_size=7, inflation=2)
    with pytest.raises(StatsInputError, match="n must be"):
        replicate_mean_t_intervals([0.0], [1.0], n=1, alpha=0.05, family_size=7, inflation=2)
