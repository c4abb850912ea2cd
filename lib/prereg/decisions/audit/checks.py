"""The audit's checks: each a function of the :class:`~prereg.decisions.audit.evidence.Evidence`
returning its findings (:data:`CHECKS`), and :func:`could_not_audit`, the blockers."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

from prereg.base.hashing import (
    FolderListing,
    list_folder,
    parse_json,
    sha256_bytes,
)
from prereg.base.schema import MapOf
from prereg.decisions.audit.evidence import (
    _ABSENT,
    JUNIT_OUTCOMES,
    Evidence,
    _abbreviated,
    _as_text,
    _execution_record,
    _fits_schema,
    _hashes_now,
    _inside,
    _junit_key,
    _listed_files,
    _required_runs,
    _single_attempt_stage,
    _value_at,
)
from prereg.evidence import envlock, execution
from prereg.kinds.registry import STAGE_KINDS, group_problem
from prereg.records import (
    APPROVAL_COPY,
    ATTESTATION_FILES,
    COMPLETE,
    EXTENSION_ORIGIN,
    FINISHING_PHASES,
    FROM_APPROVAL,
    FROM_START,
    INCOMPLETE,
    ITEM_LOG,
    ITEMS_DIR,
    JUNIT,
    LOCK_SCHEMA,
    MANIFEST,
    PASSED,
    RUN_ID_PATTERN,
    START_RECORD,
    approval_record,
    ledger,
)
from prereg.records import snapshot as snapshots

# -- hashes ------------------------------------------------------------------------------------


def _differs(now: dict, entry: dict) -> bool:
    return now["bytes"] != entry.get("bytes") or now["sha256"] != entry.get("sha256")


def hash_findings(listing: FolderListing, hashes: Mapping[str, dict], manifest: dict) -> list[str]:
    """Each file the manifest lists that is missing or hashes otherwise (``hashes``: the
    listed files as they hash now), each unlisted file, and each entry that is neither a
    regular file nor a folder (a symbolic link, a named pipe: never followed nor read)."""
    findings = []
    present = set(listing.files)
    irregular = {e["path"] for e in listing.irregular}
    listed = _listed_files(manifest)
    for rel, entry in sorted(listed.items()):
        if not _inside(rel):
            findings.append(f"{MANIFEST}: lists {rel!r}, a path outside the run folder")
        elif rel in irregular:
            continue  # named below
        elif rel not in present:
            findings.append(f"missing file: {rel}")
        elif rel not in hashes:
            continue  # it cannot be read: a blocker (could_not_audit)
        elif _differs(hashes[rel], entry):
            findings.append(f"changed file: {rel} (SHA-256 differs from the manifest)")
    for rel in sorted(present - set(listed) - {MANIFEST, *ATTESTATION_FILES}):
        findings.append(f"extra file not in the manifest: {rel}")
    return findings + _irregular_findings(listing)


def _hash_findings(run_dir: Path, manifest: dict) -> list[str]:
    """:func:`hash_findings` of ``run_dir`` as it is now against ``manifest``."""
    listing = list_folder(run_dir)
    return hash_findings(listing, _hashes_now(run_dir, listing, manifest)[0], manifest)


def _irregular_findings(contents: FolderListing) -> list[str]:
    """Each entry of the run folder that is neither a regular file nor a folder, or whose
    name is not UTF-8."""
    return [
        f"not read: {e['path']} is {e['kind']}; a run folder holds only regular files and "
        "folders named in UTF-8 (the audit neither follows a link, nor reads a pipe, nor reads "
        "a file no record can name, so nothing there is hashed): find what made it; the run "
        "cannot audit clean while it is there"
        for e in contents.irregular
    ]


# -- the checks: Evidence -> findings ------------------------------------------------------------


def check_records(ev: Evidence) -> list[str]:
    """Each record that is missing, unreadable or malformed (found while loading it)."""
    return list(ev.load_findings)


def check_files(ev: Evidence) -> list[str]:
    m = ev.manifest
    if ev.listing is None:
        return []
    if m is None:
        return _irregular_findings(ev.listing)
    found = hash_findings(ev.listing, ev.hashes, m)
    listed = {e["path"] for e in m.get("run_files", [])}
    required = [START_RECORD, APPROVAL_COPY]
    if any(set(i.get("phases", {})) & set(FINISHING_PHASES) for i in ev.items):
        required.append(ITEM_LOG)
    if any(i.get("phases") for i in ev.items) or m.get("status") == COMPLETE:
        required.append(JUNIT)
    for name in required:
        if name not in listed:
            found.append(f"{MANIFEST}: field run_files does not list {name}, a run file")
            if name not in ev.present:
                found.append(f"missing file: {name}")
    for item in ev.items:
        if "output_dir" in item and not _inside(item["output_dir"]):
            found.append(
                f"{MANIFEST}: item {item.get('nodeid')!r} has output_dir "
                f"{item['output_dir']!r}, a path outside {ITEMS_DIR}/"
            )
    return found


def _extension_form(value: Any) -> tuple[bool, list[str]]:
    """Whether ``environment.extensions`` fits its schema, and the findings of its form."""
    found: list[str] = []
    where = "environment.extensions"
    if not _fits_schema(value, MapOf(MapOf(EXTENSION_ORIGIN)), MANIFEST, where, found):
        return False, found
    for group in sorted(value):
        problem = group_problem(group)
        if problem is not None:
            found.append(
                f"{MANIFEST}: field {where} names {group!r}, not an extension-point group "
                f"({problem}): nothing the run could have loaded records it"
            )
    return True, found


def recorded_extensions(ev: Evidence) -> dict | None:
    """The installed extensions the run's controller loaded (group -> name -> origin), when
    the manifest records them well-formed (None otherwise)."""
    env = (ev.manifest or {}).get("environment")
    if not isinstance(env, dict) or "extensions" not in env:
        return None
    fits, found = _extension_form(env["extensions"])
    return env["extensions"] if fits and not found else None


def check_extensions(ev: Evidence) -> list[str]:
    """``environment.extensions``: installed stage kinds, law families and harness kinds
    the controller loaded, each with its distribution, entry point and file; well-formed
    or a finding (a manifest written before they were recorded has none: not a finding)."""
    env = (ev.manifest or {}).get("environment")
    bound = (ev.approval or {}).get("extensions") or {}
    if not isinstance(env, dict) or "extensions" not in env:
        if bound:
            return [
                (
                    f"{MANIFEST}: the approval binds installed extensions "
                    f"({', '.join(sorted(bound))}), but environment.extensions is missing"
                )
            ]
        return []
    value = env["extensions"]
    fits, found = _extension_form(value)
    if not fits:
        return found
    where = "environment.extensions"
    for group, entries in sorted(bound.items()) if isinstance(bound, dict) else ():
        for name, approved in sorted(entries.items()) if isinstance(entries, dict) else ():
            ran = value.get(group, {}).get(name) if isinstance(value.get(group), dict) else None
            if ran != approved:
                found.append(
                    f"{MANIFEST}: {where}.{group}.{name} is {ran!r}, but the approval binds "
                    f"{approved!r}: the run loaded other extension code than approved"
                )
    return found


def check_environment_lock(ev: Evidence) -> list[str]:
    """``environment.environment_lock``: the interpreter and installed distributions the run
    saw equal the approval's lock (prereg.evidence.envlock); an approval without one binds none."""
    bound = (ev.approval or {}).get("environment_lock")
    env = (ev.manifest or {}).get("environment")
    if bound is None or (ev.manifest or {}).get("minimal"):
        return []  # a minimal manifest records no environment (its reasons say why)
    where = "environment.environment_lock"
    if not isinstance(env, dict) or "environment_lock" not in env:
        return [f"{MANIFEST}: the approval binds an environment lock, but {where} is missing"]
    found: list[str] = []
    if not _fits_schema(env["environment_lock"], LOCK_SCHEMA, MANIFEST, where, found):
        return found
    for problem in envlock.lock_problems(bound, env["environment_lock"], when="in the run"):
        found.append(f"{MANIFEST}: {where}: {problem}")
    return found


