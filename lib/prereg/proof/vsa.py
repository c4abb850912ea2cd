"""Signed audits: the auditor's SLSA Verification Summary of a run, in a commit the auditor
signs with a key of ``.prereg/auditors``.

``prereg audit --sign runs/<id>`` commits ``audits/<run-id>.vsa.json`` on top of the run's
source commit, signed (git's SSH signature, like an approval), and records the commit as
``refs/prereg/runs/<run-id>/signed-audit``; ``prereg verify --require-audit`` takes the run
as audited only from that commit: it adds exactly that file, an auditor of its parent
signed it, and the summary names this run's attestation and says PASSED. A dependent
stage's gate and ``prereg report`` skip the replay of a run only on such a summary that also
says the stage was replayed and names the run's manifest as it is now
(:func:`replayed_verdict`).
"""

from __future__ import annotations

import hashlib
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import prereg
from prereg.base import gitrepo
from prereg.base.hashing import canonical_json
from prereg.proof import commits
from prereg.proof.commits import role_history_problems, signed_by
from prereg.proof.keys import AUDITORS
from prereg.proof.statement import STATEMENT_TYPE, repository_id
from prereg.records import (
    ATTESTATION,
    MANIFEST,
    START_RECORD,
    documents,
    formats,
    ledger,
    signed_audit_record,
)
from prereg.records.formats import Start, Summary

VSA = "https://slsa.dev/verification_summary/v1"
VERIFIER_ID = "urn:prereg:verifier:audit:v1"
POLICY_URI = "urn:prereg:policy:audit:v1"
CLEAN_LEVEL = "PREREG_AUDIT_CLEAN"  # every record cross-checked, nothing found
REPLAYED_LEVEL = "PREREG_REPLAYED"  # and the stage replayed to the same results
NO_REPLAY_LEVEL = "PREREG_KIND_HAS_NO_REPLAY"  # or: the stage kind defines no replay


def summary(
    root: Path,
    run_dir: Path,
    *,
    clean: bool,
    replayed: bool,
    package_sha256: str,
    replay_defined: bool = True,
) -> dict:
    """The verification summary of the run in ``run_dir`` as the audit found it: levels
    :data:`CLEAN_LEVEL` when clean, and :data:`REPLAYED_LEVEL` when the replay ran or
    :data:`NO_REPLAY_LEVEL` when the stage kind defines none (``replay_defined``)."""
    run_dir = Path(run_dir)
    attestation = run_dir / ATTESTATION
    digest = {"sha256": hashlib.sha256(attestation.read_bytes()).hexdigest()}
    manifest = {"sha256": hashlib.sha256((run_dir / MANIFEST).read_bytes()).hexdigest()}
    source = formats.load(run_dir / START_RECORD, Start).value.source_commit
    levels = [CLEAN_LEVEL] * clean
    if clean and replayed:
        levels.append(REPLAYED_LEVEL)
    elif clean and not replay_defined:
        levels.append(NO_REPLAY_LEVEL)
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            {"name": ATTESTATION, "digest": digest},
            {"name": MANIFEST, "digest": manifest},
        ],
        "predicateType": VSA,
        "predicate": {
            "verifier": {
                "id": VERIFIER_ID,
                "version": {"prereg": prereg.__version__, "preregPackageSha256": package_sha256},
            },
            "timeVerified": now,
            "resourceUri": f"prereg:{repository_id(root, source)}/runs/{run_dir.name}",
            "policy": {"uri": POLICY_URI, "digest": {"sha256": package_sha256}},
            "inputAttestations": [{"uri": f"runs/{run_dir.name}/{ATTESTATION}", "digest": digest}],
            "verificationResult": "PASSED" if clean else "FAILED",
            "verifiedLevels": levels,
        },
    }


def commit(root: Path, run_id: str, source: str, statement: dict, key: Path | None = None) -> str:
    """Commit ``audits/<run-id>.vsa.json`` on top of the run's ``source`` commit, signed
    with ``key`` (an SSH private key file) or else the user's own git signing set-up (their
    configuration is read for this), and point
    :func:`~prereg.records.ledger.signed_audit_ref` at it (created once; no branch
    moves, so an approval made meanwhile still runs); the commit's id."""
    rel = signed_audit_record(run_id)
    blob = (
        gitrepo.run(root, "hash-object", "-w", "--stdin", data=canonical_json(statement).encode())
        .stdout.decode()
        .strip()
    )
    with tempfile.TemporaryDirectory(prefix="prereg-audit-index-") as place:
        index = Path(place, "index")
        gitrepo.run(root, "read-tree", source, index=index)
        gitrepo.run(
            root, "update-index", "--add", "--cacheinfo", f"100644,{blob},{rel}", index=index
        )
        tree = gitrepo.run(root, "write-tree", index=index).stdout.decode().strip()
    chosen = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key}"] if key else []
    made = gitrepo.run(
        root, *chosen, "commit-tree", "-S", "-p", source, "-m", f"Audit {run_id}", tree,
        user_config=True,
    ).stdout.decode().strip()  # fmt: skip
    ref = ledger.signed_audit_ref(run_id)
    done = gitrepo.run(root, "update-ref", ref, made, "", check=False)
    if done.returncode != 0:
        raise FileExistsError(f"{ref} exists: a run's signed audit is recorded once")
    return made


