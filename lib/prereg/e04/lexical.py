"""BM25 retrieval over pre-tokenised documents (files or function chunks).

Scores are those of ``bm25s.BM25`` (0.3.16) to the byte, for each of its variants: every
(document, token) weight is computed from the same numbers, in the same dtypes and in the
same order of operations as ``bm25s.BM25.index``, and a query sums the weights of its
tokens in float32, in query order, as ``bm25s.BM25.get_scores`` does (the checks in
``checks/e04/retrieval`` compare bytes with bm25s itself). What bm25s recounts for every
corpus is counted once per document here (:func:`document_terms`): a perturbed corpus
shares all but a few documents with its base corpus, so indexing it costs a concatenation
and a few vectorised passes over its postings. Ranking, filtering and tie-breaking are
done here, so that they do not depend on a library's top-k selection.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from prereg.e04.tokenize import tokenize

BM25_VARIANTS = ("robertson", "lucene", "atire", "bm25l", "bm25+")
"""Scoring variants, named as bm25s names them (its ``method`` argument)."""

_SUBTRACTS_NON_OCCURRENCE = ("bm25l", "bm25+")


class BM25ParameterError(ValueError):
    """A BM25 parameter is outside its domain."""


class BM25InputError(ValueError):
    """Documents or a query cannot be indexed or searched."""


@dataclass(frozen=True)
class BM25Parameters:
    """BM25 scoring parameters, all taken from the plan.

    Parameters
    ----------
    variant : {"robertson", "lucene", "atire", "bm25l", "bm25+"}
        Term-frequency and IDF formula (bm25s ``method``; ``idf_method`` is the same).
    k1 : float
        Term-frequency saturation, ``k1 >= 0``.
    b : float
        Length normalisation, ``0 <= b <= 1``.
    delta : float or None
        Lower bound of the term-frequency component for ``bm25l`` / ``bm25+``
        (required and ``> 0`` there), ``None`` for the other variants.

    Notes
    -----
    Lucene variant (bm25s ``method="lucene"``, Kamphuis et al. 2020 [1]_)::

        score(D, Q) = sum_{t in Q} log(1 + (N - df_t + 0.5) / (df_t + 0.5))
                      * tf_{t,D} / (tf_{t,D} + k1 * (1 - b + b * |D| / avgdl))

    A query token occurring twice contributes twice (bm25s sums over query tokens).
    The IDF is rounded to float32, the term-frequency component is float64, and their
    product is rounded to float32 once per (document, token); the sum over query tokens
    is float32.

    References
    ----------
    .. [1] C. Kamphuis, A. P. de Vries, L. Boytsov, J. Lin, "Which BM25 do you
       mean? A large-scale reproducibility study of scoring variants", ECIR 2020.
    """

    variant: str
    k1: float
    b: float
    delta: float | None = None

    def __post_init__(self) -> None:
        if self.variant not in BM25_VARIANTS:
            raise BM25ParameterError(
                f"variant={self.variant!r} is not a bm25s method; use one of {BM25_VARIANTS}"
            )
        if not _finite_number(self.k1) or self.k1 < 0:
            raise BM25ParameterError(f"k1={self.k1!r} must be a finite number >= 0")
        if not _finite_number(self.b) or not 0 <= self.b <= 1:
            raise BM25ParameterError(f"b={self.b!r} must be a number in [0, 1]")
        needs_delta = self.variant in _SUBTRACTS_NON_OCCURRENCE
        if needs_delta and (not _finite_number(self.delta) or self.delta <= 0):
            raise BM25ParameterError(
                f"delta={self.delta!r} must be a finite number > 0 for variant={self.variant!r}"
            )
        if self.variant == "bm25+" and self.k1 == 0:
            raise BM25ParameterError(
                "k1=0 makes bm25+'s score of a token absent from a document 0/0; use k1 > 0"
            )
        if not needs_delta and self.delta is not None:
            raise BM25ParameterError(
                f"delta={self.delta!r} is ignored by variant={self.variant!r}; set it to None"
            )

    def idf(self, df: int, n: int) -> float:
        """IDF of a token found in ``df`` of ``n`` documents (``df >= 1``), a Python float."""
        if self.variant == "robertson":
            return math.log(max((n - df + 0.5) / (df + 0.5), 1))
        if self.variant == "lucene":
            return math.log(1 + (n - df + 0.5) / (df + 0.5))
        if self.variant == "atire":
            return math.log(n / df)
        if self.variant == "bm25l":
            return math.log((n + 1) / (df + 0.5))
        return math.log((n + 1) / df)

    def term_frequency_component(self, tf, length, average_length):
        """The variant's term-frequency component for counts ``tf`` in documents of
        ``length`` tokens; float32 ``tf`` with an int64 array or a Python int ``length``
        and a NumPy float64 ``average_length`` give float64."""
        k1, b, delta = self.k1, self.b, self.delta
        if self.variant in ("robertson", "lucene"):
            return tf / (k1 * ((1 - b) + b * length / average_length) + tf)
        if self.variant == "atire":
            return (tf * (k1 + 1)) / (tf + k1 * (1 - b + b * length / average_length))
        if self.variant == "bm25l":
            c = tf / (1 - b + b * length / average_length)
            return ((k1 + 1) * (c + delta)) / (k1 + c + delta)
        return ((k1 + 1) * tf) / (k1 * (1 - b + b * length / average_length) + tf) + delta


def _finite_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


_VOCABULARY: dict[str, int] = {}
"""Every token this process has counted -> its id (ids are never reused)."""


@dataclass(frozen=True, eq=False)
class DocumentTerms:
    """One document's bag of words: its distinct tokens as process-wide ids (int64), how
    often each occurs (float32, as bm25s counts them) and the document's length in tokens.
    Build it with :func:`document_terms`; a caller that indexes a document again (in
    another corpus) keeps it instead of recounting."""

    ids: np.ndarray
    counts: np.ndarray
    length: int


def document_terms(tokens: Sequence[str]) -> DocumentTerms:
    """The :class:`DocumentTerms` of a document's token list."""
    if isinstance(tokens, str):
        raise BM25InputError("a document is a str; pass its token list (prereg.e04.tokenize)")
    counted = Counter(tokens)
    ids = np.fromiter(
        (_VOCABULARY.setdefault(token, len(_VOCABULARY)) for token in counted),
        dtype=np.int64,
        count=len(counted),
    )
    counts = np.fromiter(counted.values(), dtype=np.float32, count=len(counted))
    return DocumentTerms(ids, counts, len(tokens))


