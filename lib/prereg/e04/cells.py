"""One E04 composite cell: baseline, S001 and one S002 dose, measured and paired.

:func:`compute_cell` is the library-level cell function. It reads corpora from git
objects (:class:`CorpusStore`), builds each retrieval structure once per corpus
(:class:`IndexStore`; H008 and H010 share an index, they differ only in the query),
and returns :class:`CellOutputs`: the reproducible records (``baseline.json``,
``s001.json``, ``s002.json``) and the non-reproducible timing record.

Conditions (E04 protocol):

* ``baseline``: every structure built at the task's base commit, labels at the base
  commit.
* ``S001``: built at the first parent of the base commit, labels at the base commit.
  Independent of the dose; its record carries ``shared_key`` ``S001/<task>/<harness>``
  and is byte-identical in the three cells of a task and harness.
* ``S002``: the base corpus plus the first ``dose`` of ``max_dose`` distractor files
  generated from one generator per task (so doses nest), added in memory only; every
  structure, FAISS included, rebuilt for that corpus.

Saved ranking of a condition (``ranking`` in each record)::

    {"files": [[path, score], ...],                     # the whole candidate list
     "functions": [[path, name, receiver, start_line, end_line, score, tokens], ...],
     "functions_total": n}                              # length of the full function list

``functions`` is the prefix that the function measures read: the first
``function_k`` functions and every function up to and including the first one that
does not fit the token budget. ``tokens`` is the function's token count under the
plan's token pattern; that prefix is enough to recompute FunctionRecall@k and
TokenCoverage@B exactly.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prereg.e04 import progress
from prereg.e04.cache import VectorCache, embed_with_cache, float32_sha256
from prereg.e04.distractors import DistractorFile, generate_distractors
from prereg.e04.gitcorpus import first_parent, read_tree
from prereg.e04.goparse import parse_go_functions
from prereg.e04.harness import FusedIndex, Index, LexicalSpec, default_registry, query_for
from prereg.e04.metrics import PairedOutcome, paired_outcome, query_measures, token_count
from prereg.e04.plan import Cell, E04Settings
from prereg.e04.tasks import locate_gold_functions
from prereg.e04.types import GoFunction, Task

BASELINE = "baseline.json"
S001 = "s001.json"
S002 = "s002.json"
TIMING = "cell.timing.json"
EMBEDDED_TEXTS = (
    "embedded_text_sha256"  # the timing's list of texts whose vectors the cell computed
)


class CorpusStore:
    """Go files and parsed functions of a repository at commits, read once per process."""

    def __init__(self, repository: str | Path) -> None:
        self.repository = Path(repository)
        self._files: dict[str, dict[str, bytes]] = {}
        self._blobs: dict[str, bytes] = {}  # by git object id, shared by every commit read
        self._parsed: dict[tuple[str, bytes], tuple[GoFunction, ...]] = {}
        self._parents: dict[str, str] = {}

    def files(self, commit: str) -> dict[str, bytes]:
        if commit not in self._files:
            start = time.perf_counter()
            self._files[commit] = read_tree(self.repository, commit, blobs=self._blobs)
            progress.note(
                f"corpus: read {len(self._files[commit])} Go files at {commit[:12]} in "
                f"{time.perf_counter() - start:.1f} s"
            )
        return self._files[commit]

    def parse(self, path: str, data: bytes) -> tuple[GoFunction, ...]:
        # Keyed by the bytes themselves: a bytes object hashes its content once, and every
        # corpus of a commit (each S002 dose copies the base corpus) holds the same objects.
        key = (path, bytes(data))
        if key not in self._parsed:
            self._parsed[key] = parse_go_functions(path, data)
        return self._parsed[key]

    def functions(self, files: Mapping[str, bytes]) -> list[GoFunction]:
        return [f for path, data in files.items() for f in self.parse(path, data)]

    def parent(self, commit: str) -> str:
        if commit not in self._parents:
            self._parents[commit] = first_parent(self.repository, commit)
        return self._parents[commit]


def build_key(spec: LexicalSpec) -> str:
    """What determines a built index besides the corpus: the spec without its query source."""
    entry = spec.to_plan()
    del entry["query_source"]
    return json.dumps(entry, sort_keys=True)


class IndexStore:
    """Built indexes by (corpus key, build key), least recently used evicted first."""

    def __init__(self, capacity: int = 6) -> None:
        self.capacity = capacity
        self._built: OrderedDict[tuple[str, str], Index] = OrderedDict()

    def get(
        self, corpus_key: str, spec: LexicalSpec, build: Callable[[], Index]
    ) -> tuple[Index, bool]:
        key = (corpus_key, build_key(spec))
        if key in self._built:
            self._built.move_to_end(key)
            return self._built[key], True
        progress.note(
            f"index: building {spec.harness_id} ({spec.kind}) for corpus {corpus_key[:12]}"
        )
        index = build()
        stats = index.statistics()
        progress.note(
            f"index: built {spec.harness_id} in {stats.build_seconds:.1f} s ({stats.files} files, "
            f"{stats.chunks} chunks, {stats.embedding_misses} texts embedded here, "
            f"{stats.embedding_hits} from the cache)"
        )
        self._built[key] = index
        while len(self._built) > self.capacity:
            self._built.popitem(last=False)
        return index, False


@dataclass
class Workspace:
    """Per-process state of a run: corpora, indexes, shared records, backend and cache."""

    corpora: CorpusStore
    backend: Any  # EmbeddingBackend or None when no harness embeds
    cache: VectorCache | None
    indexes: IndexStore = field(default_factory=IndexStore)
    shared: dict[str, tuple[dict, dict]] = field(default_factory=dict)  # key -> (record, timing)


@dataclass(frozen=True)
class CellOutputs:
    records: dict[str, dict]  # file name -> reproducible JSON record
    timing: dict  # non-reproducible: this cell's seconds, texts embedded here, cache hits


def _round_trip(value: float) -> float:
    return float(value)


def function_depth(tokens: Sequence[int], function_k: int, budget: int) -> int:
    """Length of the saved function prefix (see the module docstring)."""
    used = 0
    stop = len(tokens)
    for i, count in enumerate(tokens):
        if used + count > budget:
            stop = i + 1
            break
        used += count
    return min(len(tokens), max(function_k, stop))


def vectors_sha256(index: Index) -> str | None:
    """SHA-256 of the float32 chunk vectors of a dense index, in chunk order (else None)."""
    if not isinstance(index, FusedIndex):
        return None
    faiss_index = index.dense._index
    vectors = faiss_index.reconstruct_n(0, faiss_index.ntotal)
    return float32_sha256(vectors)


def query_vector_sha256(index: Index, query: str, workspace: Workspace) -> str | None:
    if not isinstance(index, FusedIndex):
        return None
    spec = index.spec
    vector = embed_with_cache(
        workspace.backend, workspace.cache, [query], batch_size=spec.embedding_batch_size
    )
    return float32_sha256(vector)


def gold_functions_at_label(task: Task, corpora: CorpusStore) -> tuple[GoFunction, ...]:
    """The task's gold functions as parsed at its base commit (the label revision)."""
    sources = {f: corpora.files(task.base_commit)[f] for f in task.gold_files}
    return locate_gold_functions(task, sources)


