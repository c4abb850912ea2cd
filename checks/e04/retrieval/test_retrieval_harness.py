import pytest

pytestmark = pytest.mark.software

import copy
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from prereg.e04 import harness
from prereg.e04.cache import VectorCache
from prereg.e04.harness import (
    FusedIndex,
    HarnessInputError,
    HarnessSpecError,
    LexicalIndex,
    build,
    default_registry,
    query_for,
    reciprocal_rank_fusion,
)
from prereg.e04.tokenize import TOKENIZER_VERSION
from prereg.e04.types import GoFunction, Task
from prereg.evidence import execution
from prereg.kinds import registry
from support.distributions import fake_distribution
from support.e04_doubles import HashingBackend

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
    "chunk_text": "go-function-text-1",
    "embedding_batch_size": 4,
    "rrf_k": 60,
    "function_ranking": "dense",
}
H010 = {**H008, "query_source": "e02-reformulation"}


# --- reciprocal-rank fusion -------------------------------------------------


def test_rrf_matches_hand_computed_scores() -> None:
    lexical = [("a.go", 9.0), ("b.go", 5.0), ("c.go", 1.0)]
    dense = [("c.go", 0.9), ("a.go", 0.8), ("d.go", 0.1)]
    fused = reciprocal_rank_fusion([lexical, dense], 60, 200)
    # a: 1/61 + 1/62 = 0.032522, c: 1/63 + 1/61 = 0.032266, b: 1/62, d: 1/63 (by hand)
    assert [p for p, _ in fused] == ["a.go", "c.go", "b.go", "d.go"]
    assert [s for _, s in fused] == pytest.approx(
        [1 / 61 + 1 / 62, 1 / 63 + 1 / 61, 1 / 62, 1 / 63], rel=1e-12
    )
    assert fused[0][1] == pytest.approx(0.0325224749, abs=1e-10)
    assert reciprocal_rank_fusion([lexical, dense], 60, 2) == fused[:2]


def test_rrf_ties_are_broken_by_path() -> None:
    fused = reciprocal_rank_fusion(
        [[("y.go", 2.0), ("x.go", 1.0)], [("x.go", 1.0), ("y.go", 0.5)]], 60, 10
    )
    assert fused == [("x.go", 1 / 61 + 1 / 62), ("y.go", 1 / 61 + 1 / 62)]


paths = st.lists(st.sampled_from([f"{c}.go" for c in "abcdefgh"]), unique=True, max_size=8)


@given(paths, paths, st.floats(0, 100), st.integers(1, 10))
def test_rrf_properties(first, second, k, limit) -> None:
    a = [(p, 0.0) for p in first]
    b = [(p, 0.0) for p in second]
    fused = reciprocal_rank_fusion([a, b], k, limit)
    assert fused == reciprocal_rank_fusion([b, a], k, limit)  # two-term sums commute exactly
    assert fused == sorted(fused, key=lambda item: (-item[1], item[0]))
    assert len(fused) == min(limit, len(set(first) | set(second)))
    alone = reciprocal_rank_fusion([a], k, limit)
    assert [p for p, _ in alone] == first[:limit]  # one list keeps its order


def test_rrf_refuses_bad_input() -> None:
    with pytest.raises(HarnessInputError, match="twice"):
        reciprocal_rank_fusion([[("a.go", 1.0), ("a.go", 0.5)]], 60, 5)
    with pytest.raises(HarnessInputError, match="k=-1"):
        reciprocal_rank_fusion([], -1, 5)


# --- specs ------------------------------------------------------------------


def test_reference_specs_parse_and_round_trip() -> None:
    registry = default_registry()
    specs = registry.specs_from_plan({"H000": H000, "H008": H008, "H010": H010})
    assert specs["H000"].to_plan() == H000
    assert specs["H008"].to_plan() == {**H008, "rrf_k": 60.0}
    assert specs["H010"].query_source == "e02-reformulation"
    assert registry.kinds() == ("bm25", "bm25+dense-rrf")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda e: e.pop("rrf_k"), r"missing fields \['rrf_k'\]"),
        (lambda e: e.update(extra=1), r"unknown fields \['extra'\]"),
        (lambda e: e.update(tokenizer="whitespace"), "tokenizer='whitespace'"),
        (lambda e: e.update(candidate_limit=0), "candidate_limit=0"),
        (lambda e: e.update(query_source="llm"), "query_source='llm'"),
        (lambda e: e.update(kind="splade"), "kind='splade'"),
        (lambda e: e["bm25"].update(k1=-2), "k1=-2"),
        (lambda e: e["bm25"].pop("include_path"), "include_path"),
        (lambda e: e.update(rrf_k=-1), "rrf_k=-1"),
        (lambda e: e.update(chunk_text="file"), "chunk_text='file'"),
    ],
)
def test_bad_specs_are_refused(mutate, message) -> None:
    entry = copy.deepcopy(H008)
    mutate(entry)
    with pytest.raises(HarnessSpecError, match=message):
        default_registry().spec_from_plan("H008", entry)


