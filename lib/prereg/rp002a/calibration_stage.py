"""RP002A stage 1, ``calibration``: synthetic stress tests of the interval procedures.

One item per cell: 90 simulation cells (n x law x rho x within-mean fraction) and 18
bootstrap-benchmark cells, all read from the plan. Each simulation cell writes
``figures.json`` (every retained figure, :func:`prereg.stats.records.to_record`) and
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
from pathlib import Path

from prereg.arrays import load_npz, save_npz
from prereg.hashing import canonical_json, read_json, write_json
from prereg.rp002a.plan_schema import SHARED
from prereg.schema import (
    OneOf,
    PositiveFloat,
    PositiveInt,
    Probability,
    Range,
    SchemaError,
    UnitInterval,
    validate,
)
from prereg.seeds import derivation, numpy_generator
from prereg.stages import RunView, StageKind
from prereg.stats.calibration import (
    CalibrationSettings,
    SimulationCell,
    eligibility_from_bounds,
    run_simulation_cell,
)
from prereg.stats.calibration_bootstrap import BootstrapCell, BootstrapSettings, run_bootstrap_cell
from prereg.stats.laws import LAW_NAMES
from prereg.stats.records import replay_differences, to_record, trial_arrays

STAGE = "calibration"
FIGURES = "figures.json"
TRIALS = "trials.npz"
TIMING = "cpu.timing.json"
SUMMARY = "calibration_summary.json"
SUMMARY_TIMING = "benchmark_cpu.timing.json"
SUMMARY_TEXT = "SUMMARY.md"

SAMPLE_COUNT = Range(int, min=2)  # replicates of a t interval: n - 1 >= 1 degrees of freedom

PARAMETERS = {
    "simulation": {
        "n": [SAMPLE_COUNT],
        "laws": [OneOf(LAW_NAMES)],
        "rho": [UnitInterval],
        "within_fraction": [UnitInterval],
        "trials": PositiveInt,
        "decision_sd": PositiveFloat,
        "width_quantiles": [UnitInterval],
    },
    # The Monte Carlo bound's own alpha (simultaneous over the cells), not the decisions'
    # alpha: that one is parameters.decision.familywise_alpha.
    "monte_carlo_bound": {
        "familywise_alpha": Probability,
        "statements": PositiveInt,
        "sided": OneOf(("one-sided upper",)),
        "method": OneOf(("clopper-pearson",)),
    },
    "eligibility": {"minimum_n": SAMPLE_COUNT, "max_coverage_failure_upper": Probability},
    # No rho: benchmark cells have no shared component by construction
    # (prereg.stats.calibration_bootstrap), so a rho here would be read by nothing.
    "bootstrap_benchmark": {
        "n": [SAMPLE_COUNT],
        "laws": [OneOf(LAW_NAMES)],
        "within_fraction": [UnitInterval],
        "trials": PositiveInt,
        "draws": PositiveInt,
        "episodes": PositiveInt,
        "caveat": str,
    },
}


def _params(plan: dict) -> dict:
    return plan["stages"][STAGE]["parameters"]


def simulation_cells(plan: dict) -> list[SimulationCell]:
    sim = _params(plan)["simulation"]
    return [
        SimulationCell(n=n, law=law, rho=rho, within_fraction=f)
        for n in sim["n"]
        for law in sim["laws"]
        for rho in sim["rho"]
        for f in sim["within_fraction"]
    ]


def bootstrap_cells(plan: dict) -> list[BootstrapCell]:
    bench = _params(plan)["bootstrap_benchmark"]
    return [
        BootstrapCell(n=n, law=law, within_fraction=f)
        for n in bench["n"]
        for law in bench["laws"]
        for f in bench["within_fraction"]
    ]


def simulation_id(cell: SimulationCell) -> str:
    return f"n{cell.n}-{cell.law}-rho{cell.rho:g}-f{cell.within_fraction:g}"


def bootstrap_id(cell: BootstrapCell) -> str:
    return f"n{cell.n}-{cell.law}-f{cell.within_fraction:g}"


def simulation_coords(cell: SimulationCell) -> tuple:
    return ("simulation", cell.n, cell.law, f"{cell.rho:g}", f"{cell.within_fraction:g}")


def bootstrap_coords(cell: BootstrapCell) -> tuple:
    return ("bootstrap", cell.n, cell.law, f"{cell.within_fraction:g}")


def simulation_settings(plan: dict) -> CalibrationSettings:
    decision = plan["parameters"]["decision"]
    params = _params(plan)
    sim, bound = params["simulation"], params["monte_carlo_bound"]
    return CalibrationSettings(
        trials=sim["trials"],
        contrasts=decision["family_size"],
        alpha=decision["familywise_alpha"],
        primary_inflation=decision["primary_inflation"],
        report_inflation=decision["report_inflation"],
        margin=decision["margin_nats"],
        decision_sd=sim["decision_sd"],
        mc_alpha=bound["familywise_alpha"] / bound["statements"],
        width_quantiles=tuple(sim["width_quantiles"]),
    )


def bootstrap_settings(plan: dict) -> BootstrapSettings:
    decision = plan["parameters"]["decision"]
    bench = _params(plan)["bootstrap_benchmark"]
    return BootstrapSettings(
        trials=bench["trials"],
        draws=bench["draws"],
        episodes=bench["episodes"],
        contrasts=decision["family_size"],
        alpha=decision["familywise_alpha"],
    )


def validate_plan(plan, stage: str) -> None:
    if stage != STAGE:
        raise SchemaError(
            f"{plan.path}: stage {stage!r} has kind {KIND.name!r}, which reads the stage "
            f"named {STAGE!r} (and the stages it consumes by name); name the stage {STAGE!r}"
        )
    source = f"{plan.path}: stages.{stage}.parameters"
    validate(
        plan.stage(stage)["parameters"],
        PARAMETERS,
        source=str(plan.path),
        path=f"stages.{stage}.parameters",
    )
    # The calibration reads only the decision block of the shared parameters (a reduced
    # plan may hold only that); its ranges are the shared schema's.
    shared = plan.data.get("parameters")
    decision = shared.get("decision") if isinstance(shared, dict) else None
    validate(decision, SHARED["decision"], source=str(plan.path), path="parameters.decision")
    statements = plan.stage(stage)["parameters"]["monte_carlo_bound"]["statements"]
    cells = len(simulation_cells(plan.data))
    if statements != cells:
        raise ValueError(
            f"{source}.monte_carlo_bound.statements is {statements}, but the grid has {cells} "
            "simulation cells: the simultaneous bound must cover every cell"
        )


# -- items ------------------------------------------------------------------------------


def run_simulation_item(plan: dict, cell: SimulationCell, rng, outputs: Path) -> dict:
    result = run_simulation_cell(cell, simulation_settings(plan), rng)
    record = to_record(result)
    write_json(outputs / FIGURES, record)
    save_npz(outputs / TRIALS, trial_arrays(result))
    return record


def run_bootstrap_item(plan: dict, cell: BootstrapCell, rng, outputs: Path) -> dict:
    result = run_bootstrap_cell(cell, bootstrap_settings(plan), rng)
    record = to_record(result)
    write_json(outputs / TIMING, record.pop("non_reproducible"))
    write_json(outputs / FIGURES, record)
    save_npz(outputs / TRIALS, trial_arrays(result))
    return record


# -- summary ------------------------------------------------------------------------------


def eligibility_table(plan: dict, records: list[dict]) -> list[dict]:
    """Per n: cells, the largest inflated CP upper bound, and eligibility (protocol's rule)."""
    rule = _params(plan)["eligibility"]
    counts = _params(plan)["simulation"]["n"]
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
        minimum_count=rule["minimum_n"],
        threshold=rule["max_coverage_failure_upper"],
    )
    return [
        {
            "n": n,
            "cells": len(bounds[n]),
            "max_cp_upper_inflated": max(bounds[n]),
            "all_cells_within_threshold": max(bounds[n]) <= rule["max_coverage_failure_upper"],
            "eligible": eligible[n],
        }
        for n in counts
    ]


