"""The E04 vectors a run searched, bound to the run, and their audit.

Binding (the summary step of a complete run, on the controller): every vector the dense
harnesses used (each chunk of each corpus an index was built over, and each query) is
copied from the vector cache into the run folder, next to the summary::

    summary/e04_vectors.npy    float32 [count, dimension], little-endian, one row per
                               text, rows in the order of text_sha256
    summary/e04_vectors.json   {"identity": the plan's embedding identity,
                                "identity_sha256", "dimension", "count",
                                "text_sha256": [sorted SHA-256 of each text],
                                "vectors_sha256": SHA-256 of e04_vectors.npy}

Both are summary files, so the manifest binds their SHA-256. Each vector is stored once
(full scale: ~25k distinct texts x 384 float32, ~40 MB). Before they are written, every
record's ``index.chunk_vectors_sha256`` and ``index.query_vector_sha256`` (hashed by the
item from the very vectors its index searched) is recomputed from them: a difference
(the cache changed during the run) fails the summary, so a complete run's bound vectors
are the ones its rankings came from.

Audit (:mod:`prereg.e04.replay`): rankings are rebuilt from the bound vectors, never from
the cache, so deleting or changing the cache after a run changes no verdict. Then, when
the plan's pinned backend is available here, a sample of the bound texts is re-embedded
and compared within the plan's ``cache.conflict_atol`` (its tolerance for two vectors of
one text from one model). The sample is every text that decides a saved measure (each
query; each chunk of the gold files, of the files ranked up to the first gold file or
the deepest metric cutoff, and of the files in the saved function prefix) plus
:data:`REEMBED_RANDOM_SAMPLE` other bound texts drawn with a generator seeded by the
SHA-256 of the run's manifest, which is unknown while the cache can still influence the
run. A vector the pinned model does not produce (a poisoned or foreign cache) is a
finding naming the file, the text and the difference.
"""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from prereg.api import (
    MEASURED_SUFFIX,
    canonical_json,
    numpy_generator,
    sha256_bytes,
    sha256_file,
)
from prereg.e04.backends import MissingVectorError
from prereg.e04.cache import float32_sha256, text_sha256
from prereg.e04.cells import BASELINE, S001, S002, CorpusStore
from prereg.e04.embeddings import canonical_identity_json, identity_sha256
from prereg.e04.harness import _sorted_functions, query_for
from prereg.e04.plan import Cell, E04Settings
from prereg.e04.types import GoFunction

VECTORS_FILE = "e04_vectors.npy"
VECTOR_KEYS_FILE = "e04_vectors.json"
VECTOR_ORIGIN_FILE = f"e04_vectors_origin{MEASURED_SUFFIX}"
"""Which bound vectors this run computed and which it read from the cache: measured, not a
result (a warm run computes none), so it ends in :data:`prereg.records.runs.MEASURED_SUFFIX`."""

REEMBED_RANDOM_SAMPLE = 64
"""Bound texts re-embedded at random by the audit beyond those that decide a measure.

An audit-cost setting, not a preregistered number: it changes no result, only how much
of an untargeted alteration the audit samples (with p altered of N bound vectors, it
misses all of them with probability about (1 - p/N) ** 64)."""

AUDIT_SAMPLE_NAMESPACE = "prereg-audit-e04-reembed"
"""Seed namespace of the audit's random sample (never a stage's namespace)."""

_EMBED_SLICE = 256  # texts per backend call while re-embedding (memory bound only)
_HEX64 = re.compile(r"[0-9a-f]{64}")
_STORED = np.dtype("<f4")


@dataclass(frozen=True)
class Condition:
    """One dense condition record of one item: the vectors its index and query used."""

    item: str  # the item's key (its cell id, prereg.e04.plan.item_key)
    file_name: str  # baseline.json, s001.json or s002.json
    task_id: str
    harness: str
    chunks: tuple[str, ...]  # text keys in index (chunk) order
    chunk_paths: tuple[str, ...]  # the file of each chunk
    query: str  # text key of the query
    record: Mapping


@dataclass
class RunTexts:
    """Every text the dense harnesses of a run embedded, and where each was used."""

    texts: dict[str, str] = field(default_factory=dict)  # key -> text
    labels: dict[str, str] = field(default_factory=dict)  # key -> what the text is
    conditions: list[Condition] = field(default_factory=list)


