"""E04 analysis: measures recomputed from saved rankings, and the stage summary.

The summary never treats the three copies of an S001 record as independent: S001
(and the baseline, which is also dose-independent) are de-duplicated by their
``shared_key`` (one unit per task and harness: 45 for 15 tasks x 3 harnesses) after
checking that the copies are identical. S002 has one unit per task, harness and
dose. Means are plain means over tasks of the per-task values; a measure that is
undefined for a task (``None``: e.g. retention when the baseline's top k holds no
gold, the uncensored rank displacement unless both ranks are observed) is left out
of its mean, and the summary says how many tasks it covers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from prereg.e04.metrics import (
    first_gold_rank,
    ndcg_at_k,
    paired_outcome,
    recall_at_k,
    reciprocal_rank,
    success_at_k,
)
from prereg.e04.plan import E04Settings

PAIRED_FIELDS = (
    "mrr_delta",
    "ndcg_delta",
    "top_gold_retention",
    "lost_all_top_gold",
    "rank_displacement_censored",
    "rank_displacement",
)


def coverage_from_counts(
    functions: Sequence[tuple[tuple, int]], gold: Sequence[tuple[tuple, int]], budget: int
) -> float | None:
    """TokenCoverage@B from (key, tokens) pairs: ranked functions in order, and the gold.

    Notes
    -----
    The rule of :func:`prereg.e04.metrics.token_budget_coverage`: walk the ranked
    functions adding token counts while the total stays ``<= budget``, stop at the
    first that does not fit; coverage = tokens of included gold / tokens of all gold.
    """
    total = sum(tokens for _, tokens in gold)
    if not gold or total == 0:
        return None
    used = 0
    included = set()
    for key, tokens in functions:
        if used + tokens > budget:
            break
        used += tokens
        included.add(key)
    return sum(t for key, t in gold if key in included) / total


def measures_from_ranking(
    ranking: Mapping[str, Any],
    gold_files: Sequence[str],
    gold_tokens: Sequence[tuple[tuple, int]],
    settings: E04Settings,
    candidate_limit: int,
) -> dict:
    """Every per-query measure of a saved ranking, with the names of ``QueryMeasures.as_dict``.

    ``gold_tokens`` pairs each gold function's ``(file, name, receiver)`` with its token
    count at the label revision.
    """
    files = [path for path, _ in ranking["files"]]
    out: dict[str, Any] = {}
    for k in settings.recall_ks:
        out[f"R@{k}"] = recall_at_k(files, gold_files, k)
    for k in settings.recall_ks:
        out[f"Success@{k}"] = success_at_k(files, gold_files, k)
    out["RR"] = reciprocal_rank(files, gold_files)
    out[f"nDCG@{settings.ndcg_k}"] = ndcg_at_k(files, gold_files, settings.ndcg_k)
    first = first_gold_rank(files, gold_files, candidate_limit)
    out["FirstGoldRank"] = first.censored
    out["FirstGoldObserved"] = first.observed
    out["FirstGoldRankUncensored"] = first.rank
    keys = [((f[0], f[1], f[2]), f[6]) for f in ranking["functions"]]
    top = {key for key, _ in keys[: settings.function_k]}
    gold_keys = {key for key, _ in gold_tokens}
    out[f"FunctionRecall@{settings.function_k}"] = (
        len(gold_keys & top) / len(gold_keys) if gold_keys else None
    )
    out[f"TokenCoverage@{settings.token_budget}"] = coverage_from_counts(
        keys, gold_tokens, settings.token_budget
    )
    return out


def paired_from_rankings(
    baseline: Mapping[str, Any],
    perturbed: Mapping[str, Any],
    gold_files: Sequence[str],
    settings: E04Settings,
    candidate_limit: int,
) -> dict:
    """The paired outcomes of two saved rankings (as ``cells.paired_record`` writes them)."""
    # prereg.e04.cells needs tree_sitter (the e04 extra, optional); the analysis does not
    from prereg.e04.cells import paired_record

    return paired_record(
        paired_outcome(
            [p for p, _ in baseline["files"]],
            [p for p, _ in perturbed["files"]],
            gold_files,
            recall_ks=settings.recall_ks,
            ndcg_k=settings.ndcg_k,
            retention_k=settings.retention_k,
            candidate_limit=candidate_limit,
        )
    )


def _mean(values: Iterable[float | int | bool | None]) -> dict:
    present = [float(v) for v in values if v is not None]
    return {"mean": sum(present) / len(present) if present else None, "tasks": len(present)}


def measure_means(records: Sequence[Mapping[str, Any]]) -> dict:
    """Mean of each measure over the records (bools as 0/1, ``None`` left out)."""
    names = list(records[0]["measures"]) if records else []
    out = {name: _mean(r["measures"][name] for r in records) for name in names}
    out["censored_first_gold"] = sum(1 for r in records if not r["measures"]["FirstGoldObserved"])
    return out


def paired_means(records: Sequence[Mapping[str, Any]]) -> dict:
    """Mean paired outcomes over the records (``lost_all_top_gold`` as a share)."""
    if not records:
        return {}
    out = {
        name: _mean(r["paired"]["recall_delta"][name] for r in records)
        for name in records[0]["paired"]["recall_delta"]
    }
    out = {f"{name}_delta": value for name, value in out.items()}
    for name in PAIRED_FIELDS:
        out[name] = _mean(r["paired"][name] for r in records)
    out["lost_all_top_gold_count"] = sum(1 for r in records if r["paired"]["lost_all_top_gold"])
    return out


def dedupe_shared(records: Sequence[tuple[str, str, bytes, dict]]) -> tuple[dict, list[str]]:
    """One record per ``shared_key`` from (item, key, file bytes, record) copies.

    Returns the unique records by key and the problems: copies of one key whose
    bytes differ (they must be identical; they are one unit, not several trials).
    """
    unique: dict[str, tuple[str, bytes, dict]] = {}
    problems = []
    for item, key, data, record in records:
        if key not in unique:
            unique[key] = (item, data, record)
        elif unique[key][1] != data:
            problems.append(
                f"{item}: its copy of shared_key {key!r} differs from the copy in {unique[key][0]}"
            )
    return {key: value[2] for key, value in unique.items()}, problems


def build_summary(
    settings: E04Settings,
    *,
    plan_id: str,
    synthetic: bool,
    task_ids: Sequence[str],
    baseline: Mapping[str, dict],
    s001: Mapping[str, dict],
    s002: Sequence[dict],
    cells: int,
) -> dict:
    """The stage summary (``summary/e04_summary.json``) from de-duplicated records."""
    by_harness = {h: [] for h in settings.harness_order}
    for record in baseline.values():
        by_harness[record["harness"]].append(record)
    s001_by = {h: [] for h in settings.harness_order}
    for record in s001.values():
        s001_by[record["harness"]].append(record)
    s002_rows = []
    for harness in settings.harness_order:
        for coordinate, dose in settings.doses:
            rows = [r for r in s002 if r["harness"] == harness and r["dose"] == dose]
            rows.sort(key=lambda r: task_ids.index(r["task_id"]))
            s002_rows.append(
                {
                    "harness": harness,
                    "seed_coordinate": coordinate,
                    "dose": dose,
                    "tasks": len(rows),
                    "measures": measure_means(rows),
                    "paired": paired_means(rows),
                }
            )

    def ordered(rows: list[dict]) -> list[dict]:
        return sorted(rows, key=lambda r: task_ids.index(r["task_id"]))

    return {
        "stage": "e04",
        "plan_id": plan_id,
        "synthetic": synthetic,
        "cells": cells,
        "tasks": list(task_ids),
        "units": {
            "baseline_task_harness": len(baseline),
            "S001_task_harness": len(s001),
            "S002_task_harness_dose": len(s002),
            "note": (
                "S001 and the baseline do not depend on the dose: each is one unit per task and "
                "harness, de-duplicated by shared_key; the three copies are never counted as "
                "independent trials"
            ),
        },
        "baseline": [
            {"harness": h, "tasks": len(rows), "measures": measure_means(ordered(rows))}
            for h, rows in by_harness.items()
        ],
        "S001": [
            {
                "harness": h,
                "tasks": len(rows),
                "measures": measure_means(ordered(rows)),
                "paired": paired_means(ordered(rows)),
            }
            for h, rows in s001_by.items()
        ],
        "S002": s002_rows,
        "per_task": {
            "S001": [
                {"task_id": r["task_id"], "harness": r["harness"], "paired": r["paired"]}
                for h in settings.harness_order
                for r in ordered(s001_by[h])
            ],
        },
    }


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:+.3f}" if value < 0 else f"{value:.3f}"
    return str(value)


def summary_text(summary: dict, settings: E04Settings) -> str:
    """SUMMARY.md: the baseline table, S001 and S002 paired outcomes per harness."""
    ks = settings.recall_ks
    ndcg = f"nDCG@{settings.ndcg_k}"
    label = " (SYNTHETIC data: not the preregistered tasks)" if summary["synthetic"] else ""
    lines = [
        f"# E04 robustness summary ({summary['plan_id']}){label}",
        "",
        (
            f"{summary['cells']} composite cells; units: {summary['units']['baseline_task_harness']} "
            f"baseline and {summary['units']['S001_task_harness']} S001 task-harness units "
            f"(de-duplicated by shared_key), {summary['units']['S002_task_harness_dose']} S002 units."
        ),
        "",
        "## Baseline (means over tasks)",
        "",
        "| harness | tasks | " + " | ".join(f"R@{k}" for k in ks) + f" | MRR | {ndcg} | censored |",
        "|---|---:|" + "---:|" * (len(ks) + 3),
    ]
    for row in summary["baseline"]:
        m = row["measures"]
        lines.append(
            f"| {row['harness']} | {row['tasks']} | "
            + " | ".join(_fmt(m[f"R@{k}"]["mean"]) for k in ks)
            + f" | {_fmt(m['RR']['mean'])} | {_fmt(m[ndcg]['mean'])} | {m['censored_first_gold']} |"
        )
    header = (
        "| harness | dose | tasks | "
        + " | ".join(f"dR@{k}" for k in ks)
        + " | dMRR | dnDCG | retention | lost all | displacement (censored) | censored |"
    )
    for name, rows in (
        ("S001 (index one commit stale)", summary["S001"]),
        ("S002 (distractor files)", summary["S002"]),
    ):
        lines += [
            "",
            f"## {name}: paired outcomes, perturbed - baseline",
            "",
            header,
            "|---|---:|---:|" + "---:|" * (len(ks) + 6),
        ]
        for row in rows:
            p, m = row["paired"], row["measures"]
            lines.append(
                f"| {row['harness']} | {row.get('dose', '-')} | {row['tasks']} | "
                + " | ".join(_fmt(p[f"R@{k}_delta"]["mean"]) for k in ks)
                + f" | {_fmt(p['mrr_delta']['mean'])} | {_fmt(p['ndcg_delta']['mean'])} | "
                f"{_fmt(p['top_gold_retention']['mean'])} | {p['lost_all_top_gold_count']} | "
                f"{_fmt(p['rank_displacement_censored']['mean'])} | {m['censored_first_gold']} |"
            )
    lines += [
        "",
        (
            f"Censored first-gold rank: {settings.censored_rank} (candidate limit + 1); the "
            "uncensored displacement is reported only where both ranks are observed "
            "(e04_summary.json)."
        ),
        "",
    ]
    return "\n".join(lines)