def build_summary(plan: dict, sim_records: list[dict], boot_records: list[dict]) -> dict:
    params = _params(plan)
    bound = params["monte_carlo_bound"]
    table = eligibility_table(plan, sim_records)
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
        "plan_id": plan["plan_id"],
        "eligibility_rule": {
            **params["eligibility"],
            "bound": bound,
            "bound_level": bound["familywise_alpha"] / bound["statements"],
        },
        "eligibility_by_n": table,
        "eligible_counts": [row["n"] for row in table if row["eligible"]],
        "simulation_cells": cells,
        "bootstrap_benchmark": benchmark,
        "bootstrap_caveat": params["bootstrap_benchmark"]["caveat"],
        "scope": plan["parameters"]["decision"]["limitations"],
    }


def _records(view: RunView) -> tuple[list[dict], list[dict], list[dict]]:
    sims, boots, timings = [], [], []
    for item in view.items:
        record = view.load_item_json(item, FIGURES)
        if record["kind"] == "simulation":
            sims.append(record)
        else:
            boots.append(record)
            timings.append(
                {
                    "cell": record["cell"],
                    "cpu_seconds": view.load_item_json(item, TIMING)["cpu_seconds"],
                }
            )
    order = {
        json.dumps(c.__dict__, sort_keys=True): i
        for i, c in enumerate(simulation_cells(view.plan.data))
    }
    sims.sort(key=lambda r: order[json.dumps(r["cell"], sort_keys=True)])
    border = {
        json.dumps(c.__dict__, sort_keys=True): i
        for i, c in enumerate(bootstrap_cells(view.plan.data))
    }
    boots.sort(key=lambda r: border[json.dumps(r["cell"], sort_keys=True)])
    timings.sort(key=lambda r: border[json.dumps(r["cell"], sort_keys=True)])
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
    summary = build_summary(view.plan.data, sims, boots)
    write_json(view.summary_dir / SUMMARY, summary)
    write_json(
        view.summary_dir / SUMMARY_TIMING,
        {"non_reproducible": "CPU seconds per method", "cells": timings},
    )
    (view.summary_dir / SUMMARY_TEXT).write_text(_summary_text(summary), encoding="utf-8")


