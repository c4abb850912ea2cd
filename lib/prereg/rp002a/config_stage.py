"""RP002A stage 3, ``confirmatory-config``: derive the frozen confirmatory configuration.

One item applies the protocol's fixed rule
(:func:`prereg.rp002a.stats.planning.select_sample_count`) to the calibration stage's eligibility
and the target-variance stage's seven contrast SDs, both read from the complete, clean runs the
approval consumes (``requires``). Means and effect sizes are never inputs. The configuration
records which branch fired (``precise``, ``resource-limited``, or ``no-eligible-count``: then no
confirmation may run), binds the input runs by SHA-256 (manifests, approvals, summaries, source
commits), and lists the dependencies of the final configuration separately hashed.

The complete-stage summary copies it to ``summary/CONFIRMATORY_CONFIG.json`` and to the
plan's ``output`` path (``plans/CONFIRMATORY_CONFIG.json``), which the researcher commits;
the confirmatory stage's gate checks that committed file against this run.
``plans/CONFIG_PROPOSAL.json`` is never touched (``plans/BASELINE.json`` pins it).
"""

from __future__ import annotations

import inspect
from pathlib import Path

from prereg.api import (
    RunFolder,
    RunView,
    StageKind,
    canonical_json,
    head_commit,
    read_json,
    sha256_bytes,
    sha256_file,
    write_json,
)
from prereg.rp002a import calibration_stage, variance_stage
from prereg.rp002a.settings import (
    CONFIG_PARAMETERS,
    ConfigPlan,
    parse_config,
    renderer,
)
from prereg.rp002a.stats import planning

STAGE = "confirmatory-config"
CONFIG = "CONFIRMATORY_CONFIG.json"
FORMAT = "rp002a-confirmatory-config-1"
PARAMETERS = CONFIG_PARAMETERS  # the stage's schema (prereg.rp002a.settings)
ITEM = "config"  # the key of the stage's one item


def settings_of(plan: dict | ConfigPlan) -> ConfigPlan:
    """The stage's typed settings; a plan's data is parsed (checks pass plan dicts)."""
    return plan if isinstance(plan, ConfigPlan) else parse_config(plan, STAGE)


def sd_bound(plan: dict | ConfigPlan) -> dict:
    """The planning rule's SD-bound settings, each read from its one home in the plan."""
    return settings_of(plan).sd_bound()


def output_path(root: Path, settings: ConfigPlan) -> Path:
    return Path(root) / "plans" / settings.output


def _binding(run_dir: Path) -> dict:
    path = RunFolder(run_dir).manifest
    manifest = read_json(path, what="manifest")
    return {
        "run_id": manifest["run_id"],
        "stage": manifest["stage"],
        "status": manifest["status"],
        "manifest_sha256": sha256_file(path),
        "approval_sha256": manifest["approval"]["sha256"],
        "plan_sha256": manifest["plan"]["sha256"],
        "source_commit": manifest["source_commit"],
        "summary_files": manifest["summary_files"],
    }


