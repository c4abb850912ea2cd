"""``prereg verify``: a run's whole chain of proof, from a registration card.

It trusts the card and nothing the operator wrote after it: the role files at the card's
freeze commit (and only the changes an approver signed since), git's signature check with
ssh-keygen, and the signature of each statement. It never runs stage code and imports
nothing of the science stack. The same checks, as plain commands, are in
docs/how-to/verify-a-run.sh; the conformance corpus (checks/support/corpus.py) holds both
to the same outcome on every case.

In the gate's and the audit's shape: :func:`gather` reads the chain once into a
:class:`Chain` (every file, git answer and witness answer the checks need; nothing is read
twice), and :data:`CHECKS` judges it, each check a function of the chain alone:

1. ``card``: the card matches the repository at its freeze commit;
2. ``attestation``: the run folder holds its attestation, two lines as prereg frames them;
3. ``source-commit``: line 1 names the approval commit C by its full id, in the
   repository, after the card's freeze commit; every role-file change since the freeze was
   signed by an approver;
4. ``runner-signatures``: each line is signed by a key of the runners file at C;
5. ``statements``: prereg's statements, for this run id;
6. ``subjects``: every file of the run folder is a subject with its digest, and every
   subject a file;
7. ``approval-signature``: C is signed by an approver (the gate's condition
   approval-signature and the audit's check_approval_signature, one function:
   :func:`prereg.proof.commits.approval_problems`, trusting the card here);
8. ``approval-record``: C adds exactly the approval record, whose digest the statement,
   ``approval.json`` and ``start.json`` carry; it is for this run and stage, its anchor is
   C's parent and its plan the one attested and registered;
9. ``witness``: the witness the card registers holds this start record
   (:func:`witness_disagrees`, the audit's check_witness too);
10. ``time``: with a timestamp authority on the card, the three timestamps hold in order
    (:mod:`prereg.proof.timestamp`);
11. ``refs``: git's records of the start, the attestation and its timestamp are the folder's
    (the audit's check_refs and check_attestation judge them from the repository);
12. ``required-runs``: each required run verifies too;
13. ``audit`` (with ``require_audit``): an auditor signed a passing, replayed verification
    summary of this attestation (:func:`prereg.proof.vsa.problems`; the gate and the report
    take the same summary through :func:`prereg.proof.vsa.replayed_verdict`).

Three outcomes: verified; refused, with every reason found; could not verify, only when
evidence cannot be obtained (no cryptography library, a witness that does not answer).
Evidence that exists and belongs to another run is a refusal.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

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
from prereg.records import (
    APPROVAL_COPY,
    ATTESTATION,
    ATTESTATION_TIMESTAMP,
    START_RECORD,
    approval_record,
    documents,
    formats,
    ledger,
)
from prereg.records.formats import (
    Approval,
    BuildDefinition,
    Card,
    Provenance,
    Read,
    Start,
    Statement,
)
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


@dataclass(frozen=True)
class Found:
    """What one check finds: reasons to refuse, evidence it could not obtain, what holds."""

    problems: tuple[str, ...] = ()
    could_not: tuple[str, ...] = ()
    said: tuple[str, ...] = ()


def _refused(*problems: str) -> Found:
    return Found(problems=problems)


@dataclass(frozen=True)
class Signed:
    """A line of the attestation once its signatures were checked: the statement, or why not."""

    statement: Any = None  # a Provenance (line 1) or a Statement (line 2)
    problem: str | None = None
    could_not: str | None = None
    said: str | None = None


@dataclass(frozen=True)
class Chain:
    """Everything the checks judge, read once by :func:`gather` (a field is None when an
    earlier link is missing, so that nothing is judged twice against a broken chain)."""

    run_id: str
    card: Card
    card_problems: tuple[str, ...]
    attestation: bytes | None = None  # None: the run folder holds none
    framing_problem: str | None = None  # the attestation is not two lines as prereg writes them
    commit: str | None = None  # C, once it is a full id of a commit after the freeze
    commit_problem: str | None = None
    role_problems: tuple[str, ...] = ()  # role-file changes from the freeze to C
    runners_problem: str | None = None
    signed: tuple[Signed, ...] = ()  # each line, once C's runners judged its signatures
    present: tuple[dict, ...] | None = None  # the run folder's subjects now
    present_problem: str | None = None
    signature_problems: tuple[str, ...] = ()  # of the approval commit C
    beyond: tuple[str, ...] = ()  # what C changes other than adding the record
    record: Read[Approval] | None = None  # the approval record at C
    copy_sha256: str | None = None  # approval.json's
    start: Read[Start] | None = None  # start.json
    read_problem: str | None = None  # the record or start.json cannot be read
    parent: str | None = None  # C's parent
    plan_sha256_at_commit: str | None = None
    witness_found: tuple[str, ...] | None = None  # witness_disagrees; None: not asked or no answer
    commit_object: bytes | None = None  # C as git stores it (what the start's token covers)
    committed_at: Any = None  # C's committer date
    attestation_timestamp: bytes | None = None
    recorded: tuple[tuple[str, str, bytes | None, bytes | None], ...] = ()  # ref, name, git, folder
    required: tuple[tuple[str, str | None, Verdict | None], ...] = ()  # id, problem, verdict
    audit: tuple[tuple[str, ...], str] | None = None  # vsa.problems; None: not required

    @property
    def provenance(self) -> Provenance | None:
        return self.signed[0].statement if len(self.signed) == 2 else None

    @property
    def result(self) -> Statement | None:
        return self.signed[1].statement if len(self.signed) == 2 else None

    @property
    def build(self) -> BuildDefinition | None:
        return self.provenance.predicate.build if self.provenance is not None else None

    @property
    def statements_hold(self) -> bool:
        return self.provenance is not None and self.result is not None


Check = Callable[[Chain], Found]


@dataclass(frozen=True)
class Judges:
    """The gate condition and the audit checks that judge the fact a verify check judges
    (None and () where none does: the card, trusted time and the signed audit are verify's
    alone)."""

    check: str
    gate: str | None = None
    audit: tuple[str, ...] = ()


def judges(check: str, *, gate: str | None = None, audit: tuple[str, ...] = ()):
    def mark(function: Check) -> Check:
        function.judges = Judges(check, gate, audit)  # type: ignore[attr-defined]
        return function

    return mark


# -- the checks ----------------------------------------------------------------------------------


@judges("card")
def check_card(c: Chain) -> Found:
    return Found(problems=c.card_problems)


@judges("attestation", audit=("check_attestation",))
def check_attestation(c: Chain) -> Found:
    if c.card_problems:
        return Found()
    if c.attestation is None:
        return _refused(f"{c.run_id}/{ATTESTATION} does not exist: the run wrote no attestation")
    if c.framing_problem:
        return _refused(c.framing_problem)
    return Found()


@judges("source-commit", audit=("check_history",))
def check_source_commit(c: Chain) -> Found:
    problems = ((c.commit_problem,) if c.commit_problem else ()) + c.role_problems
    return Found(problems=problems + ((c.runners_problem,) if c.runners_problem else ()))


@judges("runner-signatures", audit=("check_attestation",))
def check_runner_signatures(c: Chain) -> Found:
    return Found(
        problems=tuple(s.problem for s in c.signed if s.problem),
        could_not=tuple(s.could_not for s in c.signed if s.could_not),
        said=tuple(s.said for s in c.signed if s.said),
    )


@judges("statements", audit=("check_attestation",))
def check_statements(c: Chain) -> Found:
    if not c.statements_hold:
        return Found()
    provenance, result, run_id, build = c.provenance, c.result, c.run_id, c.build
    problems = []
    if provenance.type != STATEMENT_TYPE or result.type != STATEMENT_TYPE:
        problems.append(f"a statement's _type is not {STATEMENT_TYPE}")
    if provenance.predicate_type != PROVENANCE:
        problems.append(f"line 1's predicateType is not {PROVENANCE}")
    if result.predicate_type != TEST_RESULT:
        problems.append(f"line 2's predicateType is not {TEST_RESULT}")
    if build.build_type != BUILD_TYPE:
        problems.append(f"line 1's buildType is not {BUILD_TYPE}")
    if sorted(build.external) != sorted(EXTERNAL_PARAMETERS):
        problems.append(
            f"line 1's externalParameters hold {sorted(build.external)}, not "
            f"{list(EXTERNAL_PARAMETERS)}"
        )
    invocation, named_run = provenance.predicate.run.metadata.invocation_id, build.run_id
    if named_run != run_id or invocation != run_id:
        problems.append(
            f"the statement is for run {named_run!r} (invocation {invocation!r}), "
            f"not for {run_id!r}: an attestation of another run"
        )
    if list(result.subject) != [{"name": "source", "digest": {"gitCommit": c.commit}}]:
        problems.append("line 2's subject is not the source commit line 1 names")
    return _refused(*problems)


@judges("subjects", audit=("check_files", "check_attestation"))
def check_subjects(c: Chain) -> Found:
    if not c.statements_hold:
        return Found()
    if c.present_problem:
        return _refused(c.present_problem)
    attested = {s.get("name"): s.get("digest") for s in c.provenance.subject}
    here = {s["name"]: s["digest"] for s in c.present}
    problems = []
    for name in sorted(set(attested) | set(here)):
        if name not in here:
            problems.append(f"{c.run_id}/{name} is attested and missing")
        elif name not in attested:
            problems.append(f"{c.run_id}/{name} is not attested: a file added after the run")
        elif attested[name] != here[name]:
            problems.append(f"{c.run_id}/{name} changed after it was attested")
    return (
        Found(problems=tuple(problems))
        if problems
        else Found(said=(f"{len(here)} file(s) of {c.run_id} as attested",))
    )


@judges("approval-signature", gate="approval-signature", audit=("check_approval_signature",))
def check_approval_signature(c: Chain) -> Found:
    if not c.statements_hold or c.commit is None:
        return Found()
    if c.signature_problems:
        return Found(problems=c.signature_problems)
    return Found(said=(f"approval {c.commit[:12]} signed by an approver",))


@judges("approval-record", gate="clean-source", audit=("check_committed", "check_against_start"))
def check_approval_record(c: Chain) -> Found:
    if not c.statements_hold or c.commit is None:
        return Found()
    record_rel = approval_record(c.run_id)
    if c.beyond:
        return _refused(
            f"the approval commit {c.commit[:12]} does more than add {record_rel}: "
            + "; ".join(c.beyond[:6])
        )
    if c.read_problem:
        return _refused(c.read_problem)
    if c.record is None or c.start is None:  # not gathered
        return Found()
    record, start, commit, build = c.record.value, c.start.value, c.commit, c.build
    problems = []
    if build.digest(record_rel).get("sha256") != c.record.sha256:
        problems.append(f"the attested approval record is not {record_rel} at {commit[:12]}")
    if c.copy_sha256 != c.record.sha256:
        problems.append(f"{c.run_id}/{APPROVAL_COPY} is not the approval record at {commit[:12]}")
    if start.approval_sha256 != c.record.sha256 or start.source_commit != commit:
        problems.append(f"{c.run_id}/{START_RECORD} names another approval or commit")
    if record.run_id != c.run_id:
        problems.append(f"the approval record is for run {record.run_id!r}")
    if record.stage != build.stage or start.stage != build.stage:
        problems.append(f"the approval record is for stage {record.stage!r}, not {build.stage!r}")
    if record.source_anchor != c.parent:
        problems.append("the approval record's source_anchor is not the approval commit's parent")
    plan_path, plan_sha = record.plan.path, record.plan.sha256
    if not (plan_sha == c.plan_sha256_at_commit == build.digest(plan_path).get("sha256")):
        problems.append(
            f"the plan {plan_path} at {commit[:12]} is not the plan approved and attested"
        )
    if c.card.plans.get(plan_path) != plan_sha:
        problems.append(
            f"the plan {plan_path} the run approved is not the plan the card registers: a plan "
            "changed after registration needs a new card"
        )
    return _refused(*problems) if problems else Found(said=("the plan as registered",))


def _record_value(c: Chain) -> Approval | None:
    gathered = c.record is not None and c.start is not None and c.read_problem is None
    return c.record.value if gathered else None


@judges("witness", gate="witness", audit=("check_witness",))
def check_witness(c: Chain) -> Found:
    record = _record_value(c)
    if record is None or not c.statements_hold:
        return Found()
    url = record.witness.url if record.witness else None
    if c.card.witness and url != c.card.witness:
        return _refused(
            f"the card registers the witness {c.card.witness} and the approval names "
            f"{url or 'none'}: the witness was skipped"
        )
    if not url:
        return Found()
    if c.witness_found is None:
        return Found(could_not=(f"the witness {ledger.shown_url(url)} cannot be asked",))
    if c.witness_found:
        return Found(problems=c.witness_found)
    return Found(said=(f"the witness {ledger.shown_url(url)} holds this start of {c.run_id}",))


@judges("time")
def check_time(c: Chain) -> Found:
    """The three timestamps of :mod:`prereg.proof.timestamp` hold under the card's authority,
    in order with the approval commit's date."""
    record = _record_value(c)
    if record is None or not c.statements_hold:
        return Found()
    authority, stamp = c.card.timestamp_authority, record.timestamp
    if not authority:
        if stamp:
            return Found(
                said=(("the run's timestamps are not checked: the card registers no timestamp "
                      "authority"),)
            )  # fmt: skip
        return Found()
    if not stamp or stamp.url != authority.url:
        return _refused(
            f"the card registers the timestamp authority {authority.url} and the approval "
            f"names {stamp.url if stamp else 'none'}: the timestamps were skipped"
        )
    if c.attestation_timestamp is None:
        return _refused(
            f"{c.run_id}/{ATTESTATION_TIMESTAMP} does not exist: the attestation "
            "was not timestamped"
        )
    what = ("approval record's", "run start's", "attestation's")
    try:
        tokens = (
            timestamp.decode(stamp.token, f"the approval record's timestamp of {c.run_id}"),
            timestamp.decode(
                c.start.value.approval_timestamp or None, f"{c.run_id}/{START_RECORD}'s timestamp"
            ),
            c.attestation_timestamp,
        )
        data = (
            timestamp.approval_data(c.run_id, record.source_anchor),
            c.commit_object,
            c.attestation,
        )
        times = [
            timestamp.verified_time(token, over, list(authority.roots), name)
            for token, over, name in zip(tokens, data, what)
        ]
    except timestamp.NoTimestamps as err:
        return Found(could_not=(str(err),))
    except (timestamp.TimestampProblem, ValueError, KeyError, TypeError) as err:
        return _refused(str(err))
    approved, started, attested = times
    order = timestamp.order_problems(approved, c.committed_at, started, attested)
    if order:
        return _refused(*order)
    return Found(
        said=(
            (
                f"by {authority.url}'s clock: approved between {approved:%Y-%m-%dT%H:%M:%SZ} and "
                f"{started:%Y-%m-%dT%H:%M:%SZ}, attested by {attested:%Y-%m-%dT%H:%M:%SZ}"
            ),
        )
    )


