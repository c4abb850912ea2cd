"""One-run approval records: writing them (``prereg approve``), finding the one a run
uses, binding inputs and required runs, refusal records, and the run ids in use.

``prereg approve`` writes ``plans/approvals/<run-id>.json`` from a clean HEAD (the
*source anchor*). The researcher commits it; that commit may differ from the anchor by
the record alone. Before any item runs, the gate (:mod:`prereg.decisions.gate`: ``gather`` the
facts, ``check`` every condition) returns the refusals, each naming the condition, the
values that differ and the fix; approve judges the same conditions. A refusal does not
spend the run id; the spend, once the items about to run are the stage's whole item set,
does.
"""

from __future__ import annotations

import getpass
import json
import re
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path

from prereg.base import gitrepo, provenance
from prereg.base.hashing import canonical_json, read_json, sha256_bytes, sha256_file, write_json
from prereg.base.schema import validate
from prereg.base.typed_settings import SettingsError, parse_as
from prereg.decisions import gate
from prereg.decisions.gate import Refusal
from prereg.evidence import envlock
from prereg.kinds import registry
from prereg.kinds.plans import (  # baseline_problems: read here by projects an earlier prereg init made
    BASELINE,
    baseline_problems,  # noqa: F401
    load_plan,
    validate_stage,
)
from prereg.kinds.stages import (  # stage_module_problem: as baseline_problems above
    InputsRefused,
    load_kind,
    stage_module_problem,
)
from prereg.proof import timestamp
from prereg.records import (
    APPROVAL_FORMAT,
    APPROVALS_DIR,
    DISCLOSURE_SCHEMA,
    REHEARSAL_NAME_PATTERN,
    RUN_ID_PATTERN,
    STAGE_NAME,
    approval_record,
    documents,
    formats,
    ledger,
    passed_whole_stage,
)
from prereg.records.formats import Start
from prereg.records.runs import (
    COMPLETE,
    RunFolder,
    RunIdError,
    RunLayout,
    RunState,
    all_runs,
    check_run_id,
    contained,
    has_started,
    refusals_dir,
    require_run_id,
    runs_dir,
    valid_run_id,
)

FORMAT = APPROVAL_FORMAT
APPROVALS = Path(APPROVALS_DIR)


class ApprovalError(ValueError):
    """``prereg approve`` refuses: the message says why and what to do."""


@dataclass(frozen=True)
class Approval:
    """An approval record as loaded: its path, SHA-256 and JSON data, and the record itself
    (:class:`prereg.records.formats.Approval`), which every reader takes."""

    path: Path
    sha256: str
    data: dict
    record: formats.Approval

    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def stage(self) -> str:
        return self.record.stage


def approval_path(root: Path, run_id: str) -> Path:
    """The approval record of ``run_id`` in the checkout ``root`` (the run id is checked first)."""
    return Path(root) / approval_record(require_run_id(run_id))


def load_approval(path: Path) -> Approval:
    data = read_json(path, what="approval record")
    try:
        record = parse_as(formats.Approval, data, path="")
    except SettingsError as err:
        raise ValueError(f"{path}: {err}") from None
    if record.format != FORMAT:
        raise ValueError(f"{path}: format {record.format!r} is not {FORMAT!r}")
    if not valid_run_id(record.run_id) or Path(path).stem != record.run_id:
        raise ValueError(
            f"{path}: field run_id is {record.run_id!r}; a record is named after its run id "
            f"({approval_record('<stage>-YYYYMMDD-NNN')}): approve again with prereg approve"
        )
    return Approval(path=Path(path), sha256=sha256_file(path), data=data, record=record)


def list_approvals(root: Path) -> list[Approval]:
    folder = Path(root) / APPROVALS
    return [load_approval(p) for p in sorted(folder.glob("*.json"))] if folder.exists() else []


# -- rehearsals -----------------------------------------------------------------------------


def stage_rehearsals(root: Path, stage: str) -> list[dict]:
    """The disclosure git records of each rehearsal of ``stage``
    (:func:`prereg.records.ledger.rehearsal_disclosures`), oldest first."""
    found = []
    for name, data in ledger.rehearsal_disclosures(root, stage).items():
        ref = ledger.rehearsal_ref(stage, name)
        try:
            value = documents.loads(data, ref)
            validate(value, DISCLOSURE_SCHEMA, source=ref)
        except ValueError as err:  # SchemaError is a ValueError
            raise ApprovalError(
                f"{ref} holds no rehearsal disclosure ({err}); git's record of a rehearsal was "
                "edited: restore it from a clone that has it"
            ) from None
        found.append(value)
    return sorted(found, key=lambda d: (d["started_at"], d["name"]))


