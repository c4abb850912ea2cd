"""RP002A synthetic analysis calibration: simulation cells and count eligibility.

Data model of a simulation cell ``(n, law, rho, f)`` (standardized units): per
trial and replicate, contrast ``k`` (of ``K``) has difference ``effect + noise_k``
with ``noise_k = sqrt(rho) S + sqrt(1 - rho) I_k``; ``S`` (shared by the ``K``
contrasts of a replicate) and every ``I_k`` are ``sqrt(1 - f) L + sqrt(f) N`` with
``L`` from the cell's law and ``N`` standard normal (the limit of averaging over
assessment episodes). Every noise has unit variance and pairwise correlation
``rho``. The effect is 0, so the true mean is 0.

Order of draws (reproducibility contract), all in one call each:
``L = standardized_draws(law, rng, (trials, n, K + 1))`` unless ``f == 1``, then
``N = rng.standard_normal((trials, n, K + 1))`` unless ``f == 0``; column 0 is
the shared component. A component whose weight is exactly zero is not drawn
(skipping it changes no value).

Decision illustration: the trial's standardized means and SDs are scaled by
``decision_sd`` and translated to a true mean of ``-margin``, ``+margin`` or 0;
the batched interval and verdict functions then give false benefit (kind
benefit, truth ``-margin``), false equivalence (kind equivalence, truth
``-margin`` and ``+margin``) and zero-effect equivalence (truth 0).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from prereg.rp002a.stats._validation import (
    StatsInputError,
    check_fraction,
    check_generator,
    check_int,
    check_positive_real,
    check_probability,
)
from prereg.rp002a.stats.binomial import binomial_mc_standard_error, clopper_pearson_upper
from prereg.rp002a.stats.decisions import (
    BENEFIT,
    BENEFIT_CODE,
    EQUIVALENCE,
    EQUIVALENCE_CODE,
    contrast_verdicts,
)
from prereg.rp002a.stats.intervals import replicate_mean_t_intervals
from prereg.rp002a.stats.laws import LAW_NAMES, standardized_draws

__all__ = [
    "PROCEDURES",
    "CalibrationSettings",
    "ProcedureSummary",
    "RateSummary",
    "SimulationCell",
    "SimulationCellResult",
    "eligible_counts",
    "run_simulation_cell",
    "simulate_contrast_noise",
]

#: Procedure names, in record order: the primary (inflated) and the uninflated report.
PROCEDURES = ("inflated", "uninflated")
_BOUNDARIES = (
    # (name, kind claimed, truth in margins)
    ("false_benefit_at_minus_margin", BENEFIT, -1.0),
    ("false_equivalence_at_minus_margin", EQUIVALENCE, -1.0),
    ("false_equivalence_at_plus_margin", EQUIVALENCE, 1.0),
    ("zero_effect_equivalence", EQUIVALENCE, 0.0),
)


@dataclass(frozen=True)
class SimulationCell:
    """One calibration grid cell: replicates ``n``, law name, ``rho``, within fraction ``f``."""

    n: int
    law: str
    rho: float
    within_fraction: float

    def __post_init__(self) -> None:
        # Normalised types keep records and seed coordinates stable (0 and 0.0 alike).
        object.__setattr__(self, "n", check_int("n", self.n, 2))
        if self.law not in LAW_NAMES:
            raise StatsInputError(f"law must be one of {LAW_NAMES}, got {self.law!r}")
        object.__setattr__(self, "rho", check_fraction("rho", self.rho))
        object.__setattr__(
            self, "within_fraction", check_fraction("within_fraction", self.within_fraction)
        )


@dataclass(frozen=True)
class CalibrationSettings:
    """Plan parameters shared by every simulation cell (all from the plan; no defaults).

    trials: trials per cell; contrasts: family size ``K``; alpha: familywise level;
    primary_inflation / report_inflation: factor of the inflated / uninflated
    procedure; margin and decision_sd: the decision illustration; mc_alpha: one-sided
    level of the Clopper-Pearson bound (simultaneous across cells); width_quantiles:
    quantile levels reported for interval widths.
    """

    trials: int
    contrasts: int
    alpha: float
    primary_inflation: float
    report_inflation: float
    margin: float
    decision_sd: float
    mc_alpha: float
    width_quantiles: tuple[float, ...]

    def __post_init__(self) -> None:
        checked = {
            "trials": check_int("trials", self.trials, 1),
            "contrasts": check_int("contrasts", self.contrasts, 1),
            "alpha": check_probability("alpha", self.alpha),
            "primary_inflation": check_positive_real("primary_inflation", self.primary_inflation),
            "report_inflation": check_positive_real("report_inflation", self.report_inflation),
            "margin": check_positive_real("margin", self.margin),
            "decision_sd": check_positive_real("decision_sd", self.decision_sd),
            "mc_alpha": check_probability("mc_alpha", self.mc_alpha),
            "width_quantiles": tuple(
                check_fraction("width_quantiles[...]", q) for q in self.width_quantiles
            ),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)


@dataclass(frozen=True)
class RateSummary:
    """Counts, rates and Monte Carlo SEs of one event, per contrast and for "any of K"."""

    per_contrast_counts: tuple[int, ...]
    per_contrast_rates: tuple[float, ...]
    per_contrast_mc_se: tuple[float, ...]
    any_count: int
    any_rate: float
    any_mc_se: float


@dataclass(frozen=True)
class ProcedureSummary:
    """Retained figures of one interval procedure in one cell.

    Coverage failure = at least one of the K intervals misses the true mean;
    ``coverage_failure_cp_upper`` is its one-sided Clopper-Pearson upper bound at
    ``mc_alpha``. Widths (``2 * half_width``) are in standardized units (multiply
    by ``decision_sd`` for nats in the decision illustration).
    """

    inflation: float
    critical: float
    coverage_failures: int
    coverage_failure_rate: float
    coverage_failure_mc_se: float
    coverage_failure_cp_upper: float
    per_contrast_misses: tuple[int, ...]
    decisions: Mapping[str, RateSummary]
    width_mean: float
    width_quantiles: tuple[float, ...]
    analysis_failure_trials: int


@dataclass(frozen=True)
class SimulationCellResult:
    """Everything retained for one simulation cell.

    ``trial_diagnostics`` maps names to per-trial arrays (length ``trials``):
    ``max_abs_t`` (max over contrasts of ``|mean| / (sd / sqrt(n))``) and, per
    procedure ``p``, ``p/coverage_failure`` and ``p/any_<event>`` booleans.
    """

    cell: SimulationCell
    settings: CalibrationSettings
    procedures: Mapping[str, ProcedureSummary]
    trial_diagnostics: Mapping[str, np.ndarray]


def simulate_contrast_noise(
    rng: np.random.Generator,
    *,
    trials: int,
    n: int,
    contrasts: int,
    law: str,
    rho: float,
    within_fraction: float,
) -> np.ndarray:
    """Standardized replicate-level contrast noise, shape ``(trials, n, contrasts)``.

    See the module docstring for the model and the order of draws.

    Notes
    -----
    ``Var(noise_k) = rho + (1 - rho) = 1`` and ``Cov(noise_j, noise_k) = rho``
    for ``j != k``, because ``S`` and the ``I_k`` are independent with unit variance.
    """
    check_generator("rng", rng)
    trials = check_int("trials", trials, 1)
    n = check_int("n", n, 1)
    contrasts = check_int("contrasts", contrasts, 1)
    rho = check_fraction("rho", rho)
    f = check_fraction("within_fraction", within_fraction)
    if law not in LAW_NAMES:
        raise StatsInputError(f"law must be one of {LAW_NAMES}, got {law!r}")
    shape = (trials, n, contrasts + 1)
    if f < 1.0:
        components = standardized_draws(law, rng, shape)
        if f > 0.0:
            components *= np.sqrt(1.0 - f)
    if f > 0.0:
        episode_limit = rng.standard_normal(shape)
        if f < 1.0:
            episode_limit *= np.sqrt(f)
            components += episode_limit
        else:
            components = episode_limit
    if rho == 0.0:
        return components[:, :, 1:]
    noise = components[:, :, 1:]  # a view: combined in place to spare a copy
    noise *= np.sqrt(1.0 - rho)
    noise += np.sqrt(rho) * components[:, :, :1]
    return noise


def _rates(flags: np.ndarray, trials: int) -> RateSummary:
    counts = flags.sum(axis=0)
    any_count = int(flags.any(axis=1).sum())
    rates = counts / trials
    return RateSummary(
        per_contrast_counts=tuple(int(c) for c in counts),
        per_contrast_rates=tuple(float(r) for r in rates),
        per_contrast_mc_se=tuple(float(s) for s in binomial_mc_standard_error(rates, trials)),
        any_count=any_count,
        any_rate=any_count / trials,
        any_mc_se=float(binomial_mc_standard_error(any_count / trials, trials)),
    )


def _summarise_procedure(
    means: np.ndarray,
    sds: np.ndarray,
    n: int,
    inflation: float,
    settings: CalibrationSettings,
) -> tuple[ProcedureSummary, dict[str, np.ndarray]]:
    trials = settings.trials
    family = {
        "alpha": settings.alpha,
        "family_size": settings.contrasts,
        "inflation": inflation,
    }
    standard = replicate_mean_t_intervals(means, sds, n=n, **family)
    misses = (standard.low > 0.0) | (standard.high < 0.0)
    failures = misses.any(axis=1)
    failure_count = int(failures.sum())
    flags: dict[str, np.ndarray] = {"coverage_failure": failures}
    decisions: dict[str, RateSummary] = {}
    for name, kind, truth in _BOUNDARIES:
        shifted = replicate_mean_t_intervals(
            truth * settings.margin + settings.decision_sd * means,
            settings.decision_sd * sds,
            n=n,
            **family,
        )
        verdicts = contrast_verdicts(shifted, kinds=kind, margin=settings.margin)
        claimed = verdicts == (BENEFIT_CODE if kind == BENEFIT else EQUIVALENCE_CODE)
        decisions[name] = _rates(claimed, trials)
        flags[f"any_{name}"] = claimed.any(axis=1)
    widths = 2.0 * standard.half_width
    quantiles = np.quantile(widths, settings.width_quantiles) if settings.width_quantiles else []
    summary = ProcedureSummary(
        inflation=inflation,
        critical=standard.critical,
        coverage_failures=failure_count,
        coverage_failure_rate=failure_count / trials,
        coverage_failure_mc_se=float(binomial_mc_standard_error(failure_count / trials, trials)),
        coverage_failure_cp_upper=clopper_pearson_upper(failure_count, trials, settings.mc_alpha),
        per_contrast_misses=tuple(int(c) for c in misses.sum(axis=0)),
        decisions=decisions,
        width_mean=float(widths.mean()),
        width_quantiles=tuple(float(q) for q in quantiles),
        analysis_failure_trials=int((sds == 0).any(axis=1).sum()),
    )
    return summary, flags


def run_simulation_cell(
    cell: SimulationCell, settings: CalibrationSettings, rng: np.random.Generator
) -> SimulationCellResult:
    """Simulate one calibration cell and retain its figures and per-trial diagnostics.

    Parameters
    ----------
    cell : SimulationCell
    settings : CalibrationSettings
    rng : numpy.random.Generator
        A fresh generator for this cell (e.g. ``calibration-1.0`` namespace and the
        cell's coordinates); consumed only by :func:`simulate_contrast_noise`.

    Returns
    -------
    SimulationCellResult
        Deterministic given the generator's state.

    Notes
    -----
    Intervals: :func:`prereg.rp002a.stats.intervals.replicate_mean_t_intervals`; verdicts:
    :func:`prereg.rp002a.stats.decisions.contrast_verdicts`; Clopper-Pearson bound:
    :func:`prereg.rp002a.stats.binomial.clopper_pearson_upper`.
    """
    noise = simulate_contrast_noise(
        rng,
        trials=settings.trials,
        n=cell.n,
        contrasts=settings.contrasts,
        law=cell.law,
        rho=cell.rho,
        within_fraction=cell.within_fraction,
    )
    means = noise.mean(axis=1)
    sds = noise.std(axis=1, ddof=1)
    del noise
    with np.errstate(divide="ignore", invalid="ignore"):
        abs_t = np.abs(means) / (sds / np.sqrt(cell.n))
    diagnostics: dict[str, np.ndarray] = {"max_abs_t": abs_t.max(axis=1)}
    procedures: dict[str, ProcedureSummary] = {}
    inflations = (settings.primary_inflation, settings.report_inflation)
    for name, inflation in zip(PROCEDURES, inflations):
        summary, flags = _summarise_procedure(means, sds, cell.n, inflation, settings)
        procedures[name] = summary
        diagnostics.update({f"{name}/{key}": value for key, value in flags.items()})
    return SimulationCellResult(
        cell=cell, settings=settings, procedures=procedures, trial_diagnostics=diagnostics
    )


def eligible_counts(
    results: Iterable[SimulationCellResult],
    *,
    candidates: Sequence[int],
    minimum_count: int,
    threshold: float,
) -> dict[int, bool]:
    """Calibration eligibility of each candidate count.

    Parameters
    ----------
    results : iterable of SimulationCellResult
        Every predeclared simulation cell (the whole grid).
    candidates : sequence of int
        Candidate counts (RP002A: 20, 30, 50).
    minimum_count : int
        Smallest eligible count (RP002A: 20).
    threshold : float in (0, 1)
        Largest admissible Clopper-Pearson upper coverage-failure bound (RP002A: .05).

    Returns
    -------
    dict int -> bool
        ``True`` iff ``n >= minimum_count`` and every cell at ``n`` has an inflated
        (primary) ``coverage_failure_cp_upper <= threshold``.

    Notes
    -----
    A candidate without any cell in ``results`` is an error (the grid must
    cover every candidate), as are two results for one cell.
    """
    by_count: dict[int, list[float]] = {}
    seen: set[SimulationCell] = set()
    for result in results:
        if result.cell in seen:
            raise StatsInputError(f"results hold cell {result.cell} twice; pass each cell once")
        seen.add(result.cell)
        bound = result.procedures[PROCEDURES[0]].coverage_failure_cp_upper
        by_count.setdefault(result.cell.n, []).append(bound)
    return eligibility_from_bounds(
        by_count, candidates=candidates, minimum_count=minimum_count, threshold=threshold
    )


def eligibility_from_bounds(
    bounds_by_count: Mapping[int, Sequence[float]],
    *,
    candidates: Sequence[int],
    minimum_count: int,
    threshold: float,
) -> dict[int, bool]:
    """The eligibility rule on the primary procedure's CP upper bounds, grouped by n.

    ``True`` iff ``n >= minimum_count`` and every bound at ``n`` is ``<= threshold``
    (RP002A: "A count is eligible only if n>=20 and every predeclared cell at that n has
    a Clopper-Pearson upper coverage-failure bound <=.05"). Used by
    :func:`eligible_counts` and by the stage summary, which holds saved records.
    """
    minimum_count = check_int("minimum_count", minimum_count, 2)
    threshold = check_probability("threshold", threshold)
    by_count = bounds_by_count
    out: dict[int, bool] = {}
    for count in candidates:
        count = check_int("candidates[...]", count, 2)
        if count not in by_count:
            raise StatsInputError(
                f"no simulation cell has n={count}; the grid must cover every candidate count"
            )
        out[count] = count >= minimum_count and all(b <= threshold for b in by_count[count])
    return out
