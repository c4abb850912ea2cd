"""Benchmark: seconds per training epoch of B2 (stock vs fused GRU) and B1.

Run from the repository root::

    .venv/bin/python benchmarks/bench_training.py            # plan shape, 2 epochs each
    .venv/bin/python benchmarks/bench_training.py --epochs 1 --episodes 512   # quick look

Toy data of the plan's shape (4096 training and 1024 validation episodes of 129
observations, 5 symbols, 4 targets; the values do not change the cost) are drawn
from a fixed numpy generator. Every model is trained by the real
``prereg.rp002a.training.train`` for ``--epochs`` epochs (validation included,
patience never reached); one thread (``torch.set_num_threads(1)``).

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
    parser.add_argument("--epochs", type=int, default=2, help="epochs timed per model")
    parser.add_argument(
        "--mean-epochs", type=float, default=80.0,
        help="assumed mean epochs per fit incl. the patience tail (real figure: "
        "target-variance stage traces; DESIGN.md reports about 60-90)",
    )  # fmt: skip
    parser.add_argument("--fits-per-model", type=int, default=150, help="50 x 3 worlds")
    parser.add_argument("--workers", type=int, default=2, help="processes, one thread each")
    parser.add_argument("--allowance", type=float, default=14400.0, help="stage seconds")
    parser.add_argument("--goal", type=float, default=7200.0, help="target seconds")
    return parser.parse_args(argv)


def epoch_seconds(kind: str, implementation: str | None, data: tuple, epochs: int) -> float:
    """Median wall seconds of one training epoch (incl. validation) of ``train``."""
    model = build_model(kind, SIZES[kind], implementation=implementation)
    config = TrainConfig.from_mapping({**CONFIG, "max_epochs": epochs, "patience": epochs + 1})
    result = train(
        model, *data, config,
        init_generator=torch.Generator().manual_seed(0),
        order_generator=np.random.default_rng(0),
    )  # fmt: skip
    return statistics.median(record.seconds for record in result.trace)


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
        f"{args.steps}; {args.epochs} epoch(s) per model"
    )
    seconds = {
        "B2-stock": epoch_seconds("B2", "stock", data, args.epochs),
        "B2-fused": epoch_seconds("B2", "fused", data, args.epochs),
        "B1": epoch_seconds("B1", None, data, args.epochs),
    }
    for name, value in seconds.items():
        print(f"{name:9s} {value:8.3f} s/epoch")
    ratio = seconds["B2-fused"] / seconds["B2-stock"]
    print(f"fused/stock ratio {ratio:.3f} (goal <= 0.3)")

    per_unit_epoch = seconds["B1"] + seconds["B2-fused"]
    serial = args.fits_per_model * args.mean_epochs * per_unit_epoch
    projected = serial / args.workers
    stock_projected = (
        args.fits_per_model
        * args.mean_epochs
        * (seconds["B1"] + seconds["B2-stock"])
        / args.workers
    )
    print(
        f"projection: {2 * args.fits_per_model} fits x {args.mean_epochs:g} epochs on "
        f"{args.workers} workers: fused {projected:,.0f} s, stock {stock_projected:,.0f} s "
        f"(allowance {args.allowance:,.0f} s, goal {args.goal:,.0f} s)"
    )
    print(
        json.dumps(
            {
                "seconds_per_epoch": seconds,
                "fused_over_stock": ratio,
                "projected_seconds_fused": projected,
                "projected_seconds_stock": stock_projected,
                "args": vars(args),
            },
            sort_keys=True,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