def run_texts(
    cells: Mapping[str, Cell],
    records: Mapping[str, Mapping[str, Mapping]],
    settings: E04Settings,
    task_file,
    reformulations: Mapping[str, str] | None,
    corpora: CorpusStore,
) -> RunTexts:
    """The texts and conditions of the dense items (``records``: item key -> file -> record;
    ``cells``: item key -> cell).

    Chunks come from the repository at the record's commits plus the distractor files
    the S002 record lists (the replay checks those against their regeneration).
    """
    result = RunTexts()
    corpus_memo: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}

    def corpus(key: str, build: Callable[[], tuple[Mapping[str, bytes], list[GoFunction]]]):
        if key not in corpus_memo:
            files, functions = build()
            chunks = _sorted_functions(functions, files)  # FusedIndex's chunk order
            keys = []
            for chunk in chunks:
                k = text_sha256(chunk.text)
                if k not in result.texts:
                    result.texts[k] = chunk.text
                    receiver = f"({chunk.receiver}) " if chunk.receiver else ""
                    result.labels[k] = (
                        f"function {receiver}{chunk.name} of {chunk.path} "
                        f"lines {chunk.start_line}-{chunk.end_line}"
                    )
                keys.append(k)
            corpus_memo[key] = (tuple(keys), tuple(c.path for c in chunks))
        return corpus_memo[key]

    for name in sorted(records):
        cell = cells.get(name)
        if cell is None:
            continue
        spec = settings.harnesses[cell.harness]
        if spec.kind == "bm25":
            continue
        task = task_file.task(cell.task_id)
        query = query_for(spec, task, reformulations)
        query_key = text_sha256(query)
        if query_key not in result.texts:
            result.texts[query_key] = query
            result.labels[query_key] = f"query of task {task.task_id} ({spec.query_source})"
        for file_name, record in sorted(records[name].items()):
            found = _condition_corpus(file_name, record, task.base_commit, corpora)
            if found is None:
                continue
            chunks, paths = corpus(*found)
            result.conditions.append(
                Condition(
                    name, file_name, task.task_id, cell.harness, chunks, paths, query_key, record
                )
            )
    return result


def _condition_corpus(
    file_name: str, record: Mapping, base_commit: str, corpora: CorpusStore
) -> tuple[str, Callable[[], tuple[Mapping[str, bytes], list[GoFunction]]]] | None:
    """The key of the corpus a condition's record searched, and how to build its files and
    functions (only when a corpus of that key is not built yet); None for other files."""
    if file_name == BASELINE:
        return base_commit, lambda: _with_functions(corpora, corpora.files(base_commit))
    if file_name == S001:
        parent = corpora.parent(base_commit)
        return parent, lambda: _with_functions(corpora, corpora.files(parent))
    if file_name == S002:
        added = record.get("distractors") or []

        def perturbed() -> tuple[Mapping[str, bytes], list[GoFunction]]:
            files = dict(corpora.files(base_commit))
            functions = corpora.functions(files)
            for d in added:
                data = str(d["source"]).encode("utf-8")
                files[d["path"]] = data
                functions.extend(corpora.parse(d["path"], data))
            return files, functions

        return base_commit + "+" + ",".join(str(d["sha256"]) for d in added), perturbed
    return None


def _with_functions(
    corpora: CorpusStore, files: Mapping[str, bytes]
) -> tuple[Mapping[str, bytes], list[GoFunction]]:
    return files, corpora.functions(files)


def hash_problems(texts: RunTexts, lookup: Mapping[str, int], matrix: np.ndarray) -> list[str]:
    """Records whose index vector hashes differ from those of ``matrix`` (rows by key)."""
    problems = []
    digests: dict[tuple[str, ...], str] = {}
    for c in texts.conditions:
        index = c.record.get("index") or {}
        if c.chunks not in digests:
            digests[c.chunks] = float32_sha256(matrix[[lookup[k] for k in c.chunks]])
        if digests[c.chunks] != index.get("chunk_vectors_sha256"):
            problems.append(f"{c.item}/{c.file_name}: index.chunk_vectors_sha256")
        if float32_sha256(matrix[[lookup[c.query]]]) != index.get("query_vector_sha256"):
            problems.append(f"{c.item}/{c.file_name}: index.query_vector_sha256")
    return problems


