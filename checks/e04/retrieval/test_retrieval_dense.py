import pytest

pytestmark = pytest.mark.software

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prereg.e04.dense import DenseFileIndex, DenseInputError


def unit(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float64)
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_equal_scores_are_ordered_by_path_not_insertion() -> None:
    v = unit([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    index = DenseFileIndex(v, ["c.go", "b.go", "a.go", "z.go"])
    result = index.search(unit([[1.0, 0.0]])[0], 10)
    assert [p for p, _ in result] == ["a.go", "b.go", "c.go", "z.go"]
    assert result[0][1] == result[1][1] == result[2][1] == pytest.approx(1.0)


def test_file_score_is_the_max_over_its_chunks_and_limit_applies() -> None:
    v = unit([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    index = DenseFileIndex(v, ["a.go", "a.go", "b.go"])
    # query (0,1): a.go chunks score 0 and 1 -> 1; b.go scores 0.8 (hand-computed).
    result = index.search(unit([[0.0, 1.0]])[0], 1)
    assert result == [("a.go", pytest.approx(1.0))]
    assert index.search(unit([[0.0, 1.0]])[0], 5)[1] == ("b.go", pytest.approx(0.8))
    assert index.chunk_count == 3 and index.files == ("a.go", "b.go")


def test_negative_scores_are_still_ranked() -> None:
    index = DenseFileIndex(unit([[-1.0, 0.0]]), ["a.go"])
    assert index.search(unit([[1.0, 0.0]])[0], 5) == [("a.go", pytest.approx(-1.0))]


@settings(max_examples=50, deadline=None)
@given(
    st.integers(1, 30),
    st.integers(2, 8),
    st.integers(1, 12),
    st.integers(0, 2**32 - 1),
)
def test_search_agrees_with_brute_force(n_chunks, dim, limit, seed) -> None:
    rng = np.random.default_rng(seed)
    vectors = unit(rng.normal(size=(n_chunks, dim)))
    # Few distinct rows, so exact ties between files are frequent.
    vectors = vectors[rng.integers(0, max(1, n_chunks // 3), size=n_chunks)]
    paths = [f"f{int(i)}.go" for i in rng.integers(0, 6, size=n_chunks)]
    query = unit(rng.normal(size=(1, dim)))[0]
    result = DenseFileIndex(vectors, paths).search(query, limit)
    brute = {}
    for path, score in zip(paths, vectors.astype(np.float64) @ query.astype(np.float64)):
        brute[path] = max(brute.get(path, -np.inf), score)
    assert len(result) == min(limit, len(brute))
    assert result == sorted(result, key=lambda item: (-item[1], item[0]))
    for path, score in result:
        assert score == pytest.approx(brute[path], abs=1e-5)
    left_out = set(brute) - {p for p, _ in result}
    if left_out:
        assert max(brute[p] for p in left_out) <= result[-1][1] + 1e-5


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(DenseInputError, match="norms"):
        DenseFileIndex(np.array([[2.0, 0.0]], dtype=np.float32), ["a.go"])
    with pytest.raises(DenseInputError, match="float32"):
        DenseFileIndex(np.array([[1.0, 0.0]]), ["a.go"])
    with pytest.raises(DenseInputError, match="one path per chunk"):
        DenseFileIndex(unit([[1.0, 0.0]]), ["a.go", "b.go"])
    index = DenseFileIndex(unit([[1.0, 0.0]]), ["a.go"])
    with pytest.raises(DenseInputError, match="dimension 3"):
        index.search(unit([[1.0, 0.0, 0.0]])[0], 5)
    with pytest.raises(DenseInputError, match="limit=0"):
        index.search(unit([[1.0, 0.0]])[0], 0)
