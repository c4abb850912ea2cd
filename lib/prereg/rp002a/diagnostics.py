"""The protocol's secondary diagnostics for one model on one assessment split.

Protocol ("Complete secondary diagnostics"): per world/replicate/model retain the
multiclass Brier score, the natural-log loss conditioned on the current
observation being erasure or visible, the fraction of target probabilities
clipped below the clip, the unclipped log loss if all target probabilities are
positive (otherwise null), the gap to the information-matched B3, and fixed
top-label confidence bins with count, mean confidence and accuracy; empty strata
and bins are null. They are descriptive; no decision uses them. Aggregation over
replicates is the *equal-replicate mean* of :func:`equal_replicate_mean`, labelled
as such and never pooled over episodes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .losses import check_clip, check_probabilities_and_targets

EQUAL_REPLICATE_LABEL = (
    "equal-replicate mean: the mean over replicates of each replicate's value "
    "(replicates without a value are left out and counted); never pooled over episodes"
)


class DiagnosticsError(ValueError):
    """Bad input to a diagnostic."""


def _plain(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    if not math.isfinite(value):
        raise DiagnosticsError(f"diagnostic value {value!r} is not finite; refusing to record it")
    return value


@dataclass(frozen=True)
class ConfidenceBin:
    """Predictions whose top-label confidence lies in ``[lower, upper)`` (``]`` if last)."""

    lower: float
    upper: float
    includes_upper: bool
    count: int
    mean_confidence: float | None
    accuracy: float | None

    def to_record(self) -> dict[str, Any]:
        """Plain JSON types; empty bins carry ``None``."""
        return {
            "lower": self.lower,
            "upper": self.upper,
            "includes_upper": self.includes_upper,
            "count": self.count,
            "mean_confidence": _plain(self.mean_confidence),
            "accuracy": _plain(self.accuracy),
        }


@dataclass(frozen=True)
class SecondaryDiagnostics:
    """Secondary diagnostics of one model on one replicate's assessment split.

    Every mean is over all ``E * T`` timepoints (equal to the mean of episode
    means, as every episode has ``T`` timepoints), except the conditional losses,
    which average over the ``n_erased`` / ``n_visible`` selected timepoints.
    """

    n_episodes: int
    n_timepoints: int
    clip: float
    information_set: str
    log_loss: float
    brier: float
    log_loss_erased: float | None
    n_erased: int
    log_loss_visible: float | None
    n_visible: int
    clipped_fraction: float
    unclipped_log_loss: float | None
    ideal_log_loss: float
    gap_to_ideal: float
    confidence_bins: tuple[ConfidenceBin, ...]

    def to_record(self) -> dict[str, Any]:
        """Plain JSON types (``None`` for null, never NaN)."""
        record: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if name == "confidence_bins":
                record[name] = [b.to_record() for b in value]
            elif isinstance(value, (float, np.floating)) or value is None:
                record[name] = _plain(value)
            else:
                record[name] = value
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> SecondaryDiagnostics:
        """Inverse of :meth:`to_record` (for summaries built from saved unit records)."""
        values = dict(record)
        values["confidence_bins"] = tuple(ConfidenceBin(**b) for b in record["confidence_bins"])
        return cls(**values)


def confidence_bin_edges(n_bins: int) -> np.ndarray:
    """``[0/n, 1/n, ..., n/n]`` as the floats nearest ``b/n``."""
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise DiagnosticsError(f"n_bins={n_bins!r} must be a positive integer (10 in the plan)")
    return np.array([b / n_bins for b in range(int(n_bins) + 1)])


def confidence_bins(
    probabilities: np.ndarray, targets: np.ndarray, n_bins: int
) -> tuple[ConfidenceBin, ...]:
    """Top-label confidence bins.

    Notes
    -----
    Confidence ``max_k p_k`` in float64; predicted label ``argmax_k p_k`` (the
    lowest index on ties); bin ``b`` holds ``edges[b] <= conf < edges[b+1]``, the
    last bin also ``conf == 1``. Per bin: count, mean confidence, accuracy (the
    fraction whose predicted label equals the target); ``None`` if empty. Guo et
    al. (2017), "On calibration of modern neural networks", section 2.
    """
    probs, tgt = check_probabilities_and_targets(probabilities, targets)
    edges = confidence_bin_edges(n_bins)
    confidence = probs.max(axis=-1).ravel()
    correct = (probs.argmax(axis=-1) == tgt).ravel()
    index = np.clip(np.searchsorted(edges, confidence, side="right") - 1, 0, len(edges) - 2)
    bins = []
    for b in range(len(edges) - 1):
        members = index == b
        count = int(members.sum())
        bins.append(
            ConfidenceBin(
                lower=float(edges[b]),
                upper=float(edges[b + 1]),
                includes_upper=b == len(edges) - 2,
                count=count,
                mean_confidence=float(confidence[members].mean()) if count else None,
                accuracy=float(correct[members].mean()) if count else None,
            )
        )
    return tuple(bins)


def multiclass_brier(probabilities: np.ndarray, targets: np.ndarray) -> float:
    """Mean over timepoints of ``sum_k (p_k - [y = k])^2``, in ``[0, 2]``.

    Notes
    -----
    Brier (1950), "Verification of forecasts expressed in terms of probability",
    Monthly Weather Review 78(1), eq. 1 (the original multi-category form).
    """
    probs, tgt = check_probabilities_and_targets(probabilities, targets)
    onehot = np.zeros_like(probs)
    np.put_along_axis(onehot, tgt[..., None], 1.0, axis=-1)
    return float(((probs - onehot) ** 2).sum(axis=-1).mean())


def secondary_diagnostics(
    probabilities: np.ndarray,
    targets: np.ndarray,
    observations: np.ndarray,
    ideal_probabilities: np.ndarray,
    *,
    information_set: str,
    clip: float,
    erasure_symbol: int,
    n_confidence_bins: int,
) -> SecondaryDiagnostics:
    """All secondary diagnostics of one model on one assessment split.

    Parameters
    ----------
    probabilities : array_like, float ``[E, T, K]``
        The model's predictions (any float precision; computed in float64).
    targets : array_like of int ``[E, T]``
    observations : array_like of int ``[E, T]``
        The current observation of each timepoint (``erasure_symbol`` = erased).
    ideal_probabilities : array_like, float ``[E, T, K]``
        The information-matched B3 predictions on the same episodes
        (:func:`prereg.rp002a.ideal.ideal_predictions`).
    information_set : str
        Which B3 that is (``"current"``, ``"window"``, ``"history"``), recorded.
    clip : float
        Probability clip (1e-8 in the plan).
    erasure_symbol : int
        4 for ``K = 4``.
    n_confidence_bins : int
        10 in the plan.

    Notes
    -----
    With ``p`` the target probability: ``log_loss = mean(-ln max(p, clip))``;
    ``log_loss_erased`` / ``_visible`` the same mean over timepoints whose current
    observation is / is not ``erasure_symbol`` (``None`` if there are none);
    ``clipped_fraction = mean(p < clip)``; ``unclipped_log_loss = mean(-ln p)`` if
    every ``p > 0`` else ``None``; ``gap_to_ideal = log_loss - ideal log_loss``
    (both clipped, same episodes).
    """
    clip = check_clip(clip)
    probs, tgt = check_probabilities_and_targets(probabilities, targets)
    if np.shape(ideal_probabilities) != probs.shape:
        raise DiagnosticsError(
            f"ideal_probabilities shape {np.shape(ideal_probabilities)} != probabilities "
            f"shape {probs.shape}; pass the information-matched B3 on the same episodes"
        )
    ideal, _ = check_probabilities_and_targets(ideal_probabilities, targets)
    obs = np.asarray(observations)
    if obs.shape != tgt.shape or not np.issubdtype(obs.dtype, np.integer):
        raise DiagnosticsError(
            f"observations must be integers of shape {tgt.shape}, got {obs.dtype} {obs.shape}"
        )
    if isinstance(erasure_symbol, bool) or not isinstance(erasure_symbol, (int, np.integer)):
        raise DiagnosticsError(f"erasure_symbol={erasure_symbol!r} must be an integer (K)")
    if not information_set or not isinstance(information_set, str):
        raise DiagnosticsError(f"information_set={information_set!r} must name the matched B3")

    p_target = np.take_along_axis(probs, tgt[..., None], axis=-1)[..., 0]
    losses = -np.log(np.maximum(p_target, clip))
    ideal_loss = float(
        (-np.log(np.maximum(np.take_along_axis(ideal, tgt[..., None], -1)[..., 0], clip))).mean()
    )
    erased = obs == erasure_symbol
    n_erased, n_visible = int(erased.sum()), int((~erased).sum())
    log_loss = float(losses.mean())
    unclipped = float((-np.log(p_target)).mean()) if np.all(p_target > 0.0) else None
    return SecondaryDiagnostics(
        n_episodes=int(probs.shape[0]),
        n_timepoints=int(probs.shape[1]),
        clip=clip,
        information_set=str(getattr(information_set, "value", information_set)),
        log_loss=log_loss,
        brier=multiclass_brier(probs, tgt),
        log_loss_erased=float(losses[erased].mean()) if n_erased else None,
        n_erased=n_erased,
        log_loss_visible=float(losses[~erased].mean()) if n_visible else None,
        n_visible=n_visible,
        clipped_fraction=float((p_target < clip).mean()),
        unclipped_log_loss=unclipped,
        ideal_log_loss=ideal_loss,
        gap_to_ideal=log_loss - ideal_loss,
        confidence_bins=confidence_bins(probs, tgt, n_confidence_bins),
    )


@dataclass(frozen=True)
class ReplicateMean:
    """Mean over the replicates that have a value; ``None`` if none has one."""

    mean: float | None
    n_defined: int

    def to_record(self) -> dict[str, Any]:
        """Plain JSON types."""
        return {"mean": _plain(self.mean), "n_defined": self.n_defined}


def _replicate_mean(values: Sequence[float | None]) -> ReplicateMean:
    defined = [float(v) for v in values if v is not None]
    return ReplicateMean(float(np.mean(defined)) if defined else None, len(defined))


_SCALARS = (
    "log_loss", "brier", "log_loss_erased", "log_loss_visible", "clipped_fraction",
    "unclipped_log_loss", "ideal_log_loss", "gap_to_ideal",
)  # fmt: skip


@dataclass(frozen=True)
class EqualReplicateDiagnostics:
    """Equal-replicate aggregate of :class:`SecondaryDiagnostics` (see ``aggregation``).

    ``scalars``: ``(name, ReplicateMean)`` per scalar diagnostic; ``bins``: per
    confidence bin ``(lower, upper, mean count, mean confidence, accuracy)`` with
    each mean over the replicates where the bin is non-empty.
    """

    aggregation: str
    n_replicates: int
    information_set: str
    scalars: tuple[tuple[str, ReplicateMean], ...]
    bins: tuple[tuple[float, float, float, ReplicateMean, ReplicateMean], ...]

    def to_record(self) -> dict[str, Any]:
        """Plain JSON types, labelled with ``aggregation``."""
        return {
            "aggregation": self.aggregation,
            "n_replicates": self.n_replicates,
            "information_set": self.information_set,
            "scalars": {name: value.to_record() for name, value in self.scalars},
            "confidence_bins": [
                {
                    "lower": lower,
                    "upper": upper,
                    "mean_count": mean_count,
                    "mean_confidence": confidence.to_record(),
                    "accuracy": accuracy.to_record(),
                }
                for lower, upper, mean_count, confidence, accuracy in self.bins
            ],
        }


def equal_replicate_mean(replicates: Sequence[SecondaryDiagnostics]) -> EqualReplicateDiagnostics:
    """Aggregate one model's diagnostics over replicates, each replicate weighing equally.

    Notes
    -----
    For each diagnostic, the arithmetic mean of the per-replicate values (never a
    pool of the replicates' episodes or timepoints); a replicate whose value is
    ``None`` is left out of that mean and ``n_defined`` says how many remained.
    """
    reps = list(replicates)
    if not reps or not all(isinstance(r, SecondaryDiagnostics) for r in reps):
        raise DiagnosticsError(
            f"replicates must be a non-empty sequence of SecondaryDiagnostics, got {replicates!r}"
        )
    info = {r.information_set for r in reps}
    n_bins = {len(r.confidence_bins) for r in reps}
    if len(info) != 1 or len(n_bins) != 1:
        raise DiagnosticsError(
            f"replicates mix information sets {sorted(info)} or bin counts {sorted(n_bins)}; "
            "aggregate one model at a time"
        )
    scalars = tuple((name, _replicate_mean([getattr(r, name) for r in reps])) for name in _SCALARS)
    bins = []
    for b, first in enumerate(reps[0].confidence_bins):
        column = [r.confidence_bins[b] for r in reps]
        bins.append(
            (
                first.lower,
                first.upper,
                float(np.mean([c.count for c in column])),
                _replicate_mean([c.mean_confidence for c in column]),
                _replicate_mean([c.accuracy for c in column]),
            )
        )
    return EqualReplicateDiagnostics(
        aggregation=EQUAL_REPLICATE_LABEL,
        n_replicates=len(reps),
        information_set=info.pop(),
        scalars=scalars,
        bins=tuple(bins),
    )


__all__ = [
    "EQUAL_REPLICATE_LABEL",
    "ConfidenceBin",
    "DiagnosticsError",
    "EqualReplicateDiagnostics",
    "ReplicateMean",
    "SecondaryDiagnostics",
    "confidence_bin_edges",
    "confidence_bins",
    "equal_replicate_mean",
    "multiclass_brier",
    "secondary_diagnostics",
]
