"""Report section of the RP002A calibration stage (kind ``rp002a.calibration``).

Reads the complete-stage summary ``summary/calibration_summary.json`` and the benchmark's
CPU seconds ``summary/benchmark_cpu.timing.json`` (both written by
:mod:`prereg.rp002a.calibration_stage`). Shows the coverage-failure rate of every
simulation cell with its one-sided Clopper-Pearson upper bound (a heat map over
n x law x rho x within-mean fraction, inflated and uninflated), the eligibility table, and
the bootstrap benchmark table with its caveat.
"""

from __future__ import annotations

import numpy as np

from prereg.api import SectionContext, plots
from prereg.api import html as h

SUMMARY = "calibration_summary.json"
TIMING = "benchmark_cpu.timing.json"


def _axis_values(cells: list[dict], key: str) -> list:
    seen: list = []
    for c in cells:
        if c["cell"][key] not in seen:
            seen.append(c["cell"][key])
    return seen


def coverage_heatmap(summary: dict) -> str:
    """Two panels (inflated primary, uninflated reported): rows n, columns law x rho x fraction.

    The colour is the coverage-failure rate; each cell shows the rate and its CP upper bound;
    cells whose upper bound exceeds the eligibility threshold are framed and marked "!".
    """
    cells = summary["simulation_cells"]
    threshold = summary["eligibility_rule"]["max_coverage_failure_upper"]
    ns = _axis_values(cells, "n")
    columns = [
        (law, rho, f)
        for law in _axis_values(cells, "law")
        for rho in _axis_values(cells, "rho")
        for f in _axis_values(cells, "within_fraction")
    ]
    index = {
        (c["cell"]["n"], c["cell"]["law"], c["cell"]["rho"], c["cell"]["within_fraction"]): c
        for c in cells
    }
    panels = []
    vmax = 0.0
    for prefix, title in (
        ("inflated", "twofold-inflated t (primary)"),
        ("uninflated", "uninflated t (reported)"),
    ):
        values = np.full((len(ns), len(columns)), np.nan)
        flagged = np.zeros_like(values, dtype=bool)
        notes = [["" for _ in columns] for _ in ns]
        for i, n in enumerate(ns):
            for j, (law, rho, f) in enumerate(columns):
                cell = index.get((n, law, rho, f))
                if cell is None:
                    notes[i][j] = "n/a"
                    continue
                rate = cell[f"{prefix}_coverage_failure_rate"]
                upper = cell[f"{prefix}_coverage_failure_cp_upper"]
                values[i, j] = rate
                flagged[i, j] = upper > threshold
                notes[i][j] = f"{rate:.4f}\n≤{upper:.4f}"
        vmax = max(vmax, float(np.nanmax(values)) if np.isfinite(values).any() else 0.0)
        panels.append(plots.HeatPanel(title, values, notes, flagged))
    labels = [f"{law} ρ={rho:g} f={f:g}" for law, rho, f in columns]
    level = summary["eligibility_rule"]["bound_level"]
    figure = plots.annotated_heatmap(
        panels,
        row_labels=[f"n={n}" for n in ns],
        col_labels=labels,
        xlabel="law, shared fraction ρ, within-mean fraction f",
        ylabel="replicates n",
        colorbar_label="simultaneous coverage-failure rate (fraction of trials)",
        vmax=max(vmax, threshold),
        flag_note=(
            f"Cell text: rate / one-sided Clopper-Pearson upper bound at level {level:.3g}. "
            f"Framed and marked '!': upper bound > {threshold:g}."
        ),
    )
    caption = h.paragraph(
        f"Simultaneous coverage failure (any of the family's intervals misses its contrast) per "
        f"cell, as a fraction of trials. Each cell shows the rate and, below it, the one-sided "
        f"Clopper-Pearson upper bound at level {level:.3g}; cells whose bound exceeds "
        f"{threshold:g} are framed with a dashed border and marked '!'. Colour repeats the rate."
    )
    return (
        h.image(
            plots.png_data_uri(figure),
            "Heat map of coverage-failure rates by n, law, rho and within-mean fraction",
        )
        + caption
    )


