"""RP002A stage 2, ``target-variance``: how much the seven contrasts vary between replicates.

One item per unit (world x replicate: 15 items, 30 learned fits at full scale), see
:mod:`prereg.rp002a.units` for a unit's outputs. The complete-stage summary
(``summary/variance_summary.json`` and ``summary/SUMMARY.md``) gives, for each contrast
of the family in the protocol's order, its per-replicate values and their SD, the
training flags, and equal-replicate diagnostics per world and model. The protocol
forbids using these means to tune anything, and the summary says so.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np

from prereg.api import (
    RunFolder,
    RunView,
    StageKind,
    canonical_json,
    derivation,
    numpy_generator,
    read_json,
    write_json,
)
from prereg.api import arrays as npz
from prereg.rp002a import units as unitlib
from prereg.rp002a.datasets import dataset_bytes
from prereg.rp002a.diagnostics import SecondaryDiagnostics, equal_replicate_mean
from prereg.rp002a.frequency import fit_frequency_table, frequency_predictions
from prereg.rp002a.settings import (
    SharedSettings,
    VariancePlan,
    parse_variance,
    renderer,
)

SUMMARY = "variance_summary.json"
SUMMARY_TEXT = "SUMMARY.md"
STAGE = "target-variance"
NO_TUNING = (
    "This stage measures target-size variability; its means cannot tune models, effects "
    "or margins (RP002A). Only the SDs feed the fixed sample-count rule."
)


def stage_units(plan: dict, stage: str = STAGE) -> list[unitlib.Unit]:
    settings = parse_variance(plan, stage)
    return unitlib.units(settings.shared, settings.replicates)


def unit_records(view: RunView, shared: SharedSettings) -> list[dict]:
    """Every unit item's record, in the plan's world order then replicate order."""
    records = [view.load_item_json(item, unitlib.UNIT) for item in view.items]
    order = list(shared.world_order)
    return sorted(records, key=lambda r: (order.index(r["world"]), r["replicate"]))


def contrast_table(shared: SharedSettings, records: list[dict]) -> list[dict]:
    """Per contrast of the family (protocol order): per-replicate values and their SD."""
    rows = []
    for contrast in shared.contrast_family:
        values = [
            {"replicate": r["replicate"], "value": r["contrasts"][contrast.id]}
            for r in records
            if r["world"] == contrast.world
        ]
        numbers = [v["value"] for v in values]
        rows.append(
            {
                "contrast": contrast.id,
                "kind": contrast.kind,
                "n": len(numbers),
                "per_replicate": values,
                "sd": statistics.stdev(numbers) if len(numbers) > 1 else None,
            }
        )
    return rows


def diagnostics_table(shared: SharedSettings, records: list[dict]) -> dict:
    table = {}
    for world in shared.world_order:
        rows = [r for r in records if r["world"] == world]
        table[world] = (
            {
                model: equal_replicate_mean(
                    [SecondaryDiagnostics.from_record(r["diagnostics"][model]) for r in rows]
                ).to_record()
                for model in rows[0]["diagnostics"]
            }
            if rows
            else {}
        )
    return table


def flags_table(records: list[dict]) -> list[dict]:
    return [
        {
            "unit": r["unit_id"],
            "model": m,
            "best_epoch": f["best_epoch"],
            "epochs_run": f["epochs_run"],
            "stop_reason": f["stop_reason"],
            **f["flags"],
        }
        for r in records
        for m, f in r["fits"].items()
    ]


def build_summary(settings: VariancePlan, records: list[dict], stage: str) -> dict:
    shared = settings.shared
    return {
        "stage": stage,
        "plan_id": settings.plan_id,
        "note": NO_TUNING,
        "units": [r["unit_id"] for r in records],
        "contrasts": contrast_table(shared, records),
        "training_flags": flags_table(records),
        "flag_definitions": shared.flag_definitions,
        "diagnostics_equal_replicate": diagnostics_table(shared, records),
        "diagnostics_note": "Descriptive secondary outputs; equal-replicate means (each replicate "
        "weighted equally), never pooled over episodes; no confirmatory decisions.",
    }


def summary_text(summary: dict) -> str:
    lines = [
        f"# Target-variance summary ({summary['plan_id']})",
        "",
        summary["note"],
        "",
        "| contrast | n | SD | per-replicate values |",
        "|---|---:|---:|---|",
    ]
    for row in summary["contrasts"]:
        values = ", ".join(f"{v['value']:+.5f}" for v in row["per_replicate"])
        sd = "—" if row["sd"] is None else f"{row['sd']:.5f}"
        lines.append(f"| {row['contrast']} | {row['n']} | {sd} | {values} |")
    flagged = [
        f for f in summary["training_flags"] if f["near_cap"] or f["final_20"] or f["final_five"]
    ]
    total = len(summary["training_flags"])
    lines += [
        "",
        f"Fits with a near-cap, final-20 or final-five flag: {len(flagged)} of {total}",
        "",
    ]
    return "\n".join(lines)


def summarise(view: RunView) -> None:
    settings = view.settings
    summary = build_summary(settings, unit_records(view, settings.shared), view.stage)
    write_json(view.summary_dir / SUMMARY, summary)
    (view.summary_dir / SUMMARY_TEXT).write_text(summary_text(summary), encoding="utf-8")


def load_summary(run_dir: Path) -> dict:
    return read_json(RunFolder(run_dir).summary_dir / SUMMARY, what="target-variance summary")


# -- replay ---------------------------------------------------------------------------------


def replay_unit(
    shared: SharedSettings, unit: unitlib.Unit, folder: Path, namespace: str
) -> list[str]:
    """Regenerate data, refit B0, reload weights and predict, recompute the analysis: no
    training."""
    # prereg.rp002a.training imports torch (the training extra, optional)
    from prereg.rp002a.training import load_weights, predict_probabilities

    findings = []
    datasets = unitlib.generate_datasets(shared, unit, lambda *c: numpy_generator(namespace, *c))
    if dataset_bytes(datasets) != (folder / unitlib.DATASETS).read_bytes():
        findings.append("datasets.npz differs from the data regenerated from the seeds")
    saved = npz.load_npz(folder / unitlib.PROBABILITIES)
    for name in shared.learned_models:
        model = unitlib.learned_model(shared, name)
        model.load_state_dict(load_weights(folder / unitlib.weights_file(name)))
        again = predict_probabilities(model, datasets.assessment.observations)
        if again.dtype != saved[name].dtype or not np.array_equal(again, saved[name]):
            findings.append(f"{name}: the saved weights do not reproduce the saved probabilities")
    record = read_json(folder / unitlib.UNIT, what="unit record")
    law = unitlib.law_for(shared, unit.world)

    table = fit_frequency_table(
        datasets.train.observations,
        datasets.train.targets,
        n_symbols=law.n_symbols,
        n_classes=law.n_states,
    )
    if not np.array_equal(
        frequency_predictions(table, datasets.assessment.observations), saved["B0"]
    ):
        findings.append(
            "B0: the refitted frequency table does not reproduce the saved probabilities"
        )
    analysis = unitlib.assessment_analysis(shared, unit, datasets, saved)
    losses = npz.load_npz(folder / unitlib.LOSSES)
    if set(losses) != set(analysis["losses"]) or any(
        not np.array_equal(losses[k], analysis["losses"][k]) for k in losses
    ):
        findings.append(
            "losses.npz differs from the losses recomputed from the saved probabilities"
        )
    fresh = unitlib.unit_record(shared, unit, datasets, table.to_record(), record["fits"], analysis)
    if canonical_json(fresh) != canonical_json(record):
        findings.append("unit.json differs from the record recomputed from the saved probabilities")
    return findings


def replay_units(view: RunView, shared: SharedSettings, expected: list[unitlib.Unit]) -> list[str]:
    """Replay every unit item, paired with the plan's units by its recorded world and replicate."""
    namespace = view.plan.stage(view.stage)["seed_namespace"]
    pairs, findings = view.match({u.unit_id: u for u in expected})
    for _, item, unit in pairs:
        wanted = {
            derivation(namespace, unit.world, unit.replicate, "data", s) for s in unitlib.SPLITS
        }
        if not wanted <= set(item.get("seeds", [])):
            findings.append(f"{unit.unit_id}: recorded seeds are not the plan's derivations")
            continue
        findings += [
            f"{unit.unit_id}: {f}"
            for f in replay_unit(shared, unit, view.item_dir(item), namespace)
        ]
    return findings


def replay(view: RunView) -> list[str]:
    settings = view.settings
    expected = unitlib.units(settings.shared, settings.replicates)
    findings = replay_units(view, settings.shared, expected)
    if not findings:
        fresh = build_summary(settings, unit_records(view, settings.shared), view.stage)
        if canonical_json(fresh) != (view.summary_dir / SUMMARY).read_text(encoding="utf-8"):
            findings.append(f"summary/{SUMMARY} differs from the summary recomputed from the units")
    return findings


def run_unit_item(research, unit: unitlib.Unit) -> dict:
    """The body of one unit item (target-variance and confirmatory)."""
    research.coords(world=unit.world, replicate=unit.replicate)
    return unitlib.run_unit(
        research.settings.shared,
        unit,
        outputs=research.outputs,
        numpy_rng=research.numpy_generator,
        torch_rng=research.torch_generator,
        deadline=research.deadline,
        progress=research.progress,
    )


KIND = StageKind(
    name="rp002a.target-variance",
    settings=parse_variance,
    item_key=unitlib.unit_key,
    summarise=summarise,
    replay=replay,
    render=renderer("prereg.rp002a.report:render_target_variance"),
    doc=__doc__ or "",
)
