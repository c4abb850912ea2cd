"""The gate: the conditions under which a research run may start.

The facts are gathered once (:func:`gather`: git, hashes, the environment, the
ledger in git); each condition is a small function of those facts that returns the
refusals it finds, or nothing. ``prereg approve`` checks :data:`APPROVE_CONDITIONS`
on a draft record before writing it; the controller's ``pytest_sessionstart`` checks
:data:`RUN_CONDITIONS` before any item runs and before the run id is spent. Because
the conditions take facts, not a repository, they are tested without git.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import prereg
from prereg.base import gitrepo, provenance
from prereg.base.hashing import canonical_json, sha256_file
from prereg.base.typed_settings import parse_as, to_json
from prereg.decisions import bindings
from prereg.evidence import envlock, execution
from prereg.kinds import registry
from prereg.kinds.plans import baseline_problems, load_plan, signing_required, validate_stage
from prereg.kinds.stages import BUILT_IN_KINDS, PLAIN, load_kind
from prereg.proof import commits
from prereg.records import formats, ledger
from prereg.records import snapshot as snapshots
from prereg.records.runs import has_started


@dataclass(frozen=True)
class Refusal:
    condition: str
    message: str

    def __str__(self) -> str:
        return f"[{self.condition}] {self.message}"


@dataclass(frozen=True)
class Facts:
    """Everything the conditions look at; gathered by :func:`gather`, or made by hand in tests."""

    stage: str  # the stage asked for (command line, or prereg approve --stage)
    record: formats.Approval  # the approval record (a draft at approve time)
    record_rel: str  # plans/approvals/<run-id>.json
    run_id_asked: str | None = None  # --run-id on the command line
    record_bytes: bytes | None = None  # the record file's bytes (None: a draft)
    committed_record: bytes | None = None  # the record's blob at HEAD (None: not committed)
    plan_sha256: str | None = None  # the plan file now (None: missing)
    plan_problem: str | None = None  # the plan does not load or validate
    baseline_sha256: str | None = None  # plans/BASELINE.json now (None: missing)
    baseline_problems: tuple[str, ...] = ()
    dirty: tuple[str, ...] = ()
    history_problems: tuple[str, ...] = ()  # replace refs, grafts, a shallow clone
    head: str = ""
    anchor_is_ancestor: bool = True
    changed_since_anchor: tuple[str, ...] = ()
    package_in_use: str = ""
    package_of_checkout: str | None = None  # lib/prereg of the checkout (None: none there)
    spent_folder: bool = False  # runs/<run-id>/start.json exists
    spent_in_git: bool = False  # refs/prereg/runs/<run-id>/start exists
    single_attempt: bool = False
    attempt_used_by: str | None = None  # run id holding refs/prereg/single-attempt/<stage>
    remote_ledgers: tuple = ()  # ledger.RemoteLedger of each git remote (() when none asked)
    other_approvals_of_stage: tuple[str, ...] = ()  # run ids (single-attempt check at approve)
    namespace_clash: tuple[str, ...] = ()  # other stages' approvals using this seed namespace
    deviations_now: tuple[dict, ...] = ()
    execution_problems: tuple[str, ...] = ()
    input_problems: tuple[str, ...] = ()
    extension_problems: tuple[str, ...] = ()  # installed extensions differing from the approval
    # A hermetic session: the tree id of the folder its code runs from, recomputed from the
    # bytes on disk, and the tree of the commit it must equal (None: not a session).
    snapshot_tree: str | None = None
    source_tree: str | None = None
    environment_lock_now: dict | None = None  # envlock.lock() at the gate (None: not gathered)
    module_missing: str | None = None  # the stage's module path when no such file exists
    irregular: tuple[str, ...] = ()  # why HEAD cannot be snapshot: links, submodules
    # why the approval commit is not signed by an approver, when the stage requires it
    # (prereg.proof.commits.signing_problems; () when it need not be)
    signature_problems: tuple[str, ...] = ()
    # why the witness the approval names cannot take the run's start (prereg.proof.witness)
    witness_problems: tuple[str, ...] = ()

    @property
    def run_id(self) -> str:
        return self.record.run_id


Condition = Callable[[Facts], "list[Refusal]"]


@dataclass(frozen=True)
class Audited:
    """The refusal a gate condition gives, and the checks of :data:`prereg.decisions.audit.CHECKS`
    that judge the same condition again from the run's records, or why none can."""

    refusal: str
    checks: tuple[str, ...]
    why_not: str = ""


