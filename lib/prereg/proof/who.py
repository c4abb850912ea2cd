"""Who approved, who ran and who audited a run, by the keys that signed, as the repository's
own role files name them: what a report shows. Trust is ``prereg verify``'s, from a card."""

from __future__ import annotations

from pathlib import Path

from prereg.base import gitrepo
from prereg.proof import dsse, timestamp
from prereg.proof.commits import role_file, signature
from prereg.proof.keys import APPROVERS, AUDITORS, RUN_NAMESPACE, RUNNERS, KeyProblem, signers_of
from prereg.proof.vsa import signed_audit
from prereg.records import (
    ATTESTATION,
    START_RECORD,
    documents,
    formats,
    ledger,
    signed_audit_record,
)
from prereg.records.formats import Approval, Provenance, Start, Summary
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
    try:
        statement = formats.loads(dsse.payload_of(first), Provenance, "attestation line 1").value
    except (documents.NotJson, formats.NotARecord) as err:
        return f"not a provenance statement of prereg's: {err}"
    meta = statement.predicate.run.metadata
    names = ", ".join(f"{','.join(s.principals)} ({s.key.fingerprint})" for s in who)
    return f"{names}; started {meta.started_on or None}, finished {meta.finished_on or None}"


def _time_row(run_dir: Path) -> str | None:
    """The times the approval's timestamp authority states, or None without one."""
    folder = RunFolder(run_dir)
    try:
        stamp = formats.load(folder.approval_copy, Approval).value.timestamp
        start = formats.load(folder.start, Start).value.approval_timestamp or None
    except (OSError, ValueError):
        return None
    if not stamp:
        return None
    tokens = {"record": stamp.token, "start": start}
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
    return f"by {stamp.url}: {shown} (prereg verify checks them under the card)"


def signers(root: Path, run_dir: Path) -> list[tuple[str, str]]:
    """(what, who and when) of the approval, the run and the signed audit."""
    try:
        commit = formats.load(Path(run_dir) / START_RECORD, Start).value.source_commit
        rows = [("approved", _commit_row(root, commit, APPROVERS))]
    except (OSError, ValueError, gitrepo.GitError):
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
        try:
            predicate = formats.loads(
                gitrepo.show_bytes(root, audit, rel), Summary, rel
            ).value.predicate
            said = f"{predicate.result} at {predicate.time_verified or None}"
        except (ValueError, gitrepo.GitError) as err:
            said = f"its summary cannot be read: {err}"
        rows.append(("audited", f"{_commit_row(root, audit, AUDITORS)}; {said}"))
    return rows
