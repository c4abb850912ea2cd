"""Report section of the E04 robustness stage (kind ``e04.robustness``).

Reads ``summary/e04_summary.json`` (:mod:`prereg.e04.analysis`), where the baseline and
S001 are already de-duplicated by ``shared_key`` (one unit per task and harness), so S001
is shown once per shared key, never three times. Per harness: the metric table for the
baseline, S001 and each S002 dose, and the paired outcomes; across harnesses: rank
displacement and top-k gold retention by S002 dose.
"""

from __future__ import annotations

from prereg.api import SectionContext, plots
from prereg.api import html as h

SUMMARY = "e04_summary.json"
HIDDEN = ("FirstGoldObserved",)  # shown as the censored count instead


def _mean_cell(value: object, tasks: int) -> h.CellLike:
    if not isinstance(value, dict):
        return value
    mean, defined = value.get("mean"), value.get("tasks")
    if mean is None:
        return h.Cell(f"n/a (0 of {tasks} tasks)", sort="")
    text = h.fmt(float(mean))
    if defined is not None and defined != tasks:
        text += f" ({defined} of {tasks} tasks)"
    return h.Cell(text, sort=mean, numeric=True)


ORDER = (
    "R@",
    "Success@",
    "RR",
    "nDCG@",
    "FirstGoldRank",
    "FirstGoldRankUncensored",
    "FunctionRecall@",
    "TokenCoverage@",
)


def measure_order(name: str) -> tuple[int, float, str]:
    """Recall@k by k, then Success@k, RR, nDCG, first-gold ranks, function recall, coverage."""
    stem, _, k = name.partition("@")
    stem = stem + "@" if k else stem
    group = ORDER.index(stem) if stem in ORDER else len(ORDER)
    return group, float(k) if k.isdigit() else 0.0, name


def metric_table(harness: str, rows: list[tuple[str, dict]]) -> str:
    names = sorted(
        (n for n in rows[0][1]["measures"] if n not in HIDDEN and n != "censored_first_gold"),
        key=measure_order,
    )
    body = []
    for label, row in rows:
        m = row["measures"]
        body.append(
            [label, row["tasks"]]
            + [_mean_cell(m.get(n), row["tasks"]) for n in names]
            + [m.get("censored_first_gold")]
        )
    return h.table(
        ["condition", "tasks"] + names + ["censored first-gold ranks"],
        body,
        caption=f"{harness}: means over tasks",
    )


def paired_table(harness: str, rows: list[tuple[str, dict]]) -> str:
    names = sorted(
        (n for n in rows[0][1]["paired"] if n != "lost_all_top_gold_count"),
        key=lambda n: measure_order(n.removesuffix("_delta")),
    )
    body = [
        [label, row["tasks"]]
        + [_mean_cell(row["paired"].get(n), row["tasks"]) for n in names]
        + [row["paired"].get("lost_all_top_gold_count")]
        for label, row in rows
    ]
    return h.table(
        ["perturbation", "tasks"]
        + [n.replace("_", " ") for n in names]
        + ["tasks losing all top gold"],
        body,
        caption=f"{harness}: paired outcomes, perturbed minus baseline (means over tasks)",
    )


def _series(summary: dict, field: str) -> list[plots.Series]:
    series = []
    for row in summary["baseline"]:
        harness = row["harness"]
        points = [
            (r["dose"], (r["paired"].get(field) or {}).get("mean"))
            for r in summary["S002"]
            if r["harness"] == harness
        ]
        points = [(d, v) for d, v in points if v is not None]
        series.append(plots.Series(harness, [d for d, _ in points], [v for _, v in points]))
    return series


def dose_plots(summary: dict) -> str:
    displacement = plots.line_panels(
        [
            (
                "censored first-gold rank displacement",
                _series(summary, "rank_displacement_censored"),
            ),
            ("uncensored (both ranks observed)", _series(summary, "rank_displacement")),
        ],
        xlabel="S002 dose (distractor files added)",
        ylabel="mean rank change (ranks; + is worse)",
        columns=2,
    )
    retention = plots.line_panels(
        [
            ("top-k gold retention", _series(summary, "top_gold_retention")),
            ("lost all top-k gold", _series(summary, "lost_all_top_gold")),
        ],
        xlabel="S002 dose (distractor files added)",
        ylabel="mean over tasks (fraction)",
        columns=2,
    )
    for ax in retention.axes:
        ax.set_ylim(-0.05, 1.05)
    return (
        h.image(plots.png_data_uri(displacement), "Rank displacement by S002 dose per harness")
        + h.image(plots.png_data_uri(retention), "Top-k gold retention by S002 dose per harness")
        + h.paragraph(
            "One line per harness, told apart by marker and line style. S001 does not "
            "depend on the dose: its values are in the per-harness tables."
        )
    )


def s001_per_task(summary: dict) -> str:
    rows = []
    for r in summary["per_task"]["S001"]:
        p = r["paired"]
        deltas = ", ".join(f"{k} {v:+.3f}" for k, v in sorted(p.get("recall_delta", {}).items()))
        rows.append(
            [
                r["task_id"],
                r["harness"],
                deltas,
                p.get("mrr_delta"),
                p.get("ndcg_delta"),
                p.get("top_gold_retention"),
                p.get("lost_all_top_gold"),
                p.get("rank_displacement_censored"),
                p.get("rank_displacement"),
            ]
        )
    return h.details(
        f"S001 per task and harness ({len(rows)} units, one per shared_key)",
        h.table(
            [
                "task",
                "harness",
                "recall deltas",
                "MRR delta",
                "nDCG delta",
                "retention",
                "lost all top gold",
                "displacement (censored)",
                "displacement",
            ],
            rows,
        ),
    )


def render_e04(context: SectionContext) -> str:
    summary = context.summary_json(SUMMARY)
    body = []
    if summary.get("synthetic"):
        body.append(h.paragraph("SYNTHETIC data: not the preregistered tasks.", css="note bad"))
    units = summary["units"]
    body.append(
        h.paragraph(
            f"{summary['cells']} composite cells over {len(summary['tasks'])} tasks; units: "
            f"{units['baseline_task_harness']} baseline and {units['S001_task_harness']} S001 "
            f"task-harness units, {units['S002_task_harness_dose']} S002 task-harness-dose units. "
            f"{units['note']}."
        )
    )
    for base in summary["baseline"]:
        harness = base["harness"]
        s001 = next(r for r in summary["S001"] if r["harness"] == harness)
        s002 = [r for r in summary["S002"] if r["harness"] == harness]
        conditions = [("baseline", base), ("S001", s001)] + [
            (f"S002 dose {r['dose']}", r) for r in s002
        ]
        body.append(f"<h3>{h.esc(harness)}</h3>")
        body.append(metric_table(harness, conditions))
        body.append(paired_table(harness, conditions[1:]))
    body.append("<h3>By dose</h3>")
    body.append(dose_plots(summary))
    body.append(s001_per_task(summary))
    return h.section("E04 robustness results", "\n".join(body), section_id="stage")