def paired_record(paired: PairedOutcome) -> dict:
    record = asdict(paired)
    record["recall_delta"] = {f"R@{k}": v for k, v in paired.recall_delta}
    return record


def evaluate(
    index: Index,
    spec: LexicalSpec,
    query: str,
    task: Task,
    gold: Sequence[GoFunction],
    settings: E04Settings,
    workspace: Workspace,
    *,
    reused: bool = False,
    lookup_seconds: float = 0.0,
) -> tuple[dict, dict]:
    """Search once; return (reproducible record, timing) of one condition.

    The timing of a ``reused`` index is what it cost now (``lookup_seconds``, nothing
    embedded), not the build time of the cell that built it.
    """
    ranking = index.search(query)
    progress.note(f"query: {spec.harness_id} searched in {ranking.query_seconds:.2f} s")
    files = [path for path, _ in ranking.files]
    chunks = [index.chunks[i] for i in ranking.chunk_indices]
    measures = query_measures(
        files,
        task.gold_files,
        recall_ks=settings.recall_ks,
        ndcg_k=settings.ndcg_k,
        candidate_limit=spec.candidate_limit,
        ranked_functions=chunks,
        gold_functions=gold,
        function_k=settings.function_k,
        token_budget=settings.token_budget,
        token_pattern=settings.token_pattern,
    )
    tokens = []
    used = 0
    for chunk in chunks:  # counts up to the saved depth only
        count = token_count(chunk.text, settings.token_pattern)
        tokens.append(count)
        if len(tokens) >= settings.function_k and used + count > settings.token_budget:
            break
        used += count
    depth = function_depth(tokens, settings.function_k, settings.token_budget)
    stats = index.statistics()
    record = {
        "measures": measures.as_dict(),
        "ranking": {
            "files": [[path, _round_trip(score)] for path, score in ranking.files],
            "functions": [
                [c.path, c.name, c.receiver, c.start_line, c.end_line, f[3], tokens[i]]
                for i, (c, f) in enumerate(zip(chunks[:depth], ranking.functions))
            ],
            "functions_total": len(chunks),
        },
        "index": {
            "files": stats.files,
            "chunks": stats.chunks,
            "vocabulary_size": stats.vocabulary_size,
            "chunk_vectors_sha256": vectors_sha256(index),
            "query_vector_sha256": query_vector_sha256(index, query, workspace),
        },
    }
    if reused:
        timing = {
            "query_seconds": ranking.query_seconds,
            "build_seconds": lookup_seconds,
            "embedding_calls": 0,
            "embedding_misses": 0,
            "embedding_hits": 0,
            "index_reused": True,
        }
    else:
        timing = {
            "query_seconds": ranking.query_seconds,
            "build_seconds": stats.build_seconds,
            "embedding_calls": stats.embedding_calls,
            "embedding_misses": stats.embedding_misses,
            "embedding_hits": stats.embedding_hits,
            "index_reused": False,
        }
    return record, timing


