"""``prereg verify``: a run's whole chain of proof, from a registration card.

It trusts the card and nothing the operator wrote after it: the role files at the card's
freeze commit (and only the changes an approver signed since), git's signature check with
ssh-keygen, and the signature of each statement. It never runs stage code and imports
nothing of the science stack. The same checks, as plain commands, are in
docs/how-to/verify-a-run.md; the checks run both on the same runs.

1. the card matches the repository at its freeze commit;
2. each line of the attestation is signed by a key of the runners file, and its statement
   is prereg's, for this run id;
3. the approval commit it names is signed by an approver, adds exactly the approval record,
   whose digest the statement carries; the record is for this run and stage, binds the plan
   the card registers, and its anchor is the commit's parent;
4. every file of the run folder is a subject with its digest, and every subject a file;
5. git's record of the start and of the attestation, when the repository holds them, are
   the run folder's;
6. each required run verifies too;
7. when the card names a timestamp authority, the approval names it and its three
   timestamps hold in order (:mod:`prereg.proof.timestamp`);
8. with ``require_audit``, an auditor signed a passing verification summary of this
   attestation (:mod:`prereg.proof.vsa`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from prereg.base import gitrepo
from prereg.base.hashing import sha256_file
from prereg.proof import card as cards
from prereg.proof import dsse, timestamp, vsa
from prereg.proof.commits import (
    approval_problems,
    beyond_adding,
    committed_at,
    role_file,
    role_history_problems,
)
from prereg.proof.keys import RUN_NAMESPACE, RUNNERS, KeyProblem, signers_of
from prereg.proof.statement import (
    BUILD_TYPE,
    EXTERNAL_PARAMETERS,
    PROVENANCE,
    STATEMENT_TYPE,
    TEST_RESULT,
    StatementProblem,
    subjects,
)
from prereg.records import APPROVAL_COPY, START_RECORD, approval_record, documents, ledger
from prereg.records.runs import RunFolder

VERIFIED, REFUSED, COULD_NOT = 0, 1, 3


@dataclass
class Verdict:
    run_id: str
    problems: list[str] = field(default_factory=list)
    could_not: list[str] = field(default_factory=list)
    said: list[str] = field(default_factory=list)  # what was established, for the report

    @property
    def code(self) -> int:
        if self.could_not:
            return COULD_NOT
        return REFUSED if self.problems else VERIFIED


def _statement(env: dict, signers, number: int, verdict: Verdict) -> dict | None:
    try:
        payload, who = dsse.verify(env, signers, RUN_NAMESPACE)
    except dsse.NoCrypto as err:
        verdict.could_not.append(str(err))
        return None
    except dsse.SignatureProblem as err:
        verdict.problems.append(f"attestation line {number}: {err}")
        return None
    verdict.said.append(
        f"attestation line {number} signed by "
        + ", ".join(f"{','.join(s.principals)} ({s.key.fingerprint})" for s in who)
    )
    try:
        return documents.loads_object(payload, f"attestation line {number}'s statement")
    except documents.NotJson as err:
        verdict.problems.append(str(err))
        return None


def _digest(deps: list, name: str) -> dict:
    for dep in deps:
        if isinstance(dep, dict) and dep.get("name") == name:
            return dep.get("digest") or {}
    return {}


def verify_run(
    root: Path,
    run_dir: Path,
    card: dict,
    *,
    require_audit: bool = False,
    _seen: frozenset = frozenset(),
) -> Verdict:
    """Every check of the module docstring for the run in ``run_dir`` (a folder of ``root``'s
    ``runs/``), against ``card``."""
    root, run_dir = Path(root), Path(run_dir)
    run_id = run_dir.name
    verdict = Verdict(run_id)
    verdict.problems += cards.problems(root, card)
    if verdict.problems:
        return verdict
    folder = RunFolder(run_dir)
    if not folder.attestation.is_file():
        verdict.problems.append(
            f"{run_dir.name}/{folder.attestation.name} does not exist: the run wrote no attestation"
        )
        return verdict
    try:
        envelopes = dsse.read_lines(folder.attestation)
    except dsse.SignatureProblem as err:
        verdict.problems.append(str(err))
        return verdict
    if len(envelopes) != 2:
        verdict.problems.append(f"the attestation has {len(envelopes)} lines, not 2")
        return verdict

    # The runners file of the approval commit the statement names; that commit is found
    # from the unverified payload first, then everything is judged against it.
    try:
        unverified = documents.loads_object(
            dsse.payload_of(envelopes[0]), "attestation line 1's statement"
        )
        commit = _digest(
            unverified["predicate"]["buildDefinition"]["resolvedDependencies"], "source"
        )["gitCommit"]
    except documents.NotJson as err:
        verdict.problems.append(str(err))
        return verdict
    except (dsse.SignatureProblem, ValueError, KeyError, TypeError):
        verdict.problems.append("attestation line 1 names no source commit")
        return verdict
    if not gitrepo.is_object_id(commit):
        verdict.problems.append(
            f"attestation line 1 names the source commit {commit!r}, not a full commit id"
        )
        return verdict
    if not gitrepo.commit_exists(root, commit):
        verdict.problems.append(
            f"the attested source commit {commit[:12]} is not in the repository"
        )
        return verdict
    freeze = card["freeze_commit"]
    if not gitrepo.is_ancestor(root, freeze, commit):
        verdict.problems.append(
            f"the run's approval commit {commit[:12]} does not follow the card's freeze commit "
            f"{freeze[:12]}: the run is not of this registration (made before it, or elsewhere)"
        )
        return verdict
    history = role_history_problems(root, freeze, commit)
    if history:
        verdict.problems += history
        return verdict
    runners = role_file(root, commit, RUNNERS)
    try:
        signers = signers_of(runners, RUNNERS)
    except KeyProblem as err:
        verdict.problems.append(str(err))
        return verdict
    provenance = _statement(envelopes[0], signers, 1, verdict)
    result = _statement(envelopes[1], signers, 2, verdict)
    if provenance is None or result is None:
        return verdict
    _judge_statements(root, folder, provenance, result, commit, verdict)
    if verdict.problems:
        return verdict
    _judge_approval(root, folder, provenance, commit, card, verdict)
    _judge_refs(root, folder, verdict)
    _judge_required(root, run_dir, provenance, card, _seen | {run_id}, verdict)
    if require_audit:
        wrong, said = vsa.problems(root, run_id, folder.attestation.read_bytes(), freeze)
        verdict.problems += wrong
        if not wrong:
            verdict.said.append(f"audit passed, {said}")
    return verdict


def _judge_statements(root, folder, provenance, result, commit, verdict) -> None:
    run_id = folder.folder.name
    problems = verdict.problems
    if provenance.get("_type") != STATEMENT_TYPE or result.get("_type") != STATEMENT_TYPE:
        problems.append(f"a statement's _type is not {STATEMENT_TYPE}")
    if provenance.get("predicateType") != PROVENANCE:
        problems.append(f"line 1's predicateType is not {PROVENANCE}")
    if result.get("predicateType") != TEST_RESULT:
        problems.append(f"line 2's predicateType is not {TEST_RESULT}")
    try:
        definition = provenance["predicate"]["buildDefinition"]
        external = definition["externalParameters"]
        invocation = provenance["predicate"]["runDetails"]["metadata"]["invocationId"]
    except (KeyError, TypeError):
        problems.append("line 1 is not a SLSA provenance statement of prereg's")
        return
    if definition.get("buildType") != BUILD_TYPE:
        problems.append(f"line 1's buildType is not {BUILD_TYPE}")
    if sorted(external) != sorted(EXTERNAL_PARAMETERS):
        problems.append(
            f"line 1's externalParameters hold {sorted(external)}, not {list(EXTERNAL_PARAMETERS)}"
        )
    if external.get("runId") != run_id or invocation != run_id:
        problems.append(
            f"the statement is for run {external.get('runId')!r} (invocation {invocation!r}), "
            f"not for {run_id!r}: an attestation of another run"
        )
    if result.get("subject") != [{"name": "source", "digest": {"gitCommit": commit}}]:
        problems.append("line 2's subject is not the source commit line 1 names")
    try:
        present = subjects(folder.folder)
    except StatementProblem as err:
        problems.append(str(err))
        return
    attested = {s.get("name"): s.get("digest") for s in provenance.get("subject") or []}
    here = {s["name"]: s["digest"] for s in present}
    for name in sorted(set(attested) | set(here)):
        if name not in here:
            problems.append(f"{run_id}/{name} is attested and missing")
        elif name not in attested:
            problems.append(f"{run_id}/{name} is not attested: a file added after the run")
        elif attested[name] != here[name]:
            problems.append(f"{run_id}/{name} changed after it was attested")
    if not problems:
        verdict.said.append(f"{len(here)} file(s) of {run_id} as attested")


def _judge_approval(root, folder, provenance, commit, card, verdict) -> None:
    problems = verdict.problems
    run_id = folder.folder.name
    deps = provenance["predicate"]["buildDefinition"]["resolvedDependencies"]
    signature = approval_problems(root, commit, trusted=card["freeze_commit"])
    problems += signature
    record_rel = approval_record(run_id)
    beyond = beyond_adding(root, commit, record_rel)
    if beyond:
        problems.append(
            f"the approval commit {commit[:12]} does more than add {record_rel}: "
            + "; ".join(beyond[:6])
        )
        return
    record_bytes = gitrepo.show_bytes(root, commit, record_rel)
    record_sha = hashlib.sha256(record_bytes).hexdigest()
    if _digest(deps, record_rel).get("sha256") != record_sha:
        problems.append(f"the attested approval record is not {record_rel} at {commit[:12]}")
    if sha256_file(folder.folder / APPROVAL_COPY) != record_sha:
        problems.append(f"{run_id}/{APPROVAL_COPY} is not the approval record at {commit[:12]}")
    try:
        start = documents.load(folder.start, f"{run_id}/{START_RECORD}").value
        record = documents.loads(record_bytes, f"{record_rel} at {commit[:12]}")
        plan_path, plan_sha = record["plan"]["path"], record["plan"]["sha256"]
    except documents.NotJson as err:
        problems.append(str(err))
        return
    except (OSError, ValueError, KeyError, TypeError):
        problems.append(f"{record_rel} or {run_id}/{START_RECORD} cannot be read")
        return
    if start.get("approval_sha256") != record_sha or start.get("source_commit") != commit:
        problems.append(f"{run_id}/{START_RECORD} names another approval or commit")
    if record.get("run_id") != run_id:
        problems.append(f"the approval record is for run {record.get('run_id')!r}")
    stage = provenance["predicate"]["buildDefinition"]["externalParameters"].get("stage")
    if record.get("stage") != stage or start.get("stage") != stage:
        problems.append(f"the approval record is for stage {record.get('stage')!r}, not {stage!r}")
    if record.get("source_anchor") != gitrepo.git(root, "rev-parse", f"{commit}^").strip():
        problems.append("the approval record's source_anchor is not the approval commit's parent")
    try:
        at_commit = hashlib.sha256(gitrepo.show_bytes(root, commit, plan_path)).hexdigest()
    except gitrepo.GitError:
        at_commit = None
    if not (plan_sha == at_commit == _digest(deps, plan_path).get("sha256")):
        problems.append(
            f"the plan {plan_path} at {commit[:12]} is not the plan approved and attested"
        )
    if card["plans"].get(plan_path) != plan_sha:
        problems.append(
            f"the plan {plan_path} the run approved is not the plan the card registers: a plan "
            "changed after registration needs a new card"
        )
    if not signature:
        verdict.said.append(f"approval {commit[:12]} signed by an approver; plan as registered")
    _judge_witness(root, folder, record, card, verdict)
    _judge_time(root, folder, record, commit, card, verdict)


def witness_disagrees(root: Path, url: str, run_id: str, start: bytes) -> list[str] | None:
    """What the witness at ``url`` says against the run's start record ``start``: it holds
    none, or another (a rerun); None when it cannot be asked."""
    held, problem = ledger.witnessed_start(root, url, run_id)
    shown = ledger.shown_url(url)
    if problem is not None:
        return None
    if held is None:
        return [f"the witness {shown} holds no start record of run {run_id}: it was never pushed"]
    if held != gitrepo.object_id("blob", start, gitrepo.object_format(root)):
        return [f"the witness {shown} holds another start of run {run_id} (a rerun)"]
    return []


def _judge_witness(root, folder, record, card, verdict) -> None:
    run_id = folder.folder.name
    url = (record.get("witness") or {}).get("url")
    if card.get("witness") and url != card["witness"]:
        verdict.problems.append(
            f"the card registers the witness {card['witness']} and the approval names "
            f"{url or 'none'}: the witness was skipped"
        )
        return
    if not url:
        return
    if url.startswith("-"):  # as the plain commands refuse it: never handed to git
        verdict.problems.append(f"the witness url {ledger.shown_url(url)} looks like an option")
        return
    found = witness_disagrees(root, url, run_id, folder.start.read_bytes())
    if found is None:
        verdict.could_not.append(f"the witness {ledger.shown_url(url)} cannot be asked")
    elif found:
        verdict.problems += found
    else:
        verdict.said.append(f"the witness {ledger.shown_url(url)} holds this start of {run_id}")


def _judge_time(root, folder, record, commit, card, verdict) -> None:
    """The three timestamps of :mod:`prereg.proof.timestamp` hold under the card's authority,
    in order with the approval commit's date."""
    authority = card.get("timestamp_authority")
    stamp = record.get("timestamp") or {}
    if not authority:
        if stamp:
            verdict.said.append(
                "the run's timestamps are not checked: the card registers no timestamp authority"
            )
        return
    if stamp.get("url") != authority["url"]:
        verdict.problems.append(
            f"the card registers the timestamp authority {authority['url']} and the approval "
            f"names {stamp.get('url') or 'none'}: the timestamps were skipped"
        )
        return
    run_id = folder.folder.name
    if not folder.attestation_timestamp.is_file():
        verdict.problems.append(
            f"{run_id}/{folder.attestation_timestamp.name} does not exist: the attestation was "
            "not timestamped"
        )
        return
    what = ("approval record's", "run start's", "attestation's")
    try:
        start = documents.load(folder.start, f"{run_id}/{START_RECORD}").value
        tokens = (
            timestamp.decode(stamp.get("token"), f"the approval record's timestamp of {run_id}"),
            timestamp.decode(
                start.get("approval_timestamp"), f"{run_id}/{START_RECORD}'s timestamp"
            ),
            folder.attestation_timestamp.read_bytes(),
        )
        data = (
            timestamp.approval_data(run_id, record["source_anchor"]),
            gitrepo.read_object(root, commit)[1],
            folder.attestation.read_bytes(),
        )
        times = [
            timestamp.verified_time(token, over, authority["roots"], name)
            for token, over, name in zip(tokens, data, what)
        ]
    except timestamp.NoTimestamps as err:
        verdict.could_not.append(str(err))
        return
    except (timestamp.TimestampProblem, OSError, ValueError, KeyError, TypeError) as err:
        verdict.problems.append(str(err))
        return
    approved, started, attested = times
    order = timestamp.order_problems(approved, committed_at(root, commit), started, attested)
    verdict.problems += order
    if not order:
        verdict.said.append(
            f"by {authority['url']}'s clock: approved between {approved:%Y-%m-%dT%H:%M:%SZ} and "
            f"{started:%Y-%m-%dT%H:%M:%SZ}, attested by {attested:%Y-%m-%dT%H:%M:%SZ}"
        )


