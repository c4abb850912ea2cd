"""Report sections of RP002A stages 2-4 (target-variance, confirmatory-config, confirmatory).

Reads the complete-stage summaries written by :mod:`prereg.rp002a.variance_stage`
(``summary/variance_summary.json``), :mod:`prereg.rp002a.config_stage`
(``summary/CONFIRMATORY_CONFIG.json``) and :mod:`prereg.rp002a.confirmatory_stage`
(``summary/decisions.json``), and, for the training curves, each unit's ``unit.json``
(:mod:`prereg.rp002a.units`: per-epoch train and validation losses, selected epoch).
"""

from __future__ import annotations

from prereg.api import RunFolder, SectionContext, plots, read_json
from prereg.api import html as h
from prereg.rp002a.settings import parse_decision, plan_source

VARIANCE_SUMMARY = "variance_summary.json"
CONFIG = "CONFIRMATORY_CONFIG.json"
DECISIONS = "decisions.json"
UNIT = "unit.json"
NATS = "nats"


def _units(context: SectionContext) -> list[dict]:
    units = []
    for item in context.record.items:
        path = RunFolder(context.record.path).item_dir(item["output_dir"]) / UNIT
        if path.is_file():
            units.append(read_json(path, what=f"unit record of {item['nodeid']}"))
    return units


def training_curves(context: SectionContext, world_order: list[str]) -> str:
    units = _units(context)
    if not units:
        return h.paragraph("No unit records with training traces were found.")
    models = sorted({m for u in units for m in u["fits"]})
    panels = []
    for world in world_order:
        for model in models:
            fits = []
            for u in (u for u in units if u["world"] == world and model in u["fits"]):
                fit = u["fits"][model]
                trace = fit["trace"]
                fits.append(
                    plots.FitCurve(
                        u["unit_id"],
                        [t["epoch"] for t in trace],
                        [t["train_loss"] for t in trace],
                        [t["validation_loss"] for t in trace],
                        fit["best_epoch"],
                    )
                )
            if fits:
                panels.append((f"{world} {model}", fits))
    figure = plots.fit_curve_panels(panels, ylabel=f"clipped log loss ({NATS} per timepoint)")
    caption = h.paragraph(
        "Every learned fit: train loss dashed, validation loss solid (one colour per fit), the "
        "selected minimum-validation epoch as a black dot. Assessment used the selected weights only."
    )
    return h.image(plots.png_data_uri(figure), "Training curves of every fit") + caption


def _flags_table(flags: list[dict]) -> str:
    rows = [
        [
            f["unit"],
            f["model"],
            f["best_epoch"],
            f["epochs_run"],
            f["stop_reason"],
            f["near_cap"],
            f["final_20"],
            f["final_five"],
        ]
        for f in flags
    ]
    return h.details(
        f"training flags of every fit ({len(rows)})",
        h.table(
            [
                "unit",
                "model",
                "selected epoch",
                "epochs run",
                "stop reason",
                "near cap",
                "final 20",
                "final five",
            ],
            rows,
        ),
    )


def per_replicate_section(rows: list[tuple[str, str, list[float]]], margin: float | None) -> str:
    """Per contrast (protocol order): the per-replicate values, plotted and tabled."""
    figure = plots.strip_plot(
        [(label, values) for label, _, values in rows],
        margin=margin,
        xlabel=f"paired contrast, episode-mean loss difference ({NATS})",
    )
    table = h.table(
        ["contrast", "kind", "n", "per-replicate values (nats)"],
        [
            [label, kind, len(values), ", ".join(f"{v:+.5f}" for v in values)]
            for label, kind, values in rows
        ],
    )
    return h.image(plots.png_data_uri(figure), "Per-replicate contrast values") + table


def _mean(value: object) -> float | None:
    """An equal-replicate aggregate ``{"mean": x, "n_defined": k}``, or a plain number."""
    return value.get("mean") if isinstance(value, dict) else value


