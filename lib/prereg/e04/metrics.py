"""Per-query retrieval measures and paired robustness outcomes for E04.

A *ranking* is the harness's candidate list: distinct repository paths, best
first, at most ``candidate_limit`` long. *Gold* is the task's set of gold files.
Conventions follow trec_eval / ir_measures (binary relevance): a query is
scored on its own and aggregated later; a query where no gold is returned gets
0 for recall, Success, RR and nDCG.

Canonical names (usable as dict keys): ``R@k``, ``Success@k``, ``RR``,
``nDCG@k``, ``FirstGoldRank``, ``FunctionRecall@k``, ``TokenCoverage@B``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from prereg.e04.types import GoFunction, GoldFunction

__all__ = [
    "FirstGoldRank",
    "FunctionKey",
    "MetricInputError",
    "PairedOutcome",
    "QueryMeasures",
    "first_gold_rank",
    "function_key",
    "function_recall",
    "ndcg_at_k",
    "paired_outcome",
    "query_measures",
    "recall_at_k",
    "reciprocal_rank",
    "success_at_k",
    "token_budget_coverage",
    "token_count",
]

FunctionKey = tuple  # (file, name, receiver or None)


class MetricInputError(ValueError):
    """A ranking, gold set or cutoff that no measure is defined for."""


def _check_ranking(ranking: Sequence[str], name: str = "ranking") -> None:
    if isinstance(ranking, str) or not isinstance(ranking, Sequence):
        raise MetricInputError(f"{name} must be a sequence of paths, got {type(ranking).__name__}")
    if len(set(ranking)) != len(ranking):
        seen: set[str] = set()
        duplicate = next(p for p in ranking if p in seen or seen.add(p))
        raise MetricInputError(
            f"{name} lists {duplicate!r} more than once; deduplicate it keeping the best rank"
        )


def _check_gold(gold: Collection[str]) -> frozenset[str]:
    if isinstance(gold, str) or not isinstance(gold, Collection):
        raise MetricInputError(f"gold must be a collection of paths, got {gold!r}")
    gold_set = frozenset(gold)
    if not gold_set:
        raise MetricInputError("gold is empty; every task needs at least one gold file")
    return gold_set


def _check_cutoff(k: int, name: str = "k") -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise MetricInputError(f"{name}={k!r} must be a positive integer cutoff")


def recall_at_k(ranking: Sequence[str], gold: Collection[str], k: int) -> float:
    """``R@k``: the fraction of gold files found in the top ``k``.

    Notes
    -----
    ``|gold ∩ ranking[:k]| / |gold|`` (trec_eval ``recall_k``).
    """
    _check_ranking(ranking)
    gold_set = _check_gold(gold)
    _check_cutoff(k)
    return len(gold_set.intersection(ranking[:k])) / len(gold_set)


def success_at_k(ranking: Sequence[str], gold: Collection[str], k: int) -> float:
    """``Success@k``: 1.0 if any gold file is in the top ``k``, else 0.0."""
    _check_ranking(ranking)
    gold_set = _check_gold(gold)
    _check_cutoff(k)
    return 1.0 if gold_set.intersection(ranking[:k]) else 0.0


def reciprocal_rank(ranking: Sequence[str], gold: Collection[str]) -> float:
    """``RR``: ``1 / rank`` of the first gold file, no cutoff; 0.0 if none is returned.

    Notes
    -----
    trec_eval ``recip_rank``; the mean over queries is MRR.
    """
    _check_ranking(ranking)
    gold_set = _check_gold(gold)
    for rank, path in enumerate(ranking, start=1):
        if path in gold_set:
            return 1.0 / rank
    return 0.0


def ndcg_at_k(ranking: Sequence[str], gold: Collection[str], k: int) -> float:
    """``nDCG@k`` with binary gains.

    Notes
    -----
    ``DCG@k = sum_{r <= k, ranking[r] in gold} 1 / log2(r + 1)``;
    ``IDCG@k = sum_{r=1}^{min(|gold|, k)} 1 / log2(r + 1)``;
    ``nDCG@k = DCG@k / IDCG@k`` (Järvelin & Kekäläinen 2002, trec_eval
    ``ndcg_cut`` with binary relevance).
    """
    _check_ranking(ranking)
    gold_set = _check_gold(gold)
    _check_cutoff(k)
    dcg = sum(
        1.0 / math.log2(rank + 1)
        for rank, path in enumerate(ranking[:k], start=1)
        if path in gold_set
    )
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(gold_set), k) + 1))
    return dcg / ideal


@dataclass(frozen=True)
class FirstGoldRank:
    """Rank of the first gold file, censored at ``candidate_limit + 1``.

    ``censored`` is always an integer in ``1 .. candidate_limit + 1``;
    ``observed`` says whether a gold file was returned; ``rank`` is the
    uncensored rank, or ``None`` when not observed.
    """

    censored: int
    observed: bool
    rank: int | None


def first_gold_rank(
    ranking: Sequence[str], gold: Collection[str], candidate_limit: int
) -> FirstGoldRank:
    """The first-gold rank, censored at ``candidate_limit + 1`` when no gold is returned.

    Raises
    ------
    MetricInputError
        If the ranking is longer than ``candidate_limit`` (the harness must cut
        the candidate list first).
    """
    _check_ranking(ranking)
    gold_set = _check_gold(gold)
    _check_cutoff(candidate_limit, "candidate_limit")
    if len(ranking) > candidate_limit:
        raise MetricInputError(
            f"ranking has {len(ranking)} entries > candidate_limit={candidate_limit}; "
            "truncate the candidate list to the limit before scoring"
        )
    for rank, path in enumerate(ranking, start=1):
        if path in gold_set:
            return FirstGoldRank(censored=rank, observed=True, rank=rank)
    return FirstGoldRank(censored=candidate_limit + 1, observed=False, rank=None)


def function_key(function: GoFunction | GoldFunction) -> FunctionKey:
    """``(file, name, receiver)``: the identity used to match a function to a gold function."""
    if isinstance(function, GoFunction):
        return (function.path, function.name, function.receiver)
    if isinstance(function, GoldFunction):
        return (function.file, function.name, function.receiver)
    raise MetricInputError(
        f"expected a GoFunction or GoldFunction, got {type(function).__name__}: {function!r}"
    )


def _check_functions(functions: Sequence[GoFunction], name: str) -> None:
    if isinstance(functions, str) or not isinstance(functions, Sequence):
        raise MetricInputError(f"{name} must be a sequence of GoFunction records")
    for item in functions:
        if not isinstance(item, GoFunction):
            raise MetricInputError(
                f"{name} holds {type(item).__name__} {item!r}; pass GoFunction records"
            )


def function_recall(
    ranked_functions: Sequence[GoFunction],
    gold_functions: Collection[GoldFunction],
    k: int,
) -> float | None:
    """``FunctionRecall@k``: fraction of gold functions among the top ``k`` ranked functions.

    Notes
    -----
    Functions are matched by ``(file, name, receiver)`` (line spans are
    ignored, so a function edited between the indexed revision and the label
    revision still matches). Gold functions are counted as distinct keys:
    ``|keys(gold) ∩ keys(ranked[:k])| / |keys(gold)|``. ``None`` when the task
    has no gold function (the measure is undefined, not 0).
    """
    _check_functions(ranked_functions, "ranked_functions")
    _check_cutoff(k)
    gold_keys = {function_key(g) for g in gold_functions}
    if not gold_keys:
        return None
    top = {function_key(f) for f in ranked_functions[:k]}
    return len(gold_keys & top) / len(gold_keys)


def token_count(text: str, token_pattern: str) -> int:
    """Number of non-overlapping matches of ``token_pattern`` in ``text``.

    The E04 plan's pattern is ``[A-Za-z_][A-Za-z0-9_]*|\\d+|\\S`` (identifiers,
    digit runs, any other non-space character).
    """
    if not isinstance(text, str):
        raise MetricInputError(f"text must be a string, got {type(text).__name__}")
    try:
        compiled = re.compile(token_pattern)
    except (re.error, TypeError) as exc:
        raise MetricInputError(f"token_pattern={token_pattern!r} is not a regex: {exc}") from exc
    if compiled.match(""):
        raise MetricInputError(
            f"token_pattern={token_pattern!r} matches the empty string; tokens must be non-empty"
        )
    return sum(1 for _ in compiled.finditer(text))


def token_budget_coverage(
    ranked_functions: Sequence[GoFunction],
    gold_functions: Sequence[GoFunction],
    budget: int,
    token_pattern: str,
) -> float | None:
    """``TokenCoverage@B``: share of gold-function tokens that fit in a context budget.

    Parameters
    ----------
    ranked_functions : sequence of GoFunction
        Functions in the harness's order, with the text as indexed.
    gold_functions : sequence of GoFunction
        The task's gold functions as parsed at the label (base) revision, with text.
    budget : int
        ``B``, the token budget (>= 0).
    token_pattern : str
        Regex whose matches are the tokens (see :func:`token_count`).

    Returns
    -------
    float or None
        In ``[0, 1]``; ``None`` when there is no gold function or the gold
        functions have no tokens.

    Notes
    -----
    Walk ``ranked_functions`` in order, adding each function's token count
    while the running total stays ``<= B``; stop at the first function that
    would exceed ``B`` (later, smaller functions are not packed in). A gold
    function is *included* when some included function has its
    ``(file, name, receiver)`` key. Coverage =
    ``sum(tokens(g) for included gold g) / sum(tokens(g) for all gold g)``,
    with ``tokens(g)`` counted on the gold function's text at the label
    revision, so the ratio stays in ``[0, 1]`` even when the indexed version
    of a function differs.
    """
    _check_functions(ranked_functions, "ranked_functions")
    _check_functions(gold_functions, "gold_functions")
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise MetricInputError(f"budget={budget!r} must be a non-negative integer token count")
    if not gold_functions:
        return None
    gold_tokens = [(function_key(g), token_count(g.text, token_pattern)) for g in gold_functions]
    total = sum(tokens for _, tokens in gold_tokens)
    if total == 0:
        return None
    used = 0
    included: set[FunctionKey] = set()
    for function in ranked_functions:
        tokens = token_count(function.text, token_pattern)
        if used + tokens > budget:
            break
        used += tokens
        included.add(function_key(function))
    return sum(tokens for key, tokens in gold_tokens if key in included) / total


@dataclass(frozen=True)
class QueryMeasures:
    """All per-query E04 measures for one ranking (see :func:`query_measures`)."""

    recall: tuple[tuple[int, float], ...]
    success: tuple[tuple[int, float], ...]
    reciprocal_rank: float
    ndcg_k: int
    ndcg: float
    first_gold: FirstGoldRank
    function_k: int | None
    function_recall: float | None
    token_budget: int | None
    token_coverage: float | None

    def as_dict(self) -> dict[str, float | int | bool | None]:
        """Canonical measure names to values, e.g. ``{"R@5": 0.5, "RR": 0.33, ...}``."""
        out: dict[str, float | int | bool | None] = {}
        out.update({f"R@{k}": v for k, v in self.recall})
        out.update({f"Success@{k}": v for k, v in self.success})
        out["RR"] = self.reciprocal_rank
        out[f"nDCG@{self.ndcg_k}"] = self.ndcg
        out["FirstGoldRank"] = self.first_gold.censored
        out["FirstGoldObserved"] = self.first_gold.observed
        out["FirstGoldRankUncensored"] = self.first_gold.rank
        if self.function_k is not None:
            out[f"FunctionRecall@{self.function_k}"] = self.function_recall
        if self.token_budget is not None:
            out[f"TokenCoverage@{self.token_budget}"] = self.token_coverage
        return out


def query_measures(
    ranking: Sequence[str],
    gold: Collection[str],
    *,
    recall_ks: Sequence[int],
    ndcg_k: int,
    candidate_limit: int,
    ranked_functions: Sequence[GoFunction] | None = None,
    gold_functions: Sequence[GoFunction] | None = None,
    function_k: int | None = None,
    token_budget: int | None = None,
    token_pattern: str | None = None,
) -> QueryMeasures:
    """Every file-level measure, plus the function-level ones when functions are given.

    ``recall_ks`` gives the cutoffs of both ``R@k`` and ``Success@k`` (E04: 1, 5,
    10). Function recall needs ``ranked_functions``, ``gold_functions`` and
    ``function_k``; token coverage needs them and ``token_budget`` and
    ``token_pattern``. Otherwise those fields are ``None``.
    """
    if not recall_ks:
        raise MetricInputError("recall_ks is empty; pass the plan's cutoffs, e.g. (1, 5, 10)")
    with_functions = ranked_functions is not None and gold_functions is not None
    fr = None
    if with_functions and function_k is not None:
        fr = function_recall(ranked_functions, [_as_gold(g) for g in gold_functions], function_k)
    coverage = None
    if with_functions and token_budget is not None:
        if token_pattern is None:
            raise MetricInputError("token_budget given without token_pattern; pass both")
        coverage = token_budget_coverage(
            ranked_functions, gold_functions, token_budget, token_pattern
        )
    return QueryMeasures(
        recall=tuple((k, recall_at_k(ranking, gold, k)) for k in recall_ks),
        success=tuple((k, success_at_k(ranking, gold, k)) for k in recall_ks),
        reciprocal_rank=reciprocal_rank(ranking, gold),
        ndcg_k=ndcg_k,
        ndcg=ndcg_at_k(ranking, gold, ndcg_k),
        first_gold=first_gold_rank(ranking, gold, candidate_limit),
        function_k=function_k if with_functions else None,
        function_recall=fr,
        token_budget=token_budget if with_functions else None,
        token_coverage=coverage,
    )


def _as_gold(function: GoFunction | GoldFunction) -> GoldFunction:
    if isinstance(function, GoldFunction):
        return function
    if isinstance(function, GoFunction):
        return GoldFunction(
            file=function.path,
            name=function.name,
            receiver=function.receiver,
            start_line=function.start_line,
            end_line=function.end_line,
        )
    raise MetricInputError(f"gold_functions holds {type(function).__name__}: {function!r}")


@dataclass(frozen=True)
class PairedOutcome:
    """Robustness outcomes of a perturbed ranking against its baseline.

    Every delta is ``perturbed - baseline``. ``recall_delta`` pairs each cutoff
    with its delta. ``top_gold_retention`` and ``lost_all_top_gold`` are
    ``None`` when the baseline's top ``retention_k`` holds no gold.
    ``rank_displacement_censored`` is always defined (both ranks censored at
    ``candidate_limit + 1``; positive = gold moved down);
    ``rank_displacement`` is ``None`` unless both first-gold ranks are observed.
    """

    recall_delta: tuple[tuple[int, float], ...]
    mrr_delta: float
    ndcg_delta: float
    retention_k: int
    top_gold_retention: float | None
    lost_all_top_gold: bool | None
    rank_displacement_censored: int
    rank_displacement: int | None


def paired_outcome(
    baseline: Sequence[str],
    perturbed: Sequence[str],
    gold: Collection[str],
    *,
    recall_ks: Sequence[int],
    ndcg_k: int,
    retention_k: int,
    candidate_limit: int,
) -> PairedOutcome:
    """Paired robustness outcomes (E04 "Outcomes": deltas, retention, loss, displacement).

    Notes
    -----
    With ``T_b``, ``T_p`` the gold files in the baseline's and the perturbed
    ranking's top ``retention_k`` (E04: 10):
    retention = ``|T_b ∩ T_p| / |T_b|``; loss of all top gold =
    ``T_b != {} and T_p == {}``; both ``None`` when ``T_b`` is empty.
    Rank displacement = ``rank_p - rank_b`` of the first gold file.
    """
    _check_cutoff(retention_k, "retention_k")
    if not recall_ks:
        raise MetricInputError("recall_ks is empty; pass the plan's cutoffs, e.g. (1, 5, 10)")
    _check_ranking(baseline, "baseline")
    _check_ranking(perturbed, "perturbed")
    gold_set = _check_gold(gold)
    base_top = gold_set.intersection(baseline[:retention_k])
    pert_top = gold_set.intersection(perturbed[:retention_k])
    retention = len(base_top & pert_top) / len(base_top) if base_top else None
    lost = (not pert_top) if base_top else None
    base_rank = first_gold_rank(baseline, gold_set, candidate_limit)
    pert_rank = first_gold_rank(perturbed, gold_set, candidate_limit)
    uncensored = (
        pert_rank.rank - base_rank.rank
        if base_rank.rank is not None and pert_rank.rank is not None
        else None
    )
    return PairedOutcome(
        recall_delta=tuple(
            (k, recall_at_k(perturbed, gold_set, k) - recall_at_k(baseline, gold_set, k))
            for k in recall_ks
        ),
        mrr_delta=reciprocal_rank(perturbed, gold_set) - reciprocal_rank(baseline, gold_set),
        ndcg_delta=ndcg_at_k(perturbed, gold_set, ndcg_k) - ndcg_at_k(baseline, gold_set, ndcg_k),
        retention_k=retention_k,
        top_gold_retention=retention,
        lost_all_top_gold=lost,
        rank_displacement_censored=pert_rank.censored - base_rank.censored,
        rank_displacement=uncensored,
    )