def check_unbound_kind(ev: Evidence) -> list[str]:
    """The run's stage kind, when the run loaded it from an installed package, is one the
    approval binds (an approval whose ``extensions`` field was removed by hand binds none,
    and any installed version of the kind could have run)."""
    ran = (recorded_extensions(ev) or {}).get(STAGE_KINDS) or {}
    bound = (ev.approval or {}).get("extensions")
    bound = bound.get(STAGE_KINDS) if isinstance(bound, dict) else None
    stage = (ev.manifest or {}).get("stage")
    plan = ev.plan if ran else None
    if plan is None or not isinstance(stage, str) or stage not in plan.stages:
        return []
    kind = plan.stage(stage)["kind"]
    if kind in ran and not (isinstance(bound, dict) and kind in bound):
        return [
            (
                f"{MANIFEST}: the run loaded stage kind {kind!r} from the installed "
                f"{ran[kind].get('distribution')}, but the approval binds no installed package "
                "for it (its extensions field lacks it): nothing shows the code approved ran"
            )
        ]
    return []


def check_execution(ev: Evidence) -> list[str]:
    """Re-judge, from the manifest, the conditions under which the run's code ran: it ran
    from a snapshot whose tree is the source commit's, at the start and at the end
    (:func:`prereg.records.snapshot.tree_mismatch`), its recorded execution escapes neither the
    snapshot nor the installed packages (:func:`prereg.evidence.execution.recorded_problems`), and
    the execution condition judged again after the items ran found nothing
    (``execution_at_end``)."""
    env = (ev.manifest or {}).get("environment")
    if not isinstance(env, dict) or not ev.source_checked:
        return []
    found = []
    snapshot = env.get("snapshot")
    if not isinstance(snapshot, dict):
        found.append(
            f"{MANIFEST}: environment.snapshot is missing: nothing shows the run executed a "
            "snapshot of the approved commit (a research run started with `pytest "
            "--research-stage=NAME` always records one)"
        )
    elif ev.source_tree is not None:
        why = snapshots.tree_mismatch(str(snapshot.get("tree")), ev.source_tree)
        if why:
            found.append(f"{MANIFEST}: environment.snapshot.tree: {why}")
        if snapshot.get("tree_at_end") != snapshot.get("tree"):
            found.append(
                f"{MANIFEST}: environment.snapshot.tree_at_end: the snapshot the run executed "
                f"changed during the run (tree {_abbreviated(snapshot.get('tree'))} at the start, "
                f"{_abbreviated(snapshot.get('tree_at_end'))} at the end): what ran is unknown"
            )
    record = _execution_record(ev)
    if record is not None and ev.committed_sha256 is not None:
        for problem in execution.recorded_problems(record, ev.committed_sha256.get):
            found.append(f"{MANIFEST}: environment.execution: {problem}")
    at_end = env.get("execution_at_end")
    if isinstance(snapshot, dict) and not (
        isinstance(at_end, list) and all(isinstance(p, str) for p in at_end)
    ):
        found.append(
            f"{MANIFEST}: environment.execution_at_end is missing or not a list of strings: "
            "nothing shows the code loaded while the items ran was judged"
        )
    elif isinstance(at_end, list):
        found += [f"{MANIFEST}: environment.execution_at_end: {p}" for p in at_end]
    return found


