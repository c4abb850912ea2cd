"""One-run approval records and the gate that checks them.

``prereg approve`` writes ``plans/approvals/<run-id>.json`` from a clean HEAD (the
*source anchor*). The researcher commits it; that commit may differ from the anchor by
the record alone. Before any item runs, :func:`check_gate` verifies every condition
and returns the refusals, each naming the condition, the values that differ and the
fix. A refusal does not spend the run id; the first item of a run that passed does.
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from prereg import gitrepo, provenance
from prereg.hashing import canonical_json, read_json, sha256_file, write_json
from prereg.plans import Plan, load_plan, validate_stage
from prereg.runs import (
    COMPLETE,
    RunIdError,
    all_runs,
    check_run_id,
    has_started,
    refusals_dir,
    runs_dir,
)
from prereg.schema import MapOf, Nullable, validate
from prereg.stages import load_kind

FORMAT = "prereg-approval-1"
BASELINE = Path("plans") / "BASELINE.json"
APPROVALS = Path("plans") / "approvals"

APPROVAL_SCHEMA = {
    "format": str,
    "stage": str,
    "run_id": str,
    "plan": {"path": str, "sha256": str, "plan_id": str},
    "baseline": {"path": str, "sha256": str},
    "source_anchor": str,
    "seed_namespace": Nullable(str),
    "environment": dict,
    "deviations": [{"field": str, "pinned": Nullable(object), "actual": Nullable(object)}],
    "requires": MapOf({"run_id": str, "manifest_sha256": str}),
    "inputs": MapOf({"path": str, "kind": str, "sha256": Nullable(str), "commit": Nullable(str)}),
    "approved_at": str,
    "approved_by": str,
}


class ApprovalError(ValueError):
    """``prereg approve`` refuses: the message says why and what to do."""


@dataclass(frozen=True)
class Refusal:
    condition: str
    message: str

    def __str__(self) -> str:
        return f"[{self.condition}] {self.message}"


@dataclass(frozen=True)
class Approval:
    path: Path
    sha256: str
    data: dict

    @property
    def run_id(self) -> str:
        return self.data["run_id"]

    @property
    def stage(self) -> str:
        return self.data["stage"]


def approval_path(root: Path, run_id: str) -> Path:
    return Path(root) / APPROVALS / f"{run_id}.json"


def load_approval(path: Path) -> Approval:
    data = read_json(path, what="approval record")
    validate(data, APPROVAL_SCHEMA, source=str(path))
    if data["format"] != FORMAT:
        raise ValueError(f"{path}: format {data['format']!r} is not {FORMAT!r}")
    return Approval(path=Path(path), sha256=sha256_file(path), data=data)


def list_approvals(root: Path) -> list[Approval]:
    folder = Path(root) / APPROVALS
    return [load_approval(p) for p in sorted(folder.glob("*.json"))] if folder.exists() else []


# -- baseline ---------------------------------------------------------------------------


def baseline_problems(root: Path) -> list[str]:
    """Each immutable file of ``plans/BASELINE.json`` that is missing or hashes otherwise."""
    path = Path(root) / BASELINE
    if not path.exists():
        return [f"{BASELINE} does not exist; it lists the immutable historical files"]
    listed = read_json(path, what="baseline")
    validate(listed, {"description": str, "files": MapOf(str)}, source=str(path))
    problems = []
    for rel, expected in sorted(listed["files"].items()):
        target = Path(root) / rel
        if not target.exists():
            problems.append(f"{rel} is listed in {BASELINE} but missing")
        elif sha256_file(target) != expected:
            problems.append(
                f"{rel} hashes {sha256_file(target)[:12]}, {BASELINE} says {expected[:12]}"
            )
    return problems


# -- inputs and dependencies --------------------------------------------------------------


def bind_input(path: Path) -> dict:
    """A file is bound by SHA-256; a git repository by its HEAD commit."""
    path = Path(path).resolve()
    if path.is_file():
        return {"path": str(path), "kind": "file", "sha256": sha256_file(path), "commit": None}
    if path.is_dir():
        try:
            commit = gitrepo.head_commit(path)
        except gitrepo.GitError:
            raise ApprovalError(f"input {path} is a folder but not a git repository") from None
        return {"path": str(path), "kind": "git", "sha256": None, "commit": commit}
    raise ApprovalError(f"input {path} does not exist")


def input_problems(record_inputs: dict) -> list[str]:
    problems = []
    for name, bound in sorted(record_inputs.items()):
        path = Path(bound["path"])
        if bound["kind"] == "file":
            if not path.is_file():
                problems.append(f"input {name}: {path} is missing")
            elif sha256_file(path) != bound["sha256"]:
                problems.append(f"input {name}: {path} changed since approval")
        elif not path.is_dir() or not gitrepo.commit_exists(path, bound["commit"]):
            problems.append(f"input {name}: repository {path} lacks commit {bound['commit'][:12]}")
    return problems


def latest_complete_run(root: Path, stage: str) -> str | None:
    done = [r for r in all_runs(root) if r.stage == stage and r.status == COMPLETE]
    done.sort(key=lambda r: r.manifest["ended_at"])
    return done[-1].run_id if done else None


def dependency_problems(root: Path, requires: dict) -> list[str]:
    from prereg.audit import audit_run_cached

    problems = []
    for stage, bound in sorted(requires.items()):
        folder = runs_dir(root) / bound["run_id"]
        manifest = folder / "manifest.json"
        if not manifest.exists():
            problems.append(f"required {stage} run {bound['run_id']} has no manifest")
            continue
        if sha256_file(manifest) != bound["manifest_sha256"]:
            problems.append(
                f"required {stage} run {bound['run_id']}: manifest changed since approval"
            )
            continue
        status = read_json(manifest, what="manifest")["status"]
        if status != COMPLETE:
            problems.append(f"required {stage} run {bound['run_id']} is {status}, not complete")
            continue
        findings = audit_run_cached(root, folder)
        if findings:
            problems.append(
                f"required {stage} run {bound['run_id']} does not audit clean: {findings[0]}"
                + (f" (and {len(findings) - 1} more)" if len(findings) > 1 else "")
            )
    return problems


# -- approve ---------------------------------------------------------------------------------


def create_approval(
    root: Path,
    *,
    stage: str,
    run_id: str,
    plan_path: Path,
    inputs: dict[str, Path],
    use_runs: dict[str, str],
    accept_deviations: bool,
) -> Path:
    """Write the approval record for one run from the current clean HEAD; return its path."""
    root = Path(root)
    dirty = gitrepo.dirty_paths(root)
    if dirty:
        raise ApprovalError(
            f"the working tree is not clean ({', '.join(dirty[:5])}"
            f"{' ...' if len(dirty) > 5 else ''}); commit or remove these changes, then approve"
        )
    try:
        check_run_id(run_id, stage)
    except RunIdError as err:
        raise ApprovalError(str(err)) from None
    plan = load_plan(root / plan_path)
    if stage not in plan.stages:
        raise ApprovalError(
            f"plan {plan_path} has no stage {stage!r}; its stages: {sorted(plan.stages)}"
        )
    validate_stage(plan, stage)
    spec = plan.stage(stage)
    record_path = approval_path(root, run_id)
    if record_path.exists():
        raise ApprovalError(
            f"{record_path.relative_to(root)} exists already: one approval per run id"
        )
    if has_started(root, run_id):
        raise ApprovalError(
            f"run id {run_id} has been spent (runs/{run_id} exists); choose the next number"
        )
    existing = list_approvals(root)
    if spec["single_attempt"]:
        earlier = [a.run_id for a in existing if a.stage == stage]
        if earlier:
            raise ApprovalError(
                f"stage {stage} allows a single attempt (no retry, extension or seed replacement) "
                f"and was already approved as {earlier}"
            )
    namespace = spec.get("seed_namespace")
    if namespace is not None:
        clash = [
            a.run_id for a in existing if a.data["seed_namespace"] == namespace and a.stage != stage
        ]
        if clash:
            raise ApprovalError(
                f"seed namespace {namespace!r} is already used by {clash}; a stage never reuses "
                "another stage's datasets or weights: give this stage a fresh namespace in the plan"
            )
    problems = baseline_problems(root)
    if problems:
        raise ApprovalError("the baseline is not intact: " + "; ".join(problems))

    requires = {}
    for needed in spec["requires"]:
        chosen = use_runs.get(needed) or latest_complete_run(root, needed)
        if chosen is None:
            raise ApprovalError(
                f"stage {stage} requires a complete run of {needed}; none is under runs/ "
                f"(run and audit {needed} first, or name one with --use-run {needed}=RUN_ID)"
            )
        manifest = runs_dir(root) / chosen / "manifest.json"
        if not manifest.exists():
            raise ApprovalError(
                f"--use-run {needed}={chosen}: runs/{chosen}/manifest.json does not exist"
            )
        requires[needed] = {"run_id": chosen, "manifest_sha256": sha256_file(manifest)}
    problems = dependency_problems(root, requires)
    if problems:
        raise ApprovalError("; ".join(problems))

    missing = sorted(set(spec["inputs"]) - set(inputs))
    extra = sorted(set(inputs) - set(spec["inputs"]))
    if missing or extra:
        raise ApprovalError(
            f"stage {stage} binds inputs {spec['inputs']}; missing {missing}, unexpected {extra} "
            "(pass each as --input NAME=PATH)"
        )
    kind = load_kind(spec["kind"])
    if kind.check_inputs is not None:
        kind.check_inputs(plan, stage, {k: Path(v).resolve() for k, v in inputs.items()})
    bound_inputs = {name: bind_input(Path(p)) for name, p in sorted(inputs.items())}
    if kind.gate_check is not None:
        draft = {"stage": stage, "run_id": run_id, "requires": requires, "inputs": bound_inputs}
        problems = kind.gate_check(root, plan, stage, draft)
        if problems:
            raise ApprovalError("; ".join(problems))

    actual = provenance.pinned_environment()
    deviations = provenance.deviations(plan.data["environment_pins"], actual)
    if deviations and not accept_deviations:
        listed = "; ".join(
            f"{d['field']}: plan pins {d['pinned']!r}, here {d['actual']!r}" for d in deviations
        )
        raise ApprovalError(
            f"this environment deviates from the plan's pins ({listed}); to run here anyway, "
            "approve with --accept-deviations so the approval and the manifest name each deviation"
        )
    record = {
        "format": FORMAT,
        "stage": stage,
        "run_id": run_id,
        "plan": {
            "path": Path(plan_path).as_posix(),
            "sha256": plan.sha256,
            "plan_id": plan.plan_id,
        },
        "baseline": {"path": BASELINE.as_posix(), "sha256": sha256_file(root / BASELINE)},
        "source_anchor": gitrepo.head_commit(root),
        "seed_namespace": namespace,
        "environment": actual,
        "deviations": deviations,
        "requires": requires,
        "inputs": bound_inputs,
        "approved_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "approved_by": _approver(root),
    }
    write_json(record_path, record)
    return record_path


def _approver(root: Path) -> str:
    name = gitrepo.git(root, "config", "user.name", check=False).strip()
    return name or getpass.getuser()


# -- the gate -------------------------------------------------------------------------------


def find_approval(root: Path, stage: str, run_id: str | None) -> Approval:
    """The approval to run under: the one named by ``run_id``, else the stage's only unspent one."""
    if run_id is not None:
        path = approval_path(root, run_id)
        if not path.exists():
            raise ApprovalError(
                f"no approval record {path.relative_to(root)}; create it with "
                f"`prereg approve --stage {stage} --run-id {run_id}` and commit it"
            )
        return load_approval(path)
    unspent = [
        a for a in list_approvals(root) if a.stage == stage and not has_started(root, a.run_id)
    ]
    if not unspent:
        raise ApprovalError(
            f"no unspent approval for stage {stage} under {APPROVALS}; create one with "
            f"`prereg approve --stage {stage} --run-id {stage}-YYYYMMDD-NNN`, commit it, run again"
        )
    if len(unspent) > 1:
        raise ApprovalError(
            f"several unspent approvals for stage {stage}: {[a.run_id for a in unspent]}; "
            "choose one with --run-id"
        )
    return unspent[0]