def _index(
    workspace: Workspace,
    spec: LexicalSpec,
    corpus_key: str,
    files: Mapping[str, bytes],
    functions: Sequence[GoFunction],
) -> tuple[Index, dict]:
    """The index and the keyword arguments :func:`evaluate` needs to time it honestly."""
    registry = default_registry()
    start = time.perf_counter()
    index, reused = workspace.indexes.get(
        corpus_key,
        spec,
        lambda: registry.build(spec, files, functions, workspace.backend, workspace.cache),
    )
    return index, {"reused": reused, "lookup_seconds": time.perf_counter() - start}


_NOT_COMPUTED = {
    "query_seconds": 0.0,
    "build_seconds": 0.0,
    "embedding_calls": 0,
    "embedding_misses": 0,
    "embedding_hits": 0,
    "index_reused": True,
}


def _shared_condition(
    key: str, workspace: Workspace, compute: Callable[[], tuple[dict, dict]]
) -> tuple[dict, dict]:
    """The shared record of ``key``; the timing is this cell's cost (zero when reused)."""
    fresh = key not in workspace.shared
    if fresh:
        workspace.shared[key] = compute()
        record, timing = workspace.shared[key]
        return record, {**timing, "computed_in_this_cell": True}
    record, _ = workspace.shared[key]
    return record, {**_NOT_COMPUTED, "computed_in_this_cell": False}


def distractors_for_task(
    task: Task, settings: E04Settings, rng: np.random.Generator, corpus_paths: Sequence[str]
) -> tuple[DistractorFile, ...]:
    """All ``max_dose`` distractor files of a task (a dose takes the first ``dose``)."""
    return generate_distractors(
        task,
        count=settings.max_dose,
        prefix=settings.distractor_prefix,
        rng=rng,
        corpus_paths=corpus_paths,
    )