def _remote_worker(worker: dict) -> bool:
    """A worker that does not share the controller's checkout (prereg.runtime.remote.is_remote):
    recorded ``"remote": true``, or a ``--tx`` spec other than a plain ``popen``."""
    spec = worker.get("spec")
    if worker.get("remote") is True or not isinstance(spec, str):
        return True
    return not spec.startswith("popen") or "chdir=" in spec


def check_workers(ev: Evidence) -> list[str]:
    """In a hermetic run (``environment.snapshot`` recorded), each remote worker of
    ``environment.workers`` records the snapshot it ran from, ``{"commit", "tree"}``, and
    it is the source commit and that commit's tree: the controller's snapshot says nothing
    of the code on another host."""
    env = (ev.manifest or {}).get("environment")
    if not isinstance(env, dict) or not isinstance(env.get("snapshot"), dict):
        return []
    workers, source = env.get("workers"), ev.source_commit
    if not isinstance(workers, list) or not ev.source_checked or ev.source_tree is None:
        return []
    found = []
    for index, worker in enumerate(workers):
        where = f"{MANIFEST}: environment.workers[{index}]"
        if not isinstance(worker, dict):
            found.append(
                f"{where} is {_abbreviated(worker)}, not a worker record (an object with id and spec): "
                "nothing shows where that worker's code came from"
            )
            continue
        if not _remote_worker(worker):
            continue
        label = f"{where}: worker {worker.get('id', '?')} (--tx {worker.get('spec', '?')})"
        snapshot = worker.get("snapshot")
        if not isinstance(snapshot, dict):
            found.append(
                f"{label} records no snapshot of its own: it ran from its working tree, which "
                f"nothing shows to be the approved commit {source[:12]}'s; the run's results "
                "from that worker are not shown to come from the approved code"
            )
            continue
        commit, tree = snapshot.get("commit"), snapshot.get("tree")
        if commit != source:
            found.append(
                f"{label}: ran from a snapshot of commit {_as_text(commit)}, not the approved "
                f"commit {source}; its results do not come from the approved code"
            )
        if tree != ev.source_tree:
            found.append(
                f"{label}: ran from tree {_as_text(tree)}, not the approved commit's tree "
                f"{ev.source_tree}; its results do not come from the approved code"
            )
    return found


