"""Percentile bootstrap of a replicate-mean contrast from episode-level data.

Two resampling kernels over an array of shape ``(..., n, E)`` (``n`` replicates,
``E`` assessment episodes each; leading axes are independent contrasts):

* whole-cluster: resample the ``n`` replicates with replacement and keep each
  selected replicate's episode mean;
* nested: resample the ``n`` replicates with replacement, then, for EACH
  selected occurrence, resample its ``E`` episodes with replacement,
  independently of every other occurrence (a replicate selected twice gets two
  independent inner draws).

The statistic of a draw is the mean over the ``n`` selected occurrences of their
(resampled) episode means.

Order of draws (reproducibility contract): leading indices are visited in
C order; for each, whole-cluster draws one ``rng.integers(0, n, size=(draws, n),
dtype=np.int64)``; nested draws that same outer array, then the inner episodes
two at a time: ``pairs = rng.integers(0, E * E, size=(draws, n, E // 2),
dtype=np.int64)``, where ``p`` stands for the two episodes ``(p // E, p % E)``,
and, if ``E`` is odd, ``rng.integers(0, E, size=(draws, n, 1), dtype=np.int64)``
for the last episode. A uniform ``p`` on ``[0, E^2)`` is exactly a pair of
independent uniform episode indices, so every occurrence still gets ``E``
independent uniform inner draws; drawing them in pairs lets the kernel look up
precomputed pair sums, which is about three times faster than one draw per
episode.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prereg.rp002a.stats._validation import (
    StatsInputError,
    check_finite_array,
    check_generator,
    check_int,
    check_probability,
)

__all__ = [
    "PercentileIntervals",
    "nested_bootstrap_means",
    "percentile_intervals",
    "whole_cluster_bootstrap_means",
]


@dataclass(frozen=True)
class PercentileIntervals:
    """Percentile intervals ``[low, high]`` (arrays) at two-sided level ``1 - alpha``."""

    low: np.ndarray
    high: np.ndarray
    alpha: float


def _check_episode_values(episode_values: object) -> np.ndarray:
    values = check_finite_array("episode_values", episode_values)
    if values.ndim < 2:
        raise StatsInputError(
            f"episode_values must have shape (..., replicates, episodes), got {values.shape}"
        )
    if values.shape[-2] < 1 or values.shape[-1] < 1:
        raise StatsInputError(
            f"episode_values needs >= 1 replicate and >= 1 episode, got shape {values.shape}"
        )
    return values


def whole_cluster_bootstrap_means(
    episode_values: object, *, draws: int, rng: np.random.Generator
) -> np.ndarray:
    """Whole-cluster bootstrap replicates of the replicate-mean contrast.

    Parameters
    ----------
    episode_values : array_like, shape (..., n, E), finite
        Episode-level paired differences.
    draws : int, >= 1
        Bootstrap draws ``B``.
    rng : numpy.random.Generator
        Consumed as described in the module docstring.

    Returns
    -------
    numpy.ndarray, shape (..., B)

    Notes
    -----
    Cluster (case) resampling of the replicates; Davison and Hinkley,
    "Bootstrap Methods and their Application" (1997), section 3.8.
    """
    values = _check_episode_values(episode_values)
    draws = check_int("draws", draws, 1)
    check_generator("rng", rng)
    lead, (n, _) = values.shape[:-2], values.shape[-2:]
    replicate_means = values.mean(axis=-1).reshape(-1, n)
    out = np.empty((replicate_means.shape[0], draws))
    for i, means in enumerate(replicate_means):
        outer = rng.integers(0, n, size=(draws, n), dtype=np.int64)
        out[i] = means[outer].mean(axis=-1)
    return out.reshape(*lead, draws)


def nested_bootstrap_means(
    episode_values: object, *, draws: int, rng: np.random.Generator
) -> np.ndarray:
    """Nested (two-stage) bootstrap replicates of the replicate-mean contrast.

    Parameters
    ----------
    episode_values : array_like, shape (..., n, E), finite
    draws : int, >= 1
    rng : numpy.random.Generator
        Consumed as described in the module docstring.

    Returns
    -------
    numpy.ndarray, shape (..., B)

    Notes
    -----
    Two-stage resampling with replacement at both stages (Davison and Hinkley
    1997, section 3.8, strategy 2), with independent inner draws for each
    selected occurrence. Statistic: ``mean_j mean_k x[o_j, i_jk]``, summed as
    pair sums (see the module docstring for how the ``i_jk`` are drawn).
    """
    values = _check_episode_values(episode_values)
    draws = check_int("draws", draws, 1)
    check_generator("rng", rng)
    lead, (n, e) = values.shape[:-2], values.shape[-2:]
    replicates = values.reshape(-1, n, e)
    out = np.empty((replicates.shape[0], draws))
    for i, x in enumerate(replicates):
        # pair_sums[r * E * E + p] = x[r, p // E] + x[r, p % E]
        pair_sums = (x[:, :, None] + x[:, None, :]).reshape(-1)
        outer = rng.integers(0, n, size=(draws, n), dtype=np.int64)
        pairs = rng.integers(0, e * e, size=(draws, n, e // 2), dtype=np.int64)
        pairs += (outer * (e * e))[:, :, None]
        totals = np.take(pair_sums, pairs).reshape(draws, -1).sum(axis=-1)
        if e % 2:
            last = rng.integers(0, e, size=(draws, n), dtype=np.int64)
            last += outer * e
            totals += np.take(x.reshape(-1), last).sum(axis=-1)
        out[i] = totals / (n * e)
    return out.reshape(*lead, draws)


def percentile_intervals(bootstrap_means: object, *, alpha: float) -> PercentileIntervals:
    """Two-sided percentile intervals from bootstrap replicates (last axis).

    Parameters
    ----------
    bootstrap_means : array_like, shape (..., B), finite
    alpha : float in (0, 1)
        Two-sided level per interval (Bonferroni: familywise alpha / m).

    Returns
    -------
    PercentileIntervals
        ``alpha/2`` and ``1 - alpha/2`` quantiles along the last axis.

    Notes
    -----
    Efron's percentile interval; quantiles by ``numpy.quantile`` with
    ``method="linear"`` (Hyndman and Fan type 7).
    """
    stats_ = check_finite_array("bootstrap_means", bootstrap_means)
    if stats_.ndim < 1 or stats_.shape[-1] < 1:
        raise StatsInputError(
            f"bootstrap_means must have draws on its last axis, got shape {stats_.shape}"
        )
    alpha = check_probability("alpha", alpha)
    low, high = np.quantile(stats_, [alpha / 2.0, 1.0 - alpha / 2.0], axis=-1, method="linear")
    return PercentileIntervals(low=low, high=high, alpha=alpha)
