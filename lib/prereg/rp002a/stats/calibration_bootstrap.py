"""RP002A bootstrap benchmark cells: nested vs whole-cluster percentile methods.

Episode-level data of a cell ``(n, law, f)`` with ``E`` episodes, ``K``
independent contrasts and no shared component: for replicate ``r``, contrast
``k`` and episode ``e``

    x[k, r, e] = sqrt(1 - f) L[k, r] + sqrt(f) sqrt(E) D[k, r, e]

with ``L`` and ``D`` independent draws from the cell's centred unit-variance law.
The replicate mean ``mean_e x[k, r, e]`` then has unit variance, of which the
fraction ``f`` is due to episode averaging. Episode deviations are drawn from
the law too (not from the normal limit) because eight episodes are far from it;
so at ``f = 1`` the replicate mean is an average of eight law draws.

Generators (reproducibility contract): ``data, whole, nested = rng.spawn(3)``.
``data`` draws ``L`` (shape ``(trials, K, n)``, unless ``f == 1``) then ``D``
(shape ``(trials, K, n, E)``, unless ``f == 0``). Each method then visits the
trials in order with its own generator (see :mod:`prereg.rp002a.stats.bootstrap`).
The true mean is 0. CPU seconds (``time.process_time``) are the only
non-reproducible field and are kept apart in ``cpu_seconds``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from prereg.rp002a.stats._validation import (
    StatsInputError,
    check_fraction,
    check_generator,
    check_int,
    check_probability,
)
from prereg.rp002a.stats.binomial import binomial_mc_standard_error
from prereg.rp002a.stats.bootstrap import (
    nested_bootstrap_means,
    percentile_intervals,
    whole_cluster_bootstrap_means,
)
from prereg.rp002a.stats.laws import LAW_NAMES, standardized_draws

__all__ = [
    "BOOTSTRAP_METHODS",
    "BootstrapCell",
    "BootstrapCellResult",
    "BootstrapMethodSummary",
    "BootstrapSettings",
    "run_bootstrap_cell",
    "simulate_episode_values",
]

#: Method names, in record order.
BOOTSTRAP_METHODS = ("nested", "whole_cluster")
_KERNELS = {"nested": nested_bootstrap_means, "whole_cluster": whole_cluster_bootstrap_means}


@dataclass(frozen=True)
class BootstrapCell:
    """One benchmark cell: replicates ``n``, law name, within fraction ``f``."""

    n: int
    law: str
    within_fraction: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "n", check_int("n", self.n, 2))
        if self.law not in LAW_NAMES:
            raise StatsInputError(f"law must be one of {LAW_NAMES}, got {self.law!r}")
        object.__setattr__(
            self, "within_fraction", check_fraction("within_fraction", self.within_fraction)
        )


@dataclass(frozen=True)
class BootstrapSettings:
    """Plan parameters of the benchmark: trials, draws, episodes, contrasts, familywise alpha."""

    trials: int
    draws: int
    episodes: int
    contrasts: int
    alpha: float

    def __post_init__(self) -> None:
        for name in ("trials", "draws", "episodes", "contrasts"):
            object.__setattr__(self, name, check_int(name, getattr(self, name), 1))
        object.__setattr__(self, "alpha", check_probability("alpha", self.alpha))


@dataclass(frozen=True)
class BootstrapMethodSummary:
    """Simultaneous coverage failures of the K Bonferroni percentile intervals, and widths."""

    coverage_failures: int
    coverage_failure_rate: float
    coverage_failure_mc_se: float
    per_contrast_misses: tuple[int, ...]
    width_mean: float


@dataclass(frozen=True)
class BootstrapCellResult:
    """Retained figures of one benchmark cell.

    ``trial_diagnostics`` holds per-trial ``<method>/coverage_failure`` booleans and
    ``<method>/max_width`` floats. ``cpu_seconds`` (per method) is NOT reproducible.
    """

    cell: BootstrapCell
    settings: BootstrapSettings
    methods: Mapping[str, BootstrapMethodSummary]
    trial_diagnostics: Mapping[str, np.ndarray]
    cpu_seconds: Mapping[str, float]


def simulate_episode_values(
    rng: np.random.Generator,
    *,
    trials: int,
    n: int,
    episodes: int,
    contrasts: int,
    law: str,
    within_fraction: float,
) -> np.ndarray:
    """Episode-level synthetic differences, shape ``(trials, contrasts, n, episodes)``.

    See the module docstring for the model and the order of draws.
    """
    check_generator("rng", rng)
    f = check_fraction("within_fraction", within_fraction)
    if law not in LAW_NAMES:
        raise StatsInputError(f"law must be one of {LAW_NAMES}, got {law!r}")
    shape = (
        check_int("trials", trials, 1),
        check_int("contrasts", contrasts, 1),
        check_int("n", n, 1),
    )
    e = check_int("episodes", episodes, 1)
    values = np.zeros(shape + (e,))
    if f < 1.0:
        values += np.sqrt(1.0 - f) * standardized_draws(law, rng, shape)[..., None]
    if f > 0.0:
        values += np.sqrt(f) * np.sqrt(e) * standardized_draws(law, rng, shape + (e,))
    return values


def run_bootstrap_cell(
    cell: BootstrapCell, settings: BootstrapSettings, rng: np.random.Generator
) -> BootstrapCellResult:
    """Run both percentile bootstrap methods on one benchmark cell.

    Parameters
    ----------
    cell : BootstrapCell
    settings : BootstrapSettings
    rng : numpy.random.Generator
        A fresh generator for this cell; split with ``rng.spawn(3)``.

    Returns
    -------
    BootstrapCellResult

    Notes
    -----
    Each of the K intervals is a two-sided percentile interval at level
    ``1 - alpha / K`` (Bonferroni); a trial fails if any interval misses 0.
    """
    check_generator("rng", rng)
    data_rng, *method_rngs = rng.spawn(1 + len(BOOTSTRAP_METHODS))
    values = simulate_episode_values(
        data_rng,
        trials=settings.trials,
        n=cell.n,
        episodes=settings.episodes,
        contrasts=settings.contrasts,
        law=cell.law,
        within_fraction=cell.within_fraction,
    )
    level = settings.alpha / settings.contrasts
    methods: dict[str, BootstrapMethodSummary] = {}
    diagnostics: dict[str, np.ndarray] = {}
    cpu_seconds: dict[str, float] = {}
    for name, method_rng in zip(BOOTSTRAP_METHODS, method_rngs):
        kernel = _KERNELS[name]
        misses = np.empty((settings.trials, settings.contrasts), dtype=bool)
        widths = np.empty((settings.trials, settings.contrasts))
        start = time.process_time()
        for t in range(settings.trials):
            means = kernel(values[t], draws=settings.draws, rng=method_rng)
            intervals = percentile_intervals(means, alpha=level)
            misses[t] = (intervals.low > 0.0) | (intervals.high < 0.0)
            widths[t] = intervals.high - intervals.low
        cpu_seconds[name] = time.process_time() - start
        failures = misses.any(axis=1)
        count = int(failures.sum())
        methods[name] = BootstrapMethodSummary(
            coverage_failures=count,
            coverage_failure_rate=count / settings.trials,
            coverage_failure_mc_se=float(
                binomial_mc_standard_error(count / settings.trials, settings.trials)
            ),
            per_contrast_misses=tuple(int(c) for c in misses.sum(axis=0)),
            width_mean=float(widths.mean()),
        )
        diagnostics[f"{name}/coverage_failure"] = failures
        diagnostics[f"{name}/max_width"] = widths.max(axis=1)
    return BootstrapCellResult(
        cell=cell,
        settings=settings,
        methods=methods,
        trial_diagnostics=diagnostics,
        cpu_seconds=cpu_seconds,
    )