def check_run_id(ev: Evidence) -> list[str]:
    found = []
    for name, doc in ((MANIFEST, ev.manifest), (START_RECORD, ev.start)):
        value = (doc or {}).get("run_id")
        if value is None:
            continue
        if not RUN_ID_PATTERN.match(value):
            found.append(
                f"{name}: field run_id {value!r} does not have the form <stage>-YYYYMMDD-NNN"
            )
        elif value != ev.run_dir.name:
            found.append(
                f"{name}: field run_id is {value!r}, but the run folder is named "
                f"{ev.run_dir.name!r} (a run folder is never renamed)"
            )
    return found


def check_against_approval(ev: Evidence) -> list[str]:
    m, a = ev.manifest, ev.approval
    if m is None or a is None:
        return []
    found = []
    for mine, theirs in FROM_APPROVAL.items():
        value, approved = _value_at(m, mine), _value_at(a, theirs)
        if value is _ABSENT or approved is _ABSENT:
            continue
        if value != approved:
            found.append(
                f"{MANIFEST}: field {mine} is {_abbreviated(value)}, but {APPROVAL_COPY} field "
                f"{'.'.join(theirs)} is {_abbreviated(approved)}"
            )
    digest = ev.approval_copy_sha256
    recorded = _value_at(m, "approval.sha256")
    if recorded is not _ABSENT and recorded != digest:
        found.append(
            f"{MANIFEST}: field approval.sha256 is {recorded}, but {APPROVAL_COPY} hashes {digest}"
        )
    if isinstance(a.get("run_id"), str):
        expected = approval_record(a["run_id"])
        path = _value_at(m, "approval.path")
        if path is not _ABSENT and path != expected:
            found.append(f"{MANIFEST}: field approval.path is {path!r}, not {expected!r}")
    return found


def check_against_start(ev: Evidence) -> list[str]:
    s = ev.start
    if s is None:
        return []
    found = []
    if ev.manifest is not None:
        for theirs, mine in FROM_START.items():
            value, started = _value_at(ev.manifest, mine), s.get(theirs, _ABSENT)
            if value is _ABSENT or started is _ABSENT:
                continue
            if value != started:
                found.append(
                    f"{MANIFEST}: field {mine} is {_abbreviated(value)}, but {START_RECORD} field "
                    f"{theirs} is {_abbreviated(started)}"
                )
    if (
        ev.approval_copy_sha256 is not None
        and "approval_sha256" in s
        and ev.approval_copy_sha256 != s["approval_sha256"]
    ):
        found.append(
            f"{START_RECORD}: field approval_sha256 does not match {APPROVAL_COPY}'s SHA-256"
        )
    return found


