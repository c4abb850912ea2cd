"""Benchmark: seconds per training epoch of B2 (stock, fused, compiled GRU) and B1.

Run from the repository root::

    .venv/bin/python benchmarks/bench_training.py            # plan shape, 3 rounds x 2 epochs
    .venv/bin/python benchmarks/bench_training.py --rounds 1 --epochs 1 --episodes 512  # quick

Toy data of the plan's shape (4096 training and 1024 validation episodes of 129
observations, 5 symbols, 4 targets; the values do not change the cost) are drawn
from a fixed numpy generator. Every model is trained by the real
``prereg.rp002a.training.train`` for ``--epochs`` epochs (validation included,
patience never reached); one thread (``torch.set_num_threads(1)``). All models
are timed in the same run on the same data, so the ratios are meaningful on a
busy machine even when the absolute seconds are not. The ``compiled`` kernel is
built first if needed (the build is not timed); if it is unavailable the script
says why and times the others.

The confirmatory-stage projection assumes n = 50 replicates x 3 worlds x 2 learned
models = 300 fits (150 B1 + 150 B2), ``--mean-epochs`` epochs per fit (default 80,
an assumption: the real figure comes from the target-variance stage's traces),
and ``--workers`` worker processes with one thread each sharing the work
perfectly. Data generation, B0, assessment and analysis are not included.
This is a script, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys

import numpy as np
import torch

from prereg.rp002a.gru_kernel import KernelUnavailableError, load_kernel
from prereg.rp002a.models import build_model
from prereg.rp002a.training import TrainConfig, train

# Plan values (DESIGN.md "RP002A reference generator laws"); the benchmark needs
# them only to reproduce the real cost.
SIZES = {
    "B1": {"n_symbols": 5, "n_targets": 4, "window": 8, "conv_channels": 64, "hidden_channels": 64},
    "B2": {"n_symbols": 5, "n_targets": 4, "hidden": 64},
}
CONFIG = {
    "learning_rate": 1e-3,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_eps": 1e-8,
    "batch_size": 32,
    "grad_clip_norm": 1.0,
    "probability_clip": 1e-8,
    "patience": 20,
    "final_20_window": 20,
    "final_five_window": 5,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=4096, help="training episodes")
    parser.add_argument("--val-episodes", type=int, default=1024, help="validation episodes")
    parser.add_argument("--steps", type=int, default=129, help="observations per episode")
    parser.add_argument("--epochs", type=int, default=2, help="epochs timed per model and round")
    parser.add_argument(
        "--rounds", type=int, default=3,
        help="rounds of (stock, fused, compiled, B1), interleaved so that a changing "
        "background load affects every model alike; the median epoch is reported",
    )  # fmt: skip
    parser.add_argument(
        "--mean-epochs", type=float, default=80.0,
        help="assumed mean epochs per fit incl. the patience tail (real figure: "
        "target-variance stage traces; DESIGN.md reports about 60-90)",
    )  # fmt: skip
    parser.add_argument(
        "--fits-per-model",
        type=int,
        default=150,
        help="fits per learned model: n replicates x 3 worlds (150 for n = 50)",
    )
    parser.add_argument("--workers", type=int, default=2, help="processes, one thread each")
    parser.add_argument("--allowance", type=float, default=14400.0, help="stage seconds")
    parser.add_argument("--goal", type=float, default=7200.0, help="target seconds")
    return parser.parse_args(argv)


def epoch_seconds(kind: str, implementation: str | None, data: tuple, epochs: int) -> list[float]:
    """Wall seconds of each training epoch (incl. validation) of ``train``."""
    model = build_model(kind, SIZES[kind], implementation=implementation)
    config = TrainConfig.from_mapping({**CONFIG, "max_epochs": epochs, "patience": epochs + 1})
    result = train(
        model, *data, config,
        init_generator=torch.Generator().manual_seed(0),
        order_generator=np.random.default_rng(0),
    )  # fmt: skip
    return [record.seconds for record in result.trace]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    rng = np.random.default_rng(20261009)

    def split(episodes: int) -> tuple[np.ndarray, np.ndarray]:
        obs = rng.integers(0, 5, size=(episodes, args.steps), dtype=np.uint8)
        return obs, rng.integers(0, 4, size=(episodes, args.steps), dtype=np.uint8)

    data = (*split(args.episodes), *split(args.val_episodes))
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"{platform.platform()}, python {sys.version.split()[0]}"
    )
    print(
        f"data: {args.episodes} train + {args.val_episodes} validation episodes x "
        f"{args.steps}; {args.rounds} round(s) of {args.epochs} epoch(s) per model"
    )
    try:
        kernel = load_kernel()
        print(f"compiled kernel: {kernel.library} ({' '.join(kernel.flags)})")
    except KernelUnavailableError as error:
        kernel = None
        print(f"compiled kernel unavailable, not timed: {error}")
    models = [("B2-stock", "B2", "stock"), ("B2-fused", "B2", "fused")]
    if kernel is not None:
        models.append(("B2-compiled", "B2", "compiled"))
    models.append(("B1", "B1", None))
    epochs: dict[str, list[float]] = {name: [] for name, _, _ in models}
    for _ in range(args.rounds):
        for name, kind, implementation in models:
            epochs[name] += epoch_seconds(kind, implementation, data, args.epochs)
    seconds = {name: statistics.median(values) for name, values in epochs.items()}
    for name, value in seconds.items():
        print(f"{name:11s} {value:8.3f} s/epoch")
    ratios = {
        f"{impl}_over_stock": seconds[f"B2-{impl}"] / seconds["B2-stock"]
        for impl in ("fused", "compiled")
        if f"B2-{impl}" in seconds
    }
    for name, value in ratios.items():
        print(f"{name.replace('_over_', '/')} ratio {value:.3f} (goal <= 0.3)")
    if "B2-compiled" in seconds:
        print(f"compiled speed-up over fused {seconds['B2-fused'] / seconds['B2-compiled']:.2f}x")

    def projection(b2_seconds: float) -> float:
        return args.fits_per_model * args.mean_epochs * (seconds["B1"] + b2_seconds) / args.workers

    projected = {impl: projection(seconds[f"B2-{impl}"]) for impl in ("stock", "fused", "compiled")
                 if f"B2-{impl}" in seconds}  # fmt: skip
    print(
        f"projection (confirmatory n = {args.fits_per_model // 3} per world): "
        f"{2 * args.fits_per_model} fits x "
        f"{args.mean_epochs:g} epochs on {args.workers} workers: "
        + ", ".join(f"{impl} {value:,.0f} s" for impl, value in projected.items())
        + f" (allowance {args.allowance:,.0f} s, goal {args.goal:,.0f} s)"
    )
    print(
        json.dumps(
            {
                "seconds_per_epoch": seconds,
                "epoch_seconds_all": epochs,
                **ratios,
                **{f"projected_seconds_{impl}": value for impl, value in projected.items()},
                "compiled_kernel": None if kernel is None else kernel.to_dict(),
                "args": vars(args),
            },
            sort_keys=True,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