SCALARS = (
    ("log_loss", "log loss (nats)"),
    ("brier", "Brier"),
    ("log_loss_erased", "log loss | current erased (nats)"),
    ("log_loss_visible", "log loss | current visible (nats)"),
    ("clipped_fraction", "fraction clipped below the probability clip"),
    ("unclipped_log_loss", "unclipped log loss (nats)"),
    ("ideal_log_loss", "matched B3 log loss (nats)"),
    ("gap_to_ideal", "gap to matched B3 (nats)"),
)


def reliability(diagnostics: dict, note: str) -> str:
    """Reliability diagrams from the equal-replicate confidence bins, and the scalar table."""
    panels = []
    for world, models in diagnostics.items():
        series = []
        for model, record in sorted(models.items()):
            bins = record.get("confidence_bins") or []
            series.append(
                (
                    model,
                    [_mean(b.get("mean_confidence")) for b in bins],
                    [_mean(b.get("accuracy")) for b in bins],
                )
            )
        if series:
            panels.append((world, series))
    if not panels:
        return h.paragraph("No confidence bins in the summary.")
    figure = plots.reliability_panels(panels)
    rows = []
    for world, models in diagnostics.items():
        for model, record in sorted(models.items()):
            scalars = record.get("scalars", record)
            rows.append(
                [world, model, record.get("n_replicates")]
                + [_mean(scalars.get(key)) for key, _ in SCALARS]
            )
    table = h.table(["world", "model", "replicates"] + [label for _, label in SCALARS], rows)
    return (
        h.image(plots.png_data_uri(figure), "Reliability diagrams per world")
        + h.paragraph(note)
        + h.paragraph(
            "Reliability diagrams: per world, accuracy against mean top-label confidence in "
            "each fixed confidence bin (equal-replicate means; empty bins left out), the "
            "diagonal is perfect calibration."
        )
        + table
    )


def render_target_variance(context: SectionContext) -> str:
    summary = context.summary_json(VARIANCE_SUMMARY)
    world_order = list(summary["diagnostics_equal_replicate"])
    rows = [
        (c["contrast"], c["kind"], [v["value"] for v in c["per_replicate"]])
        for c in summary["contrasts"]
    ]
    sd_table = h.table(
        ["contrast", "kind", "n", "SD (nats)"],
        [[c["contrast"], c["kind"], c["n"], c["sd"]] for c in summary["contrasts"]],
        caption="Contrast SDs (the only inputs of the fixed sample-count rule)",
    )
    margin = _margin(context)
    body = [
        h.paragraph(summary["note"], css="note"),
        "<h3>Per-replicate contrast values</h3>",
        per_replicate_section(rows, margin),
        sd_table,
        "<h3>Training curves</h3>",
        training_curves(context, world_order),
        _flags_table(summary["training_flags"]),
        h.details("flag definitions", h.pre(str(summary.get("flag_definitions", "")))),
        "<h3>Secondary diagnostics (descriptive)</h3>",
        reliability(summary["diagnostics_equal_replicate"], summary["diagnostics_note"]),
    ]
    return h.section("Target-variance results", "\n".join(body), section_id="stage")


def _margin(context: SectionContext) -> float | None:
    """The decisions' margin from the plan at the run's commit (None if it does not parse)."""
    if not isinstance(context.plan, dict):
        return None
    try:
        return parse_decision(context.plan, plan_source(context.plan)).margin_nats
    except ValueError:
        return None


def render_confirmatory_config(context: SectionContext) -> str:
    config = context.summary_json(CONFIG)
    allowed = (
        "confirmation allowed" if config["confirmation_allowed"] else "NO confirmation may run"
    )
    body = [
        h.key_values(
            [
                ("branch", config["branch"]),
                ("n", config["n"]),
                ("verdict", allowed),
                ("resource-limited precision", config["resource_limited_precision"]),
                ("planning SD bound (nats)", config["planning_sd_bound"]),
                ("target half-width (nats)", config["rule"]["target_half_width_nats"]),
            ]
        ),
        h.paragraph(config["rule"]["assumption"], css="note"),
        h.table(
            ["n", "eligible (calibration)", "planning half-width (nats)", "meets precision"],
            [
                [c["n"], c["eligible"], c["half_width_nats"], c["meets_precision"]]
                for c in config["candidates"]
            ],
            caption="Candidate counts",
        ),
        h.table(
            ["contrast", "SD (nats)", "simultaneous upper SD bound (nats)"],
            [
                [s["contrast"], s["sd"], b["upper_sd"]]
                for s, b in zip(config["sd_inputs"], config["sd_bounds"])
            ],
            caption="SD inputs and bounds",
        ),
        h.table(
            ["dependency", "SHA-256"],
            [
                [k, h.Cell(f"<code>{h.esc(v)}</code>", markup=True)]
                for k, v in sorted(config["dependencies"].items())
            ],
            caption="Dependencies of the configuration, separately hashed",
        ),
    ]
    return h.section("Frozen confirmatory configuration", "\n".join(body), section_id="stage")


