"""``prereg audit``: recompute every hash, cross-check every record, replay the stage.

A run leaves several records of itself: ``manifest.json``, ``start.json``, the approval
copy, ``items.jsonl``, ``junit.xml``, the item outputs, and in git the committed approval
and plan at the run's commit and the refs :mod:`prereg.records.ledger` created when the run
started and ended. The audit checks each against the others and against the bound
inputs, so a post-hoc change of any one of them is a finding naming the file and field.

The audit never raises: an unreadable or malformed record is a finding; what keeps the
audit from checking at all (not a git repository, git missing, the run's commit absent)
is a *blocker*, and the verdict is then "could not audit" unless findings were made.
Replay is the stage kind's: it regenerates data from seeds and recomputes analysis from
saved predictions, never training anything; it runs only for a complete run whose
records all agree, and the result says whether it ran.

The audit has the gate's shape: :func:`gather` reads the run folder, the records and what
git answers once, into a frozen :class:`Evidence`; each check in :data:`CHECKS` is a
function of that evidence returning its findings, and :func:`could_not_audit` returns
the blockers. Because the checks take evidence, not a repository, they are tested on
evidence made by hand as well as on real runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from prereg.base import gitrepo
from prereg.decisions import replay as replaying
from prereg.decisions.audit.checks import (
    CHECKS,
    check_execution,
    check_extensions,
    check_unbound_kind,
    check_workers,
    could_not_audit,
    recorded_extensions,
)
from prereg.decisions.audit.evidence import Evidence, gather
from prereg.decisions.manifest import describe
from prereg.proof.vsa import replayed_verdict
from prereg.records import (
    CLEAN,
    COMPLETE,
    COULD_NOT_AUDIT,
    FINDINGS,
    REHEARSAL_RECORD,
    START_RECORD,
    ledger,
    verdicts,
)
from prereg.records.runs import REHEARSAL_NOTE, RunFolder, is_rehearsal, valid_run_id

__all__ = [
    "CHECKS",
    "EXIT_CODES",
    "AuditResult",
    "Evidence",
    "audit_run",
    "audit_run_cached",
    "check_execution",
    "check_extensions",
    "check_unbound_kind",
    "check_workers",
    "could_not_audit",
    "describe_extensions",
    "gather",
    "recorded_extensions",
    "replay_stage",
]

EXIT_CODES = {CLEAN: 0, FINDINGS: 1, COULD_NOT_AUDIT: 3}


@dataclass(frozen=True, eq=False)
class AuditResult(Sequence):
    """The audit of one run: a sequence of problem sentences (empty: clean), and more.

    Iterating, ``len`` and truth see :attr:`findings` followed by one sentence per
    blocker, so a caller that only asks "any problem?" treats "could not audit" as not
    clean. ``replayed`` says whether the stage kind's replay ran in this audit;
    ``replay_defined`` is False when the run's stage kind defines none.
    """

    findings: tuple[str, ...] = ()
    blockers: tuple[str, ...] = ()
    replayed: bool = False
    replay_note: str = ""
    replay_defined: bool = True
    status: str | None = None  # the status the manifest claims, when it could be read
    # The installed extensions the run's controller loaded (manifest environment.extensions):
    # group -> name -> origin; None when the manifest records none (or could not be read).
    extensions: dict | None = None
    problems: tuple[str, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        blocked = tuple(f"could not audit: {b}" for b in self.blockers)
        object.__setattr__(self, "problems", tuple(self.findings) + blocked)

    @property
    def verdict(self) -> str:
        if self.findings:
            return FINDINGS
        return COULD_NOT_AUDIT if self.blockers else CLEAN

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def __len__(self) -> int:
        return len(self.problems)

    def __getitem__(self, index):
        return self.problems[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AuditResult):
            return (self.problems, self.replayed) == (other.problems, other.replayed)
        if isinstance(other, (list, tuple)):
            return list(self.problems) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


# -- replay ------------------------------------------------------------------------------------


def replay_stage(ev: Evidence, *, records_agree: bool) -> replaying.Replay:
    """The stage kind's replay of a complete run whose records agree (``records_agree``:
    the checks found nothing and nothing blocked them), with the code of the run's
    source commit (:mod:`prereg.decisions.replay`)."""
    m = ev.manifest or {}
    if m.get("status") != COMPLETE:
        return replaying.Replay(False, "not replayed: the run is not complete")
    if not records_agree:
        return replaying.Replay(False, "not replayed: the records do not agree")
    plan = ev.plan
    if plan is None:
        return replaying.Replay(
            False, "not replayed: the plan could not be read at the run's commit"
        )
    stage = m["stage"]
    run = replaying.request(ev.root, ev.run_dir, plan, stage, plan.stage(stage)["kind"], ev.items)
    return replaying.replay_run(ev.root, str(ev.source_commit), run)


def describe_extensions(extensions: dict | None) -> list[str]:
    """One line per installed extension a run loaded (its manifest's environment.extensions)."""
    if extensions is None:
        return ["extensions: not recorded (or not well-formed) in the manifest"]
    lines = [
        f"extension {group} {name!r}: {origin['entry_point']} from {origin['distribution']} "
        f"({origin['file']})"
        for group, entries in sorted(extensions.items())
        for name, origin in sorted(entries.items())
    ]
    return lines or ["extensions: none installed were loaded (built-in code only)"]


# -- the audit ---------------------------------------------------------------------------------


def audit_run(root: Path, run_dir: Path, *, replay: bool = True) -> AuditResult:
    """All findings for one run directory; never raises (an empty result: clean)."""
    root, run_dir = Path(root), Path(run_dir)
    if is_rehearsal(run_dir):
        return AuditResult(
            findings=(
                (
                    f"{run_dir} holds a rehearsal record ({REHEARSAL_RECORD}, '{REHEARSAL_NOTE}'): "
                    "a rehearsal is never evidence of a run. Approve the stage and run it, then "
                    "audit runs/<run-id>"
                ),
            ),
        )
    files = RunFolder(run_dir)
    never_written = not files.start.exists() and not files.manifest.exists()
    if never_written and valid_run_id(run_dir.name):
        ref = ledger.start_ref(run_dir.name)
        try:
            spent = ledger.read(root, ref) is not None
        except gitrepo.GitError as err:
            return AuditResult(blockers=(f"{run_dir} does not exist and {err}",))
        if spent:
            return AuditResult(
                findings=(
                    (
                        f"{run_dir} holds no {START_RECORD}, but git records the run's start "
                        f"({ref}): its folder was never written (a full disk, permissions) or was moved "
                        "or deleted; nothing the run made can be checked. Restore the folder "
                        "if it exists elsewhere; the run id stays spent"
                    ),
                ),
                status=None,
            )
    if not run_dir.is_dir():
        return AuditResult(blockers=(f"{run_dir} is not a folder",))
    ev = gather(root, run_dir)
    findings: list[str] = []
    blockers = could_not_audit(ev)
    for check in CHECKS:
        try:
            findings.extend(check(ev))
        except Exception as err:  # noqa: BLE001 -- the audit reports, it never crashes
            blockers.append(
                f"{check.__name__} stopped on an unexpected error (please report it): "
                f"{describe(err)}"
            )
    done = replaying.Replay(False, "not replayed (--no-replay)")
    if replay:
        try:
            done = replay_stage(ev, records_agree=not findings and not blockers)
        except Exception as err:  # noqa: BLE001
            blockers.append(f"the replay could not start: {describe(err)}")
    try:
        extensions = recorded_extensions(ev)
    except Exception:  # noqa: BLE001 -- check_extensions named what is wrong with them
        extensions = None
    return AuditResult(
        findings=tuple(findings) + done.findings,
        blockers=tuple(blockers) + done.blockers,
        replayed=done.replayed,
        replay_note=done.note,
        replay_defined=done.defined,
        status=(ev.manifest or {}).get("status"),
        extensions=extensions,
    )


def audit_run_cached(root: Path, run_dir: Path, *, listing: bool = False) -> AuditResult:
    """A full audit whose replay verdict may come from an earlier audit.

    Everything but the replay (hashes, records, git, inputs) is checked now. The replay is
    not run again when an auditor signed a passing audit that replayed the stage, of this
    attestation and manifest (:func:`prereg.proof.vsa.replayed_verdict`): what a dependent
    stage's gate and a report page rely on, and nothing weaker. With ``listing`` (``prereg
    runs``, the index page), a clean replayed verdict :mod:`prereg.records.verdicts` stores for
    this manifest's SHA-256 and this audit code counts too. Otherwise the replay runs now,
    the note says why no earlier verdict was used, and the new verdict is stored.
    """
    run_dir = Path(run_dir)
    record = verdicts.load(root, run_dir)
    stale = verdicts.staleness(root, record, run_dir)
    signed = replayed_verdict(root, run_dir)
    if signed is not None:
        earlier = signed
    elif (
        listing
        and stale is None
        and record.get("replayed")
        and record.get("verdict") == CLEAN
        and not record.get("findings")
    ):
        earlier = verdicts.describe(record)
    else:
        earlier = None
    if earlier is not None:
        result = audit_run(root, run_dir, replay=False)
        if not result:
            return AuditResult(
                replay_note=f"replay: not run again; {earlier}",
                status=result.status,
                extensions=result.extensions,
            )
        return result
    result = audit_run(root, run_dir)
    if record is not None and stale is not None:
        result = replace(
            result,
            replay_note=f"{result.replay_note}; the stored verdict was stale: {stale}",
        )
    elif not listing and stale is None and record.get("replayed"):
        result = replace(
            result,
            replay_note=f"{result.replay_note}; prereg's stored verdict is not relied on here, "
            "only an auditor's signed one (prereg audit --sign)",
        )
    verdicts.store(root, run_dir, result)
    return result