def signed_audit(root: Path, run_id: str) -> str | None:
    """The signed audit commit git records for the run, or None."""
    return gitrepo.resolve(root, f"{ledger.signed_audit_ref(run_id)}^{{commit}}")


def replayed_verdict(root: Path, run_dir: Path) -> str | None:
    """Who signed a passing audit of the run in ``run_dir`` that replayed the stage, about
    its attestation and its manifest as they are now, in words; None when git records none
    that holds. Trust as the gate's: the role files since the commit that first added the
    approvers file (a card's freeze commit is ``prereg verify``'s)."""
    run_dir = Path(run_dir)
    run_id = run_dir.name
    found = signed_audit(root, run_id)
    attestation, manifest = run_dir / ATTESTATION, run_dir / MANIFEST
    if found is None or not attestation.is_file() or not manifest.is_file():
        return None
    parents = commits.parents_of(root, found)
    trusted = commits.first_role_commit(root, parents[0]) if len(parents) == 1 else None
    if trusted is None:
        return None
    wrong, said = problems(root, run_id, attestation.read_bytes(), trusted)
    if wrong:
        return None
    rel = signed_audit_record(run_id)
    summary = formats.loads(gitrepo.show_bytes(root, found, rel), Summary, rel).value
    now = {"sha256": hashlib.sha256(manifest.read_bytes()).hexdigest()}
    if REPLAYED_LEVEL not in summary.predicate.level_list:
        return None
    if summary.subject_digest(MANIFEST) != now:
        return None
    return f"an auditor replayed it and signed the audit ({said}, commit {found[:12]})"


def problems(root: Path, run_id: str, attestation: bytes, trusted: str) -> tuple[list[str], str]:
    """Why the run has no signed audit that passed, trusting the role files at ``trusted``
    (a card's freeze commit); and who signed it, in words, when it holds."""
    rel = signed_audit_record(run_id)
    found = signed_audit(root, run_id)
    if found is None:
        return [f"git records no signed audit of the run ({ledger.signed_audit_ref(run_id)})"], ""
    parents = commits.parents_of(root, found)
    if len(parents) != 1:
        return [f"the audit commit {found[:12]} has {len(parents)} parents, not one"], ""
    wrong = role_history_problems(root, trusted, parents[0])
    good, said = signed_by(root, found, parents[0], AUDITORS)
    if not good:
        wrong.append(f"the audit commit {found[:12]} is not signed by an auditor: {said}")
    if commits.beyond_adding(root, found, rel):
        wrong.append(f"the audit commit {found[:12]} does more than add {rel}")
    try:
        vsa = formats.loads(gitrepo.show_bytes(root, found, rel), Summary, f"{rel} at {found[:12]}")
        predicate = vsa.value.predicate
        attested = predicate.attested_sha256
    except documents.NotJson as err:
        return [*wrong, str(err)], ""
    except (formats.NotARecord, KeyError, IndexError, TypeError, gitrepo.GitError):
        return [*wrong, f"{rel} at {found[:12]} is not a verification summary"], ""
    result, resource = predicate.result, predicate.resource_uri
    if vsa.value.predicate_type != VSA:
        wrong.append(f"{rel}'s predicateType is not {VSA}")
    if attested != hashlib.sha256(attestation).hexdigest():
        wrong.append(f"{rel} summarises another attestation than runs/{run_id}'s")
    if not str(resource).endswith(f"/runs/{run_id}"):
        wrong.append(f"{rel} is about {resource}, not run {run_id}")
    if result != "PASSED":
        wrong.append(f"{rel} says {result}: the auditor did not pass the run")
    if not any(level in (REPLAYED_LEVEL, NO_REPLAY_LEVEL) for level in predicate.level_list):
        wrong.append(
            f"{rel} does not say the stage was replayed ({REPLAYED_LEVEL}) nor that its kind "
            f"has no replay ({NO_REPLAY_LEVEL}): an audit without its replay attests hashes only"
        )
    return wrong, said