def load_summary(run_dir: Path) -> dict:
    return read_json(Path(run_dir) / "summary" / SUMMARY, what="calibration summary")


# -- replay -------------------------------------------------------------------------------


def replay(view: RunView) -> list[str]:
    plan = view.plan.data
    namespace = view.plan.stage(view.stage)["seed_namespace"]
    expected = {
        f"test_simulation_cell[{simulation_id(c)}]": ("sim", c) for c in simulation_cells(plan)
    }
    expected.update(
        {f"test_bootstrap_cell[{bootstrap_id(c)}]": ("boot", c) for c in bootstrap_cells(plan)}
    )
    findings = []
    seen = set()
    for item in view.items:
        name = item["output_dir"]
        if name not in expected:
            findings.append(f"item {item['nodeid']} is not a cell of the plan's grid")
            continue
        seen.add(name)
        kind, cell = expected[name]
        coords = simulation_coords(cell) if kind == "sim" else bootstrap_coords(cell)
        if item.get("seeds") != [derivation(namespace, *coords)]:
            findings.append(
                f"{name}: recorded seeds {item.get('seeds')} are not the plan's derivation"
            )
            continue
        record = view.load_item_json(item, FIGURES)
        settings = simulation_settings(plan) if kind == "sim" else bootstrap_settings(plan)
        if record["settings"] != json.loads(canonical_json(to_record_settings(settings))):
            findings.append(f"{name}: figures.json settings differ from the plan's")
            continue
        arrays = load_npz(view.item_dir(item) / TRIALS)
        for difference in replay_differences(record, arrays, numpy_generator(namespace, *coords)):
            findings.append(f"{name}: {difference}")
    for name in sorted(set(expected) - seen):
        findings.append(f"cell {name} of the plan's grid has no item in the manifest")
    if not findings:
        sims, boots, _ = _records(view)
        fresh = build_summary(plan, sims, boots)
        if canonical_json(fresh) != (view.summary_dir / SUMMARY).read_text(encoding="utf-8"):
            findings.append(f"summary/{SUMMARY} differs from the summary recomputed from the items")
        if _summary_text(fresh) != (view.summary_dir / SUMMARY_TEXT).read_text(encoding="utf-8"):
            findings.append(f"summary/{SUMMARY_TEXT} differs from the recomputed summary")
    return findings


def to_record_settings(settings) -> dict:
    from dataclasses import asdict

    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(settings).items()}


KIND = StageKind(
    name="rp002a.calibration",
    validate=validate_plan,
    summarise=summarise,
    replay=replay,
    doc=__doc__ or "",
)
