"""RP002A stage 1, ``calibration``: synthetic stress tests of the interval procedures.

One item per cell: 90 simulation cells (n x law x rho x within-mean fraction) and 18
bootstrap-benchmark cells, all read from the plan. Each simulation cell writes
``figures.json`` (every retained figure, :func:`prereg.rp002a.stats.records.to_record`) and
``trials.npz`` (per-trial diagnostics); a benchmark cell also writes
``cpu.timing.json``, its CPU seconds, the one non-reproducible figure (``*.timing.json``
files are excluded from byte comparisons and replay). The complete-stage summary holds
the eligibility table by n and the benchmark table with the protocol's caveats.

Data model of a simulation trial (the plan's ``calibration`` description says the same):
per replicate each of the seven contrasts is effect + noise, noise = sqrt(rho) S +
sqrt(1 - rho) I_k, where S (shared) and every I_k are sqrt(1 - f) L + sqrt(f) N, L from
the centred unit-variance law and N standard normal (the limit of averaging over
assessment episodes).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from prereg.api import (
    RunFolder,
    RunView,
    StageKind,
    canonical_json,
    coordinate_key,
    derivation,
    numpy_generator,
    read_json,
    write_json,
)
from prereg.api import arrays as npz
from prereg.rp002a.settings import (
    CALIBRATION_PARAMETERS,
    CalibrationPlan,
    parse_calibration,
    renderer,
)
from prereg.rp002a.stats.calibration import (
    CalibrationSettings,
    SimulationCell,
    eligibility_from_bounds,
    run_simulation_cell,
)
from prereg.rp002a.stats.calibration_bootstrap import (
    BootstrapCell,
    BootstrapSettings,
    run_bootstrap_cell,
)
from prereg.rp002a.stats.records import replay_differences, to_record, trial_arrays

STAGE = "calibration"
FIGURES = "figures.json"
TRIALS = "trials.npz"
TIMING = "cpu.timing.json"
SUMMARY = "calibration_summary.json"
SUMMARY_TIMING = "benchmark_cpu.timing.json"
SUMMARY_TEXT = "SUMMARY.md"
SIMULATION, BOOTSTRAP = "simulation", "bootstrap"  # the ``design`` coordinate of an item

PARAMETERS = CALIBRATION_PARAMETERS  # the stage's schema (prereg.rp002a.settings)


def settings_of(plan: dict, stage: str = STAGE) -> CalibrationPlan:
    """The calibration's typed settings (:func:`prereg.rp002a.settings.parse_calibration`)."""
    return parse_calibration(plan, stage)


def simulation_cells(settings: CalibrationPlan) -> list[SimulationCell]:
    sim = settings.simulation
    return [
        SimulationCell(n=n, law=law, rho=rho, within_fraction=f)
        for n in sim.n
        for law in sim.laws
        for rho in sim.rho
        for f in sim.within_fraction
    ]


def bootstrap_cells(settings: CalibrationPlan) -> list[BootstrapCell]:
    bench = settings.bootstrap
    return [
        BootstrapCell(n=n, law=law, within_fraction=f)
        for n in bench.n
        for law in bench.laws
        for f in bench.within_fraction
    ]


def simulation_id(cell: SimulationCell) -> str:
    return f"n{cell.n}-{cell.law}-rho{cell.rho:g}-f{cell.within_fraction:g}"


def bootstrap_id(cell: BootstrapCell) -> str:
    return f"n{cell.n}-{cell.law}-f{cell.within_fraction:g}"


def simulation_coords(cell: SimulationCell) -> tuple:
    return (SIMULATION, cell.n, cell.law, f"{cell.rho:g}", f"{cell.within_fraction:g}")


def bootstrap_coords(cell: BootstrapCell) -> tuple:
    return (BOOTSTRAP, cell.n, cell.law, f"{cell.within_fraction:g}")


def seed_coords(cell: SimulationCell | BootstrapCell) -> tuple:
    """What the item of ``cell`` seeds from (``StageKind.seed_coords``)."""
    return simulation_coords(cell) if isinstance(cell, SimulationCell) else bootstrap_coords(cell)


def cell_coordinates(cell: SimulationCell | BootstrapCell) -> dict:
    """What an item records with ``research.coords``: its design and the cell's fields."""
    design = SIMULATION if isinstance(cell, SimulationCell) else BOOTSTRAP
    return {"design": design, **cell.__dict__}


_CELL_TYPES = {SIMULATION: SimulationCell, BOOTSTRAP: BootstrapCell}


def item_key(coords: Mapping[str, Any]) -> str:
    """``design:field=value,...``: the design names the cell type, whose fields are exact.

    A simulation cell records n, law, rho and within_fraction; a bootstrap cell records
    no rho. Other or missing fields, or another design, name no cell (``ValueError``).
    """
    fields = dict(coords)
    design = fields.pop("design", None)
    cell_type = _CELL_TYPES.get(design)
    if cell_type is None:
        raise ValueError(f"design {design!r} is neither {SIMULATION!r} nor {BOOTSTRAP!r}")
    wanted = set(cell_type.__dataclass_fields__)
    if set(fields) != wanted:
        raise ValueError(f"a {design} cell records {sorted(wanted)}, not {sorted(fields)}")
    return f"{design}:{coordinate_key(fields)}"


