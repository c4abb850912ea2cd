"""RP002A stage 4, ``confirmatory``: one fresh execution at the frozen n, then the decisions.

One item per unit (world x replicate) at the n of ``plans/CONFIRMATORY_CONFIG.json``,
seeds from the plan's fresh confirmation namespace, training exactly as in stage 2. No
retry, extension, seed replacement or optional stopping: the stage is single-attempt,
its wall-time budget is enforced (an exhausted budget ends the attempt incomplete,
partial outputs kept), and an item that fails fails the stage. The gate refuses to start
unless the committed configuration is the one the bound confirmatory-config run derived
and its rule allows confirmation.

Only when every item completed: for each contrast of the family, in the protocol's order,
the twofold-inflated Bonferroni t interval (n - 1 df, s/sqrt(n), family of seven,
familywise alpha .05) decides by the contrast's kind; the uninflated interval is reported
beside it; a zero observed SD is an analysis failure. Every outcome carries the
protocol's assumptions, the synthetic gate's limitations and the .01-nat rationale.
Secondary diagnostics are descriptive only. Summary: ``summary/decisions.json`` and
``summary/SUMMARY.md``.
"""

from __future__ import annotations

from pathlib import Path

from prereg.api import (
    RunFolder,
    RunLayout,
    RunView,
    StageKind,
    canonical_json,
    read_json,
    write_json,
)
from prereg.rp002a import config_stage, variance_stage
from prereg.rp002a import units as unitlib
from prereg.rp002a.settings import ConfirmatoryPlan, parse_confirmatory, renderer
from prereg.rp002a.stats.decisions import contrast_verdict
from prereg.rp002a.stats.intervals import replicate_mean_t_interval

STAGE = "confirmatory"
DECISIONS = "decisions.json"
SUMMARY_TEXT = "SUMMARY.md"


def settings_of(plan: dict | ConfirmatoryPlan) -> ConfirmatoryPlan:
    """The stage's typed settings; a plan's data is parsed (checks pass plan dicts)."""
    return plan if isinstance(plan, ConfirmatoryPlan) else parse_confirmatory(plan, STAGE)


def config_path(root: Path, settings: ConfirmatoryPlan) -> Path:
    return Path(root) / settings.config


def load_config(root: Path, settings: ConfirmatoryPlan) -> dict:
    return read_json(config_path(root, settings), what="frozen confirmatory configuration")


def stage_units(root: Path, plan: dict) -> list[unitlib.Unit]:
    settings = settings_of(plan)
    config = load_config(root, settings)
    if not config["confirmation_allowed"]:
        raise RuntimeError(
            f"{config_path(root, settings)}: branch {config['branch']}: no confirmation may run"
        )
    return unitlib.units(settings.shared, config["n"])


def gate_check(root: Path, plan, stage: str, approval: dict) -> list[str]:
    """The committed configuration must be the bound run's, and must allow confirmation."""
    path = config_path(root, parse_confirmatory(plan.data, stage, source=str(plan.path)))
    if not path.exists():
        return [
            (
                f"{path.relative_to(root)} does not exist: run the confirmatory-config stage and commit "
                "the configuration it derives"
            )
        ]
    bound = approval["requires"].get(config_stage.STAGE)
    if bound is None:
        return [f"the approval does not consume a {config_stage.STAGE} run"]
    derived = RunLayout(root, bound["run_id"]).summary_dir / config_stage.CONFIG
    if not derived.exists() or derived.read_bytes() != path.read_bytes():
        return [
            f"{path.relative_to(root)} is not the configuration derived by run {bound['run_id']}"
        ]
    config = read_json(path, what="frozen confirmatory configuration")
    if not config["confirmation_allowed"]:
        return [
            (
                f"the frozen rule says no confirmation (branch {config['branch']!r}): RP002A forbids "
                "executing the confirmatory stage, and no additional training may rescue the gate"
            )
        ]
    return []


