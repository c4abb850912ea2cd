import pytest

pytestmark = pytest.mark.software

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from prereg.e04.metrics import (
    MetricInputError,
    first_gold_rank,
    function_recall,
    ndcg_at_k,
    paired_outcome,
    query_measures,
    recall_at_k,
    reciprocal_rank,
    success_at_k,
    token_budget_coverage,
    token_count,
)
from prereg.e04.types import GoFunction, GoldFunction

TOKEN_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*|\d+|\S"  # the E04 plan's token regex
LIMIT = 200  # the E04 candidate limit (plan value), used as test data


def ranking_with_gold_at(ranks, length=20):
    return [f"gold{r}.go" if r in ranks else f"other{r}.go" for r in range(1, length + 1)]


def test_reference_one_gold_at_rank_3():
    # DESIGN.md "E04 reference harnesses": RR 0.3333 and nDCG@10 0.5.
    ranking = ranking_with_gold_at({3})
    gold = {"gold3.go"}
    assert reciprocal_rank(ranking, gold) == pytest.approx(0.3333, abs=5e-5)
    assert ndcg_at_k(ranking, gold, 10) == pytest.approx(0.5, abs=1e-12)  # 1/log2(4)
    assert first_gold_rank(ranking, gold, LIMIT).censored == 3


def test_reference_three_gold_at_ranks_1_4_12():
    # DESIGN.md: R@5 0.6667, nDCG@10 0.6714 (= (1 + 1/log2 5) / (1 + 1/log2 3 + 1/2)).
    ranking = ranking_with_gold_at({1, 4, 12})
    gold = {"gold1.go", "gold4.go", "gold12.go"}
    assert recall_at_k(ranking, gold, 5) == pytest.approx(0.6667, abs=5e-5)
    assert ndcg_at_k(ranking, gold, 10) == pytest.approx(0.6714, abs=5e-5)
    assert recall_at_k(ranking, gold, 1) == pytest.approx(1 / 3)
    assert success_at_k(ranking, gold, 1) == 1.0
    assert recall_at_k(ranking, gold, 12) == 1.0


def test_nothing_returned_scores_zero_and_is_censored():
    ranking = [f"x{i}.go" for i in range(LIMIT)]
    gold = {"g.go"}
    assert reciprocal_rank(ranking, gold) == 0.0
    assert ndcg_at_k(ranking, gold, 10) == 0.0
    assert success_at_k(ranking, gold, 10) == 0.0
    rank = first_gold_rank(ranking, gold, LIMIT)
    assert (rank.censored, rank.observed, rank.rank) == (LIMIT + 1, False, None)
    assert first_gold_rank([], gold, LIMIT).censored == LIMIT + 1


def test_input_errors_name_the_argument():
    with pytest.raises(MetricInputError, match="'a.go' more than once"):
        recall_at_k(["a.go", "a.go"], {"a.go"}, 1)
    with pytest.raises(MetricInputError, match="gold is empty"):
        recall_at_k(["a.go"], set(), 1)
    with pytest.raises(MetricInputError, match="k=0"):
        ndcg_at_k(["a.go"], {"a.go"}, 0)
    with pytest.raises(MetricInputError, match="candidate_limit=1"):
        first_gold_rank(["a.go", "b.go"], {"a.go"}, 1)
    with pytest.raises(MetricInputError, match="budget=-1"):
        token_budget_coverage([], [], -1, TOKEN_PATTERN)
    with pytest.raises(MetricInputError, match="empty string"):
        token_count("x", r"\s*")


@st.composite
def ranked_queries(draw):
    universe = [f"pkg{i % 5}/f{i}.go" for i in range(40)]
    ranking = draw(st.permutations(universe).map(lambda p: p[: draw(st.integers(0, 40))]))
    gold = draw(st.sets(st.sampled_from(universe), min_size=1, max_size=8))
    return list(ranking), gold


def ndcg_reference(ranking, gold, k):
    """Independent formulation: gains vector and ideal gains vector."""
    gains = [1.0 if p in gold else 0.0 for p in ranking[:k]]
    ideal = sorted([1.0] * len(gold) + [0.0] * k, reverse=True)[:k]
    disc = lambda g: sum(x / math.log2(i + 2) for i, x in enumerate(g))
    return disc(gains) / disc(ideal)


