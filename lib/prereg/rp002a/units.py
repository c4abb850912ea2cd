"""One RP002A unit (world x replicate): data, B0, the learned fits, losses, diagnostics.

Shared by the target-variance and confirmatory stages; only the seed namespace and the
number of replicates differ. A unit's outputs (one folder, one pytest item):

``datasets.npz``       the three splits, exact uint8 (prereg.rp002a.datasets format)
``probabilities.npz``  assessment probabilities per model in their original precision
                       (B0 float64 from the frequency table; B1, B2 float32 from softmax)
``losses.npz``         per-timepoint clipped log losses per model, float64 [episodes, T]
``B1.weights`` ...     selected weights of each learned model (deterministic bytes)
``unit.json``          seeds, dataset hash, B0 table, per-fit selection and per-epoch
                       losses, replicate losses, the world's contrasts, diagnostics
``unit.timing.json``   wall time per fit and per epoch, peak memory per fit (the only
                       non-reproducible figures)

Timepoints reduce to episode means, then to the equally weighted replicate mean; all
models of a replicate are assessed on the same assessment episodes, so contrasts are paired.
Every function reads the plan's shared block as :class:`prereg.rp002a.settings.SharedSettings`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from prereg.api import PeakScope, write_json
from prereg.api import arrays as npz
from prereg.rp002a.datasets import (
    dataset_content_sha256,
    generate_unit_datasets,
    save_unit_datasets,
)
from prereg.rp002a.diagnostics import secondary_diagnostics
from prereg.rp002a.frequency import fit_frequency_table, frequency_predictions
from prereg.rp002a.ideal import InformationSet, ideal_predictions
from prereg.rp002a.losses import clipped_log_loss, paired_contrast
from prereg.rp002a.settings import SharedSettings

DATASETS = "datasets.npz"
PROBABILITIES = "probabilities.npz"
LOSSES = "losses.npz"
UNIT = "unit.json"
TIMING = "unit.timing.json"
SPLITS = ("train", "validation", "assessment")


@dataclass(frozen=True)
class Unit:
    world: str
    replicate: int

    @property
    def unit_id(self) -> str:
        return f"{self.world}-r{self.replicate:03d}"


def units(shared: SharedSettings, replicates: int) -> list[Unit]:
    """World-major order: every replicate of E0, then E1, then E2 (the plan's world order)."""
    return [Unit(world, r) for world in shared.world_order for r in range(1, replicates + 1)]


def unit_key(coords) -> str:
    """The item key of a unit item: its recorded ``world`` and ``replicate``, nothing else."""
    if set(coords) != {"world", "replicate"}:
        raise ValueError(f"a unit item records world and replicate, not {sorted(coords)}")
    world, replicate = coords["world"], coords["replicate"]
    if not isinstance(world, str):
        raise TypeError(f"world {world!r} is not a name")
    if not isinstance(replicate, int) or isinstance(replicate, bool):
        raise TypeError(f"replicate {replicate!r} is not an integer")
    return Unit(world, replicate).unit_id


def law_for(shared: SharedSettings, world: str):
    return shared.laws[world]


def weights_file(model: str) -> str:
    return f"{model}.weights"


def generate_datasets(
    shared: SharedSettings, unit: Unit, numpy_rng: Callable[..., np.random.Generator]
):
    data = shared.data
    rngs = {split: numpy_rng(unit.world, unit.replicate, "data", split) for split in SPLITS}
    return generate_unit_datasets(
        law_for(shared, unit.world),
        n_timepoints=data.n_timepoints,
        train_episodes=data.train_episodes,
        validation_episodes=data.validation_episodes,
        assessment_episodes=data.assessment_episodes,
        train_rng=rngs["train"],
        validation_rng=rngs["validation"],
        assessment_rng=rngs["assessment"],
    )


def learned_model(shared: SharedSettings, name: str):
    # prereg.rp002a.models imports torch (the training extra, optional)
    from prereg.rp002a.models import build_model

    spec = shared.models[name]
    return build_model(spec.kind, dict(spec.sizes), implementation=spec.implementation)


def assessment_analysis(
    shared: SharedSettings, unit: Unit, datasets, probabilities: dict[str, np.ndarray]
) -> dict:
    """Losses, replicate means, the world's contrasts and diagnostics, from probabilities.

    Pure given its inputs: the audit recomputes it from the saved probabilities.
    """
    clip = shared.probability_clip
    law = law_for(shared, unit.world)
    assessment = datasets.assessment
    losses = {
        name: clipped_log_loss(p, assessment.targets, clip) for name, p in probabilities.items()
    }
    episode_means = {name: loss.mean(axis=1) for name, loss in losses.items()}
    replicate = {name: float(means.mean()) for name, means in episode_means.items()}
    contrasts = {
        c.id: float(paired_contrast(episode_means[c.minuend], episode_means[c.subtrahend]).mean)
        for c in shared.world_contrasts(unit.world)
    }
    diagnostics = {}
    for name, p in probabilities.items():
        info = shared.models[name].information_set
        window = shared.models["B1"].sizes["window"] if info == "window" else None
        ideal = ideal_predictions(law, assessment.observations, InformationSet(info), window=window)
        diagnostics[name] = secondary_diagnostics(
            p,
            assessment.targets,
            assessment.observations,
            ideal,
            information_set=info,
            clip=clip,
            erasure_symbol=law.erasure_symbol,
            n_confidence_bins=shared.confidence_bins,
        ).to_record()
    return {
        "losses": losses,
        "replicate_loss": replicate,
        "contrasts": contrasts,
        "diagnostics": diagnostics,
    }


def run_unit(
    shared: SharedSettings,
    unit: Unit,
    *,
    outputs: Path,
    numpy_rng: Callable[..., np.random.Generator],
    torch_rng: Callable[..., object],
    deadline: float | None,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Generate, fit B0, train B1 and B2, assess after selection, save everything."""
    # prereg.rp002a.training imports torch (the training extra, optional)
    from prereg.rp002a.training import TrainConfig, predict_probabilities, save_weights, train

    datasets = generate_datasets(shared, unit, numpy_rng)
    save_unit_datasets(datasets, outputs / DATASETS)
    law = law_for(shared, unit.world)
    train_split, validation = datasets.train, datasets.validation

    table = fit_frequency_table(
        train_split.observations,
        train_split.targets,
        n_symbols=law.n_symbols,
        n_classes=law.n_states,
    )
    probabilities = {"B0": frequency_predictions(table, datasets.assessment.observations)}
    fits, timing = {}, {}
    config: TrainConfig = shared.training
    monotonic_deadline = None if deadline is None else time.monotonic() + (deadline - time.time())
    for name in shared.learned_models:
        model = learned_model(shared, name)
        started = time.perf_counter()
        with PeakScope() as peak:
            result = train(
                model,
                train_split.observations,
                train_split.targets,
                validation.observations,
                validation.targets,
                config,
                init_generator=torch_rng(unit.world, unit.replicate, name, "init"),
                order_generator=numpy_rng(unit.world, unit.replicate, name, "order"),
                deadline=monotonic_deadline,
                progress=None
                if progress is None
                else (
                    lambda epoch, tr, va, name=name: progress(
                        f"{unit.unit_id} {name} epoch {epoch}: train {tr:.5f} val {va:.5f}"
                    )
                ),
            )
        # Assessment only after selection: the model now holds the selected weights.
        probabilities[name] = predict_probabilities(model, datasets.assessment.observations)
        save_weights(result.best_state, outputs / weights_file(name))
        fits[name] = {
            "best_epoch": result.best_epoch,
            "best_validation_loss": result.best_validation_loss,
            "epochs_run": result.epochs_run,
            "stop_reason": result.stop_reason,
            "flags": {
                "near_cap": result.near_cap,
                "final_20": result.final_20,
                "final_five": result.final_five,
            },
            "trace": [
                {"epoch": e.epoch, "train_loss": e.train_loss, "validation_loss": e.validation_loss}
                for e in result.trace
            ],
        }
        timing[name] = {
            "wall_seconds": round(time.perf_counter() - started, 3),
            "epoch_seconds": [round(e.seconds, 4) for e in result.trace],
            "peak_rss_bytes": peak.bytes,
            "peak_rss_scope": peak.scope,
            "implementation": implementation_record(shared, name),
        }
    npz.save_npz(outputs / PROBABILITIES, probabilities)
    analysis = assessment_analysis(shared, unit, datasets, probabilities)
    npz.save_npz(outputs / LOSSES, analysis["losses"])
    record = unit_record(shared, unit, datasets, table.to_record(), fits, analysis)
    write_json(outputs / UNIT, record)
    write_json(
        outputs / TIMING, {"non_reproducible": "wall time and peak memory per fit", "fits": timing}
    )
    return record


def implementation_record(shared: SharedSettings, model: str) -> dict | None:
    """Which build of the named implementation ran (machine-specific, so kept with timing)."""
    implementation = shared.models[model].implementation
    if implementation != "compiled":
        return None if implementation is None else {"name": implementation}
    # prereg.rp002a.gru_kernel imports torch (the training extra, optional)
    from prereg.rp002a.gru_kernel import load_kernel

    return {"name": implementation, **load_kernel().to_dict()}


def unit_record(
    shared: SharedSettings, unit: Unit, datasets, table: dict, fits: dict, analysis: dict
) -> dict:
    return {
        "world": unit.world,
        "replicate": unit.replicate,
        "unit_id": unit.unit_id,
        "dataset_content_sha256": dataset_content_sha256(datasets),
        "models": {name: shared.models[name].record() for name in ["B0", *shared.learned_models]},
        "B0_table": table,
        "fits": fits,
        "replicate_loss": analysis["replicate_loss"],
        "contrasts": analysis["contrasts"],
        "diagnostics": analysis["diagnostics"],
    }
