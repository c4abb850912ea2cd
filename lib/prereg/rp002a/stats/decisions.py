"""Benefit / equivalence / indeterminate decisions from adjusted intervals.

Regions (``m`` the margin, ``[low, high]`` the adjusted interval), RP002A
"Confirmatory estimand and decisions":

* benefit       iff ``high < -m``            (whole interval strictly below ``-m``);
* equivalence   iff ``-m < low and high < m`` (whole interval strictly inside);
* indeterminate otherwise (nonsignificance is not equivalence).

The regions partition all intervals ``low <= high``: benefit implies
``low <= high < -m`` which excludes equivalence.

A contrast of kind ``"benefit"`` can only be declared ``"benefit"``; a contrast
of kind ``"equivalence"`` only ``"equivalence"``; anything else is
``"indeterminate"``.

Zero observed SD (chosen handling): the verdict is the distinct outcome
``"analysis-failure"`` (code :data:`ANALYSIS_FAILURE_CODE`), never a claim and
never ``"indeterminate"``. A caller that aggregates verdicts must treat it as a
failed analysis (RP002A: "Zero observed SD is treated as an analysis failure,
not perfect precision"). Returning an outcome rather than raising keeps the
batched calibration path and the single-contrast path identical.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from prereg.rp002a.stats._validation import (
    StatsInputError,
    check_finite_array,
    check_positive_real,
)
from prereg.rp002a.stats.intervals import TInterval, TIntervalBatch

__all__ = [
    "ANALYSIS_FAILURE",
    "ANALYSIS_FAILURE_CODE",
    "BENEFIT",
    "BENEFIT_CODE",
    "DECISION_KINDS",
    "EQUIVALENCE",
    "EQUIVALENCE_CODE",
    "INDETERMINATE",
    "INDETERMINATE_CODE",
    "OUTCOME_NAMES",
    "contrast_verdict",
    "contrast_verdicts",
    "decision_region",
    "decision_regions",
]

INDETERMINATE = "indeterminate"
BENEFIT = "benefit"
EQUIVALENCE = "equivalence"
ANALYSIS_FAILURE = "analysis-failure"

INDETERMINATE_CODE = 0
BENEFIT_CODE = 1
EQUIVALENCE_CODE = 2
ANALYSIS_FAILURE_CODE = 3

#: ``OUTCOME_NAMES[code]`` is the outcome name of an int8 code.
OUTCOME_NAMES = (INDETERMINATE, BENEFIT, EQUIVALENCE, ANALYSIS_FAILURE)
#: The two contrast kinds of the RP002A primary family table.
DECISION_KINDS = (BENEFIT, EQUIVALENCE)
_KIND_CODES = {BENEFIT: BENEFIT_CODE, EQUIVALENCE: EQUIVALENCE_CODE}


def _check_kind(kind: object) -> int:
    if kind not in _KIND_CODES:
        raise StatsInputError(
            f"kind must be one of {DECISION_KINDS}, got {kind!r}; "
            "use the kind column of the protocol's primary family table"
        )
    return _KIND_CODES[kind]  # type: ignore[index]


def decision_regions(low: object, high: object, *, margin: float) -> np.ndarray:
    """Region codes (int8: 0 indeterminate, 1 benefit, 2 equivalence) of many intervals.

    Parameters
    ----------
    low, high : array_like of one shape, finite, ``low <= high``
        Interval bounds.
    margin : float, > 0
        The decision margin ``m``.

    Returns
    -------
    numpy.ndarray of int8, the shape of ``low``

    Notes
    -----
    benefit iff ``high < -m``; equivalence iff ``-m < low`` and ``high < m``
    (RP002A, "Confirmatory estimand and decisions").
    """
    lo = check_finite_array("low", low)
    hi = check_finite_array("high", high)
    if lo.shape != hi.shape:
        raise StatsInputError(f"low and high must have one shape, got {lo.shape} and {hi.shape}")
    if np.any(lo > hi):
        first = tuple(int(i) for i in np.argwhere(lo > hi)[0])
        raise StatsInputError(
            f"low must be <= high, but low[{first}]={float(lo[first])!r} > "
            f"high[{first}]={float(hi[first])!r}"
        )
    m = check_positive_real("margin", margin)
    codes = np.full(lo.shape, INDETERMINATE_CODE, dtype=np.int8)
    codes[hi < -m] = BENEFIT_CODE
    codes[(-m < lo) & (hi < m)] = EQUIVALENCE_CODE
    return codes


def decision_region(low: float, high: float, *, margin: float) -> str:
    """Region name (``"benefit"``, ``"equivalence"``, ``"indeterminate"``) of one interval.

    See :func:`decision_regions` for the rule.
    """
    code = decision_regions(np.array([low]), np.array([high]), margin=margin)[0]
    return OUTCOME_NAMES[int(code)]


def contrast_verdicts(
    intervals: TIntervalBatch, *, kinds: str | Sequence[str], margin: float
) -> np.ndarray:
    """Verdict codes of many contrasts (int8, names in :data:`OUTCOME_NAMES`).

    Parameters
    ----------
    intervals : TIntervalBatch
        Adjusted intervals, contrasts along the last axis.
    kinds : str or sequence of str
        One kind for all, or one per contrast (length of the last axis), each
        ``"benefit"`` or ``"equivalence"``.
    margin : float, > 0

    Returns
    -------
    numpy.ndarray of int8
        The kind's code if the interval lies in the kind's region, 0
        (indeterminate) otherwise, and 3 (analysis failure) wherever ``sd == 0``.
    """
    regions = decision_regions(intervals.low, intervals.high, margin=margin)
    if isinstance(kinds, str):
        kind_codes = np.int8(_check_kind(kinds))
    else:
        kind_codes = np.array([_check_kind(k) for k in kinds], dtype=np.int8)
        if regions.ndim == 0 or kind_codes.shape[0] != regions.shape[-1]:
            raise StatsInputError(
                f"kinds must give one kind per contrast (last axis of the intervals, shape "
                f"{regions.shape}), got {len(kind_codes)} kinds"
            )
    verdicts = np.where(regions == kind_codes, regions, np.int8(INDETERMINATE_CODE))
    verdicts = verdicts.astype(np.int8)
    verdicts[np.asarray(intervals.sd) == 0] = ANALYSIS_FAILURE_CODE
    return verdicts


def contrast_verdict(interval: TInterval, *, kind: str, margin: float) -> str:
    """Verdict of one contrast: the kind's claim, ``"indeterminate"`` or ``"analysis-failure"``.

    Parameters
    ----------
    interval : TInterval
        The adjusted interval of the contrast.
    kind : {"benefit", "equivalence"}
        The contrast's kind in the protocol's primary family table.
    margin : float, > 0

    Returns
    -------
    str
        ``"analysis-failure"`` if ``interval.sd == 0``; else ``kind`` if the
        interval lies in that kind's region; else ``"indeterminate"``.

    Examples
    --------
    >>> from prereg.rp002a.stats.intervals import replicate_mean_t_interval
    >>> iv = replicate_mean_t_interval([-0.03, -0.031, -0.029], alpha=0.05,
    ...                                family_size=7, inflation=2)
    >>> contrast_verdict(iv, kind="benefit", margin=0.01)
    'benefit'
    >>> contrast_verdict(iv, kind="equivalence", margin=0.01)
    'indeterminate'
    """
    kind_code = _check_kind(kind)
    if interval.sd == 0:
        return ANALYSIS_FAILURE
    code = decision_regions(np.array([interval.low]), np.array([interval.high]), margin=margin)[0]
    return OUTCOME_NAMES[kind_code] if int(code) == kind_code else INDETERMINATE