@judges("refs", audit=("check_refs", "check_attestation"))
def check_refs(c: Chain) -> Found:
    return _refused(
        *(
            f"{ref} records another {name} than {c.run_id}/{name}"
            for ref, name, recorded, here in c.recorded
            if recorded is not None and recorded != here
        )
    )


@judges("required-runs", audit=("check_required_runs",))
def check_required_runs(c: Chain) -> Found:
    problems, could_not, said = [], [], []
    for required, problem, inner in c.required:
        if problem:
            problems.append(problem)
        elif inner is not None:
            problems += [f"required run {required}: {p}" for p in inner.problems]
            could_not += inner.could_not
            if inner.code == VERIFIED:
                said.append(f"the required run {required} verifies too")
    return Found(tuple(problems), tuple(could_not), tuple(said))


@judges("audit")
def check_audit(c: Chain) -> Found:
    if c.audit is None or c.card_problems or c.attestation is None:
        return Found()
    wrong, said = c.audit
    return _refused(*wrong) if wrong else Found(said=(f"audit passed, {said}",))


CHECKS: tuple[Check, ...] = (
    check_card,
    check_attestation,
    check_source_commit,
    check_runner_signatures,
    check_statements,
    check_subjects,
    check_approval_signature,
    check_approval_record,
    check_witness,
    check_time,
    check_refs,
    check_required_runs,
    check_audit,
)