def undisclosed_rehearsals(root: Path, stage: str, approvals: list[Approval]) -> list[dict]:
    """The rehearsals of ``stage`` that no approval of ``approvals`` lists: those since the
    stage's previous approval, which the next one discloses."""
    listed = {
        rehearsal["name"]
        for approval in approvals
        if approval.stage == stage
        for rehearsal in approval.record.rehearsals or ()
    }
    return [d for d in stage_rehearsals(root, stage) if d["name"] not in listed]


def rehearsal_warning(root: Path, stage: str) -> str | None:
    """Why approving HEAD now approves code no passing rehearsal of the whole stage ran
    (none: one did, from a working tree equal to HEAD's tree but for approval records,
    which other stages' approvals add)."""
    tree = gitrepo.commit_tree(root, gitrepo.head_commit(root))

    def same_code(rehearsed: str | None) -> bool:
        if rehearsed is None:
            return False
        try:
            changed = gitrepo.trees_differ(root, rehearsed, tree)
        except gitrepo.GitError:  # the rehearsed tree's objects are gone (git gc)
            return False
        return all(Path(path).parent == APPROVALS for path in changed)

    if any(passed_whole_stage(d) and same_code(d["tree"]) for d in stage_rehearsals(root, stage)):
        return None
    return (
        f"no passing rehearsal of the whole stage {stage} ran this commit's tree ({tree[:12]}): "
        f"the run may fail where a rehearsal would have shown it (pytest --research-stage={stage} "
        "--rehearse; the approval is written all the same)"
    )


# -- amendments -------------------------------------------------------------------------------


_ABSENT = object()


