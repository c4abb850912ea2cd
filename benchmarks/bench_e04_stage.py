"""Benchmark the E04 stage's cells on a real corpus (library level, no gate, no pytest).

Usage::

    python benchmarks/bench_e04_stage.py --repo R --tasks T --reformulations F \\
        --cache C.sqlite [--plan plans/E04_PLAN.json] [--processes 2] [--cold 640]

Runs every composite cell of the plan's grid (``prereg.e04.cells.compute_cell``) with the
plan's harnesses, split by task over ``--processes`` worker processes (as ``-n 2`` does,
each process with its own corpus/index memo), against the vector cache ``--cache``
(pass a warm one: the goal is the whole grid in at most 5 minutes on 2 cores). Prints
the wall time of the grid, index build time per harness and condition, and query
latency. ``--cold N`` also measures cold MiniLM throughput on N function chunks,
batches in corpus order against batches sorted by length (as the cache now embeds).
BM25 against rank_bm25 on the same corpus: ``benchmarks/bench_e04.py --repo R --commit C``.
Synthetic inputs are accepted (the plan's ``allow_synthetic`` is overridden: this is a
benchmark, not a research run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from prereg.base.seeds import derivation, numpy_generator
from prereg.e04 import stage as e04
from prereg.e04.backends import build_backend
from prereg.e04.cache import VectorCache
from prereg.e04.cells import CorpusStore, Workspace, compute_cell
from prereg.e04.plan import grid, settings_from_parameters

NAMESPACE = "bench-e04-stage"


def _settings(plan_path: Path, tasks: int):
    plan = json.loads(plan_path.read_text())
    params = plan["stages"]["e04"]["parameters"]
    params["allow_synthetic"] = True
    params["tasks"]["count"] = tasks
    return settings_from_parameters(params, source=str(plan_path))


def run_tasks(args: tuple) -> list[dict]:
    """Every cell of the given tasks in one process; per-cell timings."""
    plan_path, inputs, cache_path, task_ids, tasks = args
    settings = _settings(plan_path, tasks)
    loaded = e04.load_inputs(settings, inputs)
    backend = build_backend(dict(settings.embedding)) if settings.dense else None
    cache = VectorCache(cache_path, conflict_atol=settings.conflict_atol, busy_timeout_seconds=120)
    workspace = Workspace(CorpusStore(loaded.repository), backend, cache)
    rows = []
    for cell in grid(settings, task_ids):
        task = loaded.task_file.task(cell.task_id)
        start = time.perf_counter()
        out = compute_cell(
            cell,
            task,
            settings,
            workspace,
            numpy_generator(NAMESPACE, cell.task_id, settings.distractor_seed_label),
            loaded.reformulations.texts,
            synthetic=loaded.synthetic,
            seed_derivation=derivation(NAMESPACE, cell.task_id, settings.distractor_seed_label),
        )
        rows.append(
            {
                "cell": cell.item_id,
                "harness": cell.harness,
                "seconds": time.perf_counter() - start,
                "timing": out.timing,
            }
        )
    return rows


def cold_throughput(repo: Path, commit: str, n: int, batch: int) -> None:
    import numpy as np

    from prereg.e04.embeddings import MiniLMBackend
    from prereg.e04.gitcorpus import read_tree
    from prereg.e04.goparse import parse_go_functions

    files = read_tree(repo, commit)
    texts = [f.text for p, d in files.items() for f in parse_go_functions(p, d)]
    picked = [texts[i] for i in np.random.default_rng(0).choice(len(texts), n, replace=False)]
    backend = MiniLMBackend("go-function-text-1", batch_size=batch)
    backend.embed(picked[:batch])  # load the model outside the timing
    for label, order in (("corpus order", picked), ("sorted by length", sorted(picked, key=len))):
        start = time.perf_counter()
        for i in range(0, n, batch):
            backend.embed(order[i : i + batch])
        seconds = time.perf_counter() - start
        print(f"cold MiniLM, one process, {label}: {n / seconds:.1f} chunks/s ({seconds:.1f} s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True)
    parser.add_argument("--tasks", type=Path, required=True)
    parser.add_argument("--reformulations", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True, help="vector cache (warm)")
    parser.add_argument("--plan", type=Path, default=Path("plans/E04_PLAN.json"))
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--cold", type=int, default=0, help="chunks for the cold MiniLM figure")
    args = parser.parse_args(argv)
    inputs = {"repository": args.repo, "tasks": args.tasks, "reformulations": args.reformulations}
    task_ids = [t["task_id"] for t in json.loads(args.tasks.read_text())["tasks"]]
    shares = [task_ids[i :: args.processes] for i in range(args.processes)]
    start = time.perf_counter()
    with ProcessPoolExecutor(args.processes) as pool:
        parts = list(
            pool.map(
                run_tasks,
                [(args.plan, inputs, args.cache, share, len(task_ids)) for share in shares],
            )
        )
    wall = time.perf_counter() - start
    rows = [row for part in parts for row in part]
    print(f"grid: {len(rows)} cells in {wall:.1f} s on {args.processes} processes (warm cache)")
    for harness in sorted({r["harness"] for r in rows}):
        mine = [r for r in rows if r["harness"] == harness]
        for condition in ("baseline", "S001", "S002"):
            built = [
                r["timing"][condition]["build_seconds"]
                for r in mine
                if not r["timing"][condition]["index_reused"]
                and r["timing"][condition].get("computed_in_this_cell", True)
            ]
            queries = [r["timing"][condition]["query_seconds"] for r in mine]
            print(
                f"{harness} {condition:<8} index build median "
                f"{statistics.median(built) if built else float('nan'):.2f} s over {len(built)} "
                f"builds; query median {1000 * statistics.median(queries):.1f} ms"
            )
        print(f"{harness} per cell median {statistics.median(r['seconds'] for r in mine):.2f} s")
    if args.cold:
        tasks = json.loads(args.tasks.read_text())["tasks"]
        cold_throughput(args.repo, tasks[0]["base_commit"], args.cold, 32)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