def check_status(ev: Evidence) -> list[str]:
    m = ev.manifest
    if m is None or "status" not in m:
        return []
    found = []
    status, reasons = m["status"], m.get("incomplete_reasons")
    nodeids = [i["nodeid"] for i in ev.items if "nodeid" in i]
    for nodeid in sorted({n for n in nodeids if nodeids.count(n) > 1}):
        found.append(f"{MANIFEST}: field items lists {nodeid} more than once")
    for item in ev.items:
        phases = item.get("phases", {})
        if item.get("outcome") == PASSED and not (
            phases.get("call") == "passed"
            and "teardown" in phases
            and all(v == "passed" for v in phases.values())
        ):
            found.append(
                f"{MANIFEST}: item {item.get('nodeid')} has outcome passed but phases "
                f"{_abbreviated(phases)}"
            )
    if status == COMPLETE:
        if reasons:
            found.append(
                f"{MANIFEST}: field status is complete but incomplete_reasons is not empty"
            )
        not_passed = [i.get("nodeid", "?") for i in ev.items if i.get("outcome") != PASSED]
        if not_passed:
            found.append(
                f"{MANIFEST}: field status is complete but {len(not_passed)} item(s) did not "
                f"pass: {', '.join(not_passed[:5])}"
            )
        expected = m.get("expected_items")
        if expected is not None and expected != len(m.get("items", [])):
            found.append(
                f"{MANIFEST}: field status is complete but expected_items is {expected} and "
                f"items holds {len(m.get('items', []))}"
            )
        if not m.get("items"):
            found.append(f"{MANIFEST}: field status is complete but items is empty")
        if m.get("partial_summary_files"):
            found.append(f"{MANIFEST}: field partial_summary_files is not empty in a complete run")
    elif status == INCOMPLETE:
        expected, held = m.get("expected_items"), len(m.get("items", []))
        if expected is not None and "minimal" not in m and held < expected:
            found.append(
                f"{MANIFEST}: field items holds {held} item(s), fewer than expected_items "
                f"({expected}): every expected item has a record, run or not"
            )
        if not reasons:
            found.append(f"{MANIFEST}: field status is incomplete but incomplete_reasons is empty")
        if m.get("summary_files"):
            found.append(
                f"{MANIFEST}: field summary_files is not empty in an incomplete run "
                "(a summary exists only for a complete run)"
            )
    return found


def check_item_log(ev: Evidence) -> list[str]:
    if ev.manifest is None or ITEM_LOG not in ev.present:
        return []
    if ev.item_log is None:
        return (
            []
            if ev.item_log_problem is None
            else [f"{ITEM_LOG}: cannot be read ({ev.item_log_problem})"]
        )
    found = []
    by_id = {i["nodeid"]: (n, i) for n, i in enumerate(ev.items) if "nodeid" in i}
    seen: set[str] = set()
    lines = ev.item_log.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    elif lines:
        found.append(f"{ITEM_LOG}: the last line has no line end (torn or edited)")
    for number, line in enumerate(lines, start=1):
        where = f"{ITEM_LOG} line {number}"
        try:
            entry = parse_json(line, what="line", source=f"{number}")
        except ValueError as err:
            found.append(f"{where}: not valid JSON ({err})")
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("nodeid"), str):
            found.append(f"{where}: not an item record with a nodeid")
            continue
        nodeid = entry["nodeid"]
        if nodeid in seen:
            found.append(f"{where}: item {nodeid} is logged more than once")
        seen.add(nodeid)
        if nodeid not in by_id:
            found.append(f"{where}: item {nodeid} is not in {MANIFEST} field items")
            continue
        index, item = by_id[nodeid]
        for key in sorted(set(entry) | {"outcome", "phases", "outputs"}):
            if key == "outputs" and "outputs_rehashed" in item:
                continue  # the controller re-hashed the folder and says why
            logged, recorded = entry.get(key, _ABSENT), item.get(key, _ABSENT)
            if logged != recorded:
                found.append(
                    f"{where} ({nodeid}): field {key} is "
                    f"{'absent' if logged is _ABSENT else _abbreviated(logged)}, but {MANIFEST} "
                    f"field items[{index}].{key} is "
                    f"{'absent' if recorded is _ABSENT else _abbreviated(recorded)}"
                )
    for nodeid, (index, item) in sorted(by_id.items()):
        if item.get("log_error"):  # the controller could not append it (a full disk) and says
            continue  # so in the manifest, whose bytes git records: an honest gap
        if nodeid not in seen and set(item.get("phases", {})) & set(FINISHING_PHASES):
            found.append(
                f"{MANIFEST}: field items[{index}] ({nodeid}) finished, but {ITEM_LOG} has no "
                "line for it"
            )
    return found


