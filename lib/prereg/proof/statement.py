"""A run's in-toto statements: what ran, from which approved commit, and what it wrote.

Line 1 of ``runs/<run-id>/attestation.intoto.jsonl`` is a Statement v1 with the SLSA
Provenance v1 predicate; line 2 the in-toto Test Result v0.1 predicate. Both are built from
the run folder alone (``start.json``, ``approval.json``, ``manifest.json``) and git's
objects, so the controller at run end and a verifier later build the same thing.
docs/reference/attestation.md is the contract: the subject rule, the parameters, each
dependency.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from pathlib import Path
from typing import TypeVar

import prereg
from prereg.base import gitrepo
from prereg.base.hashing import canonical_json, hashed_entry
from prereg.base.typed_settings import to_json
from prereg.records import (
    APPROVAL_COPY,
    ATTESTATION_FILES,
    COMPLETE,
    MANIFEST,
    PASSED,
    SKIPPED,
    START_RECORD,
    approval_record,
    documents,
    formats,
    item_outcomes,
)
from prereg.records.formats import Approval, Manifest, Start

T = TypeVar("T")

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PROVENANCE = "https://slsa.dev/provenance/v1"
TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"
# URIs whose meaning docs/reference/attestation.md defines.
BUILD_TYPE = "urn:prereg:attestation:run:v1"
BUILDER_ID = "urn:prereg:builder:hermetic-local:v1"
# The keys externalParameters holds, no other (a verifier refuses any other).
EXTERNAL_PARAMETERS = ("approval", "pytestArgs", "runId", "stage", "workers")
# The vendor digest of an installed distribution: the SHA-256 of its RECORD's counted entries
# (prereg.evidence.envlock), which is no file a consumer could fetch.
RECORD_DIGEST = "prereg_recordEntriesSha256"


class StatementProblem(ValueError):
    """A run folder no statement can be built from, or a statement that is not prereg's."""


def subjects(run_dir: Path) -> list[dict]:
    """Every regular file of the run folder but the attestation and its timestamp: name and
    SHA-256 (:func:`prereg.base.hashing.hashed_entry`: a file this process hashed for the
    manifest and not changed since is not read again; the audit and the verifiers read it)."""
    run_dir = Path(run_dir)
    found = []
    for path in sorted(run_dir.rglob("*")):
        rel = path.relative_to(run_dir).as_posix()
        if path.is_symlink() or not path.is_file():
            if path.is_symlink() or not path.is_dir():
                raise StatementProblem(f"{run_dir.name}/{rel} is not a regular file")
            continue
        if rel not in ATTESTATION_FILES:  # the manifest's digest when the file is unchanged
            found.append({"name": rel, "digest": {"sha256": hashed_entry(run_dir, rel)["sha256"]}})
    return found