def test_a_user_kind_can_be_registered() -> None:
    registry = default_registry()
    registry.register(
        "bm25-copy",
        lambda hid, e: default_registry().spec_from_plan(hid, {**e, "kind": "bm25"}),
        lambda *a: "built",
    )
    spec = registry.spec_from_plan("H999", {**H000, "kind": "bm25-copy"})
    with pytest.raises(HarnessSpecError, match="already registered"):
        registry.register("bm25", lambda *a: None, lambda *a: None)
    assert spec.kind == "bm25"


TOY_HARNESS = """
import dataclasses
from prereg.e04.harness import HarnessKind, LexicalIndex, lexical_spec_from_plan

def parse(harness_id, entry):
    spec = lexical_spec_from_plan(harness_id, {**entry, "kind": "bm25"})
    return dataclasses.replace(spec, kind="toy-bm25")

def build(spec, files, functions, backend, cache):
    return LexicalIndex(spec, files, functions)

TOY = HarnessKind("toy-bm25", parse, build)
"""


def test_an_installed_packages_harness_kind_reaches_the_default_registry(tmp_path, monkeypatch):
    site = tmp_path / "site-packages"
    points = "[prereg.harness_kinds]\ntoy-bm25 = toyharness_mod:TOY\nbm25 = toyharness_mod:TOY\n"
    fake_distribution(
        site, "toyharness", {"toyharness_mod.py": TOY_HARNESS}, {"entry_points.txt": points}
    )
    monkeypatch.setattr(execution, "site_dirs", lambda: [str(site)])
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(harness.HARNESS_POINT, "_loaded", {})
    monkeypatch.setattr(registry, "_origins", {})
    entry = {**H000, "kind": "toy-bm25"}
    (site / "toyharness_mod.py").write_text(TOY_HARNESS + "# edited after install\n")
    with pytest.raises(HarnessSpecError) as refused:
        default_registry().spec_from_plan("H900", entry)
    message = str(refused.value)
    assert "harness 'H900': field kind='toy-bm25'" in message
    assert "differs from the RECORD of toyharness 1.0; reinstall it" in message
    assert "'prereg.harness_kinds'" in message and "('bm25', 'bm25+dense-rrf')" in message
    (site / "toyharness_mod.py").write_text(TOY_HARNESS)
    try:
        spec = default_registry().spec_from_plan("H900", entry)
        toy = default_registry().build(spec, FILES, FUNCTIONS, None, None).search("start the job")
    finally:
        sys.modules.pop("toyharness_mod", None)
    reference = build(default_registry().spec_from_plan("H000", H000), FILES, FUNCTIONS, None, None)
    expected = reference.search("start the job")
    assert spec.kind == "toy-bm25" and (toy.files, toy.functions) == (
        expected.files,
        expected.functions,
    )
    assert registry.origin(registry.HARNESS_KINDS, "toy-bm25")["distribution"] == "toyharness 1.0"
    # the built-in name in the same metadata is never read from it
    assert default_registry().kind("bm25") is harness.BUILT_IN_HARNESS_KINDS[0]
    assert registry.origin(registry.HARNESS_KINDS, "bm25") is None


# --- built harnesses --------------------------------------------------------

FILES = {
    "runner/run.go": b"package runner\nfunc Run(cfg Config) error { return startJob(cfg) }\n"
    b"func startJob(cfg Config) error { return nil }\n",
    "runner/stop.go": b"package runner\nfunc Stop() { cancelJob() }\nfunc cancelJob() {}\n",
    "cache/cache.go": b"package cache\nfunc Restore(key string) error { return nil }\n",
    "docs/notes.go": b"package docs\n// nothing about jobs\n",
}
FUNCTIONS = [
    GoFunction(
        "runner/run.go", "Run", None, 2, 2, "func Run(cfg Config) error { return startJob(cfg) }"
    ),
    GoFunction(
        "runner/run.go", "startJob", None, 3, 3, "func startJob(cfg Config) error { return nil }"
    ),
    GoFunction("runner/stop.go", "Stop", None, 2, 2, "func Stop() { cancelJob() }"),
    GoFunction("runner/stop.go", "cancelJob", None, 3, 3, "func cancelJob() {}"),
    GoFunction(
        "cache/cache.go", "Restore", None, 2, 2, "func Restore(key string) error { return nil }"
    ),
]