@settings(max_examples=200, deadline=None)
@given(ranked_queries(), st.integers(1, 45))
def test_bounds_monotonicity_and_reference_ndcg(query, k):
    ranking, gold = query
    r = recall_at_k(ranking, gold, k)
    n = ndcg_at_k(ranking, gold, k)
    assert 0.0 <= r <= 1.0 and 0.0 <= n <= 1.0 + 1e-12
    assert recall_at_k(ranking, gold, k + 1) >= r
    assert success_at_k(ranking, gold, k) == (1.0 if r > 0 else 0.0)
    assert n == pytest.approx(ndcg_reference(ranking, gold, k), abs=1e-12)
    first = first_gold_rank(ranking, gold, 40)
    rr = reciprocal_rank(ranking, gold)
    if first.observed:
        assert rr == 1.0 / first.rank and first.censored == first.rank <= len(ranking)
        assert ranking[first.rank - 1] in gold
    else:
        assert rr == 0.0 and first.censored == 41 and first.rank is None
        assert not gold.intersection(ranking)


@settings(max_examples=100, deadline=None)
@given(ranked_queries(), st.integers(1, 12))
def test_invariant_to_consistent_renaming(query, k):
    ranking, gold = query
    rename = {p: f"renamed/{p[::-1]}" for p in set(ranking) | gold}
    ranking2 = [rename[p] for p in ranking]
    gold2 = {rename[p] for p in gold}
    assert recall_at_k(ranking2, gold2, k) == recall_at_k(ranking, gold, k)
    assert ndcg_at_k(ranking2, gold2, k) == ndcg_at_k(ranking, gold, k)
    assert reciprocal_rank(ranking2, gold2) == reciprocal_rank(ranking, gold)


@settings(max_examples=100, deadline=None)
@given(ranked_queries())
def test_perfect_ranking_has_ndcg_one(query):
    _, gold = query
    ranking = sorted(gold) + ["zzz.go"]
    assert ndcg_at_k(ranking, gold, 10) == pytest.approx(1.0)
    assert recall_at_k(ranking, gold, len(gold)) == 1.0


def test_paired_outcome_reference():
    gold = {"g1.go", "g2.go"}
    baseline = ["g1.go", "a.go", "g2.go"] + [f"x{i}.go" for i in range(20)]
    perturbed = ["d1.go", "d2.go", "a.go"] + [f"x{i}.go" for i in range(9)] + ["g2.go"]
    out = paired_outcome(
        baseline,
        perturbed,
        gold,
        recall_ks=(1, 5, 10),
        ndcg_k=10,
        retention_k=10,
        candidate_limit=LIMIT,
    )
    assert dict(out.recall_delta) == {1: -0.5, 5: -1.0, 10: -1.0}
    assert out.mrr_delta == pytest.approx(1 / 13 - 1.0)
    assert out.top_gold_retention == 0.0 and out.lost_all_top_gold is True
    assert out.rank_displacement == 12 and out.rank_displacement_censored == 12


def test_paired_outcome_censoring_and_none_cases():
    gold = {"g.go"}
    found = ["a.go", "g.go"]
    missing = ["a.go", "b.go"]
    lost = paired_outcome(
        found, missing, gold, recall_ks=(1,), ndcg_k=10, retention_k=10, candidate_limit=LIMIT
    )
    assert lost.rank_displacement is None
    assert lost.rank_displacement_censored == LIMIT + 1 - 2
    assert lost.lost_all_top_gold is True and lost.top_gold_retention == 0.0
    never = paired_outcome(
        missing, missing, gold, recall_ks=(1,), ndcg_k=10, retention_k=10, candidate_limit=LIMIT
    )
    assert never.top_gold_retention is None and never.lost_all_top_gold is None
    assert never.rank_displacement is None and never.rank_displacement_censored == 0


@settings(max_examples=100, deadline=None)
@given(ranked_queries(), ranked_queries())
def test_paired_outcome_properties(first, second):
    baseline, gold = first
    perturbed, _ = second
    same = paired_outcome(
        baseline,
        baseline,
        gold,
        recall_ks=(1, 5, 10),
        ndcg_k=10,
        retention_k=10,
        candidate_limit=40,
    )
    assert all(d == 0 for _, d in same.recall_delta) and same.mrr_delta == 0 == same.ndcg_delta
    assert same.lost_all_top_gold in (None, False)
    assert same.top_gold_retention in (None, 1.0)
    out = paired_outcome(
        baseline, perturbed, gold, recall_ks=(10,), ndcg_k=10, retention_k=10, candidate_limit=40
    )
    base_rank = first_gold_rank(baseline, gold, 40)
    pert_rank = first_gold_rank(perturbed, gold, 40)
    assert out.rank_displacement_censored == pert_rank.censored - base_rank.censored
    assert (out.rank_displacement is None) == (not (base_rank.observed and pert_rank.observed))
    if out.top_gold_retention is not None:
        assert 0.0 <= out.top_gold_retention <= 1.0
        assert out.lost_all_top_gold == (not gold.intersection(perturbed[:10]))


