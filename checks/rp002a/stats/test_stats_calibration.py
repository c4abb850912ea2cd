"""Calibration cells: reproducibility, the noise model, coverage, plain-loop agreement."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from prereg.rp002a.stats._validation import StatsInputError
from prereg.rp002a.stats.calibration import (
    CalibrationSettings,
    SimulationCell,
    eligible_counts,
    run_simulation_cell,
    simulate_contrast_noise,
)
from prereg.rp002a.stats.calibration_bootstrap import (
    BootstrapCell,
    BootstrapSettings,
    run_bootstrap_cell,
    simulate_episode_values,
)
from prereg.rp002a.stats.decisions import contrast_verdict
from prereg.rp002a.stats.intervals import replicate_mean_t_interval
from prereg.rp002a.stats.laws import LAW_NAMES, standardized_draws
from prereg.rp002a.stats.records import replay_differences, to_record, trial_arrays

pytestmark = pytest.mark.software


def small_settings(trials: int = 400) -> CalibrationSettings:
    # RP002A values except the trial count (the plan's is 20,000).
    return CalibrationSettings(
        trials=trials,
        contrasts=7,
        alpha=0.05,
        primary_inflation=2.0,
        report_inflation=1.0,
        margin=0.01,
        decision_sd=0.01,
        mc_alpha=0.05 / 90,
        width_quantiles=(0.05, 0.5, 0.95),
    )


@pytest.mark.parametrize("law", LAW_NAMES)
def test_laws_are_centred_with_unit_variance(law):
    x = standardized_draws(law, np.random.default_rng(5), (400_000,))
    # Generous: 6 Monte Carlo SEs for the t5 variance (kurtosis 9) is about .03.
    assert abs(x.mean()) < 0.01
    assert abs(x.var() - 1.0) < 0.04


@pytest.mark.parametrize("law", LAW_NAMES)
@pytest.mark.parametrize("rho", [0.0, 0.5])
@pytest.mark.parametrize("f", [0.0, 0.5, 1.0])
def test_noise_has_unit_variance_and_rho_correlation(law, rho, f):
    noise = simulate_contrast_noise(
        np.random.default_rng(17),
        trials=4000,
        n=5,
        contrasts=7,
        law=law,
        rho=rho,
        within_fraction=f,
    )
    assert noise.shape == (4000, 5, 7)
    flat = noise.reshape(-1, 7)
    cov = np.cov(flat, rowvar=False)
    # 20,000 rows per contrast. A sample variance under t5 (kurtosis 9) has an SE of
    # about sqrt(8 / 20000) = .02 per contrast and .008 pooled over the 7 contrasts;
    # tolerances are about 4-5 SEs of the pooled and 5 of the per-contrast figures.
    assert np.abs(flat.mean(axis=0)).max() < 0.03
    assert abs(np.diag(cov).mean() - 1.0) < 0.04
    assert np.abs(np.diag(cov) - 1.0).max() < 0.1
    off = cov[~np.eye(7, dtype=bool)]
    assert abs(off.mean() - rho) < 0.03
    assert np.abs(off - rho).max() < 0.08


def test_same_generator_same_results_and_replay():
    cell = SimulationCell(n=5, law="gamma2", rho=0.5, within_fraction=0.5)
    a = run_simulation_cell(cell, small_settings(), np.random.default_rng(1))
    b = run_simulation_cell(cell, small_settings(), np.random.default_rng(1))
    assert json.dumps(to_record(a)) == json.dumps(to_record(b))
    for key, value in trial_arrays(a).items():
        assert value.tobytes() == trial_arrays(b)[key].tobytes()
    c = run_simulation_cell(cell, small_settings(), np.random.default_rng(2))
    assert to_record(c) != to_record(a)
    record = json.loads(json.dumps(to_record(a)))
    assert replay_differences(record, trial_arrays(a), np.random.default_rng(1)) == []
    assert replay_differences(record, trial_arrays(a), np.random.default_rng(2)) != []
    tampered = trial_arrays(a)
    tampered["max_abs_t"] = tampered["max_abs_t"] + 1e-12
    assert replay_differences(record, tampered, np.random.default_rng(1)) == [
        "trial array 'max_abs_t' differs on replay"
    ]


def test_uninflated_coverage_near_nominal_under_normal_law():
    # Independent contrasts, normal law: exact t intervals, so the simultaneous failure
    # probability is 1 - (1 - .05/7)^7 = .04889 (Bonferroni, independence).
    settings = small_settings(trials=8000)
    cell = SimulationCell(n=10, law="normal", rho=0.0, within_fraction=0.0)
    result = run_simulation_cell(cell, settings, np.random.default_rng(2026))
    nominal = 1 - (1 - 0.05 / 7) ** 7
    uninflated = result.procedures["uninflated"]
    se = np.sqrt(nominal * (1 - nominal) / settings.trials)
    assert abs(uninflated.coverage_failure_rate - nominal) < 5 * se
    per_contrast = np.array(uninflated.per_contrast_misses) / settings.trials
    assert np.all(np.abs(per_contrast - 0.05 / 7) < 0.006)
    inflated = result.procedures["inflated"]
    assert inflated.coverage_failure_rate < 0.005
    assert inflated.coverage_failure_cp_upper < 0.05


def test_cell_figures_match_a_plain_per_trial_loop():
    settings = small_settings(trials=300)
    cell = SimulationCell(n=6, law="t5", rho=0.5, within_fraction=0.5)
    result = run_simulation_cell(cell, settings, np.random.default_rng(8))
    noise = simulate_contrast_noise(
        np.random.default_rng(8),
        trials=300,
        n=6,
        contrasts=7,
        law="t5",
        rho=0.5,
        within_fraction=0.5,
    )
    for name, inflation in (("inflated", 2.0), ("uninflated", 1.0)):
        failures = 0
        false_benefit = np.zeros(7, dtype=int)
        false_equiv_minus = 0
        zero_equiv = np.zeros(7, dtype=int)
        for trial in noise:
            missed = False
            any_equiv_minus = False
            for k in range(7):
                z = trial[:, k]
                iv = replicate_mean_t_interval(z, alpha=0.05, family_size=7, inflation=inflation)
                missed |= not (iv.low <= 0.0 <= iv.high)
                at_minus = replicate_mean_t_interval(
                    -0.01 + 0.01 * z, alpha=0.05, family_size=7, inflation=inflation
                )
                at_zero = replicate_mean_t_interval(
                    0.01 * z, alpha=0.05, family_size=7, inflation=inflation
                )
                false_benefit[k] += (
                    contrast_verdict(at_minus, kind="benefit", margin=0.01) == "benefit"
                )
                any_equiv_minus |= (
                    contrast_verdict(at_minus, kind="equivalence", margin=0.01) == "equivalence"
                )
                zero_equiv[k] += (
                    contrast_verdict(at_zero, kind="equivalence", margin=0.01) == "equivalence"
                )
            failures += missed
            false_equiv_minus += any_equiv_minus
        summary = result.procedures[name]
        assert summary.coverage_failures == failures
        decisions = summary.decisions
        assert decisions["false_benefit_at_minus_margin"].per_contrast_counts == tuple(
            false_benefit
        )
        assert decisions["false_equivalence_at_minus_margin"].any_count == false_equiv_minus
        assert decisions["zero_effect_equivalence"].per_contrast_counts == tuple(zero_equiv)
    # The inflated procedure never fails where the uninflated one covers.
    inflated = result.trial_diagnostics["inflated/coverage_failure"]
    uninflated = result.trial_diagnostics["uninflated/coverage_failure"]
    assert not np.any(inflated & ~uninflated)


def test_coverage_failures_fall_with_inflation_and_alpha():
    cell = SimulationCell(n=5, law="t5", rho=0.0, within_fraction=0.0)
    loose = run_simulation_cell(cell, small_settings(2000), np.random.default_rng(4))
    strict = run_simulation_cell(
        cell, dataclasses.replace(small_settings(2000), alpha=0.01), np.random.default_rng(4)
    )
    for name in ("inflated", "uninflated"):
        assert strict.procedures[name].coverage_failures <= loose.procedures[name].coverage_failures
    assert (
        loose.procedures["inflated"].coverage_failures
        <= loose.procedures["uninflated"].coverage_failures
    )
    assert loose.procedures["inflated"].width_mean == pytest.approx(
        2 * loose.procedures["uninflated"].width_mean
    )


def with_bound(cell: SimulationCell, bound: float, template):
    inflated = dataclasses.replace(template.procedures["inflated"], coverage_failure_cp_upper=bound)
    return dataclasses.replace(
        template, cell=cell, procedures={**template.procedures, "inflated": inflated}
    )


def test_eligibility_rule():
    template = run_simulation_cell(
        SimulationCell(5, "normal", 0.0, 0.0), small_settings(50), np.random.default_rng(0)
    )
    cells = [
        with_bound(SimulationCell(10, "normal", 0.0, 0.0), 0.001, template),
        with_bound(SimulationCell(20, "normal", 0.0, 0.0), 0.05, template),  # equal: eligible
        with_bound(SimulationCell(20, "t5", 0.0, 0.0), 0.01, template),
        with_bound(SimulationCell(30, "normal", 0.0, 0.0), 0.01, template),
        with_bound(SimulationCell(30, "t5", 0.5, 1.0), 0.0501, template),  # one bad cell
        with_bound(SimulationCell(50, "gamma2", 0.0, 0.0), 0.0, template),
    ]
    got = eligible_counts(cells, candidates=(10, 20, 30, 50), minimum_count=20, threshold=0.05)
    assert got == {10: False, 20: True, 30: False, 50: True}
    with pytest.raises(StatsInputError, match="n=40"):
        eligible_counts(cells, candidates=(40,), minimum_count=20, threshold=0.05)
    with pytest.raises(StatsInputError, match="twice"):
        eligible_counts(cells + cells[:1], candidates=(20,), minimum_count=20, threshold=0.05)


def test_episode_values_have_unit_variance_replicate_means():
    for law in LAW_NAMES:
        for f in (0.0, 0.5, 1.0):
            x = simulate_episode_values(
                np.random.default_rng(3),
                trials=2000,
                n=5,
                episodes=8,
                contrasts=7,
                law=law,
                within_fraction=f,
            )
            means = x.mean(axis=-1)
            assert abs(means.var() - 1.0) < 0.05
            within = x.var(axis=-1, ddof=1).mean()  # E[episode variance] = 8 f
            assert within == pytest.approx(8 * f, abs=0.25)


def test_bootstrap_cell_reproducible_except_cpu_time():
    settings = BootstrapSettings(trials=4, draws=60, episodes=8, contrasts=7, alpha=0.05)
    cell = BootstrapCell(n=5, law="gamma2", within_fraction=1.0)
    a = run_bootstrap_cell(cell, settings, np.random.default_rng(12))
    b = run_bootstrap_cell(cell, settings, np.random.default_rng(12))
    ra, rb = to_record(a), to_record(b)
    assert set(ra["non_reproducible"]["cpu_seconds"]) == {"nested", "whole_cluster"}
    ra.pop("non_reproducible"), rb.pop("non_reproducible")
    assert ra == rb
    record = json.loads(json.dumps(to_record(a)))
    assert replay_differences(record, trial_arrays(a), np.random.default_rng(12)) == []
    assert 0 <= a.methods["nested"].coverage_failures <= 4


def test_record_has_plain_json_types_and_no_nan():
    settings = small_settings(20)
    result = run_simulation_cell(
        SimulationCell(5, "normal", 0.5, 1.0), settings, np.random.default_rng(0)
    )
    text = json.dumps(to_record(result), allow_nan=False)
    assert json.loads(text)["cell"] == {"n": 5, "law": "normal", "rho": 0.5, "within_fraction": 1.0}


def test_cells_normalise_types():
    # rho=0 and rho=0.0 must give one record (and one seed coordinate string).
    assert SimulationCell(5, "normal", 0, 1) == SimulationCell(5, "normal", 0.0, 1.0)
    assert repr(SimulationCell(5, "normal", 0, 1).rho) == "0.0"
    assert BootstrapCell(5, "normal", 1).within_fraction == 1.0


def test_bad_cells_raise():
    with pytest.raises(StatsInputError, match="law"):
        SimulationCell(5, "cauchy", 0.0, 0.0)
    with pytest.raises(StatsInputError, match="rho"):
        SimulationCell(5, "normal", 1.5, 0.0)
    with pytest.raises(StatsInputError, match="n must be"):
        BootstrapCell(1, "normal", 0.0)
