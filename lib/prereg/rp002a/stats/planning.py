"""The RP002A fixed sample-count and resource rule as pure functions.

Protocol, "Fixed sample-count and resource rule": from the seven variance-stage
contrast SDs compute a simultaneous 95% normal-theory upper SD bound (df = 4,
chi-square lower quantile at .05/7); use the largest for every world; among the
eligible counts select the smallest whose twofold-inflated Bonferroni t planning
half-width is <= .005 nats; if none meets precision, the largest eligible count
("resource-limited"); if none is eligible, no confirmation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
from prereg.rp002a.stats.intervals import bonferroni_t_critical

__all__ = [
    "NO_ELIGIBLE_COUNT",
    "PRECISE",
    "RESOURCE_LIMITED",
    "SampleCountDecision",
    "planning_half_width",
    "select_sample_count",
    "simultaneous_upper_sd_bounds",
]

PRECISE = "precise"
RESOURCE_LIMITED = "resource-limited"
NO_ELIGIBLE_COUNT = "no-eligible-count"


@dataclass(frozen=True)
class SampleCountDecision:
    """Outcome of :func:`select_sample_count`.

    ``branch`` is ``"precise"``, ``"resource-limited"`` or ``"no-eligible-count"``;
    ``n`` is the chosen count (``None`` for no confirmation); ``sd_bound`` the
    largest per-contrast upper bound, used for every world; the tuples are aligned
    with ``candidates`` (ascending).
    """

    branch: str
    n: int | None
    sd_bound: float
    sd_bounds: tuple[float, ...]
    candidates: tuple[int, ...]
    half_widths: tuple[float, ...]
    eligible: tuple[bool, ...]
    target_half_width: float


def simultaneous_upper_sd_bounds(
    sds: object, *, df: int, alpha: float, family_size: int
) -> np.ndarray:
    """Simultaneous one-sided upper bounds ``s * sqrt(df / chi2_{df}(alpha / m))``.

    Parameters
    ----------
    sds : array_like, 1-d, ``family_size`` finite values > 0
        Observed contrast SDs (ddof = 1).
    df : int, >= 1
        Degrees of freedom of each SD (replicates - 1; RP002A: 4).
    alpha : float in (0, 1)
        Familywise level (RP002A: .05).
    family_size : int, >= 1
        ``m``, the number of SDs bounded simultaneously (RP002A: 7).

    Returns
    -------
    numpy.ndarray
        One upper bound per SD.

    Notes
    -----
    Under independent normal replicates ``df s^2 / sigma^2 ~ chi2(df)``, so
    ``P(sigma <= s sqrt(df / chi2_{df, q})) = 1 - q`` with ``chi2_{df, q}`` the
    lower ``q`` quantile; ``q = alpha / m`` (Bonferroni) makes the ``m`` bounds
    simultaneous at ``1 - alpha``. NIST/SEMATECH e-Handbook, section 7.2.3.
    A zero SD is refused: it is an analysis failure, not perfect precision.
    """
    values = check_finite_array("sds", sds, ndim=1)
    family_size = check_int("family_size", family_size, 1)
    if values.size != family_size:
        raise StatsInputError(
            f"sds must hold one SD per family member (family_size={family_size}), got {values.size}"
        )
    if np.any(values <= 0):
        raise StatsInputError(
            f"sds must be > 0 (a zero observed SD is an analysis failure), got {values.tolist()}"
        )
    df = check_int("df", df, 1)
    alpha = check_probability("alpha", alpha)
    quantile = distributions().chi2.ppf(alpha / family_size, df)
    return values * np.sqrt(df / quantile)


def planning_half_width(
    sd_bound: float, n: int, *, alpha: float, family_size: int, inflation: float
) -> float:
    """Planning half-width ``f * t(1 - alpha / (2 m), n - 1) * sigma_up / sqrt(n)``.

    Parameters
    ----------
    sd_bound : float, > 0
        The planning SD ``sigma_up``.
    n : int, >= 2
        Candidate replicate count.
    alpha, family_size, inflation
        As in :func:`prereg.rp002a.stats.intervals.replicate_mean_t_interval`.

    Returns
    -------
    float
    """
    sd_bound = check_positive_real("sd_bound", sd_bound)
    inflation = check_positive_real("inflation", inflation)
    critical = bonferroni_t_critical(n=n, alpha=alpha, family_size=family_size)
    return float(inflation * critical * sd_bound / np.sqrt(n))


def select_sample_count(
    contrast_sds: object,
    *,
    candidates: Sequence[int],
    eligibility: Mapping[int, bool],
    df: int,
    alpha: float,
    family_size: int,
    inflation: float,
    target_half_width: float,
) -> SampleCountDecision:
    """Apply the fixed sample-count rule.

    Parameters
    ----------
    contrast_sds : array_like, 1-d
        The ``family_size`` variance-stage contrast SDs.
    candidates : sequence of int, each >= 2, distinct
        Candidate counts (RP002A: 20, 30, 50); sorted ascending here.
    eligibility : mapping int -> bool
        For every candidate, whether calibration made it eligible
        (:func:`prereg.rp002a.stats.calibration.eligible_counts`).
    df, alpha, family_size
        As in :func:`simultaneous_upper_sd_bounds`.
    inflation : float, > 0
        Planning inflation factor (RP002A: 2).
    target_half_width : float, > 0
        Precision target in nats (RP002A: .005).

    Returns
    -------
    SampleCountDecision
        ``"precise"`` with the smallest eligible count whose half-width is
        ``<= target``; else ``"resource-limited"`` with the largest eligible count;
        else ``"no-eligible-count"`` with ``n=None``.

    Notes
    -----
    Means and effect sizes are not inputs to this rule (protocol).
    """
    counts = [check_int("candidates[...]", c, 2) for c in candidates]
    if not counts:
        raise StatsInputError("candidates must list at least one count, got none")
    if len(set(counts)) != len(counts):
        raise StatsInputError(f"candidates must be distinct, got {list(candidates)}")
    counts.sort()
    missing = [c for c in counts if c not in eligibility]
    if missing:
        raise StatsInputError(
            f"eligibility has no entry for candidate count(s) {missing}; "
            "pass the calibration eligibility of every candidate"
        )
    for c in counts:
        if not isinstance(eligibility[c], (bool, np.bool_)):
            raise StatsInputError(f"eligibility[{c}] must be a bool, got {eligibility[c]!r}")
    target = check_positive_real("target_half_width", target_half_width)
    bounds = simultaneous_upper_sd_bounds(contrast_sds, df=df, alpha=alpha, family_size=family_size)
    sd_bound = float(bounds.max())
    half_widths = tuple(
        planning_half_width(sd_bound, c, alpha=alpha, family_size=family_size, inflation=inflation)
        for c in counts
    )
    eligible = tuple(bool(eligibility[c]) for c in counts)
    precise = [c for c, hw, ok in zip(counts, half_widths, eligible) if ok and hw <= target]
    usable = [c for c, ok in zip(counts, eligible) if ok]
    if precise:
        branch, chosen = PRECISE, min(precise)
    elif usable:
        branch, chosen = RESOURCE_LIMITED, max(usable)
    else:
        branch, chosen = NO_ELIGIBLE_COUNT, None
    return SampleCountDecision(
        branch=branch,
        n=chosen,
        sd_bound=sd_bound,
        sd_bounds=tuple(float(b) for b in bounds),
        candidates=tuple(counts),
        half_widths=half_widths,
        eligible=eligible,
        target_half_width=target,
    )