def compute_cell(
    cell: Cell,
    task: Task,
    settings: E04Settings,
    workspace: Workspace,
    rng: np.random.Generator,
    reformulations: Mapping[str, str] | None,
    *,
    synthetic: bool,
    seed_derivation: str,
) -> CellOutputs:
    """Baseline, S001 and S002 at the cell's dose; records ready to be written.

    ``rng`` must be the task's distractor generator (fresh, seeded per task), so
    that the dose-``k`` files are the first ``k`` of the ``max_dose`` files.
    """
    spec = settings.harnesses[cell.harness]
    query = query_for(spec, task, reformulations)
    corpora = workspace.corpora
    gold = gold_functions_at_label(task, corpora)
    base_files = corpora.files(task.base_commit)
    head = {
        "synthetic": synthetic,
        "task_id": task.task_id,
        "harness": cell.harness,
        "query_source": spec.query_source,
        "query": query,
        "label_commit": task.base_commit,
    }

    def baseline() -> tuple[dict, dict]:
        index, cost = _index(
            workspace, spec, task.base_commit, base_files, corpora.functions(base_files)
        )
        record, timing = evaluate(index, spec, query, task, gold, settings, workspace, **cost)
        key = f"baseline/{task.task_id}/{cell.harness}"
        return (
            {
                **head,
                "condition": "baseline",
                "shared_key": key,
                "index_commit": task.base_commit,
                **record,
            },
            timing,
        )

    base_key = f"baseline/{task.task_id}/{cell.harness}"
    base_record, base_timing = _shared_condition(base_key, workspace, baseline)
    base_ranking = [p for p, _ in base_record["ranking"]["files"]]

    def paired(record: dict) -> dict:
        perturbed = [p for p, _ in record["ranking"]["files"]]
        return paired_record(
            paired_outcome(
                base_ranking,
                perturbed,
                task.gold_files,
                recall_ks=settings.recall_ks,
                ndcg_k=settings.ndcg_k,
                retention_k=settings.retention_k,
                candidate_limit=spec.candidate_limit,
            )
        )

    def s001() -> tuple[dict, dict]:
        parent = corpora.parent(task.base_commit)
        files = corpora.files(parent)
        index, cost = _index(workspace, spec, parent, files, corpora.functions(files))
        record, timing = evaluate(index, spec, query, task, gold, settings, workspace, **cost)
        record = {
            **head,
            "condition": "S001",
            "shared_key": f"S001/{task.task_id}/{cell.harness}",
            "index_commit": parent,
            **record,
        }
        record["paired"] = paired(record)
        return record, timing

    s001_key = f"S001/{task.task_id}/{cell.harness}"
    s001_record, s001_timing = _shared_condition(s001_key, workspace, s001)

    generated = distractors_for_task(task, settings, rng, list(base_files))
    added = generated[: cell.dose]
    files = dict(base_files)
    extra_functions: list[GoFunction] = []
    for d in added:
        data = d.source.encode("utf-8")
        files[d.path] = data
        extra_functions.extend(corpora.parse(d.path, data))
    corpus_key = task.base_commit + "+" + ",".join(d.sha256 for d in added)
    index, cost = _index(
        workspace, spec, corpus_key, files, corpora.functions(base_files) + extra_functions
    )
    record, timing = evaluate(index, spec, query, task, gold, settings, workspace, **cost)
    s002 = {
        **head,
        "condition": "S002",
        "index_commit": task.base_commit,
        "seed_coordinate": cell.seed_coordinate,
        "dose": cell.dose,
        "max_dose": settings.max_dose,
        "seed_derivation": seed_derivation,
        "distractors": [{"path": d.path, "sha256": d.sha256, "source": d.source} for d in added],
        "generated_sha256": [d.sha256 for d in generated],
        **record,
    }
    s002["paired"] = paired(s002)
    return CellOutputs(
        records={BASELINE: base_record, S001: s001_record, S002: s002},
        timing={
            "non_reproducible": (
                "what this cell cost in this process: wall-clock seconds, texts embedded "
                "here and vector-cache hits; a reused index or shared record costs only its "
                "lookup (index_reused, computed_in_this_cell)"
            ),
            "baseline": base_timing,
            "S001": s001_timing,
            "S002": timing,
        },
    )