def bind_run_vectors(summary_dir: Path, settings: E04Settings, texts: RunTexts, cache) -> None:
    """Write the bound vectors (module docstring) from ``cache``; raise ValueError if the
    cache lacks a vector the run used or holds other vectors than the items searched."""
    identity = dict(settings.embedding["identity"])
    keys = sorted(texts.texts)
    stored = cache.get_many(identity, keys)
    missing = [k for k in keys if k not in stored]
    if missing:
        raise ValueError(
            f"vector cache {str(cache.path)!r} no longer holds {len(missing)} vector(s) this run "
            f"used (first: {texts.labels[missing[0]]}); the cache changed during the run, so "
            "the vectors cannot be bound to it"
        )
    dimension = int(identity["dimension"])
    matrix = np.zeros((len(keys), dimension), dtype=_STORED)
    for i, k in enumerate(keys):
        if stored[k].shape != (dimension,):
            raise ValueError(
                f"vector cache {str(cache.path)!r}: the vector of {texts.labels[k]} has shape "
                f"{stored[k].shape}, the identity pins dimension {dimension}"
            )
        matrix[i] = stored[k]
    lookup = {k: i for i, k in enumerate(keys)}
    problems = hash_problems(texts, lookup, matrix)
    if problems:
        raise ValueError(
            f"vector cache {str(cache.path)!r} now holds other vectors than the items searched "
            f"({len(problems)} record field(s) differ, first: {problems[:3]}); the cache "
            "changed during the run, so the vectors cannot be bound to it"
        )
    buffer = io.BytesIO()
    np.save(buffer, matrix, allow_pickle=False)
    data = buffer.getvalue()
    summary_dir = Path(summary_dir)
    (summary_dir / VECTORS_FILE).write_bytes(data)
    keys_record = {
        "description": (
            f"the vectors this run's dense harnesses searched: row i of {VECTORS_FILE} is the "
            "vector of the text whose UTF-8 SHA-256 is text_sha256[i]"
        ),
        "identity": identity,
        "identity_sha256": identity_sha256(identity),
        "dimension": dimension,
        "count": len(keys),
        "text_sha256": keys,
        "vectors_file": VECTORS_FILE,
        "vectors_sha256": sha256_bytes(data),
    }
    (summary_dir / VECTOR_KEYS_FILE).write_text(canonical_json(keys_record), encoding="utf-8")


def write_vector_origin(summary_dir: Path, bound: Sequence[str], computed: set[str]) -> None:
    """:data:`VECTOR_ORIGIN_FILE`: of the ``bound`` texts, those whose vectors this run's
    processes computed (``computed``: the items' ``embedded_text_sha256``), and how many
    it read from the cache (stored earlier by another run, plan or tool)."""
    mine = sorted(set(bound) & set(computed))
    record = {
        "description": (
            f"of the {len(bound)} vectors bound in {VECTORS_FILE}, the run computed those of "
            "computed_text_sha256 and read the others from the vector cache"
        ),
        "bound": len(bound),
        "computed": len(mine),
        "read": len(bound) - len(mine),
        "computed_text_sha256": mine,
    }
    (Path(summary_dir) / VECTOR_ORIGIN_FILE).write_text(canonical_json(record), encoding="utf-8")