def audited(refusal: str, *checks: str, why_not: str = "") -> Callable[[Condition], Condition]:
    """Mark a condition with its :class:`Audited` (``condition.audited``); docs/reference/
    gate.md's table names the same checks, and checks/gate/test_gate.py holds all three
    together."""

    def mark(condition: Condition) -> Condition:
        condition.audited = Audited(refusal, checks, why_not)  # type: ignore[attr-defined]
        return condition

    return mark


@audited("plan-hash", "check_committed")
def plan_hash(f: Facts) -> list[Refusal]:
    path, bound = f.record.plan.path, f.record.plan.sha256
    if f.plan_sha256 is None:
        return [Refusal("plan-hash", f"the approved plan {path} does not exist")]
    if f.plan_sha256 != bound:
        return [
            Refusal(
                "plan-hash",
                f"{path} hashes {f.plan_sha256}, the approval binds {bound}; restore the approved "
                "plan, or approve the edited plan under a new run id",
            )
        ]
    if f.plan_problem:
        return [Refusal("plan-hash", f"the approved plan does not validate: {f.plan_problem}")]
    return []


@audited("baseline", "check_committed")
def baseline(f: Facts) -> list[Refusal]:
    problems = list(f.baseline_problems)
    bound = f.record.baseline.sha256
    if f.baseline_sha256 is not None and f.baseline_sha256 != bound:
        problems.insert(
            0, f"{f.record.baseline.path} hashes {f.baseline_sha256}, the approval binds {bound}"
        )
    if not problems:
        return []
    return [
        Refusal(
            "baseline",
            "; ".join(problems) + ". Historical files are immutable: restore them from git",
        )
    ]


@audited("clean-source", "check_execution")
def clean_tree(f: Facts) -> list[Refusal]:
    if not f.dirty:
        return []
    return [
        Refusal(
            "clean-source",
            f"the working tree is not clean: {', '.join(f.dirty[:8])}; commit or remove these "
            f"changes (the approval record {f.record_rel} itself must be committed)",
        )
    ]


@audited("git-history", "check_history")
def git_history(f: Facts) -> list[Refusal]:
    """git would show others a history other than the recorded objects."""
    return [Refusal("git-history", problem) for problem in f.history_problems]


@audited("clean-source", "check_committed")
def approved_source(f: Facts) -> list[Refusal]:
    anchor = f.record.source_anchor
    if not f.anchor_is_ancestor:
        return [
            Refusal(
                "clean-source",
                f"the approval's source anchor {anchor[:12]} is not an ancestor of HEAD {f.head[:12]}",
            )
        ]
    beyond = [p for p in f.changed_since_anchor if p != f.record_rel]
    if not beyond:
        return []
    return [
        Refusal(
            "clean-source",
            f"HEAD {f.head[:12]} differs from the approved anchor {anchor[:12]} beyond the approval "
            f"record: {', '.join(beyond[:8])}; only {f.record_rel} may differ. Approve the new "
            "source under a new run id, or check out the approved source",
        )
    ]


@audited("clean-source", "check_execution")
def own_package(f: Facts) -> list[Refusal]:
    if f.package_of_checkout is None or f.package_in_use == f.package_of_checkout:
        return []
    return [
        Refusal(
            "clean-source",
            f"the prereg package in use is {f.package_in_use}, not this checkout's "
            f"{f.package_of_checkout}: the approved source would not be what runs. Install this "
            "checkout (pip install -e .) or put its lib/ first on PYTHONPATH",
        )
    ]


