"""Benchmark the E04 retrieval layer: embeddings, index builds, queries, prereg BM25 vs rank_bm25.

Usage::

    python benchmarks/bench_e04.py                       # generated corpus, 2,000 files
    python benchmarks/bench_e04.py --files 500 --functions-per-file 3
    python benchmarks/bench_e04.py --corpus path/to/go/tree
    python benchmarks/bench_e04.py --repo path/to/repo --commit <sha>

Prints cold embedding throughput (MiniLM, empty cache), index build time per
harness (H000, H008 with a warm cache), query latency, and BM25 index+query time
of prereg.e04.lexical (bm25s's scores) with the project tokenizer against
rank_bm25.BM25Okapi on the same tokens, measured in the same run. Timings are wall
clock on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

from prereg.base.seeds import numpy_generator
from prereg.e04.cache import VectorCache, embed_with_cache_report
from prereg.e04.embeddings import EMBEDDING_THREADS, MiniLMBackend
from prereg.e04.goparse import parse_go_functions
from prereg.e04.harness import CHUNK_TEXT_VERSION, build, default_registry
from prereg.e04.lexical import BM25Index, BM25Parameters
from prereg.e04.tokenize import TOKENIZER_VERSION, tokenize

T = TypeVar("T")

# Reference values proposed for the plan (the benchmark is not a research stage).
H000 = {
    "kind": "bm25",
    "query_source": "task",
    "candidate_limit": 200,
    "tokenizer": TOKENIZER_VERSION,
    "bm25": {"variant": "lucene", "k1": 1.2, "b": 0.75, "delta": None, "include_path": True},
    "function_ranking": "bm25",
}
H008 = {
    **H000,
    "kind": "bm25+dense-rrf",
    "chunk_text": CHUNK_TEXT_VERSION,
    "embedding_batch_size": 32,
    "rrf_k": 60,
    "function_ranking": "dense",
}

# fmt: off
WORDS = (
    "runner", "job", "build", "cache", "artifact", "executor", "shell", "docker", "kubernetes",
    "config", "token", "trace", "session", "network", "volume", "service", "helper", "request",
    "response", "parse", "start", "stop", "retry", "timeout", "upload", "download", "archive",
    "variable", "secret", "credential", "register", "unregister", "worker", "queue", "status",
    "state", "error", "log", "buffer", "stream", "metric", "label", "feature", "manager",
    "provider", "client",
)
# fmt: on


def generated_corpus(n_files: int, functions_per_file: int) -> dict[str, bytes]:
    """Deterministic Go files built from WORDS (seed namespace ``bench-e04``)."""
    rng = numpy_generator("bench-e04", n_files, functions_per_file)
    files = {}
    for number in range(n_files):
        package = str(rng.choice(WORDS))
        lines = [f"package {package}", "", 'import "fmt"', ""]
        for f in range(functions_per_file):
            parts = [str(w) for w in rng.choice(WORDS, size=rng.integers(2, 4))]
            name = parts[0] + "".join(p.title() for p in parts[1:]) + str(f)
            receiver = str(rng.choice(WORDS)).title()
            args = ", ".join(f"{w} string" for w in dict.fromkeys(rng.choice(WORDS, size=2)))
            lines.append(f"// {name} handles the {' '.join(parts)} of a {receiver}.")
            lines.append(f"func (r *{receiver}) {name}({args}) error {{")
            for _ in range(int(rng.integers(3, 12))):
                a, b, c = (str(w) for w in rng.choice(WORDS, size=3))
                lines.append(
                    f'\tif err := r.{a}{b.title()}(); err != nil {{ return fmt.Errorf("{c}: %w", err) }}'
                )
            lines.extend(["\treturn nil", "}", ""])
        directory = "/".join(str(w) for w in rng.choice(WORDS, size=2))
        files[f"{directory}/{package}_{number:05d}.go"] = "\n".join(lines).encode()
    return files


def directory_corpus(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.go"))}


def git_corpus(repo: Path, commit: str) -> dict[str, bytes]:
    names = subprocess.run(
        ["git", "-C", str(repo), "ls-tree", "-r", "--name-only", commit],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    return {
        name: subprocess.run(
            ["git", "-C", str(repo), "show", f"{commit}:{name}"], check=True, capture_output=True
        ).stdout
        for name in names
        if name.endswith(".go")
    }


def timed(action: Callable[[], T]) -> tuple[T, float]:
    """``action()`` and its wall time in seconds."""
    start = time.perf_counter()
    result = action()
    return result, time.perf_counter() - start


def bm25_comparison(files: dict[str, bytes], queries: list[str]) -> None:
    from rank_bm25 import BM25Okapi

    tokens = {p: tokenize(p) + tokenize(b.decode("utf-8", "replace")) for p, b in files.items()}
    query_tokens = [tokenize(q) for q in queries]
    # Warm up both libraries (imports, first-call costs) outside the timings.
    BM25Index({"w.go": ["w"]}, BM25Parameters("lucene", 1.2, 0.75)).search_tokens(["w"], 1)
    BM25Okapi([["w"]]).get_scores(["w"])
    ours, build_ours = timed(lambda: BM25Index(tokens, BM25Parameters("lucene", 1.2, 0.75)))
    _, query_ours = timed(lambda: [ours.search_tokens(q, 200) for q in query_tokens])
    corpus = [tokens[p] for p in sorted(tokens)]
    theirs, build_theirs = timed(lambda: BM25Okapi(corpus, k1=1.2, b=0.75))
    _, query_theirs = timed(lambda: [theirs.get_scores(q) for q in query_tokens])
    n = len(queries)
    print(
        f"bm25 index build: prereg {build_ours:.3f} s, rank_bm25 {build_theirs:.3f} s "
        f"(ratio rank_bm25/prereg {build_theirs / build_ours:.2f})"
    )
    print(
        f"bm25 query: prereg {1000 * query_ours / n:.2f} ms, rank_bm25 "
        f"{1000 * query_theirs / n:.2f} ms per query (ratio {query_theirs / query_ours:.1f})"
    )
    print(
        f"bm25 index+{n} queries: prereg {build_ours + query_ours:.3f} s, rank_bm25 "
        f"{build_theirs + query_theirs:.3f} s "
        f"(ratio {(build_theirs + query_theirs) / (build_ours + query_ours):.2f})"
    )


def embedding_designs(backend: MiniLMBackend, texts: list[str], sample: int) -> None:
    """Seconds to embed about ``sample`` distinct texts two ways, in calls of ``batch_size``
    texts of neighbouring length taken across the corpus's length range (as a cold cache
    hands them to a worker), on the backend's thread count: the backend (one forward pass per
    text, so a vector is a pure function of its text) and sentence-transformers' ``encode``
    batches padded to their longest text (the design whose vectors depend on the batch).
    The ratio is against the backend."""
    import torch

    distinct = sorted(set(texts), key=lambda text: (len(text), text))
    size = backend.batch_size
    count = max(1, min(sample, len(distinct)) // size)
    starts = np.linspace(0, max(0, len(distinct) - size), count).astype(int)
    calls = [distinct[start : start + size] for start in starts]
    model = backend._loaded_model()
    threads = torch.get_num_threads()
    torch.set_num_threads(EMBEDDING_THREADS)
    try:
        designs = {
            "one forward pass per text (the backend)": lambda: [
                backend.embed(call) for call in calls
            ],
            "encode batches padded to the longest": lambda: [
                model.encode(call, batch_size=len(call), normalize_embeddings=False)
                for call in calls
            ],
        }
        seconds = {name: timed(run)[1] for name, run in designs.items()}
    finally:
        torch.set_num_threads(threads)
    baseline = seconds["one forward pass per text (the backend)"]
    print(f"embedding designs, {size * len(calls)} distinct texts in calls of {size}:")
    for name, value in seconds.items():
        print(f"  {name:<42} {value:7.1f} s  {value / baseline:5.2f} x the backend")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--corpus", type=Path, help="directory of Go files")
    source.add_argument("--repo", type=Path, help="git repository (with --commit)")
    parser.add_argument("--commit", help="commit of --repo")
    parser.add_argument("--files", type=int, default=2000, help="generated corpus size")
    parser.add_argument("--functions-per-file", type=int, default=3)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32, help="MiniLM encode batch size")
    parser.add_argument(
        "--design-sample", type=int, default=1000, help="texts timed per embedding design"
    )
    parser.add_argument(
        "--designs-only", action="store_true", help="stop after the embedding designs"
    )
    args = parser.parse_args(argv)

    if args.repo is not None:
        if not args.commit:
            parser.error("--repo needs --commit")
        files, seconds = timed(lambda: git_corpus(args.repo, args.commit))
    elif args.corpus is not None:
        files, seconds = timed(lambda: directory_corpus(args.corpus))
    else:
        files, seconds = timed(lambda: generated_corpus(args.files, args.functions_per_file))
    functions, parse_seconds = timed(
        lambda: [f for path, data in files.items() for f in parse_go_functions(path, data)]
    )
    megabytes = sum(len(b) for b in files.values()) / 1e6
    print(
        f"corpus: {len(files)} files, {megabytes:.1f} MB, {len(functions)} functions "
        f"(read {seconds:.2f} s, tree-sitter parse {parse_seconds:.2f} s)"
    )
    rng = numpy_generator("bench-e04-queries", args.queries)
    queries = [" ".join(str(w) for w in rng.choice(WORDS, size=5)) for _ in range(args.queries)]

    bm25_comparison(files, queries)

    registry = default_registry()
    with tempfile.TemporaryDirectory() as scratch:
        backend = MiniLMBackend(CHUNK_TEXT_VERSION, batch_size=args.batch_size)
        _, load_seconds = timed(lambda: backend.embed(["warm up"]))
        print(f"minilm load + first embed: {load_seconds:.2f} s")
        embedding_designs(backend, [f.text for f in functions], args.design_sample)
        if args.designs_only:
            return 0
        with VectorCache(
            Path(scratch) / "v.sqlite", conflict_atol=1e-5, busy_timeout_seconds=30
        ) as cache:
            texts = [f.text for f in functions]
            report, cold = timed(
                lambda: embed_with_cache_report(backend, cache, texts, batch_size=args.batch_size)
            )
            print(
                f"cold embedding: {report.misses} distinct chunks in {cold:.1f} s = "
                f"{report.misses / cold:.1f} chunks/s (batch {args.batch_size}, cache writes "
                f"included)"
            )
            for harness_id, entry in (("H000", H000), ("H008", H008)):
                spec = registry.spec_from_plan(harness_id, entry)
                index = build(spec, files, functions, backend, cache)
                stats = index.statistics()
                latencies = [index.search(q).query_seconds for q in queries]
                print(
                    f"{harness_id}: build {stats.build_seconds:.2f} s (warm cache: "
                    f"{stats.embedding_misses} misses), vocabulary {stats.vocabulary_size}, "
                    f"query median {1000 * statistics.median(latencies):.1f} ms, max "
                    f"{1000 * max(latencies):.1f} ms over {len(queries)} queries"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
