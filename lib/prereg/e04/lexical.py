"""BM25 retrieval over pre-tokenised documents (files or function chunks), with bm25s.

Scores come from ``bm25s.BM25`` (0.3.16) built from the token lists of
:mod:`prereg.e04.tokenize`; ranking, filtering and tie-breaking are done here so
that they do not depend on bm25s' top-k selection.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from prereg.e04.tokenize import tokenize

BM25_VARIANTS = ("robertson", "lucene", "atire", "bm25l", "bm25+")
"""Scoring variants implemented by bm25s (its ``method`` argument)."""


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
        needs_delta = self.variant in ("bm25l", "bm25+")
        if needs_delta and (not _finite_number(self.delta) or self.delta <= 0):
            raise BM25ParameterError(
                f"delta={self.delta!r} must be a finite number > 0 for variant={self.variant!r}"
            )
        if not needs_delta and self.delta is not None:
            raise BM25ParameterError(
                f"delta={self.delta!r} is ignored by variant={self.variant!r}; set it to None"
            )


def _finite_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class BM25Index:
    """A BM25 index over named, pre-tokenised documents.

    Parameters
    ----------
    documents : Mapping[str, Sequence[str]]
        Document key (a file path or chunk key) -> its tokens. Keys are stored
        in sorted order, which is also the tie-break order.
    parameters : BM25Parameters
        Scoring variant and constants.
    """

    def __init__(self, documents: Mapping[str, Sequence[str]], parameters: BM25Parameters) -> None:
        # bm25s: the e04 extra, optional
        import bm25s

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
        kwargs = {"delta": parameters.delta} if parameters.delta is not None else {}
        self._model = bm25s.BM25(
            k1=parameters.k1, b=parameters.b, method=parameters.variant, **kwargs
        )
        corpus = [list(documents[key]) for key in self.keys]
        self._model.index(corpus, show_progress=False)
        # bm25s adds the empty token "" to the vocabulary; it is not a word of the corpus.
        self.vocabulary_size = sum(1 for token in self._model.vocab_dict if token != "")

    def __len__(self) -> int:
        return len(self.keys)

    def scores(self, query_tokens: Sequence[str]) -> np.ndarray:
        """BM25 score of every document (in ``self.keys`` order) for the query tokens.

        Tokens absent from the vocabulary contribute nothing; a query with no
        known token scores 0 everywhere.
        """
        if isinstance(query_tokens, str):
            raise BM25InputError("query_tokens is a str; pass tokenize(query)")
        ids = self._model.get_tokens_ids(list(query_tokens))
        if not ids:
            return np.zeros(len(self.keys), dtype=np.float32)
        return np.asarray(self._model.get_scores_from_ids(ids))

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