@audited("clean-source", "check_committed")
def record_committed(f: Facts) -> list[Refusal]:
    if f.committed_record is None:
        return [
            Refusal(
                "clean-source",
                f"the approval record {f.record_rel} is not committed at HEAD {f.head[:12]} (an "
                "ignored or untracked record does not count): git add it and commit",
            )
        ]
    if f.record_bytes is not None and f.committed_record != f.record_bytes:
        return [
            Refusal(
                "clean-source",
                f"the approval record {f.record_rel} differs from its committed blob at HEAD "
                f"{f.head[:12]}: restore it (git checkout -- {f.record_rel})",
            )
        ]
    return []


@audited("stage-and-run-id", "check_against_approval", "check_run_id")
def stage_and_run_id(f: Facts) -> list[Refusal]:
    asked_run = f.run_id_asked
    if f.record.stage == f.stage and (asked_run is None or asked_run == f.run_id):
        return []
    return [
        Refusal(
            "stage-and-run-id",
            f"the approval {f.record_rel} is for stage {f.record.stage!r}, run {f.run_id!r}; "
            f"the command line asks for stage {f.stage!r}"
            + (f", run {asked_run!r}" if asked_run else ""),
        )
    ]


@audited("run-id-unused", "check_refs")
def run_id_unused(f: Facts) -> list[Refusal]:
    if f.spent_in_git:
        return [
            Refusal(
                "run-id-unused",
                f"run id {f.run_id} has been spent (git records its start in "
                f"{ledger.start_ref(f.run_id)}): one approval, one run; no retry. Approve a new run id",
            )
        ]
    spent_there = [r.remote for r in f.remote_ledgers if r.spent]
    if spent_there:
        return [
            Refusal(
                "run-id-unused",
                f"run id {f.run_id} has been spent: remote {', '.join(spent_there)} records its "
                f"start ({ledger.start_ref(f.run_id)}), which a clone does not fetch. One "
                "approval, one run; no retry. Approve a new run id; to see that run's record "
                f"here: git fetch {spent_there[0]} 'refs/prereg/*:refs/prereg/*'",
            )
        ]
    if f.spent_folder:
        return [
            Refusal(
                "run-id-unused",
                f"run id {f.run_id} has been spent (runs/{f.run_id}/start.json exists): one "
                "approval, one run; no retry. Approve a new run id",
            )
        ]
    return []


@audited("single-attempt", "check_single_attempt")
def single_attempt(f: Facts) -> list[Refusal]:
    if not f.single_attempt:
        return []
    if f.attempt_used_by is not None and f.attempt_used_by != f.run_id:
        return [
            Refusal(
                "single-attempt",
                f"stage {f.stage} allows a single attempt (no retry, extension or seed "
                f"replacement) and git records that run {f.attempt_used_by} used it "
                f"({ledger.attempt_ref(f.stage)})",
            )
        ]
    used_there = [r.remote for r in f.remote_ledgers if r.attempt_used]
    if used_there:
        return [
            Refusal(
                "single-attempt",
                f"stage {f.stage} allows a single attempt (no retry, extension or seed "
                f"replacement) and remote {', '.join(used_there)} records that another run used "
                f"it ({ledger.attempt_ref(f.stage)}); to see which: git fetch {used_there[0]} "
                "'refs/prereg/*:refs/prereg/*'",
            )
        ]
    if f.other_approvals_of_stage:
        return [
            Refusal(
                "single-attempt",
                f"stage {f.stage} allows a single attempt (no retry, extension or seed "
                f"replacement) and was already approved as {list(f.other_approvals_of_stage)}",
            )
        ]
    return []


@audited("approval-signature", "check_approval_signature")
def approval_signature(f: Facts) -> list[Refusal]:
    """A stage whose plan requires it (:func:`prereg.kinds.plans.signing_required`) runs only
    from an approval commit signed by a key of ``.prereg/approvers``."""
    return [Refusal("approval-signature", p) for p in f.signature_problems]


@audited("witness", "check_witness")
def witness(f: Facts) -> list[Refusal]:
    """An approval that names a witness runs only when the witness answers and records no
    start of the run id: it takes the start record before any item runs."""
    return [Refusal("witness", p) for p in f.witness_problems]