def plan_differences(old: object, new: object, prefix: str = "") -> list[dict]:
    """Each field whose value differs between two JSON values: its dotted path, whether it
    was ``added``, ``removed`` or ``changed``, and the value before and after (None where
    the field is absent)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            change
            for key in sorted(set(old) | set(new))
            for change in plan_differences(
                old.get(key, _ABSENT), new.get(key, _ABSENT), f"{prefix}.{key}" if prefix else key
            )
        ]
    if old is not _ABSENT and new is not _ABSENT and canonical_json(old) == canonical_json(new):
        return []
    change = "added" if old is _ABSENT else "removed" if new is _ABSENT else "changed"
    return [
        {
            "field": prefix or "(the plan)",
            "change": change,
            "from": None if old is _ABSENT else old,
            "to": None if new is _ABSENT else new,
        }
    ]


def spent_approvals(root: Path, stage: str, known: set[str]) -> list[Approval]:
    """The approvals of ``stage``'s spent runs that ``known`` lacks, as committed at each
    run's source commit: git records the spend (:mod:`prereg.records.ledger`), so removing
    an approval record from the checkout does not hide the plan its run ran under."""
    found = []
    for run_id in ledger.spent_run_ids(root):
        match = RUN_ID_PATTERN.match(run_id)
        if match is None or match["stage"] != stage or run_id in known:
            continue
        try:
            start = formats.loads(
                ledger.read(root, ledger.start_ref(run_id)) or b"{}", Start, run_id
            ).value
            data = gitrepo.show_bytes(root, start.source_commit, approval_record(run_id))
            value = documents.loads(data, approval_record(run_id))
            record = parse_as(formats.Approval, value, path="")
        except (gitrepo.GitError, ValueError, KeyError, TypeError):
            continue  # the audit of that run names what is wrong with its records
        path = Path(root, approval_record(run_id))
        found.append(Approval(path=path, sha256=sha256_bytes(data), data=value, record=record))
    return found


def amendment(
    root: Path, stage: str, plan, approvals: list[Approval], reason: str | None
) -> dict | None:
    """The amendment an approval of ``stage`` under ``plan`` records: how the plan differs
    from the one the stage's previous approval bound, and which runs had outcomes by then
    under another plan. None when there is no previous approval or the plan is its plan.

    Raises :class:`ApprovalError` when the plan changed and ``reason`` is None, when a
    reason is given and nothing changed, and when the earlier plan cannot be read."""
    earlier = [a for a in approvals if a.stage == stage]
    earlier += spent_approvals(root, stage, known={a.run_id for a in earlier})
    previous = max(earlier, key=lambda a: (a.record.approved_at, a.run_id), default=None)
    if previous is None or previous.record.plan.sha256 == plan.sha256:
        if reason is not None:
            raise ApprovalError(
                f"--amend: the plan of stage {stage} is the one "
                f"{'its previous approval bound' if previous else 'no earlier approval bound'}: "
                "there is no amendment to record; approve without --amend"
            )
        return None
    bound = previous.record.plan
    try:
        before = gitrepo.show_bytes(root, previous.record.source_anchor, bound.path)
    except gitrepo.GitError as err:
        raise ApprovalError(
            f"{previous.path.name} binds plan {bound.path} at commit "
            f"{previous.record.source_anchor[:12]}, which git cannot read here ({err}): the "
            "earlier plan cannot be compared; fetch the full history (git fetch --unshallow)"
        ) from None
    if sha256_bytes(before) != bound.sha256:
        raise ApprovalError(
            f"{previous.path.name} binds plan {bound.path} with SHA-256 {bound.sha256[:12]}, "
            f"but its source anchor {previous.record.source_anchor[:12]} holds other bytes: "
            "the earlier plan cannot be compared"
        )
    changed = plan_differences(json.loads(before), plan.data)
    outcomes = [
        run.run_id
        for run in all_runs(root)
        if run.status == COMPLETE
        and (run.manifest or {}).get("plan", {}).get("sha256") != plan.sha256
    ]
    if reason is None:
        fields = "; ".join(f"{c['field']}: {c['from']!r} -> {c['to']!r}" for c in changed)
        raise ApprovalError(
            f"the plan of stage {stage} changed since its previous approval "
            f"({previous.path.name}, plan SHA-256 {bound.sha256[:12]}): {fields}. Complete runs "
            f'under another plan by now: {outcomes or "none"}. Approve with --amend "why" to '
            "record the amendment in the approval (every report of its run shows it)"
        )
    return {
        "reason": reason,
        "previous_approval": previous.run_id,
        "previous_plan_sha256": bound.sha256,
        "changed": changed,
        "complete_runs_before": outcomes,
    }


# -- inputs and required runs ----------------------------------------------------------------


def bind_input(path: Path) -> dict:
    """A file is bound by SHA-256; a git repository by its HEAD commit."""
    path = Path(path).resolve()
    if path.is_file():
        return {"path": str(path), "kind": "file", "sha256": sha256_file(path), "commit": None}
    if path.is_dir():
        try:
            commit = gitrepo.head_commit(path)
        except gitrepo.GitError:
            raise ApprovalError(f"input {path} is a folder but not a git repository") from None
        return {"path": str(path), "kind": "git", "sha256": None, "commit": commit}
    raise ApprovalError(f"input {path} does not exist")


def latest_complete_run(root: Path, stage: str) -> str | None:
    """The stage's latest complete run whose manifest is the one git records for it."""
    done = [
        r
        for r in all_runs(root)
        if r.stage == stage
        and r.status == COMPLETE
        and ledger.read(root, ledger.manifest_ref(r.run_id))
        == RunFolder(r.path).manifest.read_bytes()
    ]
    done.sort(key=lambda r: r.manifest["ended_at"])
    return done[-1].run_id if done else None


# -- run ids and bound runs -----------------------------------------------------------------


def used_run_ids(root: Path) -> set[str]:
    """Every run id in use: an approval record under plans/approvals/, a run id git records as
    spent (:func:`prereg.records.ledger.spent_run_ids`), a folder under runs/, a refusal record."""
    root = Path(root)
    used = set(ledger.spent_run_ids(root))
    folder = root / APPROVALS
    if folder.is_dir():
        for path in folder.glob("*.json"):
            used.add(path.stem)
            used.add(_json_field(path, "run_id"))
    if runs_dir(root).is_dir():
        used.update(p.name for p in runs_dir(root).iterdir() if p.is_dir())
    if refusals_dir(root).is_dir():
        for path in refusals_dir(root).glob("*.json"):
            # <run-id>-<stamp>.json when the refusal named a well-formed run id
            used.add(path.stem.rsplit("-", 1)[0])
            used.add(_json_field(path, "run_id"))
    return {run_id for run_id in used if valid_run_id(run_id)}