def judge(chain: Chain, checks: tuple[Check, ...] = CHECKS) -> Verdict:
    """Every check of ``checks`` over ``chain``, folded into one verdict."""
    verdict = Verdict(chain.run_id)
    for check in checks:
        found = check(chain)
        verdict.problems += found.problems
        verdict.could_not += found.could_not
        verdict.said += found.said
    return verdict


# -- gathering -----------------------------------------------------------------------------------


def witness_disagrees(root: Path, url: str, run_id: str, start: bytes) -> list[str] | None:
    """What the witness at ``url`` says against the run's start record ``start``: it holds
    none, or another (a rerun); an option-like url is refused by its form and never handed
    to git; None when the witness cannot be asked."""
    shown = ledger.shown_url(url)
    if url.startswith("-"):  # as the plain commands refuse it
        return [f"the witness url {shown} looks like an option"]
    held, problem = ledger.witnessed_start(root, url, run_id)
    if problem is not None:
        return None
    if held is None:
        return [f"the witness {shown} holds no start record of run {run_id}: it was never pushed"]
    if held != gitrepo.object_id("blob", start, gitrepo.object_format(root)):
        return [f"the witness {shown} holds another start of run {run_id} (a rerun)"]
    return []


def _source_commit(
    root: Path, envelopes: tuple[dict, ...], freeze: str
) -> tuple[str | None, str | None]:
    """(C, None) from line 1's statement, read before its signature is checked (which runners
    file judges it depends on C), or (None, why not)."""
    try:
        unverified = formats.loads(
            dsse.payload_of(envelopes[0]), Provenance, "attestation line 1's statement"
        ).value
        commit = unverified.predicate.build.digest("source").get("gitCommit")
    except documents.NotJson as err:
        return None, str(err)
    except (dsse.SignatureProblem, formats.NotARecord, AttributeError):
        commit = None
    if commit is None:
        return None, "attestation line 1 names no source commit"
    if not gitrepo.is_object_id(commit):
        return None, f"attestation line 1 names the source commit {commit!r}, not a full commit id"
    if not gitrepo.commit_exists(root, commit):
        return None, f"the attested source commit {commit[:12]} is not in the repository"
    if not gitrepo.is_ancestor(root, freeze, commit):
        return None, (
            f"the run's approval commit {commit[:12]} does not follow the card's freeze commit "
            f"{freeze[:12]}: the run is not of this registration (made before it, or elsewhere)"
        )
    return commit, None