@audited(
    "seed-namespace",
    why_not="judged among the approvals when one is written; a run records its namespace "
    "(check_against_approval) and its replay draws every seed from it again",
)
def seed_namespace(f: Facts) -> list[Refusal]:
    if not f.namespace_clash:
        return []
    return [
        Refusal(
            "seed-namespace",
            f"seed namespace {f.record.seed_namespace!r} is already used by "
            f"{list(f.namespace_clash)}; a stage never reuses another stage's datasets or "
            "weights: give this stage a fresh namespace in the plan",
        )
    ]


@audited("environment", "check_against_approval")
def environment(f: Facts) -> list[Refusal]:
    named = {canonical_json(d) for d in f.record.deviations}
    unnamed = [d for d in f.deviations_now if canonical_json(d) not in named]
    if not unnamed:
        return []
    return [
        Refusal(
            "environment",
            "deviations from the plan's pins not named in the approval: "
            f"{provenance.describe(unnamed)}; approve again "
            "with --accept-deviations on this machine so they are named",
        )
    ]


@audited("execution", "check_execution")
def executed_code(f: Facts) -> list[Refusal]:
    return [Refusal("execution", problem) for problem in f.execution_problems]


@audited("extensions", "check_extensions", "check_unbound_kind")
def extensions(f: Facts) -> list[Refusal]:
    return [Refusal("extensions", problem) for problem in f.extension_problems]


@audited("environment-lock", "check_environment_lock")
def environment_lock(f: Facts) -> list[Refusal]:
    """Nothing installed after approval runs: the interpreter and installed distributions
    equal the approval's environment_lock (prereg.evidence.envlock)."""
    if f.environment_lock_now is None:
        return []
    bound = f.record.environment_lock
    problems = envlock.lock_problems(to_json(bound) if bound else None, f.environment_lock_now)
    return [Refusal("environment-lock", p) for p in problems]


@audited(
    "stage-module",
    why_not="a module the run could not collect gives it no items: the audit judges the "
    "items the run recorded against the stage's (check_status)",
)
def stage_module(f: Facts) -> list[Refusal]:
    if f.module_missing is None:
        return []
    return [
        Refusal(
            "stage-module",
            f"the plan's stage module {f.module_missing} is not a file of the approved source: "
            "fix the stage's module path in the plan, or commit the module",
        )
    ]


@audited("hermetic", "check_execution", "check_workers")
def hermetic(f: Facts) -> list[Refusal]:
    """A session's code runs from a snapshot whose tree is the approved commit's
    (:func:`prereg.records.snapshot.tree_mismatch`)."""
    if f.snapshot_tree is None:
        return []
    why = snapshots.tree_mismatch(f.snapshot_tree, f.source_tree)
    return [Refusal("hermetic", why)] if why else []


@audited("hermetic", "check_execution")
def regular_files(f: Facts) -> list[Refusal]:
    """A run executes a snapshot of the commit's regular files: a commit with a link or a
    submodule could never run, so it is refused at approval already."""
    return [Refusal("hermetic", why) for why in f.irregular]


@audited("inputs", "check_inputs", "check_required_runs")
def inputs(f: Facts) -> list[Refusal]:
    return input_refusals(f.input_problems)


def input_refusals(problems: Sequence[str]) -> list[Refusal]:
    """The inputs condition: the bound inputs, the required runs and the stage kind's own
    check (:attr:`Gathered.kind_check`) found no problem."""
    return [Refusal("inputs", "; ".join(problems))] if problems else []


RUN_CONDITIONS: tuple[Condition, ...] = (
    plan_hash,
    baseline,
    clean_tree,
    git_history,
    approved_source,
    own_package,
    record_committed,
    stage_and_run_id,
    approval_signature,
    run_id_unused,
    witness,
    single_attempt,
    environment,
    environment_lock,
    stage_module,
    regular_files,
    hermetic,
    executed_code,
    extensions,
    inputs,
)
APPROVE_CONDITIONS: tuple[Condition, ...] = (
    baseline,
    stage_module,
    regular_files,
    clean_tree,
    git_history,
    own_package,
    approval_signature,
    run_id_unused,
    witness,
    single_attempt,
    seed_namespace,
    executed_code,
    inputs,
)


