"""RP002A stage 3, ``confirmatory-config``: derive the frozen confirmatory configuration.

One item applies the protocol's fixed rule (:func:`prereg.stats.planning.select_sample_count`)
to the calibration stage's eligibility and the target-variance stage's seven contrast SDs,
both read from the complete, clean runs the approval consumes (``requires``). Means and
effect sizes are never inputs. The configuration records which branch fired (``precise``,
``resource-limited``, or ``no-eligible-count``: then no confirmation may run), binds the
input runs by SHA-256 (manifests, approvals, summaries, source commits), and lists the
dependencies of the final configuration separately hashed.

The complete-stage summary copies it to ``summary/CONFIRMATORY_CONFIG.json`` and to the
plan's ``output`` path (``plans/CONFIRMATORY_CONFIG.json``), which the researcher commits;
the confirmatory stage's gate checks that committed file against this run.
``plans/CONFIG_PROPOSAL.json`` is never touched (``plans/BASELINE.json`` pins it).
"""

from __future__ import annotations

import inspect
from pathlib import Path

from prereg import gitrepo
from prereg.hashing import canonical_json, read_json, sha256_bytes, sha256_file, write_json
from prereg.rp002a import calibration_stage, variance_stage
from prereg.rp002a.plan_schema import validate_shared
from prereg.schema import PositiveFloat, Range, SchemaError, validate
from prereg.stages import RunView, StageKind
from prereg.stats import planning

STAGE = "confirmatory-config"
CONFIG = "CONFIRMATORY_CONFIG.json"
FORMAT = "rp002a-confirmatory-config-1"
PARAMETERS = {
    "candidate_counts": [Range(int, min=2)],  # replicates of a t interval (n - 1 df >= 1)
    "target_half_width_nats": PositiveFloat,
    "output": str,
    "assumption": str,
}
# The planning rule's SD bound has no numbers of its own: its degrees of freedom are the
# target-variance stage's replicates - 1, its alpha and family size are the decisions'
# (parameters.decision), the ones the confirmatory intervals read. One home each.


def validate_plan(plan, stage: str) -> None:
    if stage != STAGE:
        raise SchemaError(
            f"{plan.path}: stage {stage!r} has kind {KIND.name!r}, which reads the stage "
            f"named {STAGE!r} (and the stages it consumes by name); name the stage {STAGE!r}"
        )
    validate_shared(plan)
    params = plan.stage(stage)["parameters"]
    validate(params, PARAMETERS, source=str(plan.path), path=f"stages.{stage}.parameters")
    if not params["candidate_counts"]:
        raise SchemaError(
            f"{plan.path}: field stages.{stage}.parameters.candidate_counts is empty; "
            "list at least one count"
        )
    if variance_stage.STAGE not in plan.stages:
        raise SchemaError(
            f"{plan.path}: the {STAGE} stage reads the replicates of a {variance_stage.STAGE} "
            "stage in the same plan, and there is none"
        )
    replicates = plan.stage(variance_stage.STAGE)["parameters"]["replicates"]
    if not isinstance(replicates, int) or isinstance(replicates, bool) or replicates < 2:
        raise SchemaError(
            f"{plan.path}: field stages.{variance_stage.STAGE}.parameters.replicates is "
            f"{replicates!r}; the planning rule needs an integer >= 2 (df = replicates - 1)"
        )
    if calibration_stage.STAGE in plan.stages:
        grid = plan.stage(calibration_stage.STAGE)["parameters"]["simulation"]["n"]
        missing = [n for n in params["candidate_counts"] if n not in grid]
        if missing:
            raise SchemaError(
                f"{plan.path}: field stages.{stage}.parameters.candidate_counts lists {missing}, "
                f"which the calibration grid (stages.{calibration_stage.STAGE}.parameters."
                f"simulation.n = {grid}) does not calibrate; the rule would fail after the run"
            )


def sd_bound(plan: dict) -> dict:
    """The planning rule's SD-bound settings, each read from its one home in the plan."""
    decision = plan["parameters"]["decision"]
    return {
        "df": plan["stages"][variance_stage.STAGE]["parameters"]["replicates"] - 1,
        "familywise_alpha": decision["familywise_alpha"],
        "family_size": decision["family_size"],
    }


def output_path(root: Path, plan: dict) -> Path:
    return Path(root) / "plans" / plan["stages"][STAGE]["parameters"]["output"]


