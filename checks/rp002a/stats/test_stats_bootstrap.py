"""Bootstrap kernels against plain-loop references that consume the same draws."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prereg.rp002a.stats._validation import StatsInputError, StatsTypeError
from prereg.rp002a.stats.bootstrap import (
    nested_bootstrap_means,
    percentile_intervals,
    whole_cluster_bootstrap_means,
)

pytestmark = pytest.mark.software

FAST = settings(max_examples=40, deadline=None)


def loop_whole_cluster(x: np.ndarray, draws: int, rng: np.random.Generator) -> np.ndarray:
    """Reference: one contrast at a time, one draw at a time, in the documented order."""
    lead, (n, e) = x.shape[:-2], x.shape[-2:]
    flat = x.reshape(-1, n, e)
    out = np.empty((flat.shape[0], draws))
    for c in range(flat.shape[0]):
        outer = rng.integers(0, n, size=(draws, n), dtype=np.int64)
        for b in range(draws):
            total = 0.0
            for j in range(n):
                total += sum(flat[c, outer[b, j]]) / e
            out[c, b] = total / n
    return out.reshape(*lead, draws)


def loop_nested(x: np.ndarray, draws: int, rng: np.random.Generator) -> np.ndarray:
    """Reference: independent inner draws for every selected occurrence."""
    lead, (n, e) = x.shape[:-2], x.shape[-2:]
    flat = x.reshape(-1, n, e)
    out = np.empty((flat.shape[0], draws))
    for c in range(flat.shape[0]):
        outer = rng.integers(0, n, size=(draws, n), dtype=np.int64)
        # Episodes drawn two at a time: p on [0, e * e) is the pair (p // e, p % e);
        # an odd e gets one more single draw per occurrence.
        pairs = rng.integers(0, e * e, size=(draws, n, e // 2), dtype=np.int64)
        inner = np.empty((draws, n, e), dtype=np.int64)
        inner[:, :, 0 : 2 * (e // 2) : 2] = pairs // e
        inner[:, :, 1 : 2 * (e // 2) : 2] = pairs % e
        if e % 2:
            inner[:, :, e - 1] = rng.integers(0, e, size=(draws, n), dtype=np.int64)
        for b in range(draws):
            total = 0.0
            for j in range(n):
                replicate = flat[c, outer[b, j]]
                total += sum(replicate[inner[b, j, k]] for k in range(e)) / e
            out[c, b] = total / n
    return out.reshape(*lead, draws)


shapes = st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 4))


@FAST
@given(shapes, st.integers(1, 30), st.integers(0, 2**32))
def test_kernels_match_plain_loops_with_the_same_draws(shape, draws, seed):
    x = np.random.default_rng(seed + 1).normal(size=shape)
    for kernel, reference in (
        (whole_cluster_bootstrap_means, loop_whole_cluster),
        (nested_bootstrap_means, loop_nested),
    ):
        got = kernel(x, draws=draws, rng=np.random.default_rng(seed))
        want = reference(x, draws, np.random.default_rng(seed))
        assert got.shape == shape[:-2] + (draws,)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_unbatched_input_and_constant_episodes():
    # With every replicate's episodes equal, nested equals whole-cluster draw by draw
    # (same outer indices: both start from the same generator state).
    x = np.repeat(np.array([[0.0], [1.0], [5.0]]), 4, axis=1)
    whole = whole_cluster_bootstrap_means(x, draws=500, rng=np.random.default_rng(3))
    nested = nested_bootstrap_means(x, draws=500, rng=np.random.default_rng(3))
    np.testing.assert_allclose(nested, whole, atol=1e-12)


def test_inner_draws_are_independent_per_occurrence():
    # One replicate with episodes (0, 1): whole-cluster always gives 0.5; the nested
    # mean of two inner draws is 0, .5, 1 with probabilities 1/4, 1/2, 1/4.
    x = np.array([[0.0, 1.0]])
    assert set(whole_cluster_bootstrap_means(x, draws=100, rng=np.random.default_rng(0))) == {0.5}
    nested = nested_bootstrap_means(x, draws=40000, rng=np.random.default_rng(0))
    freq = [np.mean(nested == v) for v in (0.0, 0.5, 1.0)]
    assert freq == pytest.approx([0.25, 0.5, 0.25], abs=0.015)
    # Two identical replicates (0, 1): with independent inner draws per occurrence, a mean
    # of .25 or .75 has probability 2 * 1/2 * 1/2 = 1/2; inner draws shared by a replicate's
    # occurrences would give it only when the two replicates differ: 1/2 * 1/2 = 1/4.
    x2 = np.array([[0.0, 1.0], [0.0, 1.0]])
    nested2 = nested_bootstrap_means(x2, draws=4000, rng=np.random.default_rng(1))
    assert np.mean(np.isin(nested2, [0.25, 0.75])) == pytest.approx(0.5, abs=0.04)


@FAST
@given(st.integers(0, 2**32), st.floats(0.001, 0.5), st.floats(0.001, 0.5))
def test_percentile_intervals(seed, a1, a2):
    stats_ = np.random.default_rng(seed).normal(size=(3, 401))
    lo, hi = sorted((a1, a2))
    wide = percentile_intervals(stats_, alpha=lo)
    narrow = percentile_intervals(stats_, alpha=hi)
    assert np.all(wide.low <= narrow.low) and np.all(narrow.high <= wide.high)
    # numpy.percentile with the default linear method is the reference.
    np.testing.assert_array_equal(wide.low, np.percentile(stats_, 100 * lo / 2, axis=-1))


def test_same_seed_same_bytes():
    x = np.random.default_rng(9).normal(size=(2, 4, 3))
    a = nested_bootstrap_means(x, draws=50, rng=np.random.default_rng(11))
    b = nested_bootstrap_means(x, draws=50, rng=np.random.default_rng(11))
    assert a.tobytes() == b.tobytes()


def test_bad_inputs_raise():
    rng = np.random.default_rng(0)
    with pytest.raises(StatsInputError, match="episode_values"):
        nested_bootstrap_means(np.ones(3), draws=10, rng=rng)
    with pytest.raises(StatsInputError, match="draws"):
        whole_cluster_bootstrap_means(np.ones((3, 2)), draws=0, rng=rng)
    with pytest.raises(StatsTypeError, match="numpy.random.Generator"):
        nested_bootstrap_means(np.ones((3, 2)), draws=10, rng=np.random.RandomState(0))
    with pytest.raises(StatsInputError, match="NaN"):
        nested_bootstrap_means(np.array([[np.nan, 1.0]]), draws=10, rng=rng)