@audited("whole-stage", "check_status")
def item_set(
    expected: list[str], about_to_run: list[str], changers: tuple[str, ...] = ()
) -> list[Refusal]:
    """The whole stage runs or nothing does: the items about to run are exactly the stage's
    (``expected``: what its module alone collects in a clean process), and there is at least
    one (a run of no item would spend the run id for nothing). ``changers`` names the
    conftest.py files and plugins loaded here whose hooks can change the collected items."""
    if not expected:
        return [
            Refusal(
                "whole-stage",
                "the stage has no items: its module collects none (is it the module the plan "
                "names, and does it parametrize its items from the plan?). Nothing was spent; "
                "fix the module or the plan, commit, and approve again",
            )
        ]
    missing = sorted(set(expected) - set(about_to_run))
    unexpected = sorted(set(about_to_run) - set(expected))
    if not missing and not unexpected and len(about_to_run) == len(expected):
        return []
    detail = "".join(
        f"; {label} ({len(ids)}): {', '.join(ids[:5])}{' ...' if len(ids) > 5 else ''}"
        for label, ids in (("missing", missing), ("unexpected", unexpected))
        if ids
    )
    hooks = (
        f" Collection hooks loaded here that can change the items: {', '.join(changers)}; a "
        "stage's items must come from its module alone (parametrize them there), so remove "
        "the hook or make it leave the stage's items alone, commit, and approve again."
        if changers
        else ""
    )
    return [
        Refusal(
            "whole-stage",
            f"{len(about_to_run)} item(s) would run, the stage has {len(expected)} (what its "
            f"module alone collects){detail}. A research stage runs whole: drop the options, "
            "PYTEST_ADDOPTS or plugins that select, ignore or skip items (-o, --ignore, "
            f"--sw-skip, a stepwise cache ...) and run again.{hooks}",
        )
    ]


def check(facts: Facts, conditions: tuple[Condition, ...] = RUN_CONDITIONS) -> list[Refusal]:
    return [refusal for condition in conditions for refusal in condition(facts)]


# -- gathering the facts -----------------------------------------------------------------------


@dataclass(frozen=True)
class Gathered:
    """The facts, and the plan they loaded (None when it does not load)."""

    facts: Facts
    plan: object = None
    # A session's recorded execution (prereg.evidence.execution.record), judged here and written
    # into the manifest as it is, so the audit judges the very record the gate judged.
    execution: dict | None = None
    # The environment the execution condition was judged against (prereg.evidence.execution).
    environment: execution.Environment | None = None
    # With ``defer_kind_check``: the stage kind's own check, left to the caller to run (it
    # returns problems of the inputs condition, :func:`input_refusals`); None when none is due.
    kind_check: Callable[[], list[str]] | None = None


def _unbound_kind(bound: dict, kind: str | None) -> list[str]:
    """The stage's kind, when an installed package provides it, must be bound by the approval."""
    if not kind or kind in BUILT_IN_KINDS or kind == PLAIN.name:
        return []
    return registry.unbound_problems(bound, registry.STAGE_KINDS, kind)


def _read_tree(root: Path, head: str) -> tuple[tuple[str, ...], ...]:
    """(history problems, dirty paths, irregular entries) of the checkout at ``head``; a
    corrupt object is a history problem (a refusal), never a crash."""
    try:
        history = tuple(gitrepo.history_problems(root))
        dirty = tuple(gitrepo.dirty_paths(root))
        irregular = tuple(
            snapshots.irregular_entry(rel, mode, head)
            for rel, mode in (gitrepo.irregular_entries(root, head) if head else ())
        )
    except gitrepo.GitError as err:
        return (f"git cannot read {root}'s objects intact: {err}",), (), ()
    return history, dirty, irregular


