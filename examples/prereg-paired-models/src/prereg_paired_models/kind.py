"""The stage kind ``paired-models.compare``: items, summary, replay and report section.

One item per dataset replicate. Each item draws its replicate from the generator seeded by
``(seed_namespace, "replicate", r)``, fits both models, and writes ``replicate.json`` (the
two test losses and their difference) and ``predictions.json`` (both models' test
predictions). The summary (``summary/comparison.json``) holds the per-replicate losses, the
paired t interval of loss(B) - loss(A) and the decision. The replay regenerates every
replicate from its seed, refits both models, and compares predictions, losses and the whole
summary with what the run wrote.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prereg import seeds
from prereg.report import html as h
from prereg.stages import RunView, StageKind
from prereg_paired_models import analysis, models
from prereg_paired_models.settings import Settings, parse_settings

NAME = "paired-models.compare"
ITEM_FILE = "replicate.json"
PREDICTIONS_FILE = "predictions.json"
SUMMARY_FILE = "comparison.json"
# The replay refits on this machine: equal up to floating-point reassociation (another BLAS)
# within this relative tolerance; a changed number beyond it is a finding.
REPLAY_RTOL = 1e-9


def replicates(settings: Settings) -> list[int]:
    return list(range(settings.replicates))


def replicate_id(replicate: int) -> str:
    return f"replicate{replicate}"


def seed_coords(replicate: int) -> tuple[object, ...]:
    return ("replicate", replicate)


def item_key(coords: Mapping[str, Any]) -> str:
    """An item's key from the coordinates it recorded (``research.coords(replicate=r)``).

    Exactly one coordinate, an int: ``True``, ``"1"`` or ``1.7`` names no replicate."""
    replicate = coords.get("replicate")
    if set(coords) != {"replicate"} or type(replicate) is not int:
        raise ValueError(f"an item records one int coordinate 'replicate', not {dict(coords)!r}")
    return replicate_id(replicate)


def _dump(path: Path, value: object) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def compute(settings: Settings, replicate: int, rng) -> tuple[dict, dict]:
    """(the replicate's record, its predictions) from the generator of its seed."""
    data = models.draw(settings, rng)
    predicted_a = models.ridge_predict(data, settings.penalty)
    predicted_b = models.knn_predict(data, settings.neighbours)
    loss_a = models.mean_squared_error(data.y_test, predicted_a)
    loss_b = models.mean_squared_error(data.y_test, predicted_b)
    record = {
        "replicate": replicate,
        "loss_a": loss_a,
        "loss_b": loss_b,
        "difference": loss_b - loss_a,
    }
    predictions = {"a": predicted_a.tolist(), "b": predicted_b.tolist()}
    return record, predictions


def run_item(research, replicate: int) -> None:
    """The item of one replicate (``research`` is the item's prereg ItemContext, whose
    ``settings`` are this kind's typed settings of the stage)."""
    settings: Settings = research.settings
    research.coords(replicate=replicate)
    rng = research.numpy_generator(*seed_coords(replicate))
    record, predictions = compute(settings, replicate, rng)
    _dump(research.outputs / ITEM_FILE, record)
    _dump(research.outputs / PREDICTIONS_FILE, predictions)
    research.progress(f"loss A {record['loss_a']:.4f}, loss B {record['loss_b']:.4f}")


def build_summary(settings: Settings, records: list[dict]) -> dict:
    records = sorted(records, key=lambda r: r["replicate"])
    interval = analysis.paired_t_interval([r["difference"] for r in records], settings.confidence)
    return {
        "model_a": f"ridge regression (penalty {settings.penalty})",
        "model_b": f"k-nearest neighbours (k {settings.neighbours})",
        "replicates": records,
        "interval": interval.as_record(),
        "decision": analysis.decide(interval),
        "rule": analysis.RULE,
    }


def _paired(view: RunView) -> tuple[list[tuple[str, dict, int]], list[str]]:
    settings = view.settings
    return view.match({replicate_id(r): r for r in replicates(settings)})


def summarise(view: RunView) -> None:
    pairs, problems = _paired(view)
    if problems:
        raise ValueError("; ".join(problems))
    records = [view.load_item_json(item, ITEM_FILE) for _, item, _ in pairs]
    view.summary_dir.mkdir(parents=True, exist_ok=True)
    _dump(view.summary_dir / SUMMARY_FILE, build_summary(view.settings, records))


def _differences(where: str, found: Any, expected: Any) -> list[str]:
    """Where ``found`` (what the run wrote) differs from ``expected`` (the replay)."""
    if isinstance(expected, dict):
        if not isinstance(found, dict) or set(found) != set(expected):
            shown = sorted(found) if isinstance(found, dict) else repr(found)
            return [f"{where}: fields {shown}, the replay's {sorted(expected)}"]
        return [
            d for k in sorted(expected) for d in _differences(f"{where}.{k}", found[k], expected[k])
        ]
    if isinstance(expected, list):
        if not isinstance(found, list) or len(found) != len(expected):
            return [f"{where}: not the replay's {len(expected)} values"]
        wrong = [i for i, (f, e) in enumerate(zip(found, expected)) if _differences("", f, e)]
        return (
            [f"{where}: {len(wrong)} value(s) differ from the replay, first [{wrong[0]}]"]
            if wrong
            else []
        )
    if (
        isinstance(expected, float)
        and isinstance(found, (int, float))
        and not isinstance(found, bool)
    ):
        if math.isclose(found, expected, rel_tol=REPLAY_RTOL, abs_tol=0.0):
            return []
        return [f"{where}: {found!r}, the replay gives {expected!r}"]
    return [] if found == expected else [f"{where}: {found!r}, the replay gives {expected!r}"]


def replay(view: RunView) -> list[str]:
    """Regenerate each replicate from its seed, refit, recompute; findings where they differ."""
    settings = view.settings
    pairs, findings = _paired(view)
    replayed = []
    for key, item, replicate in pairs:
        coords = seed_coords(replicate)
        wanted = [seeds.derivation(settings.seed_namespace, *coords)]
        if item.get("seeds") != wanted:
            findings.append(f"{key}: recorded seeds {item.get('seeds')}, the plan's are {wanted}")
            continue
        record, predictions = compute(
            settings, replicate, seeds.numpy_generator(settings.seed_namespace, *coords)
        )
        replayed.append(record)
        for name, expected in ((ITEM_FILE, record), (PREDICTIONS_FILE, predictions)):
            found = _load(view.item_dir(item) / name)
            findings += _differences(f"{key} {name}", found, expected)
    if len(replayed) == settings.replicates:
        stored = _load(view.summary_dir / SUMMARY_FILE)
        findings += _differences(
            f"summary/{SUMMARY_FILE}", stored, build_summary(settings, replayed)
        )
    return findings


def render(context) -> str:
    """The report section (``context`` is prereg's SectionContext of a complete run)."""
    summary = context.summary_json(SUMMARY_FILE)
    interval = summary["interval"]
    level = f"{interval['confidence']:.0%}"
    body = [
        h.key_values(
            [
                ("model A", summary["model_a"]),
                ("model B", summary["model_b"]),
                ("replicates", interval["n"]),
                ("mean of loss(B) - loss(A)", interval["mean"]),
                (
                    f"{level} paired t interval",
                    f"[{interval['lower']:.4g}, {interval['upper']:.4g}]",
                ),
                ("decision", summary["decision"]),
            ]
        ),
        h.paragraph(summary["rule"], css="note"),
        h.table(
            ["replicate", "loss A (ridge)", "loss B (k-NN)", "loss(B) - loss(A)"],
            [
                [r["replicate"], r["loss_a"], r["loss_b"], r["difference"]]
                for r in summary["replicates"]
            ],
            caption="Test mean squared error per dataset replicate",
        ),
    ]
    return h.section(
        "Ridge regression against k-nearest neighbours", "\n".join(body), section_id="paired-models"
    )


KIND = StageKind(
    name=NAME,
    settings=parse_settings,
    item_key=item_key,
    summarise=summarise,
    replay=replay,
    render=render,
    doc=__doc__ or "",
)