class RunVectors:
    """The bound vectors of a run as a read-only cache (``get_many``), for the replay."""

    def __init__(self, path: Path, identity: dict, keys: Sequence[str], matrix: np.ndarray):
        self.path = Path(path)
        self.identity = dict(identity)
        self.keys = tuple(keys)
        self.matrix = matrix
        self.lookup = {k: i for i, k in enumerate(self.keys)}

    def get_many(self, identity: dict, text_hashes: Sequence[str]) -> dict[str, np.ndarray]:
        if canonical_identity_json(identity) != canonical_identity_json(self.identity):
            return {}
        return {
            k: self.matrix[self.lookup[k]].copy() for k in dict.fromkeys(text_hashes)
            if k in self.lookup
        }  # fmt: skip

    def put_many(self, identity: dict, text_hashes: Sequence[str], vectors: np.ndarray) -> int:
        raise MissingVectorError(
            f"{len(text_hashes)} text(s) have no vector in {self.path.name}; the audit binds "
            "only what the run used and never embeds into it"
        )

    @classmethod
    def load(cls, summary_dir: Path, identity: dict) -> tuple[RunVectors | None, list[str]]:
        """The bound vectors, or None and findings naming the file and field."""
        summary_dir = Path(summary_dir)
        keys_path, vectors_path = summary_dir / VECTOR_KEYS_FILE, summary_dir / VECTORS_FILE
        where_keys, where_vectors = f"summary/{VECTOR_KEYS_FILE}", f"summary/{VECTORS_FILE}"
        missing = [w for w, p in ((where_keys, keys_path), (where_vectors, vectors_path))
                   if not p.is_file()]  # fmt: skip
        if missing:
            return None, [
                (
                    f"{', '.join(missing)} missing: the run's dense rankings have no bound vectors "
                    "to be rebuilt from"
                )
            ]
        try:
            record = json.loads(keys_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as err:
            return None, [f"{where_keys} is not readable JSON ({err})"]
        if not isinstance(record, dict):
            return None, [f"{where_keys} is not a JSON object"]
        problems = []
        if record.get("identity") != dict(identity):
            problems.append(
                f"{where_keys}: field identity is {record.get('identity')!r}, the plan pins "
                f"{dict(identity)!r}"
            )
        keys = record.get("text_sha256")
        if (
            not isinstance(keys, list)
            or not all(isinstance(k, str) and _HEX64.fullmatch(k) for k in keys)
            or keys != sorted(set(keys))
        ):
            problems.append(
                f"{where_keys}: field text_sha256 must be sorted, distinct SHA-256 hex keys"
            )
        if record.get("vectors_sha256") != sha256_file(vectors_path):
            problems.append(
                f"{where_keys}: field vectors_sha256 is not the SHA-256 of {where_vectors}"
            )
        if problems:
            return None, problems
        try:
            matrix = np.load(vectors_path, allow_pickle=False)
        except (OSError, ValueError) as err:
            return None, [f"{where_vectors} is not a readable .npy array ({err})"]
        dimension = identity.get("dimension")
        if matrix.dtype != _STORED or matrix.shape != (len(keys), dimension):
            return None, [
                (
                    f"{where_vectors} holds {matrix.dtype} {matrix.shape}; {where_keys} field "
                    f"text_sha256 and the identity want float32 ({len(keys)}, {dimension})"
                )
            ]
        if not np.all(np.isfinite(matrix)):
            return None, [f"{where_vectors} holds non-finite values"]
        return cls(vectors_path, identity, keys, matrix), []


def key_set_findings(bound: RunVectors, texts: RunTexts) -> list[str]:
    """The bound keys must be exactly the texts the run's dense conditions used."""
    have, need = set(bound.keys), set(texts.texts)
    findings = []
    if need - have:
        first = min(need - have)
        findings.append(
            f"summary/{VECTOR_KEYS_FILE}: field text_sha256 lacks {len(need - have)} text(s) "
            f"the run searched (first: {texts.labels[first]})"
        )
    if have - need:
        findings.append(
            f"summary/{VECTOR_KEYS_FILE}: field text_sha256 holds {len(have - need)} key(s) "
            "of texts no ranking of the run used"
        )
    return findings


def deciding_keys(texts: RunTexts, gold_files: Mapping[str, Sequence[str]], settings) -> set[str]:
    """Texts whose vectors decide a saved measure (see the module docstring)."""
    depth_cut = max((*settings.recall_ks, settings.ndcg_k, settings.retention_k))
    chosen: set[str] = set()
    for c in texts.conditions:
        gold = set(gold_files[c.task_id])
        ranking = c.record.get("ranking") or {}
        files = [entry[0] for entry in ranking.get("files") or []]
        first = next((i for i, path in enumerate(files) if path in gold), len(files) - 1)
        paths = set(files[: max(depth_cut, first + 1)]) | gold
        paths |= {entry[0] for entry in ranking.get("functions") or []}
        chosen.add(c.query)
        chosen.update(k for k, p in zip(c.chunks, c.chunk_paths) if p in paths)
    return chosen


def reembed_sample(texts: RunTexts, deciding: set[str], seed_text: str) -> list[str]:
    """The sample the audit re-embeds: ``deciding`` plus a seeded draw of the rest, sorted."""
    rest = sorted(set(texts.texts) - deciding)
    size = min(REEMBED_RANDOM_SAMPLE, len(rest))
    rng = numpy_generator(AUDIT_SAMPLE_NAMESPACE, seed_text)
    drawn = rng.choice(len(rest), size=size, replace=False) if size else []
    return sorted(deciding | {rest[int(i)] for i in drawn})


def reembed_findings(
    backend, bound: RunVectors, texts: RunTexts, sample: Sequence[str], atol: float
) -> list[str]:
    """Re-embed ``sample`` with ``backend``; findings for vectors beyond ``atol`` (max |diff|)."""
    differ: list[tuple[str, float]] = []
    for start in range(0, len(sample), _EMBED_SLICE):
        keys = list(sample[start : start + _EMBED_SLICE])
        fresh = np.asarray(backend.embed([texts.texts[k] for k in keys]), dtype=np.float64)
        held = bound.matrix[[bound.lookup[k] for k in keys]].astype(np.float64)
        if fresh.shape != held.shape:
            return [
                (
                    f"summary/{VECTORS_FILE}: the pinned backend returns vectors of shape "
                    f"{fresh.shape[1:]}, the bound ones have {held.shape[1:]}"
                )
            ]
        diff = np.max(np.abs(fresh - held), axis=1)
        differ += [(k, float(d)) for k, d in zip(keys, diff) if not d <= atol]
    if not differ:
        return []
    shown = "; ".join(
        f"text_sha256 {k[:12]} ({texts.labels[k]}): max |diff| {d:.3g}" for k, d in differ[:5]
    )
    return [
        (
            f"summary/{VECTORS_FILE}: {len(differ)} of {len(sample)} re-embedded vectors differ from "
            f"the vectors the run searched by more than cache.conflict_atol={atol} ({shown}); the run "
            f"used vectors the pinned model {bound.identity.get('model')!r} does not produce "
            "(a poisoned or foreign vector cache)"
        )
    ]


def note(message: str) -> None:
    """A line for the auditor that is not a finding (e.g. re-embedding skipped)."""
    print(f"prereg audit (E04): {message}", file=sys.stderr)