def _read_plan(plan_file: Path, stage: str) -> tuple[Any, str | None, str | None]:
    """(the plan, why it does not load, its SHA-256); the file missing gives three Nones."""
    if not plan_file.is_file():
        return None, None, None
    plan_sha = sha256_file(plan_file)
    try:
        plan = load_plan(plan_file)
        validate_stage(plan, stage)
    except (ValueError, LookupError) as err:
        return None, str(err), plan_sha
    return plan, None, plan_sha


def _kind_check(root: Path, plan, stage: str, record: dict) -> Callable[[], list[str]] | None:
    """The stage kind's own gate check, bound to this run (None: the kind has none)."""
    kind = load_kind(plan.stage(stage)["kind"])
    if kind.gate_check is None:
        return None
    return functools.partial(kind.gate_check, root, plan, stage, record)


def _committed(root: Path, head: str, rel: str) -> bytes | None:
    """The bytes HEAD holds at ``rel`` (None: it holds none)."""
    try:
        return gitrepo.show_bytes(root, head, rel)
    except gitrepo.GitError:
        return None


def witness_problems(root: Path, record: formats.Approval) -> list[str]:
    """Why the witness the approval names (if any) cannot take the run's start record."""
    if not record.witness:
        return []
    url, run_id = record.witness.url, record.run_id
    held, problem = ledger.witnessed_start(root, url, run_id)
    shown = ledger.shown_url(url)
    if problem is not None:
        return [
            (
                f"the approval names the witness {shown}, which cannot be asked ({problem}): a run "
                "whose approval names a witness starts only when the witness can take its start"
            )
        ]
    if held is not None:
        return [
            (
                f"the witness {shown} records a start of run {run_id} "
                f"({ledger.start_ref(run_id)}): one approval, one run; no retry. Approve "
                "a new run id"
            )
        ]
    return []


