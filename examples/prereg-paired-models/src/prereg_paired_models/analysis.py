"""The preregistered analysis: a paired t interval of loss(B) - loss(A) across replicates,
and the decision rule read from it (A is ridge regression, B is k-nearest neighbours)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from scipy import stats

B_BETTER = "B better"
A_BETTER = "A better"
INCONCLUSIVE = "inconclusive"
RULE = (
    "d = loss(B) - loss(A) per replicate (test mean squared error); a two-sided paired t "
    "interval of the mean of d at the plan's confidence. B (k-nearest neighbours) is better "
    "if the interval's upper bound is below 0, A (ridge) is better if its lower bound is above "
    "0, otherwise the comparison is inconclusive."
)


@dataclass(frozen=True)
class Interval:
    n: int
    mean: float
    sd: float
    t_quantile: float
    half_width: float
    lower: float
    upper: float
    confidence: float

    def as_record(self) -> dict:
        return asdict(self)


def paired_t_interval(differences: Sequence[float], confidence: float) -> Interval:
    """The two-sided t interval of the mean of ``differences`` (n - 1 degrees of freedom)."""
    n = len(differences)
    if n < 2:
        raise ValueError(f"a paired t interval needs at least 2 differences, got {n}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    values = [float(d) for d in differences]
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"differences must be finite, got {values}")
    mean = math.fsum(values) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    quantile = float(stats.t.ppf((1 + confidence) / 2, n - 1))
    half = quantile * sd / math.sqrt(n)
    return Interval(n, mean, sd, quantile, half, mean - half, mean + half, confidence)


def decide(interval: Interval) -> str:
    """The preregistered decision (see :data:`RULE`)."""
    if interval.upper < 0:
        return B_BETTER
    if interval.lower > 0:
        return A_BETTER
    return INCONCLUSIVE