def cache_at(path: Path) -> VectorCache:
    return VectorCache(path, conflict_atol=0.0, busy_timeout_seconds=10)


def test_lexical_harness_ranks_files_and_functions() -> None:
    spec = default_registry().spec_from_plan("H000", H000)
    index = build(spec, FILES, FUNCTIONS, None, None)
    assert isinstance(index, LexicalIndex)
    ranking = index.search("start the job")
    assert [p for p, _ in ranking.files] == ["runner/run.go", "runner/stop.go"]
    # functions: file rank first, then chunk BM25 score ("startJob" matches start+job)
    assert [f[1] for f in ranking.functions] == ["startJob", "Run", "cancelJob", "Stop"]
    assert ranking.functions[0][3] > 0 and ranking.query_seconds >= 0
    stats = index.statistics()
    assert (stats.files, stats.chunks, stats.embedding_calls) == (4, 5, 0)
    assert stats.vocabulary_size > 10


def test_fused_harness_is_rrf_of_its_two_lists_and_deterministic(tmp_path: Path) -> None:
    spec = default_registry().spec_from_plan("H008", {**H008, "candidate_limit": 3})
    backend = HashingBackend()
    with cache_at(tmp_path / "v.sqlite") as cache:
        index = build(spec, FILES, FUNCTIONS, backend, cache)
        assert isinstance(index, FusedIndex)
        first = index.search("restore job cache")
        lexical = index.files.search_tokens(["restore", "job", "cache"], spec.candidate_limit)
        from prereg.e04.cache import embed_with_cache

        query = embed_with_cache(backend, cache, ["restore job cache"], batch_size=1)[0]
        dense = index.dense.search(query, spec.candidate_limit)
        assert list(first.files) == reciprocal_rank_fusion([lexical, dense], 60, 3)
        assert len(first.files) == 3
        stats = index.statistics()
        assert (stats.chunks, stats.embedding_misses, stats.embedding_calls) == (5, 5, 2)
        again = build(spec, FILES, FUNCTIONS, HashingBackend(), cache)
        assert again.statistics().embedding_misses == 0
        second = again.search("restore job cache")
    assert (first.files, first.functions) == (second.files, second.functions)
    ranks = {p: r for r, (p, _) in enumerate(first.files)}
    keys = [(ranks[f[0]], -f[3]) for f in first.functions]
    assert keys == sorted(keys)  # by file rank, then by dense chunk score
    assert {f[0] for f in first.functions} <= set(ranks)


def test_a_perturbed_corpus_gets_its_own_index(tmp_path: Path) -> None:
    spec = default_registry().spec_from_plan("H008", H008)
    distractor = "__harness_distractors__/d0.go"
    perturbed = {**FILES, distractor: b"package d\nfunc RestoreCache() {}\n"}
    functions = [
        *FUNCTIONS,
        GoFunction(distractor, "RestoreCache", None, 2, 2, "func RestoreCache() {}"),
    ]
    with cache_at(tmp_path / "v.sqlite") as cache:
        base = build(spec, FILES, FUNCTIONS, HashingBackend(), cache)
        moved = build(spec, perturbed, functions, HashingBackend(), cache)
        assert distractor not in [p for p, _ in base.search("restore cache").files]
        assert distractor in [p for p, _ in moved.search("restore cache").files]
        assert moved.statistics().embedding_misses == 1


def test_build_refuses_inconsistent_input(tmp_path: Path) -> None:
    spec = default_registry().spec_from_plan("H008", H008)
    with pytest.raises(HarnessInputError, match="backend"):
        build(spec, FILES, FUNCTIONS, None, None)
    stray = GoFunction("other.go", "X", None, 1, 1, "func X() {}")
    with pytest.raises(HarnessInputError, match="'other.go', which is not in files"):
        build(default_registry().spec_from_plan("H000", H000), FILES, [stray], None, None)
    with pytest.raises(HarnessInputError, match="query"):
        build(default_registry().spec_from_plan("H000", H000), FILES, [], None, None).search(" ")


def test_query_for_picks_the_reformulation_for_h010() -> None:
    registry = default_registry()
    task = Task("T1", "original query", "0" * 40, ("a.go",), ())
    assert query_for(registry.spec_from_plan("H008", H008), task, None) == "original query"
    h010 = registry.spec_from_plan("H010", H010)
    assert query_for(h010, task, {"T1": "reformulated"}) == "reformulated"
    with pytest.raises(HarnessInputError, match="'T1'"):
        query_for(h010, task, {})