def eligibility_table(summary: dict) -> str:
    rule = summary["eligibility_rule"]
    rows = [
        [
            r["n"],
            r["cells"],
            h.Cell(
                f"{r['max_cp_upper_inflated']:.5f}", sort=r["max_cp_upper_inflated"], numeric=True
            ),
            r["all_cells_within_threshold"],
            h.Cell("yes" if r["eligible"] else "no"),
        ]
        for r in summary["eligibility_by_n"]
    ]
    text = (
        f"A count is eligible only if n ≥ {rule['minimum_n']} and every predeclared cell at that n "
        f"has a one-sided Clopper-Pearson upper coverage-failure bound ≤ "
        f"{rule['max_coverage_failure_upper']:g} (bounds at {rule['bound']['familywise_alpha']:g}/"
        f"{rule['bound']['statements']} = {rule['bound_level']:.3g} for simultaneous Monte Carlo "
        f"statements across all {rule['bound']['statements']} cells). Eligible counts: "
        f"{summary['eligible_counts'] or 'none'}."
    )
    return h.paragraph(text) + h.table(
        [
            "n",
            "cells",
            "max CP upper (inflated)",
            f"all cells ≤ {rule['max_coverage_failure_upper']:g}",
            "eligible",
        ],
        rows,
        caption="Eligibility by n",
    )


def cells_table(summary: dict) -> str:
    rows = []
    for c in summary["simulation_cells"]:
        cell = c["cell"]
        d = c["decisions_inflated_any_of_family"]
        rows.append(
            [
                cell["n"],
                cell["law"],
                cell["rho"],
                cell["within_fraction"],
                c["inflated_coverage_failure_rate"],
                c["inflated_coverage_failure_mc_se"],
                c["inflated_coverage_failure_cp_upper"],
                c["uninflated_coverage_failure_rate"],
                c["uninflated_coverage_failure_cp_upper"],
                c["width_mean_inflated"],
                c["width_mean_uninflated"],
                *(d[k] for k in sorted(d)),
            ]
        )
    decisions = sorted(summary["simulation_cells"][0]["decisions_inflated_any_of_family"])
    headers = [
        "n",
        "law",
        "ρ",
        "f",
        "failure rate (infl.)",
        "MC SE (infl.)",
        "CP upper (infl.)",
        "failure rate (uninfl.)",
        "CP upper (uninfl.)",
        "mean width infl. (SD units)",
        "mean width uninfl. (SD units)",
    ] + [f"{k.replace('_', ' ')} (any of family)" for k in decisions]
    return h.details(
        f"every simulation cell ({len(rows)}; click a header to sort)", h.table(headers, rows)
    )


def benchmark_table(summary: dict, timing: dict | None) -> str:
    cpu = {}
    if timing is not None:
        for entry in timing.get("cells", []):
            c = entry["cell"]
            cpu[(c["n"], c["law"], c["within_fraction"])] = entry["cpu_seconds"]
    rows = []
    for entry in summary["bootstrap_benchmark"]:
        c, methods = entry["cell"], entry["methods"]
        seconds = cpu.get((c["n"], c["law"], c["within_fraction"]), {})
        for method in sorted(methods):
            m = methods[method]
            rows.append(
                [
                    c["n"],
                    c["law"],
                    c["within_fraction"],
                    method.replace("_", "-"),
                    m["coverage_failure_rate"],
                    m["coverage_failure_mc_se"],
                    m["coverage_failures"],
                    m["width_mean"],
                    seconds.get(method),
                ]
            )
    table = h.table(
        [
            "n",
            "law",
            "f",
            "method",
            "coverage-failure rate",
            "MC SE",
            "failures (trials)",
            "mean width",
            "CPU seconds (not reproducible)",
        ],
        rows,
        caption="Bootstrap benchmark: nested and whole-cluster percentile methods, separately",
    )
    return h.paragraph(f"Caveat: {summary['bootstrap_caveat']}", css="note") + table


def render_calibration(context: SectionContext) -> str:
    summary = context.summary_json(SUMMARY)
    timing = context.summary_json(TIMING) if context.has_summary(TIMING) else None
    body = [
        f"<p>Plan <code>{h.esc(summary['plan_id'])}</code>. Scope: {h.esc(summary['scope'])}</p>",
        "<h3>Coverage failure by cell</h3>",
        coverage_heatmap(summary),
        cells_table(summary),
        "<h3>Eligibility</h3>",
        eligibility_table(summary),
        "<h3>Bootstrap benchmark</h3>",
        benchmark_table(summary, timing),
    ]
    return h.section("Calibration results", "\n".join(body), section_id="stage")
