"""Cold-cache embedding by two workers: texts embedded and wall time, before and after claims.

Usage::

    python benchmarks/make_go_stdlib_repo.py /tmp/go            # once: the corpus
    python benchmarks/bench_e04_claims.py --go /tmp/go --before /tmp/wt/lib \\
        [--texts 2000] [--repeats 2] [--parity both|any] [--out result.json]

Two worker processes (as ``pytest -n 2``) each ask ``embed_with_cache_report`` for the
same texts (the first ``--texts`` functions, in corpus order, of the corpus at the first
task's base commit: what two workers building the baseline index of one corpus ask for)
against one fresh vector cache, started together, with the plan's MiniLM backend and
batch size. Each variant runs in fresh processes: ``--before`` is the ``lib`` folder of
a checkout of the code before the claims (``git worktree add /tmp/wt <commit>``), the
other is this checkout's ``lib``. Variants alternate, ``--repeats`` times each, in one
invocation (same machine, same load). The old code ordered texts by pid parity, so its
duplication depends on it: ``--parity both`` (default) runs each variant once with both
workers' pids even and once with one even, one odd (a worker re-starts itself until its
pid has the parity asked). Reports per run: wall time of the pair, texts each worker
embedded (counted at the backend), unique texts, and the pids' parity. Results:
docs/records/E04_EMBEDDING_CLAIMS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def worker(
    lib: str, cache_path: str, texts_file: str, out: str, plan: str, go: str, parity: str
) -> None:
    if parity != "any" and os.getpid() % 2 != int(parity):
        # The old code orders texts by pid parity: re-start until this pid has the one asked.
        raise SystemExit(subprocess.call([sys.executable, *sys.argv]))
    sys.path.insert(0, lib)
    import prereg
    from prereg.e04.backends import build_backend
    from prereg.e04.cache import VectorCache, embed_with_cache_report
    from prereg.e04.plan import settings_from_parameters

    document = json.loads(Path(plan).read_text())
    params = document["stages"]["e04"]["parameters"]
    settings = settings_from_parameters(params, source=plan)
    backend = build_backend(dict(settings.embedding))
    batch = next(s.embedding_batch_size for s in settings.harnesses.values() if s.kind != "bm25")
    embedded = [0]
    inner = backend.embed

    def counting(texts):
        embedded[0] += len(texts)
        return inner(texts)

    backend.embed = counting
    backend.embed(["warm up the model before the clock starts"])
    embedded[0] = 0
    texts = json.loads(Path(texts_file).read_text())
    cache = VectorCache(
        cache_path,
        conflict_atol=settings.conflict_atol,
        busy_timeout_seconds=settings.busy_timeout_seconds,
    )
    ready = Path(out + ".ready")
    ready.write_text("")
    go_file = Path(go)
    while not go_file.exists():
        time.sleep(0.01)
    start = time.perf_counter()
    embed_with_cache_report(backend, cache, texts, batch_size=batch)
    seconds = time.perf_counter() - start
    cache.close()
    Path(out).write_text(
        json.dumps(
            {
                "pid": os.getpid(),
                "embedded": embedded[0],
                "seconds": seconds,
                "end": time.time(),
                "start": time.time() - seconds,
                "prereg": prereg.__file__,
            }
        )
    )


def corpus_texts(go: Path, count: int) -> list[str]:
    from prereg.e04.cells import CorpusStore
    from prereg.e04.tasks import load_task_file

    tasks = load_task_file(go / "tasks.json")
    store = CorpusStore(go / "repository")
    functions = store.functions(store.files(tasks.tasks[0].base_commit))
    texts = list(dict.fromkeys(f.text for f in functions))
    return texts[:count]


def run_pair(
    lib: Path, texts_file: Path, plan: Path, work: Path, processes: int, parities: list[str]
) -> dict:
    cache = work / "cache.sqlite"
    go = work / "go"
    outs = [work / f"w{i}.json" for i in range(processes)]
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", str(lib), str(cache), str(texts_file)]
            + [str(out), str(plan), str(go), parity],
            cwd=ROOT,
        )
        for out, parity in zip(outs, parities)
    ]
    while not all(Path(str(o) + ".ready").exists() for o in outs):
        if any(p.poll() not in (None, 0) for p in procs):
            raise SystemExit("a worker failed before starting")
        time.sleep(0.05)
    go.write_text("")
    for p in procs:
        if p.wait() != 0:
            raise SystemExit(f"worker exited with {p.returncode}")
    rows = [json.loads(o.read_text()) for o in outs]
    wall = max(r["end"] for r in rows) - min(r["start"] for r in rows)
    return {
        "lib": str(lib),
        "modules": sorted({r["prereg"] for r in rows}),
        "wall_seconds": round(wall, 2),
        "embedded_per_worker": [r["embedded"] for r in rows],
        "embedded_total": sum(r["embedded"] for r in rows),
        "pid_parity": [r["pid"] % 2 for r in rows],
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(*sys.argv[2:9])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--go", type=Path, required=True, help="make_go_stdlib_repo.py DEST")
    parser.add_argument("--before", type=Path, required=True, help="lib/ of the old checkout")
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--plan", type=Path, default=ROOT / "plans" / "E04_PLAN.json")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--parity",
        choices=("any", "both"),
        default="both",
        help="both: run each variant with workers of equal pid parity and of opposite parity "
        "(the old code's duplication depends on it); any: whatever pids come",
    )
    args = parser.parse_args()
    texts = corpus_texts(args.go, args.texts)
    results = {"texts": len(texts), "unique_texts": len(set(texts)), "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps(texts))
        variants = [("before", args.before.resolve()), ("after", (ROOT / "lib").resolve())]
        layouts = (
            {"any": ["any"] * args.processes}
            if args.parity == "any"
            else {
                "equal parity": ["0"] * args.processes,
                "opposite parity": [str(i % 2) for i in range(args.processes)],
            }
        )
        for repeat in range(args.repeats):
            for layout, parities in layouts.items():
                for name, lib in variants:
                    work = Path(tmp) / f"{name}-{repeat}-{parities}"
                    work.mkdir()
                    row = {"variant": name, "repeat": repeat, "layout": layout}
                    row.update(run_pair(lib, texts_file, args.plan, work, args.processes, parities))
                    results["runs"].append(row)
                    print(json.dumps(row), flush=True)
    for name in ("before", "after"):
        rows = [r for r in results["runs"] if r["variant"] == name]
        results[name] = {
            "wall_seconds_mean": round(sum(r["wall_seconds"] for r in rows) / len(rows), 2),
            "embedded_total_mean": sum(r["embedded_total"] for r in rows) / len(rows),
        }
    results["ratio_wall_after_over_before"] = round(
        results["after"]["wall_seconds_mean"] / results["before"]["wall_seconds_mean"], 3
    )
    results["ratio_embedded_after_over_before"] = round(
        results["after"]["embedded_total_mean"] / results["before"]["embedded_total_mean"], 3
    )
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
