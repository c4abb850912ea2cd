"""The stage kind ``paired-models.compare``: items, summary, replay and report section.

One item per dataset replicate. Each item draws its replicate from the generator seeded by
``(seed_namespace, "replicate", r)``, fits both models, and writes ``replicate.json`` (the
two test losses and their difference) and ``predictions.json`` (both models' test
predictions). The summary (``summary/comparison.json``) holds the per-replicate losses, the
paired t interval of loss(B) - loss(A) and the decision. The replay regenerates every
replicate from its seed, refits both models, and compares predictions, losses and the whole
summary with what the run wrote (``prereg.api.rerun_replay``: the items' own code, rerun).
"""

from __future__ import annotations

from collections.abc import Mapping

from prereg import api
from prereg_paired_models import analysis, models
from prereg_paired_models.settings import Settings, parse_settings

NAME = "paired-models.compare"
ITEM_FILE, PREDICTIONS_FILE, SUMMARY_FILE = "replicate.json", "predictions.json", "comparison.json"
# The replay refits on this machine: equal up to floating-point reassociation (another BLAS)
# within this relative tolerance; a changed number beyond it is a finding.
REPLAY_RTOL = 1e-9


# One item per dataset replicate: keys replicate0, replicate1, ..., each seeded from
# ("replicate", r) after the plan's seed_namespace.
GRID = api.Grid("replicate", lambda settings: range(settings.replicates))


def compute(settings: Settings, replicate: int, rng) -> tuple[dict, dict]:
    """(the replicate's record, its predictions) from the generator of its seed."""
    data = models.draw(settings, rng)
    predicted_a = models.ridge_predict(data, settings.ridge.penalty)
    predicted_b = models.knn_predict(data, settings.neighbours)
    loss_a = models.mean_squared_error(data.y_test, predicted_a)
    loss_b = models.mean_squared_error(data.y_test, predicted_b)
    record = {"replicate": replicate, "loss_a": loss_a, "loss_b": loss_b}
    return {**record, "difference": loss_b - loss_a}, {
        "a": predicted_a.tolist(),
        "b": predicted_b.tolist(),
    }


def build_summary(settings: Settings, records: Mapping[str, dict]) -> dict:
    """The summary of the replicates' records (by item key)."""
    ordered = sorted(records.values(), key=lambda r: r["replicate"])
    interval = analysis.paired_t_interval(
        [r["difference"] for r in ordered], settings.analysis.confidence
    )
    return {
        "model_a": f"ridge regression (penalty {settings.ridge.penalty})",
        "model_b": f"k-nearest neighbours (k {settings.neighbours})",
        "replicates": ordered,
        "interval": interval.as_record(),
        "decision": analysis.decide(interval),
        "rule": analysis.RULE,
    }


def run_item(research, replicate: int) -> None:
    """The item of one replicate (``research``: the item's prereg ItemContext)."""
    rng = GRID.start(research, replicate)
    record, predictions = compute(research.settings, replicate, rng)
    api.save_json(research.outputs / ITEM_FILE, record)
    api.save_json(research.outputs / PREDICTIONS_FILE, predictions)
    research.progress(f"loss A {record['loss_a']:.4f}, loss B {record['loss_b']:.4f}")


KIND = api.StageKind(
    name=NAME,
    settings=parse_settings,
    grid=GRID,
    summarise=api.summarise_items(SUMMARY_FILE, ITEM_FILE, cells=GRID.cells, build=build_summary),
    replay=api.rerun_replay(run_item, GRID.cells, rtol=REPLAY_RTOL),
    render=api.render_summary(
        "Ridge regression against k-nearest neighbours",
        SUMMARY_FILE,
        table="replicates",
        section_id="paired-models",
    ),
    headline=api.headline_from(SUMMARY_FILE, "decision: {decision}"),
    doc=__doc__ or "",
)