def gather(
    root: Path,
    record: dict,
    record_path: Path,
    *,
    stage: str,
    run_id_asked: str | None = None,
    plugins: list[tuple[str, object]] | None = None,
    at_approval: bool = False,
    approvals: Sequence = (),
    snapshot=None,
    session_follows: bool = False,
    defer_kind_check: bool = False,
    consult_remotes: bool = True,
) -> Gathered:
    """Read every fact the conditions need from the checkout, git and this process.

    ``approvals``: at approval, the checkout's approval records
    (:func:`prereg.decisions.approval.list_approvals`), for the single-attempt and seed-namespace
    conditions. ``snapshot`` (a :class:`prereg.records.snapshot.Snapshot`): this process's code runs
    from that folder, not from the checkout; the plan, the baseline's files and the code are
    read there, the approval, runs and git records in the checkout. ``session_follows``: this
    process is the launcher of a hermetic session, whose own gate judges the environment lock,
    the bytecode of the installed harness (:func:`prereg.evidence.execution.problems`), the stage
    kind's own check (``StageKind.gate_check``: E04 loads its embedding model for it), the
    required runs' replays, the bound inputs' hashes, the approval commit's signature and
    what the remotes and the witness record again, before anything is spent; the launcher
    leaves them to it, so each is judged once per run. ``defer_kind_check``: that kind's
    check is not run here but returned as :attr:`Gathered.kind_check`, for a session to run
    while its workers start and to judge before it spends the run id.
    ``consult_remotes``: ask every git remote whether it records the run id or the stage's
    single attempt (:func:`prereg.records.ledger.consult_remotes`)."""
    root = Path(root)
    record_rel = Path(record_path).relative_to(root).as_posix()
    head = gitrepo.head_commit(root)
    history, dirty, irregular = _read_tree(root, head)
    code = Path(snapshot.folder) if snapshot is not None else root
    environment = execution.Environment.read(code, snapshot)  # the checks and the record
    approval = parse_as(formats.Approval, record, path="")  # the schema's shape: it parses
    plan, plan_problem, plan_sha = _read_plan(code / approval.plan.path, stage)
    baseline_file = code / approval.baseline.path
    spec = plan.stage(stage) if plan is not None and stage in plan.stages else {}
    anchor = approval.source_anchor
    ancestor = gitrepo.commit_exists(root, anchor) and gitrepo.is_ancestor(root, anchor, head)

    own = code / "lib" / "prereg"
    run_id, namespace = approval.run_id, approval.seed_namespace

    problems: list[str] = []
    kind_check = None
    asks_others = consult_remotes and not session_follows
    if at_approval or plan is not None:
        problems = [] if session_follows else bindings.input_problems(to_json(approval.inputs))
        problems += bindings.dependency_problems(
            root,
            to_json(approval.requires),
            plan_sha256=approval.plan.sha256,
            replay=not session_follows,
        )
        if plan is not None and not problems and not session_follows:
            kind_check = _kind_check(root, plan, stage, record)
            if kind_check is not None and not defer_kind_check:
                problems += kind_check()
                kind_check = None
    deviations_now: list[dict] = []
    if plan is not None:
        deviations_now = provenance.deviations(
            plan.data["environment_pins"], provenance.pinned_environment()
        )
    committed = None if at_approval else _committed(root, head, record_rel)
    facts = Facts(
        stage=stage,
        record=approval,
        record_rel=record_rel,
        run_id_asked=run_id_asked,
        record_bytes=None if at_approval else Path(record_path).read_bytes(),
        committed_record=committed,
        plan_sha256=plan_sha,
        plan_problem=plan_problem,
        baseline_sha256=sha256_file(baseline_file) if baseline_file.is_file() else None,
        baseline_problems=tuple(baseline_problems(code)),
        dirty=dirty,
        history_problems=history,
        head=head,
        anchor_is_ancestor=ancestor,
        changed_since_anchor=tuple(gitrepo.changed_between(root, anchor, head)) if ancestor else (),
        package_in_use=str(Path(prereg.__file__).resolve().parent),
        package_of_checkout=str(own.resolve()) if own.is_dir() else None,
        spent_folder=has_started(root, run_id),
        spent_in_git=ledger.is_spent(root, run_id),
        single_attempt=bool(spec.get("single_attempt")),
        attempt_used_by=ledger.attempt_run_id(root, stage),
        remote_ledgers=ledger.consult_remotes(root, run_id, stage) if asks_others else (),
        other_approvals_of_stage=tuple(
            a.run_id for a in approvals if a.stage == stage and a.run_id != run_id
        ),
        namespace_clash=tuple(
            a.run_id
            for a in approvals
            if namespace is not None and a.record.seed_namespace == namespace and a.stage != stage
        ),
        deviations_now=tuple(deviations_now),
        execution_problems=tuple(
            execution.problems(
                code, plugins or [], env=environment, session_follows=session_follows
            )
        ),
        input_problems=tuple(problems),
        environment_lock_now=None if at_approval or session_follows else envlock.lock(),
        irregular=irregular,
        signature_problems=tuple(
            commits.signing_problems(root, head, at_approval=at_approval)
            if spec and signing_required(spec) and head and not session_follows
            else ()
        ),
        witness_problems=tuple(witness_problems(root, approval) if asks_others else ()),
        module_missing=(
            spec["module"] if spec.get("module") and not (code / spec["module"]).is_file() else None
        ),
        extension_problems=tuple(
            registry.binding_problems(
                approval.extensions or {},
                to_json(approval.environment_lock) if approval.environment_lock else None,
            )
            + _unbound_kind(approval.extensions or {}, spec.get("kind"))
        ),
    )
    executed = None
    if snapshot is not None:
        executed = execution.record(code, plugins or [], env=environment)
        recorded = execution.recorded_problems(
            executed, lambda rel: sha256_file(code / rel) if rel in snapshot.blobs else None
        )
        facts = replace(
            facts,
            snapshot_tree=snapshot.tree,
            source_tree=gitrepo.commit_tree(root, head),
            execution_problems=facts.execution_problems + tuple(recorded),
        )
    return Gathered(
        facts=facts, plan=plan, execution=executed, environment=environment, kind_check=kind_check
    )