def cell_key(cell: SimulationCell | BootstrapCell) -> str:
    return item_key(cell_coordinates(cell))


def simulation_settings(settings: CalibrationPlan) -> CalibrationSettings:
    decision, sim, bound = settings.decision, settings.simulation, settings.bound
    return CalibrationSettings(
        trials=sim.trials,
        contrasts=decision.family_size,
        alpha=decision.familywise_alpha,
        primary_inflation=decision.primary_inflation,
        report_inflation=decision.report_inflation,
        margin=decision.margin_nats,
        decision_sd=sim.decision_sd,
        mc_alpha=bound.familywise_alpha / bound.statements,
        width_quantiles=sim.width_quantiles,
    )


def bootstrap_settings(settings: CalibrationPlan) -> BootstrapSettings:
    decision, bench = settings.decision, settings.bootstrap
    return BootstrapSettings(
        trials=bench.trials,
        draws=bench.draws,
        episodes=bench.episodes,
        contrasts=decision.family_size,
        alpha=decision.familywise_alpha,
    )


# -- items ------------------------------------------------------------------------------


def run_simulation_item(
    settings: CalibrationPlan, cell: SimulationCell, rng, outputs: Path
) -> dict:
    result = run_simulation_cell(cell, simulation_settings(settings), rng)
    record = to_record(result)
    write_json(outputs / FIGURES, record)
    npz.save_npz(outputs / TRIALS, trial_arrays(result))
    return record


def run_bootstrap_item(settings: CalibrationPlan, cell: BootstrapCell, rng, outputs: Path) -> dict:
    result = run_bootstrap_cell(cell, bootstrap_settings(settings), rng)
    record = to_record(result)
    write_json(outputs / TIMING, record.pop("non_reproducible"))
    write_json(outputs / FIGURES, record)
    npz.save_npz(outputs / TRIALS, trial_arrays(result))
    return record


# -- summary ------------------------------------------------------------------------------


def eligibility_table(settings: CalibrationPlan, records: list[dict]) -> list[dict]:
    """Per n: cells, the largest inflated CP upper bound, and eligibility (protocol's rule)."""
    rule = settings.eligibility
    counts = list(settings.simulation.n)
    bounds = {
        n: [
            r["figures"]["inflated"]["coverage_failure_cp_upper"]
            for r in records
            if r["cell"]["n"] == n
        ]
        for n in counts
    }
    eligible = eligibility_from_bounds(
        bounds,
        candidates=counts,
        minimum_count=rule.minimum_n,
        threshold=rule.max_coverage_failure_upper,
    )
    return [
        {
            "n": n,
            "cells": len(bounds[n]),
            "max_cp_upper_inflated": max(bounds[n]),
            "all_cells_within_threshold": max(bounds[n]) <= rule.max_coverage_failure_upper,
            "eligible": eligible[n],
        }
        for n in counts
    ]


def build_summary(
    settings: CalibrationPlan, sim_records: list[dict], boot_records: list[dict]
) -> dict:
    bound = settings.bound
    table = eligibility_table(settings, sim_records)
    cells = []
    for r in sim_records:
        infl, unin = r["figures"]["inflated"], r["figures"]["uninflated"]
        cells.append(
            {
                "cell": r["cell"],
                "inflated_coverage_failure_rate": infl["coverage_failure_rate"],
                "inflated_coverage_failure_mc_se": infl["coverage_failure_mc_se"],
                "inflated_coverage_failure_cp_upper": infl["coverage_failure_cp_upper"],
                "uninflated_coverage_failure_rate": unin["coverage_failure_rate"],
                "uninflated_coverage_failure_cp_upper": unin["coverage_failure_cp_upper"],
                "decisions_inflated_any_of_family": {
                    k: v["any_rate"] for k, v in infl["decisions"].items()
                },
                "width_mean_inflated": infl["width_mean"],
                "width_mean_uninflated": unin["width_mean"],
            }
        )
    benchmark = [{"cell": r["cell"], "methods": r["figures"]} for r in boot_records]
    return {
        "stage": "calibration",
        "plan_id": settings.plan_id,
        "eligibility_rule": {
            **settings.eligibility.record(),
            "bound": bound.record(),
            "bound_level": bound.familywise_alpha / bound.statements,
        },
        "eligibility_by_n": table,
        "eligible_counts": [row["n"] for row in table if row["eligible"]],
        "simulation_cells": cells,
        "bootstrap_benchmark": benchmark,
        "bootstrap_caveat": settings.bootstrap.caveat,
        "scope": settings.decision.limitations,
    }


def expected_cells(settings: CalibrationPlan) -> dict[str, SimulationCell | BootstrapCell]:
    """Item key -> cell, in the plan's order: every simulation cell, then every benchmark cell."""
    return {cell_key(c): c for c in [*simulation_cells(settings), *bootstrap_cells(settings)]}