# The class each line's statement is read as, and what it must be.
LINES = ((Provenance, "a SLSA provenance statement of prereg's"), (Statement, "a statement"))


def _signed(envelope: dict, signers, number: int) -> Signed:
    try:
        payload, who = dsse.verify(envelope, signers, RUN_NAMESPACE)
    except dsse.NoCrypto as err:
        return Signed(None, could_not=str(err))
    except dsse.SignatureProblem as err:
        return Signed(None, problem=f"attestation line {number}: {err}")
    said = f"attestation line {number} signed by " + ", ".join(
        f"{','.join(s.principals)} ({s.key.fingerprint})" for s in who
    )
    kind, what = LINES[number - 1]
    try:
        statement = formats.loads(payload, kind, f"attestation line {number}'s statement").value
    except documents.NotJson as err:
        return Signed(None, problem=str(err), said=said)
    except formats.NotARecord as err:
        return Signed(None, problem=f"line {number} is not {what}: {err}", said=said)
    return Signed(statement, said=said)


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def gather(
    root: Path,
    run_dir: Path,
    card: Card,
    *,
    require_audit: bool = False,
    seen: frozenset = frozenset(),
) -> Chain:
    """The chain of the run in ``run_dir`` (a folder of ``root``'s ``runs/``) as the checks
    judge it, against ``card``; each link read once, and none past a broken one."""
    root, run_dir = Path(root), Path(run_dir)
    run_id, folder, freeze = run_dir.name, RunFolder(run_dir), card.freeze_commit
    chain = Chain(run_id, card, tuple(cards.problems(root, card)))
    if chain.card_problems:
        return chain
    attestation = _read(folder.attestation)
    chain = replace(chain, attestation=attestation)
    if attestation is None:
        return chain
    try:
        envelopes = tuple(dsse.parse_lines(attestation, str(folder.attestation)))
    except dsse.SignatureProblem as err:
        return replace(chain, framing_problem=str(err))
    if len(envelopes) != 2:
        return replace(chain, framing_problem=f"the attestation has {len(envelopes)} lines, not 2")
    commit, problem = _source_commit(root, envelopes, freeze)
    chain = replace(chain, commit=commit, commit_problem=problem)
    if commit is None:
        return chain
    chain = replace(chain, role_problems=tuple(role_history_problems(root, freeze, commit)))
    if chain.role_problems:
        return chain
    try:
        signers = signers_of(role_file(root, commit, RUNNERS), RUNNERS)
    except KeyProblem as err:
        return replace(chain, runners_problem=str(err))
    chain = replace(chain, signed=tuple(_signed(e, signers, n) for n, e in enumerate(envelopes, 1)))
    if not chain.statements_hold:
        return chain
    try:
        chain = replace(chain, present=tuple(subjects(folder.folder)))
    except StatementProblem as err:
        chain = replace(chain, present_problem=str(err))
    chain = _approval(chain, root, folder)
    recorded = tuple(
        (ref, path.name, ledger.read(root, ref), _read(path))
        for ref, path in (
            (ledger.start_ref(run_id), folder.start),
            (ledger.attestation_ref(run_id), folder.attestation),
            (ledger.attestation_timestamp_ref(run_id), folder.attestation_timestamp),
        )
    )
    chain = replace(
        chain,
        recorded=recorded,
        attestation_timestamp=_read(folder.attestation_timestamp),
        required=_required(root, run_dir, chain.build, card, seen | {run_id}),
    )
    if require_audit:
        wrong, said = vsa.problems(root, run_id, attestation, freeze)
        chain = replace(chain, audit=(tuple(wrong), said))
    return chain


