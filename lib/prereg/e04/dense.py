"""Dense file retrieval: FAISS IndexFlatIP over normalised chunk vectors, max per file.

An index is built for one corpus and never reused for another (each perturbed
corpus gets its own). A file's score is the largest inner product (cosine, for
unit vectors) between the query and any of its chunks. Files are ranked by
(-score, path) after every search: FAISS orders equal scores by insertion, which
is not a stable property of the corpus, so ties are re-broken here by path.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_UNIT_NORM_TOLERANCE = 1e-3
"""Largest |norm - 1| accepted for an input vector (a sanity check, not a plan value)."""


class DenseInputError(ValueError):
    """Vectors, paths, a query or a limit that the dense index cannot use."""


def _unit_rows(vectors: np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(vectors)
    if array.dtype != np.float32:
        raise DenseInputError(f"{name} has dtype {array.dtype}; pass float32 vectors")
    if array.ndim != 2 or array.shape[1] == 0:
        raise DenseInputError(f"{name} has shape {array.shape}; expected [n, d] with d >= 1")
    if not np.all(np.isfinite(array)):
        raise DenseInputError(f"{name} contains non-finite values")
    norms = np.linalg.norm(array.astype(np.float64), axis=1)
    bad = np.flatnonzero(np.abs(norms - 1.0) > _UNIT_NORM_TOLERANCE)
    if bad.size:
        raise DenseInputError(
            f"{name} rows {bad[:10].tolist()} have L2 norms {norms[bad[:3]].tolist()}, not 1; "
            "normalise them (embedding backends return unit vectors)"
        )
    return np.ascontiguousarray(array)


class DenseFileIndex:
    """Exact inner-product search over chunk vectors, aggregated to files.

    Parameters
    ----------
    vectors : ndarray of float32, shape [n_chunks, d]
        Unit-norm chunk vectors.
    chunk_paths : sequence of str, length n_chunks
        The file of each chunk.
    """

    def __init__(self, vectors: np.ndarray, chunk_paths: Sequence[str]) -> None:
        # faiss: the e04 extra, optional
        import faiss

        array = _unit_rows(vectors, "vectors")
        if isinstance(chunk_paths, str) or len(chunk_paths) != array.shape[0]:
            raise DenseInputError(
                f"chunk_paths has {len(chunk_paths)} entries for {array.shape[0]} vectors; "
                "give one path per chunk"
            )
        if array.shape[0] == 0:
            raise DenseInputError("vectors is empty; a dense index needs at least one chunk")
        self.files: tuple[str, ...] = tuple(sorted(set(chunk_paths)))
        position = {path: i for i, path in enumerate(self.files)}
        self.chunk_file = np.array([position[path] for path in chunk_paths], dtype=np.int64)
        self.dimension = int(array.shape[1])
        self._index = faiss.IndexFlatIP(self.dimension)
        self._index.add(array)

    @property
    def chunk_count(self) -> int:
        """Number of indexed chunks."""
        return int(self._index.ntotal)

    def chunk_scores(self, query_vector: np.ndarray) -> np.ndarray:
        """Inner product of the query with every chunk, float32, in chunk order."""
        query = _unit_rows(np.asarray(query_vector).reshape(1, -1), "query_vector")
        if query.shape[1] != self.dimension:
            raise DenseInputError(
                f"query_vector has dimension {query.shape[1]}; the index has {self.dimension}"
            )
        total = self.chunk_count
        distances, ids = self._index.search(query, total)
        scores = np.empty(total, dtype=np.float32)
        scores[ids[0]] = distances[0]
        return scores

    def search(self, query_vector: np.ndarray, limit: int) -> list[tuple[str, float]]:
        """Top ``limit`` files by max chunk score, sorted by (-score, path).

        Every file with a chunk is a candidate, whatever the sign of its score.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise DenseInputError(f"limit={limit!r} must be an int >= 1")
        return self.rank_files(self.chunk_scores(query_vector), limit)

    def rank_files(self, chunk_scores: np.ndarray, limit: int) -> list[tuple[str, float]]:
        """Files ranked by the max of their chunk scores, (-score, path), at most ``limit``."""
        file_scores = np.full(len(self.files), -np.inf, dtype=np.float32)
        np.maximum.at(file_scores, self.chunk_file, chunk_scores)
        # self.files is sorted, so the file index is the path order.
        order = np.lexsort((np.arange(len(self.files)), -file_scores))[:limit]
        return [(self.files[i], float(file_scores[i])) for i in order]