def _records(view: RunView) -> tuple[list[dict], list[dict], list[dict]]:
    """The items' figures in the plan's cell order, paired by recorded coordinates."""
    expected = expected_cells(view.settings)
    order = {key: i for i, key in enumerate(expected)}
    pairs, _ = view.match(expected)
    sims, boots, timings = [], [], []
    for _, item, cell in sorted(pairs, key=lambda pair: order[pair[0]]):
        record = view.load_item_json(item, FIGURES)
        if isinstance(cell, SimulationCell):
            sims.append(record)
        else:
            boots.append(record)
            timings.append(
                {
                    "cell": record["cell"],
                    "cpu_seconds": view.load_item_json(item, TIMING)["cpu_seconds"],
                }
            )
    return sims, boots, timings


def _summary_text(summary: dict) -> str:
    lines = [
        f"# Calibration summary ({summary['plan_id']})",
        "",
        "## Eligibility by n",
        "",
        "| n | cells | max CP upper (inflated) | eligible |",
        "|---:|---:|---:|---|",
    ]
    for row in summary["eligibility_by_n"]:
        lines.append(
            f"| {row['n']} | {row['cells']} | {row['max_cp_upper_inflated']:.5f} | "
            f"{'yes' if row['eligible'] else 'no'} |"
        )
    lines += [
        "",
        f"Eligible counts: {summary['eligible_counts'] or 'none'}",
        "",
        "## Bootstrap benchmark (coverage failure rate, mean width)",
        "",
        "| n | law | f | nested | whole-cluster |",
        "|---:|---|---:|---|---|",
    ]
    for row in summary["bootstrap_benchmark"]:
        c, m = row["cell"], row["methods"]
        lines.append(
            f"| {c['n']} | {c['law']} | {c['within_fraction']:g} | "
            f"{m['nested']['coverage_failure_rate']:.3f}, {m['nested']['width_mean']:.3f} | "
            f"{m['whole_cluster']['coverage_failure_rate']:.3f}, {m['whole_cluster']['width_mean']:.3f} |"
        )
    lines += ["", f"Caveat: {summary['bootstrap_caveat']}", "", f"Scope: {summary['scope']}", ""]
    return "\n".join(lines)


def summarise(view: RunView) -> None:
    sims, boots, timings = _records(view)
    summary = build_summary(view.settings, sims, boots)
    write_json(view.summary_dir / SUMMARY, summary)
    write_json(
        view.summary_dir / SUMMARY_TIMING,
        {"non_reproducible": "CPU seconds per method", "cells": timings},
    )
    (view.summary_dir / SUMMARY_TEXT).write_text(_summary_text(summary), encoding="utf-8")


def load_summary(run_dir: Path) -> dict:
    return read_json(RunFolder(run_dir).summary_dir / SUMMARY, what="calibration summary")


# -- replay -------------------------------------------------------------------------------


def replay(view: RunView) -> list[str]:
    settings = view.settings
    namespace = view.plan.stage(view.stage)["seed_namespace"]
    pairs, findings = view.match(expected_cells(settings))
    for _, item, cell in pairs:
        simulation = isinstance(cell, SimulationCell)
        name = simulation_id(cell) if simulation else bootstrap_id(cell)
        coords = seed_coords(cell)
        if item.get("seeds") != [derivation(namespace, *coords)]:
            findings.append(
                f"{name}: recorded seeds {item.get('seeds')} are not the plan's derivation"
            )
            continue
        record = view.load_item_json(item, FIGURES)
        if json.dumps(record.get("cell"), sort_keys=True) != json.dumps(
            cell.__dict__, sort_keys=True
        ):
            findings.append(f"{name}: figures.json holds cell {record.get('cell')!r}")
            continue
        cell_settings = (
            simulation_settings(settings) if simulation else bootstrap_settings(settings)
        )
        if record["settings"] != json.loads(canonical_json(to_record_settings(cell_settings))):
            findings.append(f"{name}: figures.json settings differ from the plan's")
            continue
        arrays = npz.load_npz(view.item_dir(item) / TRIALS)
        for difference in replay_differences(record, arrays, numpy_generator(namespace, *coords)):
            findings.append(f"{name}: {difference}")
    if not findings:
        sims, boots, _ = _records(view)
        fresh = build_summary(settings, sims, boots)
        if canonical_json(fresh) != (view.summary_dir / SUMMARY).read_text(encoding="utf-8"):
            findings.append(f"summary/{SUMMARY} differs from the summary recomputed from the items")
        if _summary_text(fresh) != (view.summary_dir / SUMMARY_TEXT).read_text(encoding="utf-8"):
            findings.append(f"summary/{SUMMARY_TEXT} differs from the recomputed summary")
    return findings


def to_record_settings(settings) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(settings).items()}


KIND = StageKind(
    name="rp002a.calibration",
    settings=parse_calibration,
    cells=expected_cells,
    seed_coords=seed_coords,
    item_key=item_key,
    summarise=summarise,
    replay=replay,
    render=renderer("prereg.rp002a.report_calibration:render_calibration"),
    doc=__doc__ or "",
)