class BM25Index:
    """A BM25 index over named, pre-tokenised documents.

    Parameters
    ----------
    documents : Mapping[str, Sequence[str] | DocumentTerms]
        Document key (a file path or chunk key) -> its tokens, or their
        :func:`document_terms`. Keys are stored in sorted order, which is also the
        tie-break order.
    parameters : BM25Parameters
        Scoring variant and constants.
    """

    def __init__(
        self, documents: Mapping[str, Sequence[str] | DocumentTerms], parameters: BM25Parameters
    ) -> None:
        if not isinstance(parameters, BM25Parameters):
            raise BM25InputError(
                f"parameters must be a BM25Parameters, got {type(parameters).__name__}"
            )
        if len(documents) == 0:
            raise BM25InputError("documents is empty; BM25 needs at least one document")
        for key, tokens in documents.items():
            if not isinstance(key, str):
                raise BM25InputError(f"document key {key!r} must be a str")
            if isinstance(tokens, str):
                raise BM25InputError(
                    f"documents[{key!r}] is a str; pass its token list (prereg.e04.tokenize)"
                )
        self.keys: tuple[str, ...] = tuple(sorted(documents))
        self.parameters = parameters
        terms = [
            d if isinstance(d, DocumentTerms) else document_terms(d)
            for d in (documents[key] for key in self.keys)
        ]
        self._postings_ids = np.concatenate([t.ids for t in terms])
        self._postings_documents = np.repeat(np.arange(len(terms)), [len(t.ids) for t in terms])
        self._document_frequency = np.bincount(self._postings_ids)
        self.vocabulary_size = int(np.count_nonzero(self._document_frequency))
        self._weights, self._non_occurrence = self._postings_weights(terms)

    def _postings_weights(
        self, terms: Sequence[DocumentTerms]
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """float32 weight of each (document, token) posting and, for the variants that
        subtract it, each document frequency's float32 non-occurrence score."""
        parameters = self.parameters
        n = len(terms)
        lengths = np.array([t.length for t in terms])
        average = lengths.mean()
        df = self._document_frequency[self._postings_ids]
        idf_of = {value: parameters.idf(value, n) for value in np.unique(df).tolist()}
        idf = np.zeros(n + 1, dtype=np.float32)
        for value, exact in idf_of.items():
            idf[value] = exact
        tf = np.concatenate([t.counts for t in terms])
        component = parameters.term_frequency_component(
            tf, lengths[self._postings_documents], average
        )
        weights = idf[df] * component
        if parameters.variant not in _SUBTRACTS_NON_OCCURRENCE:
            return weights.astype(np.float32), None
        non_occurrence = np.zeros(n + 1, dtype=np.float32)
        if idf_of:
            absent = parameters.term_frequency_component(0, average, average)
            for value, exact in idf_of.items():
                non_occurrence[value] = exact * absent
        weights -= non_occurrence[df]
        return weights.astype(np.float32), non_occurrence

    def __len__(self) -> int:
        return len(self.keys)

    def scores(self, query_tokens: Sequence[str]) -> np.ndarray:
        """BM25 score of every document (in ``self.keys`` order) for the query tokens.

        Tokens absent from the corpus contribute nothing; a query with no token of the
        corpus scores 0 everywhere.
        """
        if isinstance(query_tokens, str):
            raise BM25InputError("query_tokens is a str; pass tokenize(query)")
        frequency = self._document_frequency
        ids = [
            i
            for i in (_VOCABULARY.get(token, -1) for token in query_tokens)
            if 0 <= i < frequency.size and frequency[i]
        ]
        scores = np.zeros(len(self.keys), dtype=np.float32)
        postings: dict[int, np.ndarray] = {}
        for i in ids:
            if i not in postings:
                postings[i] = np.flatnonzero(self._postings_ids == i)
            chosen = postings[i]
            scores[self._postings_documents[chosen]] += self._weights[chosen]
        if self._non_occurrence is not None and ids:
            scores += self._non_occurrence[frequency[ids]].sum()
        return scores

    def search_tokens(self, query_tokens: Sequence[str], limit: int) -> list[tuple[str, float]]:
        """Documents with score > 0, sorted by (-score, key), at most ``limit``."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise BM25InputError(f"limit={limit!r} must be an int >= 1")
        scores = self.scores(query_tokens)
        return ranked_positive(self.keys, scores, limit)

    def search(self, query: str, limit: int) -> list[tuple[str, float]]:
        """:meth:`search_tokens` on ``tokenize(query)``."""
        return self.search_tokens(tokenize(query), limit)


def ranked_positive(keys: Sequence[str], scores: np.ndarray, limit: int) -> list[tuple[str, float]]:
    """Keys with score > 0 sorted by (-score, key), truncated to ``limit``.

    ``keys`` must be sorted ascending (then index order is key order).
    """
    positive = np.flatnonzero(scores > 0)
    order = positive[np.lexsort((positive, -scores[positive]))][:limit]
    return [(keys[i], float(scores[i])) for i in order]