def check_junit(ev: Evidence) -> list[str]:
    if ev.manifest is None or JUNIT not in ev.present:
        return []
    if ev.junit_problem is not None:
        return [f"{JUNIT}: cannot be parsed as XML ({ev.junit_problem})"]
    found = []
    by_key = {_junit_key(i["nodeid"]): i for i in ev.items if "nodeid" in i}
    seen = set()
    for classname, name, said in ev.junit_cases:
        if name is None:
            continue  # pytest writes a nameless testcase for an item interrupted mid-call
        key = (classname, name)
        label = f"{classname}.{name}" if classname else name
        item = by_key.get(key)
        if item is None:
            found.append(f"{JUNIT}: testcase {label} is not an item of {MANIFEST}")
            continue
        seen.add(key)
        outcome = item.get("outcome")
        if outcome in JUNIT_OUTCOMES and said != outcome:
            found.append(
                f"{JUNIT}: testcase {label} {said}, but {MANIFEST} gives item "
                f"{item['nodeid']} outcome {outcome}"
            )
    for key, item in sorted(by_key.items()):
        if key not in seen and item.get("outcome") in JUNIT_OUTCOMES:
            found.append(
                f"{MANIFEST}: item {item['nodeid']} has outcome {item['outcome']}, but "
                f"{JUNIT} has no testcase for it"
            )
    return found


# -- the checks against git --------------------------------------------------------------------


def check_history(ev: Evidence) -> list[str]:
    return [f"the repository's history cannot be trusted: {p}" for p in ev.history_problems]


def check_committed(ev: Evidence) -> list[str]:
    """The approval copy is the approval committed at the run's commit, the plan and
    baseline it binds hash there as it says, and the commit follows its source anchor
    with nothing changed beyond the approval record."""
    if not ev.source_checked:
        return []
    source, a = str(ev.source_commit), ev.approval
    found = []
    if ev.committed_approval is not None:
        rel = approval_record(ev.run_id)
        if ev.committed_approval.problem is not None:
            found.append(
                f"{rel} is not committed at the run's commit {source[:12]}: the run did not "
                "start under a committed approval"
            )
        elif (
            APPROVAL_COPY in ev.run_bytes
            and ev.committed_approval.data != ev.run_bytes[APPROVAL_COPY]
        ):
            found.append(f"{rel} at {source[:12]} differs from the run's {APPROVAL_COPY}")
    if a is not None:
        for what in ("plan", "baseline"):
            path, digest = _value_at(a, f"{what}.path"), _value_at(a, f"{what}.sha256")
            read = ev.committed_bound.get(what)
            if not isinstance(path, str) or not isinstance(digest, str) or read is None:
                continue
            if read.problem is not None:
                found.append(f"{APPROVAL_COPY}: field {what}.path: {read.problem}")
            elif sha256_bytes(read.data or b"") != digest:
                found.append(
                    f"{path} at {source[:12]} does not hash as {APPROVAL_COPY} field "
                    f"{what}.sha256 says"
                )
    if ev.commit_problem is not None:
        found.append(f"git cannot read the run's commit {source[:12]} intact: {ev.commit_problem}")
        return found
    anchor = (a or {}).get("source_anchor")
    if not isinstance(anchor, str) or ev.anchor_is_ancestor is None:
        return found
    if not ev.anchor_is_ancestor:
        found.append(
            f"{APPROVAL_COPY}: field source_anchor {anchor[:12]} is not an ancestor of the "
            f"run's commit {source[:12]}"
        )
        return found
    record = approval_record((a or {}).get("run_id"))
    beyond = [p for p in ev.changed_since_anchor if p != record]
    if beyond:
        found.append(
            f"the run's source differs from the approved anchor beyond the record: {beyond[:5]}"
        )
    return found


