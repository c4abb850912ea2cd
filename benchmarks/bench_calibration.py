"""Time the RP002A calibration stage's statistics serially (a script, not a test).

Runs the 90 simulation cells and the 18 bootstrap benchmark cells with the
protocol's sizes, prints seconds per cell and in total, and the speed ratio of
the vectorised simulation cell against a plain per-trial Python loop (timed on a
few hundred trials of one cell and extrapolated). Generators come from the
``bench-calibration`` namespace, never from ``calibration-1.0``.

Usage: ``.venv/bin/python benchmarks/bench_calibration.py [--loop-trials 300]``
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np

from prereg.base.seeds import numpy_generator
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
)
from prereg.rp002a.stats.decisions import contrast_verdict
from prereg.rp002a.stats.intervals import replicate_mean_t_interval

# A mirror of the plan's values for this benchmark only; research stages read the plan.
SETTINGS = CalibrationSettings(
    trials=20_000,
    contrasts=7,
    alpha=0.05,
    primary_inflation=2.0,
    report_inflation=1.0,
    margin=0.01,
    decision_sd=0.01,
    mc_alpha=0.05 / 90,
    width_quantiles=(0.05, 0.5, 0.95),
)
GRID = {
    "n": (5, 10, 20, 30, 50),
    "law": ("normal", "gamma2", "t5"),
    "rho": (0.0, 0.5),
    "within_fraction": (0.0, 0.5, 1.0),
}
BOOT = BootstrapSettings(trials=100, draws=2000, episodes=8, contrasts=7, alpha=0.05)
BOOT_GRID = {"n": (5, 20, 50), "law": ("normal", "gamma2", "t5"), "within_fraction": (0.0, 1.0)}
NAMESPACE = "bench-calibration"


def plain_loop_cell(
    cell: SimulationCell, settings: CalibrationSettings, trials: int, rng: np.random.Generator
) -> int:
    """The per-trial Python loop the vectorised cell replaces (same figures, a trial at a time)."""
    failures = 0
    for _ in range(trials):
        noise = simulate_contrast_noise(
            rng,
            trials=1,
            n=cell.n,
            contrasts=settings.contrasts,
            law=cell.law,
            rho=cell.rho,
            within_fraction=cell.within_fraction,
        )[0]
        for inflation in (settings.primary_inflation, settings.report_inflation):
            family = {
                "alpha": settings.alpha,
                "family_size": settings.contrasts,
                "inflation": inflation,
            }
            missed = False
            for k in range(settings.contrasts):
                z = noise[:, k]
                interval = replicate_mean_t_interval(z, **family)
                missed |= not (interval.low <= 0.0 <= interval.high)
                for truth, kind in (
                    (-1, "benefit"),
                    (-1, "equivalence"),
                    (1, "equivalence"),
                    (0, "equivalence"),
                ):
                    shifted = replicate_mean_t_interval(
                        truth * settings.margin + settings.decision_sd * z, **family
                    )
                    contrast_verdict(shifted, kind=kind, margin=settings.margin)
            failures += missed
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--loop-trials",
        type=int,
        default=300,
        help="trials timed for the plain-loop reference (default 300)",
    )
    args = parser.parse_args()
    stage_start = time.perf_counter()

    print(f"simulation cells: {SETTINGS.trials} trials each")
    results = []
    sim_total = 0.0
    for n, law, rho, f in itertools.product(*GRID.values()):
        cell = SimulationCell(n=n, law=law, rho=rho, within_fraction=f)
        start = time.perf_counter()
        result = run_simulation_cell(
            cell, SETTINGS, numpy_generator(NAMESPACE, "sim", n, law, rho, f)
        )
        elapsed = time.perf_counter() - start
        sim_total += elapsed
        results.append(result)
        inflated = result.procedures["inflated"]
        print(
            f"  n={n:>2} {law:<6} rho={rho:<3} f={f:<3} {elapsed:6.3f} s  "
            f"inflated fail={inflated.coverage_failure_rate:.4f} "
            f"(CP upper {inflated.coverage_failure_cp_upper:.4f})  "
            f"uninflated fail={result.procedures['uninflated'].coverage_failure_rate:.4f}"
        )
    print(f"simulation total {sim_total:.2f} s, mean {sim_total / len(results):.3f} s per cell")
    print(
        "eligibility:",
        eligible_counts(results, candidates=(20, 30, 50), minimum_count=20, threshold=0.05),
    )

    print(f"bootstrap cells: {BOOT.trials} trials, {BOOT.draws} draws, {BOOT.episodes} episodes")
    boot_total = 0.0
    for n, law, f in itertools.product(*BOOT_GRID.values()):
        cell = BootstrapCell(n=n, law=law, within_fraction=f)
        start = time.perf_counter()
        result = run_bootstrap_cell(cell, BOOT, numpy_generator(NAMESPACE, "boot", n, law, f))
        elapsed = time.perf_counter() - start
        boot_total += elapsed
        figures = "  ".join(
            f"{m}: fail={s.coverage_failure_rate:.2f} width={s.width_mean:.3f} "
            f"cpu={result.cpu_seconds[m]:.2f}s"
            for m, s in result.methods.items()
        )
        print(f"  n={n:>2} {law:<6} f={f:<3} {elapsed:6.3f} s  {figures}")
    print(f"bootstrap total {boot_total:.2f} s, mean {boot_total / 18:.3f} s per cell")

    worst = SimulationCell(n=50, law="t5", rho=0.5, within_fraction=0.5)
    start = time.perf_counter()
    plain_loop_cell(worst, SETTINGS, args.loop_trials, numpy_generator(NAMESPACE, "loop"))
    loop_per_trial = (time.perf_counter() - start) / args.loop_trials
    start = time.perf_counter()
    run_simulation_cell(worst, SETTINGS, numpy_generator(NAMESPACE, "vector"))
    vector_cell = time.perf_counter() - start
    loop_cell = loop_per_trial * SETTINGS.trials
    print(
        f"plain loop ({args.loop_trials} trials timed, cell {worst}): "
        f"{loop_cell:.1f} s extrapolated vs vectorised {vector_cell:.3f} s: "
        f"{loop_cell / vector_cell:.0f}x"
    )
    print(
        f"stage total (simulation + bootstrap) {sim_total + boot_total:.2f} s; "
        f"script wall time {time.perf_counter() - stage_start:.2f} s"
    )


if __name__ == "__main__":
    main()