def forest(result: dict) -> str:
    inflated, uninflated = [], []
    for r in result["contrasts"]:
        i, u = r["inflated_interval"], r["uninflated_interval"]
        inflated.append(plots.Interval(r["contrast"], r["mean"], i["low"], i["high"]))
        uninflated.append(plots.Interval(r["contrast"], r["mean"], u["low"], u["high"]))
    first = result["contrasts"][0]
    figure = plots.forest_plot(
        [
            (f"inflated x{first['inflated_interval']['inflation']:g} (decides)", inflated),
            (f"uninflated x{first['uninflated_interval']['inflation']:g} (reported)", uninflated),
        ],
        margin=result["margin_nats"],
        xlabel=f"mean paired contrast and interval ({NATS})",
    )
    caption = h.paragraph(
        f"Seven Bonferroni t intervals in the protocol's order; dashed lines at ±{result['margin_nats']:g} "
        "nats (the margin), dotted at 0. Filled markers: the inflated (deciding) interval; open "
        "markers: the uninflated interval."
    )
    return h.image(plots.png_data_uri(figure), "Forest plot of the seven intervals") + caption


def render_confirmatory(context: SectionContext) -> str:
    result = context.summary_json(DECISIONS)
    config = result["config"]
    rows = []
    for r in result["contrasts"]:
        i, u = r["inflated_interval"], r["uninflated_interval"]
        rows.append(
            [
                r["contrast"],
                r["kind"] + (f" ({r['note']})" if r.get("note") else ""),
                r["n"],
                r["mean"],
                r["sd"],
                f"[{i['low']:+.5f}, {i['high']:+.5f}]",
                f"[{u['low']:+.5f}, {u['high']:+.5f}]",
                h.Cell(f"<strong>{h.esc(r['decision'])}</strong>", sort=r["decision"], markup=True),
            ]
        )
    decision_table = h.table(
        [
            "contrast",
            "kind",
            "n",
            "mean (nats)",
            "SD (nats)",
            "inflated interval (decides)",
            "uninflated interval",
            "decision",
        ],
        rows,
        caption="Decisions in the protocol's order",
    )
    body = [
        h.key_values(
            [
                ("n per world", config["n"]),
                ("configuration branch", config["branch"]),
                ("resource-limited precision", config["resource_limited_precision"]),
            ]
        ),
        forest(result),
        decision_table,
        h.paragraph(f"Decision rule: {result['decision_rule']}."),
        f'<p class="note"><strong>Assumptions.</strong> {h.esc(result["assumptions"])}</p>',
        f'<p class="note"><strong>Limitations.</strong> {h.esc(result["limitations"])}</p>',
        f'<p class="note"><strong>Rationale of the margin.</strong> {h.esc(result["rationale"])}</p>',
        "<h3>Per-replicate contrast values</h3>",
        per_replicate_section(
            [(r["contrast"], r["kind"], r["per_replicate"]) for r in result["contrasts"]],
            result["margin_nats"],
        ),
        "<h3>Training curves</h3>",
        training_curves(context, list(result["diagnostics_equal_replicate"])),
        "<h3>Secondary diagnostics (descriptive)</h3>",
        reliability(result["diagnostics_equal_replicate"], result["diagnostics_note"]),
    ]
    return h.section("Confirmatory results", "\n".join(body), section_id="stage")
