"""Frozen retrieval harnesses (H000, H008, H010) built from plan entries, and their kinds.

Plan entry of a harness (every field required, no others)::

    "H000": {"kind": "bm25", "query_source": "task", "candidate_limit": 200,
             "tokenizer": "prereg-identifier-tokenizer-1",
             "bm25": {"variant": "lucene", "k1": 1.2, "b": 0.75, "delta": null,
                      "include_path": true},
             "function_ranking": "bm25"}
    "H008": {"kind": "bm25+dense-rrf", ...the H000 fields...,
             "chunk_text": "go-function-text-1", "embedding_batch_size": 32,
             "rrf_k": 60, "function_ranking": "dense"}
    "H010": H008 with "query_source": "e02-reformulation"

Rankings (identical for identical corpus, query and cache contents):

* files, ``bm25``: BM25 over the files (document = tokens of the path, if
  ``include_path``, then of the UTF-8 text), files with score > 0, by
  (-score, path), at most ``candidate_limit``.
* files, ``bm25+dense-rrf``: the BM25 list above and the dense list (top
  ``candidate_limit`` files by the max cosine of their function chunks, by
  (-score, path)) fused by reciprocal-rank fusion, see
  :func:`reciprocal_rank_fusion`, truncated to ``candidate_limit``.
* functions: every function of every returned file, ordered by the file's rank,
  then by -chunk score, start line, end line, name, receiver. The chunk score is
  the BM25 score of the function's text (``function_ranking = "bm25"``, a BM25
  index over function chunks with the harness's parameters) or the cosine of
  its vector with the query vector (``"dense"``).

Chunk text rule ``go-function-text-1``: a chunk is one :class:`GoFunction`, its
text is ``GoFunction.text`` verbatim.

Harness kinds: a plan entry's ``kind`` names a :class:`HarnessKind` (how to parse the
entry, how to build the index). ``bm25`` and ``bm25+dense-rrf`` are built in
(:data:`BUILT_IN_HARNESS_KINDS`, never taken from package metadata); any other kind comes
from a recorded installed distribution under the entry-point group
``prereg.harness_kinds`` (:mod:`prereg.kinds.registry`), found by :func:`default_registry`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

from prereg.api import registry
from prereg.e04.cache import VectorCache, embed_with_cache_report
from prereg.e04.dense import DenseFileIndex
from prereg.e04.embeddings import EmbeddingBackend
from prereg.e04.lexical import BM25Index, BM25Parameters, DocumentTerms, document_terms
from prereg.e04.tokenize import TOKENIZER_VERSION, tokenize
from prereg.e04.types import GoFunction, Task

CHUNK_TEXT_VERSION = "go-function-text-1"
QUERY_SOURCES = ("task", "e02-reformulation")
FUNCTION_RANKINGS = ("bm25", "dense")


class HarnessSpecError(ValueError):
    """A harness plan entry is incomplete, has unknown fields or bad values."""


class HarnessInputError(ValueError):
    """A corpus, query or backend that a harness cannot use."""


@dataclass(frozen=True)
class Ranking:
    """One search result: ranked files, ranked functions and the query time.

    ``files`` holds ``(path, score)``; ``functions`` holds
    ``(path, name, receiver, score)``; ``query_seconds`` is wall time;
    ``chunk_indices[i]`` is the position of ``functions[i]`` in the index's
    ``chunks`` (so its line span and text can be read back).
    """

    files: tuple[tuple[str, float], ...]
    functions: tuple[tuple[str, str, str | None, float], ...]
    query_seconds: float
    chunk_indices: tuple[int, ...] = ()


@dataclass(frozen=True)
class IndexStatistics:
    """Size and cost of a built index (embedding counts are distinct texts)."""

    files: int
    chunks: int
    vocabulary_size: int
    build_seconds: float
    embedding_calls: int
    embedding_misses: int
    embedding_hits: int


class Index(Protocol):
    """A built harness: search a query, report its statistics."""

    def search(self, query: str) -> Ranking: ...

    def statistics(self) -> IndexStatistics: ...


@dataclass(frozen=True)
class LexicalSpec:
    """H000-like harness: BM25 over files."""

    harness_id: str
    kind: str
    query_source: str
    candidate_limit: int
    tokenizer: str
    bm25: BM25Parameters
    include_path: bool
    function_ranking: str

    def to_plan(self) -> dict[str, Any]:
        """The plan entry this spec was read from (``harness_id`` is the key)."""
        entry = asdict(self)
        del entry["harness_id"]
        bm25 = entry.pop("bm25")
        bm25["include_path"] = entry.pop("include_path")
        entry["bm25"] = bm25
        return entry


@dataclass(frozen=True)
class FusedSpec(LexicalSpec):
    """H008-like harness: BM25 and dense function chunks fused by RRF."""

    chunk_text: str
    embedding_batch_size: int
    rrf_k: float


def _require(entry: Mapping[str, Any], harness_id: str, fields: set[str]) -> None:
    if not isinstance(entry, Mapping):
        raise HarnessSpecError(f"harness {harness_id!r}: entry must be an object, got {entry!r}")
    missing = sorted(fields - set(entry))
    extra = sorted(set(entry) - fields)
    if missing or extra:
        raise HarnessSpecError(
            f"harness {harness_id!r}: missing fields {missing}, unknown fields {extra}; "
            "the plan states every harness parameter and nothing else"
        )


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise HarnessSpecError(f"{where}={value!r} must be an int >= 1")
    return value


def _choice(value: Any, allowed: Sequence[str], where: str) -> str:
    if value not in allowed:
        raise HarnessSpecError(f"{where}={value!r} must be one of {tuple(allowed)}")
    return value


_LEXICAL_FIELDS = {
    "kind",
    "query_source",
    "candidate_limit",
    "tokenizer",
    "bm25",
    "function_ranking",
}
_FUSED_FIELDS = _LEXICAL_FIELDS | {"chunk_text", "embedding_batch_size", "rrf_k"}


def _lexical_fields(harness_id: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    where = f"harness {harness_id!r}"
    if entry["tokenizer"] != TOKENIZER_VERSION:
        raise HarnessSpecError(
            f"{where}: tokenizer={entry['tokenizer']!r}, this code implements "
            f"{TOKENIZER_VERSION!r}; a frozen harness cannot change tokenizer"
        )
    bm25 = entry["bm25"]
    _require(bm25, f"{harness_id}.bm25", {"variant", "k1", "b", "delta", "include_path"})
    if not isinstance(bm25["include_path"], bool):
        raise HarnessSpecError(f"{where}: bm25.include_path={bm25['include_path']!r} must be bool")
    try:
        parameters = BM25Parameters(bm25["variant"], bm25["k1"], bm25["b"], bm25["delta"])
    except ValueError as error:
        raise HarnessSpecError(f"{where}: bm25: {error}") from error
    return {
        "harness_id": harness_id,
        "kind": entry["kind"],
        "query_source": _choice(entry["query_source"], QUERY_SOURCES, f"{where}: query_source"),
        "candidate_limit": _positive_int(entry["candidate_limit"], f"{where}: candidate_limit"),
        "tokenizer": entry["tokenizer"],
        "bm25": parameters,
        "include_path": bm25["include_path"],
        "function_ranking": entry["function_ranking"],
    }


def lexical_spec_from_plan(harness_id: str, entry: Mapping[str, Any]) -> LexicalSpec:
    """Parse a ``"kind": "bm25"`` plan entry."""
    _require(entry, harness_id, _LEXICAL_FIELDS)
    fields = _lexical_fields(harness_id, entry)
    _choice(fields["function_ranking"], ("bm25",), f"harness {harness_id!r}: function_ranking")
    return LexicalSpec(**fields)


def fused_spec_from_plan(harness_id: str, entry: Mapping[str, Any]) -> FusedSpec:
    """Parse a ``"kind": "bm25+dense-rrf"`` plan entry."""
    _require(entry, harness_id, _FUSED_FIELDS)
    where = f"harness {harness_id!r}"
    fields = _lexical_fields(harness_id, entry)
    _choice(fields["function_ranking"], FUNCTION_RANKINGS, f"{where}: function_ranking")
    _choice(entry["chunk_text"], (CHUNK_TEXT_VERSION,), f"{where}: chunk_text")
    rrf_k = entry["rrf_k"]
    if isinstance(rrf_k, bool) or not isinstance(rrf_k, (int, float)) or not rrf_k >= 0:
        raise HarnessSpecError(f"{where}: rrf_k={rrf_k!r} must be a number >= 0")
    return FusedSpec(
        **fields,
        chunk_text=entry["chunk_text"],
        embedding_batch_size=_positive_int(
            entry["embedding_batch_size"], f"{where}: embedding_batch_size"
        ),
        rrf_k=float(rrf_k),
    )


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[tuple[str, float]]], k: float, limit: int
) -> list[tuple[str, float]]:
    """Fuse ranked lists by reciprocal rank, sorted by (-score, path), at most ``limit``.

    Notes
    -----
    ``score(d) = sum over lists L containing d of 1 / (k + rank_L(d))`` with
    1-based ranks, summed in list order; a list not containing ``d`` adds 0
    (Cormack, Clarke & Buettcher 2009 [1]_, who use ``k = 60``).

    References
    ----------
    .. [1] G. V. Cormack, C. L. A. Clarke, S. Buettcher, "Reciprocal rank fusion
       outperforms Condorcet and individual rank learning methods", SIGIR 2009.
    """
    if isinstance(k, bool) or not isinstance(k, (int, float)) or not k >= 0:
        raise HarnessInputError(f"k={k!r} must be a number >= 0")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise HarnessInputError(f"limit={limit!r} must be an int >= 1")
    fused: dict[str, float] = {}
    for number, ranking in enumerate(rankings):
        paths = [path for path, _ in ranking]
        if len(set(paths)) != len(paths):
            raise HarnessInputError(f"rankings[{number}] lists a path twice")
        for rank, path in enumerate(paths, start=1):
            fused[path] = fused.get(path, 0.0) + 1.0 / (k + rank)
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:limit]


def _decoded(files: Mapping[str, bytes]) -> dict[str, str]:
    if not files:
        raise HarnessInputError("files is empty; a harness needs at least one file")
    texts = {}
    for path, data in files.items():
        if not isinstance(path, str) or not isinstance(data, (bytes, bytearray)):
            raise HarnessInputError(
                f"files must map str paths to bytes; got {type(path).__name__} -> "
                f"{type(data).__name__} for {path!r}"
            )
        texts[path] = bytes(data).decode("utf-8", errors="replace")
    return texts


def _sorted_functions(
    functions: Sequence[GoFunction], files: Mapping[str, Any]
) -> tuple[GoFunction, ...]:
    for function in functions:
        if not isinstance(function, GoFunction):
            raise HarnessInputError(f"functions must hold GoFunction, got {function!r:.80}")
        if function.path not in files:
            raise HarnessInputError(
                f"function {function.name!r} is in {function.path!r}, which is not in files"
            )
    return tuple(
        sorted(
            functions,
            key=lambda f: (f.path, f.start_line, f.end_line, f.name, f.receiver or ""),
        )
    )


def _function_ranking(
    files: Sequence[tuple[str, float]],
    chunks: Sequence[GoFunction],
    chunk_scores: np.ndarray,
) -> tuple[tuple[tuple[str, str, str | None, float], ...], tuple[int, ...]]:
    by_file: dict[str, list[int]] = {}
    for i, chunk in enumerate(chunks):
        by_file.setdefault(chunk.path, []).append(i)
    result = []
    order = []
    for path, _ in files:
        members = by_file.get(path, [])
        members.sort(
            key=lambda i: (
                -float(chunk_scores[i]),
                chunks[i].start_line,
                chunks[i].end_line,
                chunks[i].name,
                chunks[i].receiver or "",
            )
        )
        for i in members:
            chunk = chunks[i]
            result.append((chunk.path, chunk.name, chunk.receiver, float(chunk_scores[i])))
            order.append(i)
    return tuple(result), tuple(order)


@lru_cache(maxsize=1 << 16)
def _terms(*texts: str) -> DocumentTerms:
    """The bag of words of the texts' tokens, one after the other, remembered: a perturbed
    corpus indexes mostly the documents of its base corpus again."""
    return document_terms([token for text in texts for token in tokenize(text)])


class LexicalIndex:
    """Built H000-like harness (see module docstring for the rankings)."""

    def __init__(
        self, spec: LexicalSpec, files: Mapping[str, bytes], functions: Sequence[GoFunction]
    ):
        start = time.perf_counter()
        self.spec = spec
        texts = _decoded(files)
        self.chunks = _sorted_functions(functions, texts)
        self.files = BM25Index(
            {
                path: _terms(path, text) if spec.include_path else _terms(text)
                for path, text in texts.items()
            },
            spec.bm25,
        )
        self.chunk_bm25 = None
        if self.chunks and spec.function_ranking == "bm25":
            width = len(str(len(self.chunks)))
            self.chunk_bm25 = BM25Index(
                {f"{i:0{width}d}": _terms(c.text) for i, c in enumerate(self.chunks)},
                spec.bm25,
            )
        self._embedding = (0, 0, 0)
        self._build_seconds = time.perf_counter() - start

    def _chunk_scores_bm25(self, tokens: list[str]) -> np.ndarray:
        if self.chunk_bm25 is None:
            return np.zeros(0, dtype=np.float32)
        return self.chunk_bm25.scores(tokens)

    def search(self, query: str) -> Ranking:
        """Rank files and functions for ``query``."""
        start = time.perf_counter()
        tokens = _query_tokens(query)
        files = self.files.search_tokens(tokens, self.spec.candidate_limit)
        functions, order = _function_ranking(files, self.chunks, self._chunk_scores_bm25(tokens))
        return Ranking(tuple(files), functions, time.perf_counter() - start, order)

    def statistics(self) -> IndexStatistics:
        """Files, chunks, file-vocabulary size, build time, embedding counts."""
        calls, misses, hits = self._embedding
        return IndexStatistics(
            files=len(self.files),
            chunks=len(self.chunks),
            vocabulary_size=self.files.vocabulary_size,
            build_seconds=self._build_seconds,
            embedding_calls=calls,
            embedding_misses=misses,
            embedding_hits=hits,
        )


def _query_tokens(query: str) -> list[str]:
    if not isinstance(query, str) or not query.strip():
        raise HarnessInputError(f"query={query!r:.80} must be a non-empty str")
    return tokenize(query)


class FusedIndex(LexicalIndex):
    """Built H008-like harness: BM25 and dense retrieval fused by RRF."""

    def __init__(
        self,
        spec: FusedSpec,
        files: Mapping[str, bytes],
        functions: Sequence[GoFunction],
        backend: EmbeddingBackend,
        cache: VectorCache,
    ) -> None:
        start = time.perf_counter()
        if backend is None or cache is None:
            raise HarnessInputError(
                f"harness {spec.harness_id!r} is dense: pass an embedding backend and a cache"
            )
        super().__init__(spec, files, functions)
        if not self.chunks:
            raise HarnessInputError(
                f"harness {spec.harness_id!r}: the corpus has no functions to embed"
            )
        self.backend = backend
        self.cache = cache
        embedded = embed_with_cache_report(
            backend, cache, [c.text for c in self.chunks], batch_size=spec.embedding_batch_size
        )
        self.dense = DenseFileIndex(embedded.vectors, [c.path for c in self.chunks])
        self._embedding = (embedded.backend_calls, embedded.misses, embedded.hits)
        self._build_seconds = time.perf_counter() - start

    def search(self, query: str) -> Ranking:
        """Rank files (RRF of BM25 and dense) and functions for ``query``."""
        start = time.perf_counter()
        spec = self.spec
        tokens = _query_tokens(query)
        lexical = self.files.search_tokens(tokens, spec.candidate_limit)
        vector = embed_with_cache_report(
            self.backend, self.cache, [query], batch_size=spec.embedding_batch_size
        ).vectors[0]
        dense_scores = self.dense.chunk_scores(vector)
        dense = self.dense.rank_files(dense_scores, spec.candidate_limit)
        files = reciprocal_rank_fusion([lexical, dense], spec.rrf_k, spec.candidate_limit)
        chunk_scores = (
            dense_scores if spec.function_ranking == "dense" else self._chunk_scores_bm25(tokens)
        )
        functions, order = _function_ranking(files, self.chunks, chunk_scores)
        return Ranking(tuple(files), functions, time.perf_counter() - start, order)


Builder = Callable[..., Index]
SpecParser = Callable[[str, Mapping[str, Any]], LexicalSpec]

ENTRY_POINT_GROUP = registry.HARNESS_KINDS
_INSTALL_HINT = (
    f"a package installed in site-packages adds a harness kind under the entry-point group "
    f"{ENTRY_POINT_GROUP!r}, naming a prereg.e04.harness.HarnessKind of that kind "
    "(pip install PATH, not pip install -e PATH)"
)


@dataclass(frozen=True)
class HarnessKind:
    """A harness kind: how to parse its plan entry and how to build its index.

    ``parse(harness_id, entry) -> LexicalSpec`` reads one plan entry (every field, no others)
    and raises :class:`HarnessSpecError` naming the field; ``build(spec, files, functions,
    backend, cache) -> Index`` builds the index of one corpus. A user's package makes its
    kind available to real runs by naming an instance under the entry-point group
    ``prereg.harness_kinds`` (:mod:`prereg.kinds.registry`), its entry name equal to ``kind``::

        [project.entry-points."prereg.harness_kinds"]
        "splade" = "my_harnesses:SPLADE"
    """

    kind: str
    parse: SpecParser
    build: Builder


def _build_lexical(
    spec: LexicalSpec,
    files: Mapping[str, bytes],
    functions: Sequence[GoFunction],
    backend: EmbeddingBackend | None,
    cache: VectorCache | None,
) -> LexicalIndex:
    return LexicalIndex(spec, files, functions)


# The project's own kinds: tracked code, never taken from package metadata.
BUILT_IN_HARNESS_KINDS: tuple[HarnessKind, ...] = (
    HarnessKind("bm25", lexical_spec_from_plan, _build_lexical),
    HarnessKind("bm25+dense-rrf", fused_spec_from_plan, FusedIndex),
)


def _is_harness_kind(name: str, found: object) -> bool:
    return isinstance(found, HarnessKind) and found.kind == name


# Harness kinds by name: the built-in ones, then those installed packages declare.
HARNESS_POINT = registry.ExtensionPoint(
    ENTRY_POINT_GROUP,
    {built_in.kind: built_in for built_in in BUILT_IN_HARNESS_KINDS},
    _is_harness_kind,
    "harness kind",
)


def installed_kind(name: str) -> HarnessKind:
    """Harness kind ``name`` from a recorded installed distribution (:mod:`prereg.kinds.registry`).

    Raises :class:`prereg.kinds.registry.NotInstalled` (with every reason found) otherwise.
    """
    if name in HARNESS_POINT.built_in:
        raise registry.NotInstalled(ENTRY_POINT_GROUP, name, [f"{name!r} is built in"])
    return HARNESS_POINT.load(name)


class HarnessRegistry:
    """Harness kinds by name: how to parse a plan entry and how to build an index.

    A user adds a kind in-process with :meth:`register` or :meth:`add`;
    :func:`default_registry` holds ``"bm25"`` and ``"bm25+dense-rrf"`` and finds any other
    kind among the recorded installed distributions (entry-point group
    ``prereg.harness_kinds``), so a user's installed package reaches real runs.
    """

    def __init__(self, *, installed: bool = False) -> None:
        self._kinds: dict[str, HarnessKind] = {}
        self._installed = installed  # look unknown kinds up in installed distributions

    def add(self, harness_kind: HarnessKind) -> None:
        """Add a :class:`HarnessKind`."""
        if not isinstance(harness_kind, HarnessKind):
            raise HarnessSpecError(f"{harness_kind!r} is not a HarnessKind")
        kind = harness_kind.kind
        if not isinstance(kind, str) or not kind:
            raise HarnessSpecError(f"kind={kind!r} must be a non-empty str")
        if kind in self._kinds:
            raise HarnessSpecError(f"kind {kind!r} is already registered")
        self._kinds[kind] = harness_kind

    def register(self, kind: str, parse: SpecParser, build: Builder) -> None:
        """Add a kind; ``build(spec, files, functions, backend, cache) -> Index``."""
        self.add(HarnessKind(kind, parse, build))

    def kinds(self) -> tuple[str, ...]:
        """Kind names registered so far (built in, added, or installed and used), sorted."""
        return tuple(sorted(self._kinds))

    def kind(self, kind: Any, where: str = "harness") -> HarnessKind:
        """The :class:`HarnessKind` named ``kind``; ``where`` names the plan entry in errors."""
        if kind in self._kinds:
            return self._kinds[kind]
        why = ""
        if self._installed and isinstance(kind, str) and kind:
            try:
                found = installed_kind(kind)
            except registry.NotInstalled as missing:
                why = f" ({'; '.join(missing.reasons)})" if missing.reasons else ""
            else:
                self._kinds[kind] = found
                return found
        hint = f"; {_INSTALL_HINT}" if self._installed else ""
        raise HarnessSpecError(
            f"{where}: field kind={kind!r} is not one of {self.kinds()}, built in or "
            f"installed{why}{hint}"
        )

    def spec_from_plan(self, harness_id: str, entry: Mapping[str, Any]) -> LexicalSpec:
        """Parse one plan entry by its ``kind``."""
        if not isinstance(entry, Mapping) or "kind" not in entry:
            raise HarnessSpecError(f"harness {harness_id!r}: entry {entry!r:.80} has no 'kind'")
        return self.kind(entry["kind"], f"harness {harness_id!r}").parse(harness_id, entry)

    def specs_from_plan(self, harnesses: Mapping[str, Mapping[str, Any]]) -> dict[str, LexicalSpec]:
        """Parse a plan's ``{harness_id: entry}`` object."""
        return {hid: self.spec_from_plan(hid, entry) for hid, entry in harnesses.items()}

    def build(
        self,
        spec: LexicalSpec,
        files: Mapping[str, bytes],
        functions: Sequence[GoFunction],
        backend: EmbeddingBackend | None,
        cache: VectorCache | None,
    ) -> Index:
        """Build the index of ``spec`` over one corpus (never reused for another)."""
        harness_kind = self.kind(spec.kind, f"harness {spec.harness_id!r}")
        return harness_kind.build(spec, files, functions, backend, cache)


def default_registry() -> HarnessRegistry:
    """A new registry: the built-in kinds ``bm25`` and ``bm25+dense-rrf``, then any kind a
    recorded installed distribution provides (looked up on first use, once per process)."""
    kinds = HarnessRegistry(installed=True)
    for harness_kind in BUILT_IN_HARNESS_KINDS:
        kinds.add(harness_kind)
    return kinds


def build(
    spec: LexicalSpec,
    files: Mapping[str, bytes],
    functions: Sequence[GoFunction],
    backend: EmbeddingBackend | None,
    cache: VectorCache | None,
) -> Index:
    """:meth:`HarnessRegistry.build` with :func:`default_registry`."""
    return default_registry().build(spec, files, functions, backend, cache)


def query_for(spec: LexicalSpec, task: Task, reformulations: Mapping[str, str] | None) -> str:
    """The text a harness searches for a task: its query or its E02 reformulation."""
    if spec.query_source == "task":
        return task.query
    if reformulations is None or task.task_id not in reformulations:
        raise HarnessInputError(
            f"harness {spec.harness_id!r} searches the E02 reformulation, and none is given "
            f"for task {task.task_id!r}; load it with prereg.e04.reformulations"
        )
    return reformulations[task.task_id]