def derive_config(
    settings: ConfigPlan, required_runs: dict[str, Path], *, source_commit: str, root: Path
) -> dict:
    """The frozen configuration, from the consumed runs' summaries by the fixed rule."""
    params = settings.record()
    candidates = list(settings.candidate_counts)
    cal_dir, var_dir = required_runs[calibration_stage.STAGE], required_runs[variance_stage.STAGE]
    calibration = calibration_stage.load_summary(cal_dir)
    variance = variance_stage.load_summary(var_dir)
    by_n = {row["n"]: row["eligible"] for row in calibration["eligibility_by_n"]}
    missing = [n for n in candidates if n not in by_n]
    if missing:
        raise ValueError(
            f"candidate counts {missing} were not calibrated (calibration grid: {sorted(by_n)})"
        )
    sds = [row["sd"] for row in variance["contrasts"]]
    bound = settings.sd_bound()
    decision = planning.select_sample_count(
        sds,
        candidates=candidates,
        eligibility={n: by_n[n] for n in candidates},
        df=bound["df"],
        alpha=bound["familywise_alpha"],
        family_size=bound["family_size"],
        inflation=settings.decision.primary_inflation,
        target_half_width=settings.target_half_width_nats,
    )
    cal_summary = RunFolder(cal_dir).summary_dir / calibration_stage.SUMMARY
    var_summary = RunFolder(var_dir).summary_dir / variance_stage.SUMMARY
    return {
        "format": FORMAT,
        "plan_id": settings.plan_id,
        "derived_by_stage": STAGE,
        "source_commit": source_commit,
        "branch": decision.branch,
        "n": decision.n,
        "confirmation_allowed": decision.n is not None,
        "resource_limited_precision": decision.branch == "resource-limited",
        "rule": {
            "candidate_counts": candidates,
            "sd_bound": bound,
            "inflation": settings.decision.primary_inflation,
            "target_half_width_nats": settings.target_half_width_nats,
            "assumption": settings.assumption,
        },
        "sd_inputs": [
            {"contrast": row["contrast"], "sd": row["sd"]} for row in variance["contrasts"]
        ],
        "sd_bounds": [
            {"contrast": row["contrast"], "upper_sd": b}
            for row, b in zip(variance["contrasts"], decision.sd_bounds)
        ],
        "planning_sd_bound": decision.sd_bound,
        "candidates": [
            {
                "n": n,
                "eligible": e,
                "half_width_nats": h,
                "meets_precision": h <= decision.target_half_width,
            }
            for n, e, h in zip(decision.candidates, decision.eligible, decision.half_widths)
        ],
        "inputs": {stage: _binding(path) for stage, path in sorted(required_runs.items())},
        "dependencies": {
            "calibration_summary_sha256": sha256_file(cal_summary),
            "variance_summary_sha256": sha256_file(var_summary),
            # every number the rule used, the SD bound's included (read from their homes)
            "rule_parameters_sha256": sha256_bytes(
                canonical_json({**params, "sd_bound": bound}).encode()
            ),
            "decision_parameters_sha256": sha256_bytes(
                canonical_json(settings.decision.record()).encode()
            ),
            "planning_code_sha256": sha256_bytes(inspect.getsource(planning).encode()),
            "config_proposal_sha256": sha256_file(Path(root) / "plans" / "CONFIG_PROPOSAL.json"),
        },
    }


def run_item(research, root: Path) -> dict:
    config = derive_config(
        research.settings,
        research.required_runs,
        source_commit=head_commit(root),
        root=root,
    )
    write_json(research.outputs / CONFIG, config)
    return config


def summarise(view: RunView) -> None:
    (item,) = view.items
    data = (view.item_dir(item) / CONFIG).read_bytes()
    view.summary_dir.mkdir(parents=True, exist_ok=True)
    (view.summary_dir / CONFIG).write_bytes(data)
    if view.rehearsal:  # a rehearsal freezes nothing: the configuration stays in its summary
        return
    target = output_path(view.root, view.settings)
    if target.exists() and target.read_bytes() != data:
        raise FileExistsError(
            f"{target} exists with other content; a frozen configuration is never "
            "overwritten. Remove it only if it was never committed or used"
        )
    target.write_bytes(data)


def item_key(coords) -> str:
    """The stage has one item, whatever it records."""
    return ITEM


def replay(view: RunView) -> list[str]:
    pairs, findings = view.match({ITEM: None})
    if findings:
        return findings
    ((_, item, _),) = pairs
    manifest = read_json(view.layout.manifest, what="manifest")
    required = {stage: view.required_run(stage) for stage in view.approval["requires"]}
    fresh = derive_config(
        view.settings, required, source_commit=manifest["source_commit"], root=view.root
    )
    if canonical_json(fresh) != (view.item_dir(item) / CONFIG).read_text(encoding="utf-8"):
        findings.append(f"{CONFIG} differs from the configuration recomputed from the bound inputs")
    if (view.summary_dir / CONFIG).read_bytes() != (view.item_dir(item) / CONFIG).read_bytes():
        findings.append(f"summary/{CONFIG} differs from the item's output")
    return findings


KIND = StageKind(
    name="rp002a.confirmatory-config",
    settings=parse_config,
    item_key=item_key,
    summarise=summarise,
    replay=replay,
    render=renderer("prereg.rp002a.report:render_confirmatory_config"),
    doc=__doc__ or "",
)