def check_gate(
    root: Path, approval: Approval, stage: str, run_id: str | None
) -> tuple[Plan | None, list[Refusal]]:
    """Every gate condition, checked; the refusals (empty when the run may start)."""
    root = Path(root)
    data = approval.data
    refusals: list[Refusal] = []
    rel = approval.path.relative_to(root).as_posix()

    plan_file = root / data["plan"]["path"]
    plan = None
    if not plan_file.exists():
        refusals.append(
            Refusal("plan-hash", f"the approved plan {data['plan']['path']} does not exist")
        )
    else:
        actual = sha256_file(plan_file)
        if actual != data["plan"]["sha256"]:
            refusals.append(
                Refusal(
                    "plan-hash",
                    f"{data['plan']['path']} hashes {actual}, the approval binds {data['plan']['sha256']}; "
                    "restore the approved plan, or approve the edited plan under a new run id",
                )
            )
        else:
            plan = load_plan(plan_file)
            try:
                validate_stage(plan, stage)
            except (ValueError, LookupError) as err:
                refusals.append(Refusal("plan-hash", f"the approved plan does not validate: {err}"))

    problems = baseline_problems(root)
    baseline_file = root / BASELINE
    if baseline_file.exists() and sha256_file(baseline_file) != data["baseline"]["sha256"]:
        problems.insert(
            0,
            f"{BASELINE} hashes {sha256_file(baseline_file)}, the approval binds {data['baseline']['sha256']}",
        )
    if problems:
        refusals.append(
            Refusal(
                "baseline",
                "; ".join(problems) + ". Historical files are immutable: restore them from git",
            )
        )

    dirty = gitrepo.dirty_paths(root)
    if dirty:
        refusals.append(
            Refusal(
                "clean-source",
                f"the working tree is not clean: {', '.join(dirty[:8])}; commit or remove these changes "
                f"(the approval record {rel} itself must be committed)",
            )
        )
    anchor = data["source_anchor"]
    head = gitrepo.head_commit(root)
    if not gitrepo.commit_exists(root, anchor) or not gitrepo.is_ancestor(root, anchor, head):
        refusals.append(
            Refusal(
                "clean-source",
                f"the approval's source anchor {anchor[:12]} is not an ancestor of HEAD {head[:12]}",
            )
        )
    else:
        beyond = [p for p in gitrepo.changed_between(root, anchor, head) if p != rel]
        if beyond:
            refusals.append(
                Refusal(
                    "clean-source",
                    f"HEAD {head[:12]} differs from the approved anchor {anchor[:12]} beyond the approval "
                    f"record: {', '.join(beyond[:8])}; only {rel} may differ. Approve the new source under "
                    "a new run id, or check out the approved source",
                )
            )

    import prereg

    own_copy = root / "lib" / "prereg"
    in_use = Path(prereg.__file__).resolve().parent
    if own_copy.is_dir() and in_use != own_copy.resolve():
        refusals.append(
            Refusal(
                "clean-source",
                f"the prereg package in use is {in_use}, not this checkout's {own_copy}: the approved "
                "source would not be what runs. Install this checkout (pip install -e .) or set "
                f"PYTHONPATH={root / 'lib'}",
            )
        )

    if data["stage"] != stage or (run_id is not None and data["run_id"] != run_id):
        refusals.append(
            Refusal(
                "stage-and-run-id",
                f"the approval {rel} is for stage {data['stage']!r}, run {data['run_id']!r}; the command "
                f"line asks for stage {stage!r}" + (f", run {run_id!r}" if run_id else ""),
            )
        )
    if has_started(root, data["run_id"]):
        refusals.append(
            Refusal(
                "run-id-unused",
                f"run id {data['run_id']} has been spent (runs/{data['run_id']}/start.json exists): one "
                "approval, one run; no retry. Approve a new run id",
            )
        )

    if plan is not None:
        actual_env = provenance.pinned_environment()
        now = provenance.deviations(plan.data["environment_pins"], actual_env)
        named = {canonical_json(d) for d in data["deviations"]}
        unnamed = [d for d in now if canonical_json(d) not in named]
        if unnamed:
            listed = "; ".join(
                f"{d['field']}: pinned {d['pinned']!r}, here {d['actual']!r}" for d in unnamed
            )
            refusals.append(
                Refusal(
                    "environment",
                    f"deviations from the plan's pins not named in the approval: {listed}; approve again "
                    "with --accept-deviations on this machine so they are named",
                )
            )

    problems = input_problems(data["inputs"]) + dependency_problems(root, data["requires"])
    if plan is not None and not problems:
        kind = load_kind(plan.stage(stage)["kind"])
        if kind.gate_check is not None:
            problems += kind.gate_check(root, plan, stage, data)
    if problems:
        refusals.append(Refusal("inputs", "; ".join(problems)))
    return plan, refusals


def write_refusal(
    root: Path, approval: Approval | None, stage: str, run_id: str | None, refusals: list[Refusal]
) -> Path:
    """Record a refusal under runs/refusals/ (it does not spend the run id)."""
    now = datetime.now(timezone.utc)
    name = f"{run_id or stage}-{now.strftime('%Y%m%dT%H%M%S%fZ')}.json"
    path = refusals_dir(root) / name
    write_json(
        path,
        {
            "stage": stage,
            "run_id": run_id,
            "approval": None if approval is None else approval.path.relative_to(root).as_posix(),
            "refused_at": now.isoformat(timespec="seconds"),
            "head": gitrepo.head_commit(root),
            "refusals": [{"condition": r.condition, "message": r.message} for r in refusals],
        },
    )
    return path