def _json_field(path: Path, field: str) -> object:
    """``field`` of the JSON object in ``path``; None when it is unreadable or not an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data.get(field) if isinstance(data, dict) else None


def _day(today: date | str | None) -> str:
    if today is None:
        return datetime.now(timezone.utc).strftime("%Y%m%d")
    if isinstance(today, date):
        return today.strftime("%Y%m%d")
    if not (isinstance(today, str) and re.fullmatch(r"[0-9]{8}", today)):
        raise ApprovalError(f"today {today!r} is not a date YYYYMMDD (for example 20261009)")
    return today


def next_free_run_id(
    root: Path, stage: str, today: date | str | None = None, *, used: set[str] | None = None
) -> str:
    """``<stage>-<today>-NNN`` with the smallest NNN from 001 that :func:`used_run_ids` lacks.

    ``today`` is a date or ``YYYYMMDD``; by default today's date in UTC. ``used``: the run
    ids in use, when the caller has them already (:func:`used_run_ids`)."""
    day = _day(today)
    used = used_run_ids(root) if used is None else used
    try:
        check_run_id(f"{stage}-{day}-001", stage)
    except RunIdError:
        raise ApprovalError(
            f"stage {stage!r} gives no run id <stage>-YYYYMMDD-NNN: a stage name is lower-case "
            "letters, digits and hyphens, starting with a letter"
        ) from None
    for seq in range(1, 1000):
        candidate = f"{stage}-{day}-{seq:03d}"
        if candidate not in used:
            return candidate
    raise ApprovalError(
        f"every run id from {stage}-{day}-001 to {stage}-{day}-999 is used (by approval records "
        f"under {APPROVALS}, spent runs, run folders or refusal records); approve again on "
        "another day (UTC)"
    )


def _started_at(run: RunState) -> str | None:
    """When a run started (the ISO time of its start record), None when unreadable."""
    value = (run.manifest or {}).get("started_at") or _json_field(
        RunFolder(run.path).start, "started_at"
    )
    return value if isinstance(value, str) else None


def _run_order(run_id: str) -> tuple[str, str]:
    _, day, seq = run_id.rsplit("-", 2)
    return day, seq


def newer_runs(root: Path, stage: str, run_id: str) -> list[RunState]:
    """The runs of ``stage`` under runs/ that started after run ``run_id`` (by their start
    records' times; by the run ids' date and number when a time is unreadable), oldest first.
    A run folder too damaged to name its stage counts when its name is a run id of ``stage``."""
    runs = [
        r
        for r in all_runs(root)
        if r.run_id != run_id
        and valid_run_id(r.run_id)
        and (r.stage == stage or (r.stage is None and r.run_id.rsplit("-", 2)[0] == stage))
    ]
    bound = [r for r in all_runs(root) if r.run_id == run_id]
    bound_start = _started_at(bound[0]) if bound else None

    def newer(run: RunState) -> bool:
        start = _started_at(run)
        if start is not None and bound_start is not None:
            return start > bound_start
        return _run_order(run.run_id) > _run_order(run_id)

    found = [r for r in runs if newer(r)]
    found.sort(key=lambda r: (_started_at(r) or "", _run_order(r.run_id)))
    return found


def bound_run_warnings(root: Path, requires: dict) -> list[str]:
    """A warning for each run of a required stage newer than the run the approval binds
    (``requires``: stage -> {"run_id": ...}, as in the approval record) that is not the
    stage's latest complete run: it failed, is running or was killed, or is unreadable."""
    warnings = []
    for needed, bound in sorted(requires.items()):
        latest = latest_complete_run(root, needed)
        for run in newer_runs(root, needed, bound["run_id"]):
            if run.status == COMPLETE and run.run_id != latest:
                status = "complete, but its manifest is not the one git records for it"
            elif run.status == COMPLETE:
                status = "complete"
            else:
                status = run.status
            warnings.append(
                f"required stage {needed}: run {run.run_id}, newer than the bound run "
                f"{bound['run_id']}, is {status}; this approval consumes {bound['run_id']} (to "
                f"consume another run, delete this approval record and approve again with "
                f"--use-run {needed}=RUN_ID naming a complete run)"
            )
    return warnings