def rfc3339(stamp: str | None) -> str | None:
    """An ISO time as RFC 3339 in UTC with ``Z``."""
    if not stamp:
        return None
    when = datetime.fromisoformat(stamp).astimezone(timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S") + f".{when.microsecond // 1000:03d}Z"


def _read(path: Path, kind: type[T]) -> T:
    """The record ``kind`` at ``path``, or StatementProblem."""
    try:
        return formats.load(path, kind).value
    except OSError as err:
        raise StatementProblem(f"{path} cannot be read: {err}") from None
    except (documents.NotJson, formats.NotARecord) as err:
        raise StatementProblem(str(err)) from None


def repository_id(root: Path, commit: str) -> str:
    """The repository's identity: its first root commit reachable from ``commit``."""
    return gitrepo.git(root, "rev-list", "--max-parents=0", commit).split()[-1]


def _git_blob(data: bytes, root: Path) -> str:
    return gitrepo.object_id("blob", data, gitrepo.object_format(root))


def _file_dependency(name: str, data: bytes | None, root: Path, sha256: str) -> dict:
    digest = {"sha256": sha256}
    if data is not None:
        digest["gitBlob"] = _git_blob(data, root)
    return {"name": name, "digest": digest}


def _shown(root: Path, commit: str, rel: str) -> bytes | None:
    try:
        return gitrepo.show_bytes(root, commit, rel)
    except gitrepo.GitError:
        return None


def dependencies(root: Path, approval: Approval, start: Start) -> list[dict]:
    """``resolvedDependencies``: the approved commit, the plan, the approval record, the
    baseline, the inputs, the required runs, the interpreter, the environment lock and each
    locked distribution."""
    commit = start.source_commit
    record_rel = approval_record(approval.run_id)
    plan = approval.plan
    deps = [
        {
            "name": "source",
            "uri": f"git+prereg:{repository_id(root, commit)}",
            "digest": {"gitCommit": commit},
            "annotations": {
                "sourceAnchor": approval.source_anchor,
                "tree": gitrepo.commit_tree(root, commit),
            },
        },
        _file_dependency(plan.path, _shown(root, commit, plan.path), root, plan.sha256),
        _file_dependency(record_rel, _shown(root, commit, record_rel), root, start.approval_sha256),
        {"name": approval.baseline.path, "digest": {"sha256": approval.baseline.sha256}},
    ]
    for name, bound in sorted(approval.inputs.items()):
        digest = {"gitCommit": bound.commit} if bound.commit else {}
        if bound.sha256:
            digest["sha256"] = bound.sha256
        deps.append(
            {"name": f"input:{name}", "digest": digest, "annotations": {"kind": bound.kind}}
        )
    for name, required in sorted(approval.requires.items()):
        deps.append(
            {
                "name": f"run:{name}/{required.run_id}",
                "digest": {"sha256": required.manifest_sha256},
            }
        )
    lock = approval.environment_lock
    if lock:
        python = lock.python
        deps.append(
            {
                "name": "python",
                "uri": f"pkg:generic/{python.implementation.lower()}@{python.version}",
                "digest": {"sha256": python.executable_sha256},
            }
        )
        deps.append(
            {
                "name": "environment-lock",
                "digest": {
                    "sha256": hashlib.sha256(canonical_json(to_json(lock)).encode()).hexdigest()
                },
            }
        )
        for dist, locked in sorted(lock.distributions.items()):
            deps.append(
                {
                    "uri": f"pkg:pypi/{dist}@{locked.version}",
                    "digest": {RECORD_DIGEST: locked.record_sha256},
                    "annotations": {"files": locked.files},
                }
            )
    return deps


def provenance(root: Path, run_dir: Path) -> dict:
    """Line 1: the SLSA Provenance v1 statement of the run in ``run_dir``."""
    run_dir = Path(run_dir)
    start = _read(run_dir / START_RECORD, Start)
    approval = _read(run_dir / APPROVAL_COPY, Approval)
    manifest = _read(run_dir / MANIFEST, Manifest)
    snapshot = manifest.snapshot
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects(run_dir),
        "predicateType": PROVENANCE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "approval": approval_record(start.run_id),
                    "pytestArgs": list(manifest.execution.get("argv") or [])[1:],
                    "runId": start.run_id,
                    "stage": start.stage,
                    "workers": manifest.workers or 0,
                },
                "internalParameters": {"snapshot": snapshot} if snapshot is not None else {},
                "resolvedDependencies": dependencies(root, approval, start),
            },
            "runDetails": {
                "builder": {"id": BUILDER_ID, "version": {"prereg": prereg.__version__}},
                "metadata": {
                    "invocationId": start.run_id,
                    "startedOn": rfc3339(start.started_at),
                    "finishedOn": rfc3339(manifest.ended_at or None),
                },
            },
        },
    }


def result_statement(run_dir: Path) -> dict:
    """Line 2: the Test Result v0.1 statement: each item and its outcome."""
    run_dir = Path(run_dir)
    start = _read(run_dir / START_RECORD, Start)
    manifest = _read(run_dir / MANIFEST, Manifest)
    outcome = dict(item_outcomes(manifest.items or ()))
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": "source", "digest": {"gitCommit": start.source_commit}}],
        "predicateType": TEST_RESULT,
        "predicate": {
            "result": "PASSED" if manifest.status == COMPLETE else "FAILED",
            "configuration": [
                {
                    "name": approval_record(start.run_id),
                    "digest": {"sha256": start.approval_sha256},
                }
            ],
            "passedTests": sorted(n for n, o in outcome.items() if o == PASSED),
            "warnedTests": sorted(n for n, o in outcome.items() if o == SKIPPED),
            "failedTests": sorted(n for n, o in outcome.items() if o not in (PASSED, SKIPPED)),
        },
    }


def statements(root: Path, run_dir: Path) -> list[dict]:
    return [provenance(root, run_dir), result_statement(run_dir)]


def payload(statement: dict) -> bytes:
    """A statement's bytes as signed: canonical JSON (sorted keys, no NaN, integers kept)."""
    return canonical_json(statement).encode()
