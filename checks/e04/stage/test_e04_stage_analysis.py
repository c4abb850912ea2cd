import pytest

pytestmark = pytest.mark.software

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from prereg.e04 import analysis
from prereg.e04.cells import function_depth
from prereg.e04.metrics import query_measures, token_budget_coverage, token_count
from prereg.e04.plan import settings_from_parameters
from prereg.e04.types import GoFunction

PLAN = Path(__file__).resolve().parents[3] / "plans" / "E04_PLAN.json"
SETTINGS = settings_from_parameters(json.loads(PLAN.read_text())["stages"]["e04"]["parameters"])
PATTERN = SETTINGS.token_pattern
PATHS = [f"pkg/f{i}.go" for i in range(30)]

words = st.lists(st.sampled_from(["x", "Run", "0", "(", ")", "{", "}", "err", ":="]), max_size=40)
functions = st.lists(
    st.tuples(st.sampled_from(PATHS), st.sampled_from(["A", "B", "C"]), words), max_size=25
).map(
    lambda rows: list(
        {
            (p, n): GoFunction(
                path=p, name=n, receiver=None, start_line=1, end_line=2, text=" ".join(w)
            )
            for p, n, w in rows
        }.values()
    )
)


def _row(f: GoFunction) -> list:
    return [f.path, f.name, f.receiver, f.start_line, f.end_line, 0.0, token_count(f.text, PATTERN)]


@settings(max_examples=200, deadline=None)
@given(ranked=functions, gold=functions, budget=st.integers(0, 120))
def test_coverage_from_counts_equals_the_library_measure(ranked, gold, budget):
    expected = token_budget_coverage(ranked, gold, budget, PATTERN)
    pairs = [((f.path, f.name, f.receiver), token_count(f.text, PATTERN)) for f in ranked]
    gold_pairs = [((g.path, g.name, g.receiver), token_count(g.text, PATTERN)) for g in gold]
    assert analysis.coverage_from_counts(pairs, gold_pairs, budget) == expected


@settings(max_examples=200, deadline=None)
@given(
    ranking=st.lists(st.sampled_from(PATHS), unique=True, max_size=30),
    gold=st.sets(st.sampled_from(PATHS), min_size=1, max_size=4),
    ranked=functions,
    gold_functions=functions,
)
def test_measures_recomputed_from_a_saved_prefix_equal_the_live_measures(
    ranking, gold, ranked, gold_functions
):
    # The saved function list is the prefix function_depth keeps; it must be enough to
    # recompute every measure exactly (reference: prereg.e04.metrics.query_measures).
    live = query_measures(
        ranking,
        gold,
        recall_ks=SETTINGS.recall_ks,
        ndcg_k=SETTINGS.ndcg_k,
        candidate_limit=SETTINGS.censored_rank - 1,
        ranked_functions=ranked,
        gold_functions=gold_functions,
        function_k=SETTINGS.function_k,
        token_budget=SETTINGS.token_budget // 40,
        token_pattern=PATTERN,
    ).as_dict()
    small = type(SETTINGS)(**{**SETTINGS.__dict__, "token_budget": SETTINGS.token_budget // 40})
    rows = [_row(f) for f in ranked]
    depth = function_depth([r[6] for r in rows], small.function_k, small.token_budget)
    saved = {"files": [[p, 1.0] for p in ranking], "functions": rows[:depth]}
    gold_pairs = [
        ((g.path, g.name, g.receiver), token_count(g.text, PATTERN)) for g in gold_functions
    ]
    fresh = analysis.measures_from_ranking(saved, sorted(gold), gold_pairs, small, 200)
    assert fresh == live


@given(
    tokens=st.lists(st.integers(0, 50), max_size=40),
    k=st.integers(1, 12),
    budget=st.integers(0, 200),
)
def test_function_depth_keeps_k_functions_and_the_first_that_overflows(tokens, k, budget):
    depth = function_depth(tokens, k, budget)
    assert depth <= len(tokens)
    assert depth >= min(k, len(tokens))
    total = sum(tokens[:depth])
    if depth < len(tokens):  # something was cut: the cut is past the budget's stopping point
        assert total > budget or depth == k


def test_function_depth_reference_values():
    # hand-computed: budget 10 holds 4 + 5, the third (3) overflows -> keep 3; k=5 -> 5
    assert function_depth([4, 5, 3, 1, 1, 1], 2, 10) == 3
    assert function_depth([4, 5, 3, 1, 1, 1], 5, 10) == 5
    assert function_depth([1, 1], 1, 10) == 2


def test_shared_copies_are_one_unit_and_differing_copies_are_reported():
    record = {"shared_key": "S001/T01/H000"}
    copies = [(f"cell{i}", "S001/T01/H000", b"same", record) for i in range(3)]
    unique, problems = analysis.dedupe_shared(copies)
    assert list(unique) == ["S001/T01/H000"] and problems == []
    unique, problems = analysis.dedupe_shared([*copies, ("cell9", "S001/T01/H000", b"x", record)])
    assert len(unique) == 1 and problems == [
        "cell9: its copy of shared_key 'S001/T01/H000' differs from the copy in cell0"
    ]


def _record(task: str, harness: str, **paired) -> dict:
    measures = {"R@1": 1.0, "FirstGoldObserved": True, "RR": 0.5}
    base = {
        "recall_delta": {"R@1": -1.0},
        "mrr_delta": -0.5,
        "ndcg_delta": -0.25,
        "top_gold_retention": None,
        "lost_all_top_gold": None,
        "rank_displacement_censored": 3,
        "rank_displacement": None,
    }
    return {
        "task_id": task,
        "harness": harness,
        "measures": measures,
        "paired": {**base, **paired},
        "dose": 1,
    }


def test_paired_means_leave_undefined_outcomes_out_and_count_them():
    rows = [
        _record("T1", "H000", rank_displacement=2, top_gold_retention=1.0, lost_all_top_gold=False),
        _record("T2", "H000"),
    ]
    means = analysis.paired_means(rows)
    assert means["rank_displacement"] == {"mean": 2.0, "tasks": 1}
    assert means["rank_displacement_censored"] == {"mean": 3.0, "tasks": 2}
    assert means["top_gold_retention"] == {"mean": 1.0, "tasks": 1}
    assert means["R@1_delta"] == {"mean": -1.0, "tasks": 2}
    assert means["lost_all_top_gold_count"] == 0