def _approval(chain: Chain, root: Path, folder: RunFolder) -> Chain:
    """``chain`` with the approval commit's facts: its signature, what it changes, the record
    it adds, the run's start and approval copy, the plan at C and the witness's answer."""
    run_id, commit, card = chain.run_id, chain.commit, chain.card
    record_rel = approval_record(run_id)
    chain = replace(
        chain,
        signature_problems=tuple(approval_problems(root, commit, trusted=card.freeze_commit)),
        beyond=tuple(beyond_adding(root, commit, record_rel)),
        parent=gitrepo.git(root, "rev-parse", f"{commit}^").strip(),
        commit_object=gitrepo.read_object(root, commit)[1],
        committed_at=committed_at(root, commit),
    )
    if chain.beyond:
        return chain
    try:
        record = formats.loads(
            gitrepo.show_bytes(root, commit, record_rel), Approval, f"{record_rel} at {commit[:12]}"
        )
        start = formats.load(folder.start, Start, f"{run_id}/{START_RECORD}")
    except (documents.NotJson, formats.NotARecord) as err:
        return replace(chain, read_problem=str(err))
    except (OSError, gitrepo.GitError):
        return replace(
            chain, read_problem=f"{record_rel} or {run_id}/{START_RECORD} cannot be read"
        )
    copy = folder.folder / APPROVAL_COPY
    try:
        plan = hashlib.sha256(gitrepo.show_bytes(root, commit, record.value.plan.path)).hexdigest()
    except gitrepo.GitError:
        plan = None
    chain = replace(
        chain,
        record=record,
        start=start,
        copy_sha256=sha256_file(copy) if copy.is_file() else None,
        plan_sha256_at_commit=plan,
    )
    witness = record.value.witness
    if witness and not (card.witness and witness.url != card.witness):
        found = witness_disagrees(root, witness.url, run_id, start.data)
        chain = replace(chain, witness_found=None if found is None else tuple(found))
    return chain


def _required(
    root: Path, run_dir: Path, build: BuildDefinition, card: Card, seen: frozenset
) -> tuple:
    """Each run the statement names as required: (its id, why it is not the one attested,
    its verdict)."""
    found = []
    for dep in build.dependencies:
        if not (dep.name or "").startswith("run:"):
            continue
        required = dep.name.rsplit("/", 1)[-1]
        if required in seen:
            found.append((required, f"run {required} requires itself", None))
            continue
        other = run_dir.parent / required
        manifest = RunFolder(other).manifest
        if not manifest.is_file() or sha256_file(manifest) != (dep.digest or {}).get("sha256"):
            problem = f"the required run {required}'s manifest is not the one attested"
            found.append((required, problem, None))
            continue
        found.append((required, None, verify_run(root, other, card, _seen=seen)))
    return tuple(found)


def verify_run(
    root: Path,
    run_dir: Path,
    card: Card,
    *,
    require_audit: bool = False,
    _seen: frozenset = frozenset(),
) -> Verdict:
    """Every check of :data:`CHECKS` for the run in ``run_dir`` (a folder of ``root``'s
    ``runs/``), against ``card``."""
    return judge(gather(root, run_dir, card, require_audit=require_audit, seen=_seen))
