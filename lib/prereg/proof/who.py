"""Who approved, who ran and who audited a run, by the keys that signed, as the repository's
own role files name them: what a report shows. Trust is ``prereg verify``'s, from a card."""

from __future__ import annotations

from pathlib import Path

from prereg.base import gitrepo
from prereg.proof import dsse, timestamp
from prereg.proof.commits import role_file, signature
from prereg.proof.keys import APPROVERS, AUDITORS, RUN_NAMESPACE, RUNNERS, KeyProblem, signers_of
from prereg.proof.vsa import signed_audit
from prereg.records import ATTESTATION, START_RECORD, documents, ledger, signed_audit_record
from prereg.records.runs import RunFolder


def _commit_row(root: Path, commit: str, role: str) -> str:
    parent = gitrepo.git(root, "rev-parse", f"{commit}^").strip()
    found = signature(root, commit, role_file(root, parent, role) or b"")
    when = gitrepo.git(root, "log", "-1", "--format=%cI", commit).strip()
    who = f"{found.principal} ({found.key})" if found.good else found.describe()
    return f"{who}; commit {commit[:12]} dated {when} (the signer's own clock)"


def _attestation_row(root: Path, run_dir: Path, commit: str) -> str:
    path = Path(run_dir) / ATTESTATION
    if not path.is_file():
        return "no attestation"
    try:
        first = dsse.read_lines(path)[0]
        signers = signers_of(role_file(root, commit, RUNNERS), RUNNERS)
        _, who = dsse.verify(first, signers, RUN_NAMESPACE)
    except dsse.NoCrypto as err:
        return f"not checked here: {err}"
    except (dsse.SignatureProblem, KeyProblem, IndexError) as err:
        return f"not a runner's signature: {err}"
    statement = documents.loads(dsse.payload_of(first), "attestation line 1")
    meta = statement["predicate"]["runDetails"]["metadata"]
    names = ", ".join(f"{','.join(s.principals)} ({s.key.fingerprint})" for s in who)
    return f"{names}; started {meta.get('startedOn')}, finished {meta.get('finishedOn')}"


def _time_row(run_dir: Path) -> str | None:
    """The times the approval's timestamp authority states, or None without one."""
    folder = RunFolder(run_dir)
    try:
        stamp = documents.load(folder.approval_copy).value.get("timestamp") or {}
        start = documents.load(folder.start).value.get("approval_timestamp")
    except (OSError, ValueError, AttributeError):
        return None
    if not stamp:
        return None
    tokens = {"record": stamp.get("token"), "start": start}
    times = {}
    for name, token in tokens.items():
        try:
            times[name] = timestamp.time_of(timestamp.decode(token, name))
        except timestamp.TimestampProblem:
            times[name] = None
    path = folder.attestation_timestamp
    times["attestation"] = timestamp.time_of(path.read_bytes()) if path.is_file() else None
    shown = ", ".join(
        f"{name} {when:%Y-%m-%dT%H:%M:%SZ}" if when else f"{name} none"
        for name, when in times.items()
    )
    return f"by {stamp.get('url')}: {shown} (prereg verify checks them under the card)"


def signers(root: Path, run_dir: Path) -> list[tuple[str, str]]:
    """(what, who and when) of the approval, the run and the signed audit."""
    try:
        commit = documents.load(Path(run_dir) / START_RECORD).value["source_commit"]
        rows = [("approved", _commit_row(root, commit, APPROVERS))]
    except (OSError, ValueError, KeyError, gitrepo.GitError):
        return [("approved", "unknown: the start record or its commit cannot be read")]
    rows.append(("ran", _attestation_row(root, run_dir, commit)))
    stamped = _time_row(run_dir)
    if stamped is not None:
        rows.append(("timestamped", stamped))
    audit = signed_audit(root, Path(run_dir).name)
    if audit is None:
        rows.append(("audited", f"no signed audit ({ledger.signed_audit_ref(Path(run_dir).name)})"))
    else:
        rel = signed_audit_record(Path(run_dir).name)
        summary = documents.loads(gitrepo.show_bytes(root, audit, rel), rel)
        predicate = summary.get("predicate") or {}
        rows.append(
            (
                "audited",
                (
                    f"{_commit_row(root, audit, AUDITORS)}; {predicate.get('verificationResult')} "
                    f"at {predicate.get('timeVerified')}"
                ),
            )
        )
    return rows