def fn(path, name, receiver, text):
    return GoFunction(path, name, receiver, 1, 1, text)


def test_token_count_reference():
    # Counted by hand: func ( r * R ) Run ( ) { return 42 } -> 13 tokens.
    assert token_count("func (r *R) Run() { return 42 }", TOKEN_PATTERN) == 13
    assert token_count("x_1+=0x1F", TOKEN_PATTERN) == 5  # x_1 + = 0 x1F


def test_function_recall_and_token_coverage_reference():
    gold = [fn("a.go", "Run", "R", "a b c d"), fn("b.go", "Stop", None, "a b")]  # 4 + 2 tokens
    ranked = [
        fn("c.go", "Other", None, "x y y"),  # 3 tokens
        fn("a.go", "Run", "R", "a b c d e"),  # 5 tokens (indexed version differs)
        fn("b.go", "Stop", None, "a b"),  # 2 tokens
        fn("d.go", "Tiny", None, "t"),
    ]
    gold_keys = [GoldFunction(g.path, g.name, g.receiver, 1, 1) for g in gold]
    assert function_recall(ranked, gold_keys, 1) == 0.0
    assert function_recall(ranked, gold_keys, 2) == 0.5
    assert function_recall(ranked, gold_keys, 3) == 1.0
    assert function_recall(ranked, [], 3) is None
    # Budget 8 takes 3 + 5 tokens and stops before "Stop" (3+5+2 > 8): covers Run's 4 of 6.
    assert token_budget_coverage(ranked, gold, 8, TOKEN_PATTERN) == pytest.approx(4 / 6)
    # Budget 7: stops at Run (3+5 > 7) and does not skip ahead to the smaller Stop.
    assert token_budget_coverage(ranked, gold, 7, TOKEN_PATTERN) == 0.0
    assert token_budget_coverage(ranked, gold, 10, TOKEN_PATTERN) == 1.0
    assert token_budget_coverage(ranked, [], 10, TOKEN_PATTERN) is None


@settings(max_examples=100, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 30), min_size=1, max_size=12),
    gold_mask=st.lists(st.booleans(), min_size=12, max_size=12),
    budget=st.integers(0, 200),
)
def test_token_coverage_bounded_and_monotone_in_budget(sizes, gold_mask, budget):
    ranked = [fn(f"f{i}.go", "F", None, " ".join(["t"] * n)) for i, n in enumerate(sizes)]
    gold = [f for f, is_gold in zip(ranked, gold_mask) if is_gold]
    low = token_budget_coverage(ranked, gold, budget, TOKEN_PATTERN)
    high = token_budget_coverage(ranked, gold, budget + 7, TOKEN_PATTERN)
    if low is None:
        assert high is None and sum(len(g.text.split()) for g in gold) == 0
        return
    assert 0.0 <= low <= high <= 1.0
    if budget >= sum(sizes):
        assert low == 1.0


def test_query_measures_dictionary_names():
    ranking = ranking_with_gold_at({3})
    gold_fn = fn("gold3.go", "Run", None, "a b")
    out = query_measures(
        ranking,
        {"gold3.go"},
        recall_ks=(1, 5, 10),
        ndcg_k=10,
        candidate_limit=LIMIT,
        ranked_functions=[gold_fn],
        gold_functions=[gold_fn],
        function_k=10,
        token_budget=100,
        token_pattern=TOKEN_PATTERN,
    )
    values = out.as_dict()
    assert values["R@1"] == 0.0 and values["R@5"] == 1.0 and values["Success@5"] == 1.0
    assert values["nDCG@10"] == 0.5 and values["FirstGoldRank"] == 3
    assert values["FunctionRecall@10"] == 1.0 and values["TokenCoverage@100"] == 1.0
    files_only = query_measures(
        ranking, {"gold3.go"}, recall_ks=(1,), ndcg_k=10, candidate_limit=LIMIT
    )
    assert "FunctionRecall@10" not in files_only.as_dict()
