"""What an approval binds that must still hold when its run starts: the bound inputs and
the required runs (present, unchanged, complete, of the approval's plan and stage, and
auditing clean). The immutable files of ``plans/BASELINE.json``:
:func:`prereg.kinds.plans.baseline_problems`.

The gate (:func:`prereg.decisions.gate.gather`) asks for these problems at ``prereg approve`` and
before a research run; each problem names the file, input or run and what differs.
"""

from __future__ import annotations

from pathlib import Path

from prereg.base import gitrepo
from prereg.base.hashing import read_json, sha256_file
from prereg.decisions.audit import audit_run, audit_run_cached
from prereg.records.runs import COMPLETE, RunLayout, valid_run_id


def input_problems(record_inputs: dict) -> list[str]:
    """Each bound input (the approval record's ``inputs``) that is missing or changed."""
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


def dependency_problems(
    root: Path, requires: dict, *, plan_sha256: str, replay: bool = True
) -> list[str]:
    """Each required run that is missing, changed, incomplete, of another plan or not clean.

    Clean is :func:`prereg.decisions.audit.audit_run_cached`'s: the replay is skipped only on
    an auditor's signed, replayed audit. ``replay=False``: no replay at all (a launcher, whose
    hermetic session judges the required runs again with their replays before it spends)."""
    problems = []
    for stage, bound in sorted(requires.items()):
        if not valid_run_id(bound["run_id"]):
            problems.append(f"required {stage} run {bound['run_id']!r} is not a run id")
            continue
        layout = RunLayout(root, bound["run_id"])
        folder, manifest = layout.folder, layout.manifest
        if not manifest.exists():
            problems.append(f"required {stage} run {bound['run_id']} has no manifest")
            continue
        if sha256_file(manifest) != bound["manifest_sha256"]:
            problems.append(
                f"required {stage} run {bound['run_id']}: manifest changed since approval"
            )
            continue
        try:
            recorded = read_json(manifest, what="manifest")
            status, plan_hash = recorded["status"], recorded["plan"]["sha256"]
        except (ValueError, KeyError, TypeError) as err:
            problems.append(f"required {stage} run {bound['run_id']}: unreadable manifest ({err})")
            continue
        if plan_hash != plan_sha256:
            problems.append(
                f"required {stage} run {bound['run_id']} ran under another plan (SHA-256 "
                f"{str(plan_hash)[:12]}), not this approval's plan ({plan_sha256[:12]})"
            )
            continue
        if recorded.get("stage") != stage:
            problems.append(
                f"required {stage} run {bound['run_id']} is a run of stage {recorded.get('stage')!r}"
            )
            continue
        if status != COMPLETE:
            problems.append(f"required {stage} run {bound['run_id']} is {status}, not complete")
            continue
        findings = (
            audit_run_cached(root, folder) if replay else audit_run(root, folder, replay=False)
        )
        if findings:
            problems.append(
                f"required {stage} run {bound['run_id']} does not audit clean: {findings[0]}"
                + (f" (and {len(findings) - 1} more)" if len(findings) > 1 else "")
            )
    return problems