# -- approve ---------------------------------------------------------------------------------


def _stamped(url: str, run_id: str, anchor: str) -> dict:
    """The record's ``timestamp``: the authority and its token over the run id and anchor."""
    try:
        token = timestamp.request(url, timestamp.approval_data(run_id, anchor))
    except (timestamp.TimestampProblem, timestamp.NoTimestamps) as err:
        raise ApprovalError(
            f"{err}. Nothing was written: approve again when the authority answers, or "
            "without --timestamp-authority"
        ) from None
    return {"url": url, "token": timestamp.encode(token)}


def create_approval(
    root: Path,
    *,
    stage: str,
    run_id: str,
    plan_path: Path,
    inputs: dict[str, Path],
    use_runs: dict[str, str],
    accept_deviations: bool,
    amend: str | None = None,
    witness: str | None = None,
    timestamp_authority: str | None = None,
) -> Path:
    """Write the approval record for one run from the current clean HEAD; return its path.

    The draft record passes the gate's approval conditions first (:mod:`prereg.decisions.gate`);
    every refusal is reported at once.
    """
    root = Path(root)
    try:
        check_run_id(run_id, stage)
    except RunIdError as err:
        raise ApprovalError(str(err)) from None
    plan = load_plan(root / plan_path)
    if stage not in plan.stages:
        raise ApprovalError(
            f"plan {plan_path} has no stage {stage!r}; its stages: {sorted(plan.stages)}"
        )
    validate_stage(plan, stage)
    spec = plan.stage(stage)
    module_problem = stage_module_problem(root, plan_path, stage, spec["module"])
    if module_problem:
        raise ApprovalError(module_problem)
    record_path = approval_path(root, run_id)
    if record_path.exists():
        raise ApprovalError(
            f"{record_path.relative_to(root)} exists already: one approval per run id"
        )
    requires = {}
    for needed in spec["requires"]:
        chosen = use_runs.get(needed) or latest_complete_run(root, needed)
        if chosen is not None and REHEARSAL_NAME_PATTERN.match(chosen):
            raise ApprovalError(
                f"--use-run {needed}={chosen} names a rehearsal, and a rehearsal is never a run: "
                f"approve, run and audit {needed}, then approve {stage} (it binds that run)"
            )
        if chosen is None:
            raise ApprovalError(
                f"stage {stage} requires a complete run of {needed}; none is under runs/ "
                f"(run and audit {needed} first, or name one with --use-run {needed}=RUN_ID)"
            )
        manifest = RunLayout(root, chosen).manifest
        if not manifest.exists():
            raise ApprovalError(
                f"--use-run {needed}={chosen}: {manifest.relative_to(root)} does not exist"
            )
        requires[needed] = {"run_id": chosen, "manifest_sha256": sha256_file(manifest)}

    missing = sorted(set(spec["inputs"]) - set(inputs))
    extra = sorted(set(inputs) - set(spec["inputs"]))
    if missing or extra:
        raise ApprovalError(
            f"stage {stage} binds inputs {spec['inputs']}; missing {missing}, unexpected {extra} "
            "(pass each as --input NAME=PATH)"
        )
    kind = load_kind(spec["kind"])
    if kind.check_inputs is not None:
        try:
            kind.check_inputs(plan, stage, {k: Path(v).resolve() for k, v in inputs.items()})
        except InputsRefused as err:
            raise ApprovalError(str(err)) from None
    bound_inputs = {name: bind_input(Path(p)) for name, p in sorted(inputs.items())}

    actual = provenance.pinned_environment()
    deviations = provenance.deviations(plan.data["environment_pins"], actual)
    if deviations and not accept_deviations:
        raise ApprovalError(
            f"this environment deviates from the plan's pins ({provenance.describe(deviations)}); "
            "to run here anyway, approve with --accept-deviations so the approval and the "
            "manifest name each deviation"
        )
    record = {
        "format": FORMAT,
        "stage": stage,
        "run_id": run_id,
        "plan": {
            "path": Path(plan_path).as_posix(),
            "sha256": plan.sha256,
            "plan_id": plan.plan_id,
        },
        "baseline": {"path": BASELINE.as_posix(), "sha256": _sha256_or_none(root / BASELINE)},
        "source_anchor": gitrepo.head_commit(root),
        "seed_namespace": spec.get("seed_namespace"),
        "environment": actual,
        "deviations": deviations,
        "requires": requires,
        "inputs": bound_inputs,
        "approved_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "approved_by": _approver(root),
    }
    # The installed packages whose code the stage's kind, laws or harnesses come from (loaded
    # above while the plan was validated): the gate refuses a run if any of them changed.
    extensions = registry.loaded_origins()
    if extensions:
        record["extensions"] = extensions
    # The interpreter and every installed distribution (prereg.evidence.envlock): the gate refuses a
    # run after anything was installed, removed or changed.
    record["environment_lock"] = envlock.lock()
    # Every rehearsal of the stage since its previous approval: what was tried, and seen, before.
    approvals = list_approvals(root)
    record["rehearsals"] = undisclosed_rehearsals(root, stage, approvals)
    if witness is not None:
        record["witness"] = {"url": witness}
    amended = amendment(root, stage, plan, approvals, amend)
    if amended is not None:
        record["amendment"] = amended
    facts = gate.gather(
        root, record, record_path, stage=stage, at_approval=True, approvals=approvals
    ).facts
    refusals = gate.check(facts, gate.APPROVE_CONDITIONS)
    if refusals:
        raise ApprovalError("\n  ".join(str(r) for r in refusals))
    if timestamp_authority is not None:
        record["timestamp"] = _stamped(timestamp_authority, run_id, record["source_anchor"])
    try:
        write_json(contained(root, record_path), record, exclusive=True)
    except FileExistsError:
        raise ApprovalError(
            f"{record_path.relative_to(root)} was written by another prereg approve meanwhile: "
            "one approval per run id; it is kept as that one wrote it"
        ) from None
    return record_path