def check_approval_signature(ev: Evidence) -> list[str]:
    """A stage whose plan requires a signed approval ran from an approval commit an approver
    signed (the gate's condition approval-signature, one function)."""
    return list(ev.signature_problems)


def check_attestation(ev: Evidence) -> list[str]:
    """The run's attestation is git's record of it, its statements are what the run folder
    gives now, and its signatures hold against the runners file of the run's commit."""
    return list(ev.attestation_problems)


def check_witness(ev: Evidence) -> list[str]:
    """The witness the approval names holds the run's start record, byte for byte (judged
    when the witness answers)."""
    return list(ev.witness_problems)


def check_records_intact(ev: Evidence) -> list[str]:
    """Each record git holds for the run that cannot be read back intact."""
    return [
        f"git's record {ref} cannot be read intact: {read.problem}"
        for ref, read in sorted(ev.records.items())
        if read.problem is not None
    ]


def check_refs(ev: Evidence) -> list[str]:
    """start.json and manifest.json are, byte for byte, the records git holds of them, and
    the source commit git pins for the run (if it pins one) is the one they name."""
    run_id = ev.run_id
    if not ev.refs_checked or run_id is None:
        return []
    found = []
    for name, ref in (
        (START_RECORD, ledger.start_ref(run_id)),
        (MANIFEST, ledger.manifest_ref(run_id)),
    ):
        recorded = ev.record(ref)
        if recorded is None and name == MANIFEST and name not in ev.present:
            continue  # the missing manifest is the finding already
        if recorded is None:
            found.append(
                f"git has no record {ref}: the run's {name} was never recorded in git (a run "
                "made outside the controller, or the ref was deleted)"
            )
        elif name not in ev.present:
            found.append(f"{name} is missing, but git records it ({ref})")
        elif name in ev.run_bytes and ev.run_bytes[name] != recorded:
            found.append(
                f"{name} differs from its record in git ({ref}): it was changed after it was written"
            )
    if ev.pinned_source is not None and ev.pinned_source != ev.source_commit:
        found.append(
            f"git pins commit {ev.pinned_source} as the run's source "
            f"({ledger.source_ref(run_id)}), but its records name {ev.source_commit}"
        )
    return found


def check_plan_at_source(ev: Evidence) -> list[str]:
    """The plan committed at the run's commit loads (the single-attempt check and the
    replay read it)."""
    return [] if ev.plan_problem is None else [ev.plan_problem]


def check_single_attempt(ev: Evidence) -> list[str]:
    run_id = ev.run_id
    stage = _single_attempt_stage(ev)
    if not ev.refs_checked or run_id is None or stage is None:
        return []
    ref = ledger.attempt_ref(stage)
    recorded = ev.record(ref)
    if recorded is None:
        return [f"stage {stage} allows a single attempt, but git has no record {ref}"]
    if recorded != ev.record(ledger.start_ref(run_id)):
        return [
            (
                f"stage {stage} allows a single attempt and git records it as run "
                f"{ev.attempt_holder} ({ref}); this run {run_id} is another attempt"
            )
        ]
    return []


