"""B0: the closed-form conditional frequency table ``P(target | current observation)``.

B0 is not trained by gradient descent: it is the empirical conditional
distribution of the target given the current observation symbol in the training
split, and it predicts from ``observations[:, t]`` alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class FrequencyTableError(ValueError):
    """Bad input to the frequency table."""


@dataclass(frozen=True, eq=False)
class FrequencyTable:
    """A fitted B0 table.

    Attributes
    ----------
    counts : numpy.ndarray, int64 ``[n_symbols, n_classes]``
        ``counts[o, y]`` = number of training timepoints with observation ``o``
        and target ``y``.
    probabilities : numpy.ndarray, float64 ``[n_symbols, n_classes]``
        ``counts[o, y] / sum_y counts[o, y]``; a symbol never seen in training
        gets the uniform row ``1 / n_classes``.
    unseen_symbols : tuple of int
        Symbols with no training timepoint (their rows are uniform).
    """

    counts: np.ndarray
    probabilities: np.ndarray
    unseen_symbols: tuple

    @property
    def n_symbols(self) -> int:
        """Number of observation symbols (rows)."""
        return int(self.counts.shape[0])

    @property
    def n_classes(self) -> int:
        """Number of target classes (columns)."""
        return int(self.counts.shape[1])

    def to_record(self) -> dict:
        """Plain JSON types: counts, probabilities, unseen symbols."""
        return {
            "counts": self.counts.tolist(),
            "probabilities": self.probabilities.tolist(),
            "unseen_symbols": list(self.unseen_symbols),
        }


def _check_symbols(name: str, array: np.ndarray, bound: int, meaning: str) -> np.ndarray:
    values = np.asarray(array)
    if values.ndim != 2 or 0 in values.shape:
        raise FrequencyTableError(f"{name} has shape {values.shape}; expected [episodes, T]")
    if not np.issubdtype(values.dtype, np.integer):
        raise FrequencyTableError(f"{name} has dtype {values.dtype}; expected integers (uint8)")
    if values.min() < 0 or values.max() >= bound:
        raise FrequencyTableError(
            f"{name} holds values in [{values.min()}, {values.max()}]; expected 0..{bound - 1} "
            f"({meaning})"
        )
    return values.astype(np.int64)


def _check_count(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise FrequencyTableError(f"{name}={value!r} must be a positive integer")
    return int(value)


def fit_frequency_table(
    observations: np.ndarray, targets: np.ndarray, n_symbols: int, n_classes: int
) -> FrequencyTable:
    """Fit B0 on a training split.

    Parameters
    ----------
    observations : array_like of int, ``[episodes, T]``
        Symbols ``0 .. n_symbols-1`` (5 symbols: four states and the erasure).
    targets : array_like of int, ``[episodes, T]``
        Classes ``0 .. n_classes-1`` (4).
    n_symbols, n_classes : int

    Returns
    -------
    FrequencyTable

    Notes
    -----
    Maximum-likelihood estimate of a categorical ``P(y | o)``, no smoothing:
    ``p(y | o) = n(o, y) / n(o)`` pooled over all timepoints of all training
    episodes. A zero cell stays zero (the clipped loss bounds its cost). An
    observation symbol absent from training (``n(o) = 0``) predicts the uniform
    distribution ``1 / n_classes``, the only choice that uses no information.
    """
    n_symbols = _check_count("n_symbols", n_symbols)
    n_classes = _check_count("n_classes", n_classes)
    obs = _check_symbols("observations", observations, n_symbols, "observation symbols")
    tgt = _check_symbols("targets", targets, n_classes, "target classes")
    if obs.shape != tgt.shape:
        raise FrequencyTableError(f"observations shape {obs.shape} != targets shape {tgt.shape}")
    counts = (
        np.bincount((obs * n_classes + tgt).ravel(), minlength=n_symbols * n_classes)
        .reshape(n_symbols, n_classes)
        .astype(np.int64)
    )
    totals = counts.sum(axis=1, keepdims=True)
    probabilities = np.where(totals > 0, counts / np.maximum(totals, 1), 1.0 / n_classes).astype(
        np.float64
    )
    unseen = tuple(int(o) for o in np.flatnonzero(totals[:, 0] == 0))
    counts.setflags(write=False)
    probabilities.setflags(write=False)
    return FrequencyTable(counts=counts, probabilities=probabilities, unseen_symbols=unseen)


def frequency_predictions(table: FrequencyTable, observations: np.ndarray) -> np.ndarray:
    """B0 predictions ``table.probabilities[observations[e, t]]``, float64 ``[E, T, K]``.

    Uses the current observation only; symbols unseen in training get the
    uniform row (see :func:`fit_frequency_table`).
    """
    if not isinstance(table, FrequencyTable):
        raise TypeError(f"table={table!r} must be a FrequencyTable from fit_frequency_table")
    obs = _check_symbols("observations", observations, table.n_symbols, "observation symbols")
    return table.probabilities[obs]