def _sha256_or_none(path: Path) -> str:
    return sha256_file(path) if path.is_file() else "(missing)"


def _approver(root: Path) -> str:
    name = gitrepo.user_name(root)
    return name or getpass.getuser()


# -- the gate -------------------------------------------------------------------------------


def find_approval(root: Path, stage: str, run_id: str | None) -> Approval:
    """The approval to run under: the one named by ``run_id``, else the stage's only unspent one."""
    if run_id is not None:
        try:
            path = approval_path(root, run_id)
        except RunIdError as err:
            raise ApprovalError(f"--run-id: {err}") from None
        if not path.exists():
            raise ApprovalError(
                f"no approval record {path.relative_to(root)}; create it with "
                f"`prereg approve --stage {stage} --run-id {run_id}` and commit it"
            )
        return load_approval(path)
    unspent = [
        a
        for a in list_approvals(root)
        if a.stage == stage
        and not has_started(root, a.run_id)
        and not ledger.is_spent(root, a.run_id)
    ]
    if not unspent:
        raise ApprovalError(
            f"no unspent approval for stage {stage} under {APPROVALS}; create one with "
            f"`prereg approve --stage {stage}` (it takes the next free run id), commit it, run again"
        )
    if len(unspent) > 1:
        raise ApprovalError(
            f"several unspent approvals for stage {stage}: {[a.run_id for a in unspent]}; "
            "choose one with --run-id"
        )
    return unspent[0]


def write_refusal(
    root: Path, approval: Approval | None, stage: str, run_id: str | None, refusals: list[Refusal]
) -> Path:
    """Record a refusal under runs/refusals/ (it does not spend the run id)."""
    now = datetime.now(timezone.utc)
    label = run_id if valid_run_id(run_id) else "invalid-run-id" if run_id else stage
    if not re.fullmatch(rf"{STAGE_NAME}(-[0-9]{{8}}-[0-9]{{3}})?", label):
        label = "unknown-stage"
    name = f"{label}-{now.strftime('%Y%m%dT%H%M%S%fZ')}.json"
    path = contained(root, refusals_dir(root) / name)
    write_json(
        path,
        {
            "stage": stage,
            "run_id": run_id,
            "approval": None if approval is None else approval.path.relative_to(root).as_posix(),
            "refused_at": now.isoformat(timespec="seconds"),
            "head": gitrepo.resolve(root, "HEAD"),  # None when git cannot answer
            "refusals": [{"condition": r.condition, "message": r.message} for r in refusals],
        },
    )
    return path
