"""Paired replicate-mean Student-t intervals with Bonferroni adjustment and inflation.

The interval for one contrast with ``n`` replicate differences is

    mean +/- f * t(1 - alpha / (2 m), n - 1) * s / sqrt(n)

with ``s`` the sample standard deviation (ddof = 1), ``alpha`` the familywise
error rate, ``m`` the family size and ``f`` the inflation factor (2 for the
RP002A primary procedure, 1 for the uninflated report).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prereg.rp002a.stats._scipy import distributions
from prereg.rp002a.stats._validation import (
    StatsInputError,
    check_finite_array,
    check_int,
    check_positive_real,
    check_probability,
)

__all__ = [
    "TInterval",
    "TIntervalBatch",
    "bonferroni_t_critical",
    "replicate_mean_t_interval",
    "replicate_mean_t_intervals",
]


@dataclass(frozen=True)
class TInterval:
    """One replicate-mean t interval.

    ``critical`` is the uninflated Bonferroni t quantile; the inflation factor is
    in ``half_width = inflation * critical * sd / sqrt(n)``.
    """

    mean: float
    sd: float
    n: int
    df: int
    critical: float
    half_width: float
    low: float
    high: float
    alpha: float
    family_size: int
    inflation: float


@dataclass(frozen=True)
class TIntervalBatch:
    """Many replicate-mean t intervals sharing ``n``, ``alpha``, ``family_size``, ``inflation``.

    ``mean``, ``sd``, ``half_width``, ``low`` and ``high`` are float64 arrays of one shape.
    """

    mean: np.ndarray
    sd: np.ndarray
    n: int
    df: int
    critical: float
    half_width: np.ndarray
    low: np.ndarray
    high: np.ndarray
    alpha: float
    family_size: int
    inflation: float


def bonferroni_t_critical(*, n: int, alpha: float, family_size: int) -> float:
    """Two-sided Bonferroni Student-t quantile ``t(1 - alpha / (2 m), n - 1)``.

    Parameters
    ----------
    n : int, >= 2
        Number of replicate differences.
    alpha : float in (0, 1)
        Familywise error rate.
    family_size : int, >= 1
        Number of intervals ``m`` in the family.

    Returns
    -------
    float
        The quantile, computed with ``scipy.stats.t.ppf``.

    Notes
    -----
    Bonferroni: each of ``m`` two-sided intervals is built at level
    ``1 - alpha / m`` [1]_.

    References
    ----------
    .. [1] NIST/SEMATECH e-Handbook of Statistical Methods, section 1.3.5.2,
       https://itl.nist.gov/div898/handbook/eda/section3/eda352.htm
    """
    n = check_int("n", n, 2)
    alpha = check_probability("alpha", alpha)
    family_size = check_int("family_size", family_size, 1)
    return float(distributions().t.ppf(1.0 - alpha / (2.0 * family_size), n - 1))


def replicate_mean_t_interval(
    differences: object, *, alpha: float, family_size: int, inflation: float
) -> TInterval:
    """Inflated Bonferroni Student-t interval for the mean of paired replicate differences.

    Parameters
    ----------
    differences : array_like, 1-d, at least 2 finite values
        One paired difference per replicate (each already reduced to a replicate mean).
    alpha : float in (0, 1)
        Familywise error rate.
    family_size : int, >= 1
        Number of intervals ``m`` in the family.
    inflation : float, > 0
        Factor ``f`` on the critical value (2 primary, 1 uninflated report).

    Returns
    -------
    TInterval

    Notes
    -----
    ``mean +/- f * t(1 - alpha / (2 m), n - 1) * s / sqrt(n)`` with ``s`` the
    sample standard deviation (``ddof=1``) [1]_. A zero ``sd`` gives a degenerate
    interval here; :mod:`prereg.rp002a.stats.decisions` turns it into an analysis failure.

    References
    ----------
    .. [1] NIST/SEMATECH e-Handbook of Statistical Methods, section 1.3.5.2.

    Examples
    --------
    >>> r = replicate_mean_t_interval([1.0, 2.0, 3.0], alpha=0.05, family_size=1, inflation=1)
    >>> round(r.low, 4), round(r.high, 4)
    (-0.4841, 4.4841)
    """
    values = check_finite_array("differences", differences, ndim=1)
    if values.size < 2:
        raise StatsInputError(
            f"differences must hold at least 2 values (n - 1 degrees of freedom), "
            f"got {values.size}; an interval needs two or more replicates"
        )
    inflation = check_positive_real("inflation", inflation)
    n = int(values.size)
    critical = bonferroni_t_critical(n=n, alpha=alpha, family_size=family_size)
    mean = float(values.mean())
    sd = float(values.std(ddof=1))
    half_width = inflation * critical * sd / np.sqrt(n)
    return TInterval(
        mean=mean,
        sd=sd,
        n=n,
        df=n - 1,
        critical=critical,
        half_width=float(half_width),
        low=float(mean - half_width),
        high=float(mean + half_width),
        alpha=float(alpha),
        family_size=int(family_size),
        inflation=inflation,
    )


def replicate_mean_t_intervals(
    means: object,
    sds: object,
    *,
    n: int,
    alpha: float,
    family_size: int,
    inflation: float,
) -> TIntervalBatch:
    """Vectorised :func:`replicate_mean_t_interval` from precomputed means and SDs.

    Parameters
    ----------
    means, sds : array_like of one shape
        Replicate-mean differences and their sample SDs (``ddof=1``), e.g. of
        shape ``(trials, contrasts)``. SDs must be finite and ``>= 0``.
    n : int, >= 2
        Replicates behind every mean.
    alpha, family_size, inflation
        As in :func:`replicate_mean_t_interval`.

    Returns
    -------
    TIntervalBatch

    Notes
    -----
    Same formula as :func:`replicate_mean_t_interval`, one critical value for all.
    """
    mean = check_finite_array("means", means)
    sd = check_finite_array("sds", sds)
    if mean.shape != sd.shape:
        raise StatsInputError(f"means and sds must have one shape, got {mean.shape} and {sd.shape}")
    if np.any(sd < 0):
        raise StatsInputError(f"sds must be >= 0, got minimum {float(sd.min())!r}")
    inflation = check_positive_real("inflation", inflation)
    critical = bonferroni_t_critical(n=n, alpha=alpha, family_size=family_size)
    half_width = inflation * critical * sd / np.sqrt(n)
    return TIntervalBatch(
        mean=mean,
        sd=sd,
        n=int(n),
        df=int(n) - 1,
        critical=critical,
        half_width=half_width,
        low=mean - half_width,
        high=mean + half_width,
        alpha=float(alpha),
        family_size=int(family_size),
        inflation=inflation,
    )