def decisions(plan: ConfirmatoryPlan | dict, records: list[dict], config: dict) -> dict:
    """Intervals and decisions per contrast of the family (a plan dict is parsed first)."""
    settings = settings_of(plan)
    decision = settings.shared.decision
    rows = []
    for contrast in settings.shared.contrast_family:
        values = [r["contrasts"][contrast.id] for r in records if r["world"] == contrast.world]
        common = {"alpha": decision.familywise_alpha, "family_size": decision.family_size}
        primary = replicate_mean_t_interval(values, inflation=decision.primary_inflation, **common)
        report = replicate_mean_t_interval(values, inflation=decision.report_inflation, **common)
        rows.append(
            {
                "contrast": contrast.id,
                "kind": contrast.kind,
                "note": contrast.note,
                "n": primary.n,
                "df": primary.df,
                "mean": primary.mean,
                "sd": primary.sd,
                "critical_uninflated": primary.critical,
                "inflated_interval": {
                    "inflation": primary.inflation,
                    "low": primary.low,
                    "high": primary.high,
                    "half_width": primary.half_width,
                },
                "uninflated_interval": {
                    "inflation": report.inflation,
                    "low": report.low,
                    "high": report.high,
                    "half_width": report.half_width,
                },
                "decision": contrast_verdict(
                    primary, kind=contrast.kind, margin=decision.margin_nats
                ),
                "per_replicate": values,
            }
        )
    return {
        "stage": STAGE,
        "plan_id": settings.plan_id,
        "config": {k: config[k] for k in ("branch", "n", "resource_limited_precision")},
        "margin_nats": decision.margin_nats,
        "decision_rule": "benefit iff the inflated interval lies strictly below -margin; equivalence iff "
        "strictly inside (-margin, +margin); otherwise indeterminate (nonsignificance is "
        "not equivalence); zero observed SD is an analysis failure",
        "contrasts": rows,
        "assumptions": decision.assumptions,
        "limitations": decision.limitations,
        "rationale": decision.rationale,
        "diagnostics_equal_replicate": variance_stage.diagnostics_table(settings.shared, records),
        "diagnostics_note": "Descriptive secondary outputs only; no additional confirmatory decisions.",
    }


def decision_table_text(result: dict) -> str:
    lines = [
        (
            f"# Confirmatory decisions ({result['plan_id']}; n = {result['config']['n']}, "
            f"branch {result['config']['branch']})"
        ),
        "",
        "| contrast | kind | mean | inflated interval | uninflated interval | decision |",
        "|---|---|---:|---|---|---|",
    ]
    for r in result["contrasts"]:
        i, u = r["inflated_interval"], r["uninflated_interval"]
        lines.append(
            f"| {r['contrast']} | {r['kind']} | {r['mean']:+.5f} | [{i['low']:+.5f}, {i['high']:+.5f}] "
            f"| [{u['low']:+.5f}, {u['high']:+.5f}] | **{r['decision']}** |"
        )
    lines += [
        "",
        f"Margin: ±{result['margin_nats']} nats. {result['decision_rule']}.",
        "",
        f"Assumptions: {result['assumptions']}",
        "",
        f"Limitations: {result['limitations']}",
        "",
        f"Rationale of the margin: {result['rationale']}",
        "",
    ]
    return "\n".join(lines)


def _config(view: RunView) -> dict:
    required = view.required_run(config_stage.STAGE)
    return read_json(
        RunFolder(required).summary_dir / config_stage.CONFIG, what="frozen configuration"
    )


def summarise(view: RunView) -> None:
    settings = view.settings
    records = variance_stage.unit_records(view, settings.shared)
    result = decisions(settings, records, _config(view))
    write_json(view.summary_dir / DECISIONS, result)
    (view.summary_dir / SUMMARY_TEXT).write_text(decision_table_text(result), encoding="utf-8")


def replay(view: RunView) -> list[str]:
    settings = view.settings
    config = _config(view)
    expected = unitlib.units(settings.shared, config["n"])
    findings = variance_stage.replay_units(view, settings.shared, expected)
    if not findings:
        records = variance_stage.unit_records(view, settings.shared)
        fresh = decisions(settings, records, config)
        if canonical_json(fresh) != (view.summary_dir / DECISIONS).read_text(encoding="utf-8"):
            findings.append(
                f"summary/{DECISIONS} differs from the intervals and decisions recomputed"
            )
        if decision_table_text(fresh) != (view.summary_dir / SUMMARY_TEXT).read_text(
            encoding="utf-8"
        ):
            findings.append(f"summary/{SUMMARY_TEXT} differs from the recomputed decision table")
    return findings


def headline(context) -> str:
    """Each contrast's decision, for the index of runs: ``C1: benefit; C2: ...``."""
    rows = context.summary_json(DECISIONS)["contrasts"]
    return "; ".join(f"{row['contrast']}: {row['decision']}" for row in rows)


KIND = StageKind(
    name="rp002a.confirmatory",
    settings=parse_confirmatory,
    item_key=unitlib.unit_key,
    gate_check=gate_check,
    summarise=summarise,
    replay=replay,
    render=renderer("prereg.rp002a.report:render_confirmatory"),
    headline=headline,
    doc=__doc__ or "",
)