def check_required_runs(ev: Evidence) -> list[str]:
    """Each required run the approval binds is recorded in git with the bound manifest."""
    if not ev.refs_checked or ev.run_id is None:
        return []
    found = []
    for stage, bound in _required_runs(ev):
        run_id, digest = bound.get("run_id"), bound.get("manifest_sha256")
        where = f"{APPROVAL_COPY} field requires.{stage}"
        if not isinstance(run_id, str) or not RUN_ID_PATTERN.match(run_id):
            found.append(f"{where}.run_id {run_id!r} is not a run id")
            continue
        ref = ledger.manifest_ref(run_id)
        recorded = ev.record(ref)
        if recorded is None:
            found.append(
                f"{where}: git has no record {ref}: the required run {run_id} was not "
                "recorded by a controller"
            )
        elif sha256_bytes(recorded) != digest:
            found.append(
                f"{where}.manifest_sha256 is {digest}, but git records run {run_id}'s "
                f"manifest ({ref}) as {sha256_bytes(recorded)}: the run consumed a changed "
                "manifest"
            )
    return found


def check_inputs(ev: Evidence) -> list[str]:
    inputs = (ev.approval or {}).get("inputs")
    if not isinstance(inputs, dict):
        return []
    found = []
    for name, bound in sorted(inputs.items()):
        seen = ev.inputs.get(name)
        if seen is None or not isinstance(bound, dict):
            continue
        where = f"{APPROVAL_COPY} field inputs.{name}"
        path = Path(bound["path"])
        if bound.get("kind") == "file":
            if not seen["exists"]:
                found.append(f"{where}: the bound file {path} is missing; it cannot be re-hashed")
            elif seen["sha256"] != bound.get("sha256"):
                found.append(
                    f"{where}: {path} hashes {seen['sha256']}, the approval binds "
                    f"{bound.get('sha256')} (the input changed after approval)"
                )
        elif bound.get("kind") == "git":
            commit = bound.get("commit")
            if not isinstance(commit, str) or not seen["repository"]:
                found.append(f"{where}: the bound repository {path} is missing")
            elif not seen["has_commit"]:
                found.append(f"{where}: the repository {path} lacks the bound commit {commit}")
    return found


Check = Callable[[Evidence], "list[str]"]

# In the order their findings are listed.
CHECKS: tuple[Check, ...] = (
    check_records,
    check_files,
    check_extensions,
    check_environment_lock,
    check_run_id,
    check_against_approval,
    check_against_start,
    check_status,
    check_item_log,
    check_junit,
    check_history,
    check_committed,
    check_records_intact,
    check_refs,
    check_approval_signature,
    check_attestation,
    check_witness,
    check_plan_at_source,
    check_single_attempt,
    check_required_runs,
    check_execution,
    check_workers,
    check_unbound_kind,
    check_inputs,
)


def could_not_audit(ev: Evidence) -> list[str]:
    """What keeps the run from being checked (blockers): git cannot answer, the run's
    commit is unknown or absent, a part of the gathering stopped on an unexpected error."""
    blockers = []
    if ev.git_problem is not None:
        blockers.append(
            f"git cannot answer in {ev.root}: {ev.git_problem}. Run the audit in the checkout "
            "the run was made in (or pass --repo), with git installed"
        )
    elif ev.git_answers and ev.source_commit is None:
        blockers.append(
            f"no readable source_commit in {MANIFEST} or {START_RECORD}: nothing to check "
            "the run against in git"
        )
    elif ev.source_in_repo is False:
        blockers.append(
            f"source commit {str(ev.source_commit)[:12]} is not in the repository at {ev.root}; "
            "fetch it (git fetch) or audit in the repository the run was made in"
        )
    for rel, err in sorted(ev.unreadable.items()):
        what = f"the run folder {ev.run_dir}" if rel == "." else f"{rel} in the run folder"
        blockers.append(
            f"{what} cannot be read ({err}), so it is not checked: make it readable "
            "(chmod u+r) and audit again"
        )
    return blockers + list(ev.gather_problems)