def _binding(run_dir: Path) -> dict:
    manifest = read_json(run_dir / "manifest.json", what="manifest")
    return {
        "run_id": manifest["run_id"],
        "stage": manifest["stage"],
        "status": manifest["status"],
        "manifest_sha256": sha256_file(run_dir / "manifest.json"),
        "approval_sha256": manifest["approval"]["sha256"],
        "plan_sha256": manifest["plan"]["sha256"],
        "source_commit": manifest["source_commit"],
        "summary_files": manifest["summary_files"],
    }


def derive_config(
    plan: dict, required_runs: dict[str, Path], *, source_commit: str, root: Path
) -> dict:
    """The frozen configuration, from the consumed runs' summaries by the fixed rule."""
    params = plan["stages"][STAGE]["parameters"]
    decision_params = plan["parameters"]["decision"]
    cal_dir, var_dir = required_runs[calibration_stage.STAGE], required_runs[variance_stage.STAGE]
    calibration = calibration_stage.load_summary(cal_dir)
    variance = variance_stage.load_summary(var_dir)
    by_n = {row["n"]: row["eligible"] for row in calibration["eligibility_by_n"]}
    missing = [n for n in params["candidate_counts"] if n not in by_n]
    if missing:
        raise ValueError(
            f"candidate counts {missing} were not calibrated (calibration grid: {sorted(by_n)})"
        )
    sds = [row["sd"] for row in variance["contrasts"]]
    bound = sd_bound(plan)
    decision = planning.select_sample_count(
        sds,
        candidates=params["candidate_counts"],
        eligibility={n: by_n[n] for n in params["candidate_counts"]},
        df=bound["df"],
        alpha=bound["familywise_alpha"],
        family_size=bound["family_size"],
        inflation=decision_params["primary_inflation"],
        target_half_width=params["target_half_width_nats"],
    )
    cal_summary = cal_dir / "summary" / calibration_stage.SUMMARY
    var_summary = var_dir / "summary" / variance_stage.SUMMARY
    return {
        "format": FORMAT,
        "plan_id": plan["plan_id"],
        "derived_by_stage": STAGE,
        "source_commit": source_commit,
        "branch": decision.branch,
        "n": decision.n,
        "confirmation_allowed": decision.n is not None,
        "resource_limited_precision": decision.branch == "resource-limited",
        "rule": {
            "candidate_counts": params["candidate_counts"],
            "sd_bound": bound,
            "inflation": decision_params["primary_inflation"],
            "target_half_width_nats": params["target_half_width_nats"],
            "assumption": params["assumption"],
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
            "decision_parameters_sha256": sha256_bytes(canonical_json(decision_params).encode()),
            "planning_code_sha256": sha256_bytes(inspect.getsource(planning).encode()),
            "config_proposal_sha256": sha256_file(Path(root) / "plans" / "CONFIG_PROPOSAL.json"),
        },
    }


def run_item(research, root: Path) -> dict:
    config = derive_config(
        research.plan, research.required_runs, source_commit=gitrepo.head_commit(root), root=root
    )
    write_json(research.outputs / CONFIG, config)
    return config


def summarise(view: RunView) -> None:
    (item,) = view.items
    data = (view.item_dir(item) / CONFIG).read_bytes()
    view.summary_dir.mkdir(parents=True, exist_ok=True)
    (view.summary_dir / CONFIG).write_bytes(data)
    target = output_path(view.root, view.plan.data)
    if target.exists() and target.read_bytes() != data:
        raise FileExistsError(
            f"{target} exists with other content; a frozen configuration is never "
            "overwritten. Remove it only if it was never committed or used"
        )
    target.write_bytes(data)


def replay(view: RunView) -> list[str]:
    (item,) = view.items
    manifest = read_json(view.run_dir / "manifest.json", what="manifest")
    required = {stage: view.required_run(stage) for stage in view.approval["requires"]}
    fresh = derive_config(
        view.plan.data, required, source_commit=manifest["source_commit"], root=view.root
    )
    findings = []
    if canonical_json(fresh) != (view.item_dir(item) / CONFIG).read_text(encoding="utf-8"):
        findings.append(f"{CONFIG} differs from the configuration recomputed from the bound inputs")
    if (view.summary_dir / CONFIG).read_bytes() != (view.item_dir(item) / CONFIG).read_bytes():
        findings.append(f"summary/{CONFIG} differs from the item's output")
    return findings


KIND = StageKind(
    name="rp002a.confirmatory-config",
    validate=validate_plan,
    summarise=summarise,
    replay=replay,
    doc=__doc__ or "",
)