def _judge_refs(root, folder, verdict) -> None:
    run_id = folder.folder.name
    for ref, path in (
        (ledger.start_ref(run_id), folder.start),
        (ledger.attestation_ref(run_id), folder.attestation),
        (ledger.attestation_timestamp_ref(run_id), folder.attestation_timestamp),
    ):
        recorded = ledger.read(root, ref)
        if recorded is not None and (not path.is_file() or recorded != path.read_bytes()):
            verdict.problems.append(f"{ref} records another {path.name} than {run_id}/{path.name}")


def _judge_required(root, run_dir, provenance, card, seen, verdict) -> None:
    for dep in provenance["predicate"]["buildDefinition"]["resolvedDependencies"]:
        name = dep.get("name") or ""
        if not name.startswith("run:"):
            continue
        required = name.rsplit("/", 1)[-1]
        if required in seen:
            verdict.problems.append(f"run {required} requires itself")
            continue
        other = run_dir.parent / required
        manifest = RunFolder(other).manifest
        if not manifest.is_file() or sha256_file(manifest) != dep["digest"].get("sha256"):
            verdict.problems.append(
                f"the required run {required}'s manifest is not the one attested"
            )
            continue
        inner = verify_run(root, other, card, _seen=seen)
        verdict.problems += [f"required run {required}: {p}" for p in inner.problems]
        verdict.could_not += inner.could_not
        if inner.code == VERIFIED:
            verdict.said.append(f"the required run {required} verifies too")
