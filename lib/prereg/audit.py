"""``prereg audit``: recompute every hash, check the approval binding, replay the stage.

Findings are sentences naming the file or field that differs; an empty list is a
clean audit. Replay is the stage kind's: it regenerates data from seeds and recomputes
analysis from saved predictions, never training anything.
"""

from __future__ import annotations

from pathlib import Path

from prereg import gitrepo
from prereg.hashing import read_json, sha256_bytes, sha256_file, write_json
from prereg.runs import APPROVAL_COPY, COMPLETE, ITEMS_DIR, MANIFEST, SUMMARY_DIR, audits_dir


def _hash_findings(run_dir: Path, manifest: dict) -> list[str]:
    findings = []
    listed: dict[str, dict] = {}
    for entry in manifest["run_files"]:
        listed[entry["path"]] = entry
    for item in manifest["items"]:
        for entry in item.get("outputs", []):
            listed[f"{ITEMS_DIR}/{item['output_dir']}/{entry['path']}"] = entry
    for entry in manifest["summary_files"] + manifest.get("partial_summary_files", []):
        listed[f"{SUMMARY_DIR}/{entry['path']}"] = entry
    for rel, entry in sorted(listed.items()):
        path = run_dir / rel
        if not path.is_file():
            findings.append(f"missing file: {rel}")
        elif path.stat().st_size != entry["bytes"] or sha256_file(path) != entry["sha256"]:
            findings.append(f"changed file: {rel} (SHA-256 differs from the manifest)")
    present = {p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file()}
    for rel in sorted(present - set(listed) - {MANIFEST}):
        findings.append(f"extra file not in the manifest: {rel}")
    return findings


def _binding_findings(root: Path, run_dir: Path, manifest: dict) -> list[str]:
    findings = []
    copy = run_dir / APPROVAL_COPY
    if not copy.is_file():
        return [f"missing file: {APPROVAL_COPY} (the approval this run was started under)"]
    if sha256_file(copy) != manifest["approval"]["sha256"]:
        findings.append(f"{APPROVAL_COPY} does not hash as the manifest's approval SHA-256")
    record = read_json(copy, what="approval copy")
    if record["plan"]["sha256"] != manifest["plan"]["sha256"]:
        findings.append("the approval binds another plan hash than the manifest records")
    if record["run_id"] != manifest["run_id"] or record["stage"] != manifest["stage"]:
        findings.append("the approval names another stage or run id than the manifest")
    source = manifest["source_commit"]
    if not gitrepo.commit_exists(root, source):
        return findings + [f"source commit {source[:12]} is not in the repository at {root}"]
    try:
        plan_bytes = gitrepo.show_bytes(root, source, manifest["plan"]["path"])
        if sha256_bytes(plan_bytes) != manifest["plan"]["sha256"]:
            findings.append(
                f"{manifest['plan']['path']} at {source[:12]} does not hash as approved"
            )
        committed = gitrepo.show_bytes(root, source, manifest["approval"]["path"])
        if committed != copy.read_bytes():
            findings.append(
                f"{manifest['approval']['path']} at {source[:12]} differs from the run's copy"
            )
    except gitrepo.GitError as err:
        findings.append(str(err))
    anchor = record["source_anchor"]
    if not gitrepo.is_ancestor(root, anchor, source):
        findings.append(
            f"source anchor {anchor[:12]} is not an ancestor of the run's commit {source[:12]}"
        )
    else:
        beyond = [
            p
            for p in gitrepo.changed_between(root, anchor, source)
            if p != manifest["approval"]["path"]
        ]
        if beyond:
            findings.append(
                f"the run's source differs from the approved anchor beyond the record: {beyond[:5]}"
            )
    return findings


def audit_run(root: Path, run_dir: Path, *, replay: bool = True) -> list[str]:
    """All findings for one run directory (empty: clean)."""
    root, run_dir = Path(root), Path(run_dir)
    if not (run_dir / MANIFEST).is_file():
        return [f"{run_dir} has no {MANIFEST}: the run is still going or its controller was killed"]
    manifest = read_json(run_dir / MANIFEST, what="manifest")
    findings = _hash_findings(run_dir, manifest) + _binding_findings(root, run_dir, manifest)
    if replay and not findings and manifest["status"] == COMPLETE:
        from prereg.stages import RunView, load_kind

        plan_bytes = gitrepo.show_bytes(root, manifest["source_commit"], manifest["plan"]["path"])
        plan = _plan_from_bytes(root, manifest["plan"]["path"], plan_bytes)
        kind = load_kind(plan.stage(manifest["stage"])["kind"])
        if kind.replay is not None:
            view = RunView(
                root=root,
                run_dir=run_dir,
                plan=plan,
                stage=manifest["stage"],
                items=tuple(manifest["items"]),
            )
            findings += kind.replay(view)
    return findings


def _plan_from_bytes(root: Path, rel: str, data: bytes):
    """The plan as it was at the run's commit (the working copy may have moved on)."""
    import json

    from prereg.plans import PLAN_SCHEMA, Plan
    from prereg.schema import validate

    value = json.loads(data)
    validate(value, PLAN_SCHEMA, source=f"{rel} (at the run's commit)")
    return Plan(path=Path(root) / rel, sha256=sha256_bytes(data), data=value)


def audit_run_cached(root: Path, run_dir: Path) -> list[str]:
    """A full audit, reusing a stored clean verdict for the same manifest (hashes rechecked now)."""
    run_dir = Path(run_dir)
    manifest_path = run_dir / MANIFEST
    if not manifest_path.is_file():
        return audit_run(root, run_dir)
    digest = sha256_file(manifest_path)
    store = audits_dir(root) / f"{run_dir.name}.json"
    if store.is_file():
        cached = read_json(store, what="stored audit verdict")
        if cached.get("manifest_sha256") == digest and not cached.get("findings"):
            return audit_run(root, run_dir, replay=False)
    findings = audit_run(root, run_dir)
    write_json(store, {"manifest_sha256": digest, "findings": findings})
    return findings
