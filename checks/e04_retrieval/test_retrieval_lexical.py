import pytest

pytestmark = pytest.mark.software

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from prereg.e04.lexical import BM25Index, BM25InputError, BM25ParameterError, BM25Parameters

LUCENE = BM25Parameters("lucene", 1.2, 0.75)
words = st.sampled_from(["alpha", "beta", "gamma", "delta", "eps"])
corpora = st.lists(st.lists(words, max_size=8), min_size=1, max_size=8)


def lucene_reference(corpus: list[list[str]], query: list[str], k1: float, b: float) -> list[float]:
    """Kamphuis et al. 2020, Lucene variant, written out in float64 (the module's Notes)."""
    n = len(corpus)
    avgdl = sum(len(d) for d in corpus) / n
    scores = []
    for doc in corpus:
        total = 0.0
        for term in query:
            df = sum(term in d for d in corpus)
            if df == 0:
                continue
            tf = doc.count(term)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            total += idf * tf / (tf + k1 * (1 - b + b * len(doc) / avgdl)) if tf else 0.0
        scores.append(total)
    return scores


@settings(max_examples=60, deadline=None)
@given(corpora, st.lists(words, min_size=1, max_size=4), st.floats(0.1, 3.0), st.floats(0.0, 1.0))
def test_lucene_scores_match_the_formula(corpus, query, k1, b) -> None:
    if sum(len(d) for d in corpus) == 0:
        return
    keys = {f"f{i:02d}.go": doc for i, doc in enumerate(corpus)}
    index = BM25Index(keys, BM25Parameters("lucene", k1, b))
    expected = lucene_reference(corpus, query, k1, b)
    got = index.scores(query)
    for e, g in zip(expected, got):
        assert g == pytest.approx(e, rel=1e-5, abs=1e-6)  # float32 scores


@settings(max_examples=60, deadline=None)
@given(corpora, st.lists(words, min_size=1, max_size=4), st.integers(1, 10))
def test_search_is_positive_sorted_and_limited(corpus, query, limit) -> None:
    if sum(len(d) for d in corpus) == 0:
        return
    index = BM25Index({f"f{i:02d}.go": d for i, d in enumerate(corpus)}, LUCENE)
    result = index.search_tokens(query, limit)
    assert len(result) <= limit
    assert all(score > 0 for _, score in result)
    assert result == sorted(result, key=lambda item: (-item[1], item[0]))
    positive = int((index.scores(query) > 0).sum())
    assert len(result) == min(limit, positive)


def test_ties_are_broken_by_path_and_limit_applies() -> None:
    docs = {"c.go": ["run", "x"], "a.go": ["run", "x"], "b.go": ["run", "x"], "d.go": ["y"]}
    index = BM25Index(docs, LUCENE)
    result = index.search_tokens(["run"], 200)
    assert [p for p, _ in result] == ["a.go", "b.go", "c.go"]  # d.go scores 0: excluded
    assert len({s for _, s in result}) == 1
    assert [p for p, _ in index.search_tokens(["run"], 2)] == ["a.go", "b.go"]


def test_search_uses_the_identifier_tokenizer() -> None:
    index = BM25Index({"a.go": ["parse", "http"], "b.go": ["other"]}, LUCENE)
    assert [p for p, _ in index.search("parseHTTP", 10)] == ["a.go"]


def test_repeated_query_token_counts_twice() -> None:
    index = BM25Index({"a.go": ["run", "x"], "b.go": ["y"]}, LUCENE)
    once = index.scores(["run"])[0]
    assert index.scores(["run", "run"])[0] == pytest.approx(2 * once, rel=1e-6)


def test_unknown_query_gives_no_results() -> None:
    index = BM25Index({"a.go": ["run"]}, LUCENE)
    assert index.search_tokens(["nothing"], 5) == []
    assert index.search_tokens([], 5) == []


def test_vocabulary_size_excludes_the_empty_token() -> None:
    assert BM25Index({"a.go": ["x", "y"], "b.go": ["y", "z"]}, LUCENE).vocabulary_size == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"variant": "okapi", "k1": 1.2, "b": 0.75}, "variant='okapi'"),
        ({"variant": "lucene", "k1": -1, "b": 0.75}, "k1=-1"),
        ({"variant": "lucene", "k1": 1.2, "b": 1.5}, "b=1.5"),
        ({"variant": "lucene", "k1": 1.2, "b": 0.75, "delta": 0.5}, "delta=0.5"),
        ({"variant": "bm25+", "k1": 1.2, "b": 0.75}, "delta=None"),
    ],
)
def test_bad_parameters_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(BM25ParameterError, match=message.replace("(", r"\(")):
        BM25Parameters(**kwargs)


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(BM25InputError, match="empty"):
        BM25Index({}, LUCENE)
    with pytest.raises(BM25InputError, match="token list"):
        BM25Index({"a.go": "func main"}, LUCENE)  # type: ignore[dict-item]
    index = BM25Index({"a.go": ["x"]}, LUCENE)
    with pytest.raises(BM25InputError, match="limit=0"):
        index.search_tokens(["x"], 0)
    with pytest.raises(BM25InputError, match="tokenize"):
        index.scores("x")  # type: ignore[arg-type]
