import pytest

pytestmark = pytest.mark.software

import math

import bm25s
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prereg.e04.lexical import (
    BM25_VARIANTS,
    BM25Index,
    BM25InputError,
    BM25ParameterError,
    BM25Parameters,
    document_terms,
)

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


def bm25s_scores(corpus: list[list[str]], query: list[str], parameters) -> np.ndarray:
    """bm25s 0.3.16's own scores, as its README builds and queries an index."""
    delta = {"delta": parameters.delta} if parameters.delta is not None else {}
    model = bm25s.BM25(k1=parameters.k1, b=parameters.b, method=parameters.variant, **delta)
    model.index(corpus, show_progress=False)
    ids = model.get_tokens_ids(query)
    if not ids:
        return np.zeros(len(corpus), dtype=np.float32)
    return np.asarray(model.get_scores_from_ids(ids))


@st.composite
def bm25_parameters(draw) -> BM25Parameters:
    variant = draw(st.sampled_from(BM25_VARIANTS))
    delta = draw(st.floats(0.05, 2.0)) if variant in ("bm25l", "bm25+") else None
    low = 0.05 if variant == "bm25+" else 0.0
    k1 = draw(st.sampled_from([low, 1.2, 2.0]) | st.floats(low, 3.0))
    b = draw(st.sampled_from([0.0, 0.75, 1.0]) | st.floats(0.0, 1.0))
    return BM25Parameters(variant, k1, b, delta)


many_words = st.sampled_from([f"w{i}" for i in range(12)] + ["parse", "http", "run"])
lengths = st.sampled_from([0, 1, 2, 3, 7, 40])


@settings(max_examples=150, deadline=None)
@given(
    st.lists(lengths.flatmap(lambda n: st.lists(many_words, min_size=n, max_size=n)),
             min_size=1, max_size=12),
    st.lists(many_words | st.just("absent"), min_size=1, max_size=12),
    bm25_parameters(),
)  # fmt: skip
def test_scores_are_bm25s_scores_to_the_byte(corpus, query, parameters) -> None:
    """Every variant, repeated and unknown query tokens, empty documents: the same float32
    bytes as bm25s itself, whether documents come as tokens or as kept DocumentTerms."""
    if sum(len(d) for d in corpus) == 0:
        return
    keys = {f"f{i:02d}.go": doc for i, doc in enumerate(corpus)}
    expected = bm25s_scores([keys[k] for k in sorted(keys)], query, parameters)
    from_tokens = BM25Index(keys, parameters)
    from_terms = BM25Index({k: document_terms(d) for k, d in keys.items()}, parameters)
    for index in (from_tokens, from_terms):
        got = index.scores(query)
        assert got.dtype == expected.dtype == np.float32
        assert got.tobytes() == expected.tobytes(), (got, expected)
        assert index.vocabulary_size == len({t for d in corpus for t in d})


def test_a_document_kept_for_another_corpus_scores_as_in_a_new_index() -> None:
    """Terms counted once serve every corpus that holds the document; the corpus's own
    document frequencies and lengths still decide its scores."""
    shared = document_terms(["parse", "http", "parse"])
    base = BM25Index({"a.go": shared, "b.go": ["run"]}, LUCENE)
    perturbed = BM25Index({"a.go": shared, "b.go": ["run"], "c.go": ["parse"] * 9}, LUCENE)
    fresh = BM25Index({"a.go": ["parse", "http", "parse"], "b.go": ["run"],
                       "c.go": ["parse"] * 9}, LUCENE)  # fmt: skip
    assert perturbed.scores(["parse"]).tobytes() == fresh.scores(["parse"]).tobytes()
    assert base.scores(["parse"])[0] != perturbed.scores(["parse"])[0]


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
        ({"variant": "bm25+", "k1": 0, "b": 0.75, "delta": 0.5}, "k1=0"),
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
