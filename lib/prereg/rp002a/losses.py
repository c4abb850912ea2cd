"""Clipped natural log loss, episode means, replicate means and paired contrasts.

The estimand (protocol, "Confirmatory estimand"): per-timepoint clipped natural
log loss, reduced to episode means, then to the replicate mean over episodes; a
contrast between two models is the paired difference of episode means on the
same assessment episodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class LossInputError(ValueError):
    """Probabilities, targets or the clip are unusable."""


def check_probabilities_and_targets(
    probabilities: np.ndarray, targets: np.ndarray, sum_tolerance: float = 1e-5
) -> tuple:
    """Validate and return ``(probabilities float64 [E, T, K], targets int64 [E, T])``.

    Probabilities must be finite, in [0, 1], and sum to 1 within ``sum_tolerance``
    over the last axis (float32 softmax outputs pass); targets integers in
    ``0 .. K-1`` with the shape ``probabilities.shape[:2]``.
    """
    probs = np.asarray(probabilities)
    tgt = np.asarray(targets)
    if probs.ndim != 3 or 0 in probs.shape:
        raise LossInputError(
            f"probabilities has shape {probs.shape}; expected non-empty [episodes, T, classes]"
        )
    if not np.issubdtype(probs.dtype, np.floating):
        raise LossInputError(f"probabilities has dtype {probs.dtype}; expected floating point")
    if tgt.shape != probs.shape[:2]:
        raise LossInputError(
            f"targets has shape {tgt.shape}; expected {probs.shape[:2]} to match probabilities"
        )
    if not np.issubdtype(tgt.dtype, np.integer):
        raise LossInputError(f"targets has dtype {tgt.dtype}; expected integers (uint8)")
    probs = probs.astype(np.float64)
    if not np.all(np.isfinite(probs)) or probs.min() < 0.0 or probs.max() > 1.0:
        bad = probs[~(np.isfinite(probs) & (probs >= 0.0) & (probs <= 1.0))]
        raise LossInputError(
            f"probabilities must be finite and in [0, 1]; found {bad.size} value(s) such as "
            f"{bad[0]!r}"
        )
    worst = float(np.max(np.abs(probs.sum(axis=-1) - 1.0)))
    if worst > sum_tolerance:
        raise LossInputError(
            f"probabilities do not sum to 1 over classes (largest deviation {worst:.3g} > "
            f"sum_tolerance={sum_tolerance}); pass softmax outputs"
        )
    if tgt.min() < 0 or tgt.max() >= probs.shape[2]:
        raise LossInputError(
            f"targets hold values in [{tgt.min()}, {tgt.max()}]; expected 0..{probs.shape[2] - 1}"
        )
    return probs, tgt.astype(np.int64)


def check_clip(clip: float) -> float:
    """Return ``clip`` as a float after checking it lies in (0, 1)."""
    if (
        isinstance(clip, bool)
        or not isinstance(clip, (int, float, np.floating))
        or not (0.0 < float(clip) < 1.0)
    ):
        raise LossInputError(f"clip={clip!r} must be a number in (0, 1) (1e-8 in the plan)")
    return float(clip)


def target_probabilities(probabilities: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """``p[e, t, y[e, t]]``, float64 ``[E, T]`` (inputs validated)."""
    probs, tgt = check_probabilities_and_targets(probabilities, targets)
    return np.take_along_axis(probs, tgt[..., None], axis=-1)[..., 0]


def clipped_log_loss(probabilities: np.ndarray, targets: np.ndarray, clip: float) -> np.ndarray:
    """Per-timepoint clipped natural log loss, float64 ``[E, T]``.

    Notes
    -----
    ``loss[e, t] = -ln(max(p[e, t, y[e, t]], clip))``, computed in float64 whatever
    the input precision.
    """
    clip = check_clip(clip)
    return -np.log(np.maximum(target_probabilities(probabilities, targets), clip))


def episode_mean_losses(probabilities: np.ndarray, targets: np.ndarray, clip: float) -> np.ndarray:
    """Episode means of :func:`clipped_log_loss`, float64 ``[E]``."""
    return clipped_log_loss(probabilities, targets, clip).mean(axis=1)


@dataclass(frozen=True, eq=False)
class ReplicateLoss:
    """A model's loss on one replicate's assessment split.

    ``episode_means`` float64 ``[E]``; ``mean`` = their mean (each episode weighs
    ``1/E``, each timepoint ``1/(E T)``).
    """

    episode_means: np.ndarray
    mean: float


def replicate_loss(probabilities: np.ndarray, targets: np.ndarray, clip: float) -> ReplicateLoss:
    """Episode means and the replicate mean of the clipped log loss."""
    means = episode_mean_losses(probabilities, targets, clip)
    means.setflags(write=False)
    return ReplicateLoss(episode_means=means, mean=float(means.mean()))


@dataclass(frozen=True, eq=False)
class PairedContrast:
    """Model A minus model B on the same episodes.

    ``differences[i] = a[i] - b[i]`` (episode means, float64 ``[E]``); ``mean`` is
    their mean, the replicate's contrast value (negative: A has lower loss).
    """

    differences: np.ndarray
    mean: float


def paired_contrast(episode_means_a: np.ndarray, episode_means_b: np.ndarray) -> PairedContrast:
    """Paired episode-mean differences ``a - b`` and their mean.

    Parameters
    ----------
    episode_means_a, episode_means_b : array_like, float ``[E]``
        Episode-mean losses of two models on the *same* assessment episodes, in
        the same order (e.g. B1 and B0 for the contrast B1-B0).
    """
    a = np.asarray(episode_means_a, dtype=np.float64)
    b = np.asarray(episode_means_b, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape or a.size == 0:
        raise LossInputError(
            f"episode_means_a shape {a.shape} and episode_means_b shape {b.shape} must be "
            "equal non-empty 1-d arrays over the same assessment episodes"
        )
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise LossInputError("episode means must be finite")
    differences = a - b
    differences.setflags(write=False)
    return PairedContrast(differences=differences, mean=float(differences.mean()))
