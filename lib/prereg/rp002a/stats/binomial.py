"""Clopper-Pearson bounds and the binomial Monte Carlo standard error."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prereg.rp002a.stats._scipy import distributions
from prereg.rp002a.stats._validation import StatsInputError, check_int, check_probability

__all__ = [
    "ConfidenceInterval",
    "binomial_mc_standard_error",
    "clopper_pearson_interval",
    "clopper_pearson_upper",
]


@dataclass(frozen=True)
class ConfidenceInterval:
    """A two-sided interval ``[low, high]``."""

    low: float
    high: float


def _check_counts(successes: int, trials: int) -> tuple[int, int]:
    trials = check_int("trials", trials, 1)
    successes = check_int("successes", successes, 0)
    if successes > trials:
        raise StatsInputError(f"successes={successes!r} cannot exceed trials={trials!r}")
    return successes, trials


def clopper_pearson_upper(successes: int, trials: int, alpha: float) -> float:
    """One-sided Clopper-Pearson upper bound at level ``1 - alpha``.

    Parameters
    ----------
    successes : int, 0 <= successes <= trials
        Observed count ``x`` (e.g. simultaneous coverage failures).
    trials : int, >= 1
        Number of independent trials ``n``.
    alpha : float in (0, 1)
        One-sided error level (RP002A calibration: .05/90).

    Returns
    -------
    float
        ``u`` with ``P(X <= x | p = u) = alpha``: the ``1 - alpha`` quantile of
        ``Beta(x + 1, n - x)``; ``1 - alpha**(1/n)`` if ``x = 0``; ``1`` if ``x = n``.

    Notes
    -----
    Clopper and Pearson [1]_; the beta-quantile form is in Brown, Cai and
    DasGupta [2]_. The ``x = 0`` case is written out: ``(1 - u)**n = alpha``.

    References
    ----------
    .. [1] C. J. Clopper and E. S. Pearson, "The use of confidence or fiducial
       limits illustrated in the case of the binomial", Biometrika 26 (1934).
    .. [2] L. D. Brown, T. T. Cai, A. DasGupta, "Interval estimation for a
       binomial proportion", Statistical Science 16 (2001).

    Examples
    --------
    >>> round(clopper_pearson_upper(0, 20000, 0.05 / 90), 7)
    0.0003747
    """
    x, n = _check_counts(successes, trials)
    alpha = check_probability("alpha", alpha)
    if x == n:
        return 1.0
    if x == 0:
        return float(1.0 - alpha ** (1.0 / n))
    return float(distributions().beta.ppf(1.0 - alpha, x + 1, n - x))


def clopper_pearson_interval(successes: int, trials: int, alpha: float) -> ConfidenceInterval:
    """Two-sided Clopper-Pearson ("exact") interval at level ``1 - alpha``.

    Parameters
    ----------
    successes : int, 0 <= successes <= trials
    trials : int, >= 1
    alpha : float in (0, 1)
        Two-sided error level; each tail gets ``alpha / 2``.

    Returns
    -------
    ConfidenceInterval
        ``low`` = ``Beta(x, n - x + 1)`` quantile ``alpha/2`` (0 if ``x = 0``);
        ``high`` = ``Beta(x + 1, n - x)`` quantile ``1 - alpha/2`` (1 if ``x = n``).
        Closed forms: ``high = 1 - (alpha/2)**(1/n)`` at ``x = 0`` and
        ``low = (alpha/2)**(1/n)`` at ``x = n``.

    Notes
    -----
    Clopper and Pearson (1934); agrees with
    ``scipy.stats.binomtest(x, n).proportion_ci(1 - alpha, method="exact")``.
    """
    x, n = _check_counts(successes, trials)
    alpha = check_probability("alpha", alpha)
    tail = alpha / 2.0
    if x == 0:
        low = 0.0
        high = 1.0 - tail ** (1.0 / n)
    elif x == n:
        low = tail ** (1.0 / n)
        high = 1.0
    else:
        low = float(distributions().beta.ppf(tail, x, n - x + 1))
        high = float(distributions().beta.ppf(1.0 - tail, x + 1, n - x))
    return ConfidenceInterval(low=float(low), high=float(high))


def binomial_mc_standard_error(rate: float | np.ndarray, trials: int) -> float | np.ndarray:
    """Monte Carlo standard error ``sqrt(p (1 - p) / n)`` of an estimated rate.

    Parameters
    ----------
    rate : float or array of floats in [0, 1]
        Estimated proportion(s) ``p``.
    trials : int, >= 1
        Number of independent trials ``n`` behind each rate.

    Returns
    -------
    float or numpy.ndarray
        Same shape as ``rate``; 0 when ``p`` is 0 or 1.

    Notes
    -----
    Plug-in binomial standard error (e.g. Morris, White and Crowther, "Using
    simulation studies to evaluate statistical methods", Stat. Med. 38, 2019).
    """
    n = check_int("trials", trials, 1)
    p = np.asarray(rate, dtype=np.float64)
    if not np.all(np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise StatsInputError(f"rate must lie in [0, 1], got {rate!r}")
    se = np.sqrt(p * (1.0 - p) / n)
    return float(se) if se.ndim == 0 else se
