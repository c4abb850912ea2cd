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

import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from prereg.base import gitrepo
from prereg.base.hashing import (
    FolderListing,
    hash_entry,
    list_folder,
    parse_json,
    read_json,
    sha256_bytes,
    sha256_file,
)
from prereg.base.schema import MapOf, SchemaError, validate
from prereg.decisions import replay as replaying
from prereg.decisions.manifest import describe
from prereg.evidence import envlock, execution
from prereg.kinds.plans import PLAN_SCHEMA, Plan
from prereg.kinds.registry import STAGE_KINDS, group_problem
from prereg.records import (
    APPROVAL_COPY,
    APPROVAL_SCHEMA,
    CLEAN,
    COMPLETE,
    COMPLETE_FIELDS,
    COULD_NOT_AUDIT,
    ERROR,
    EXTENSION_ORIGIN,
    FAILED,
    FINDINGS,
    FINISHING_PHASES,
    FROM_APPROVAL,
    FROM_START,
    INCOMPLETE,
    ITEM_FIELDS,
    ITEM_LOG,
    ITEM_OPTIONAL_FIELDS,
    ITEMS_DIR,
    JUNIT,
    LOCK_SCHEMA,
    MANIFEST,
    MANIFEST_FIELDS,
    MINIMAL_FIELDS,
    OPTIONAL_FIELDS,
    PASSED,
    REHEARSAL_RECORD,
    RUN_ID_PATTERN,
    SKIPPED,
    START_FIELDS,
    START_RECORD,
    approval_record,
    ledger,
    verdicts,
)
from prereg.records import MANIFEST_FORMAT as FORMAT
from prereg.records import snapshot as snapshots
from prereg.records.runs import REHEARSAL_NOTE, RunFolder, is_rehearsal, valid_run_id

EXIT_CODES = {CLEAN: 0, FINDINGS: 1, COULD_NOT_AUDIT: 3}
# The item outcomes junit.xml records too (a testcase passed, failed, errored or was skipped).
JUNIT_OUTCOMES = (PASSED, FAILED, ERROR, SKIPPED)


_ABSENT = object()


@dataclass(frozen=True, eq=False)
class AuditResult(Sequence):
    """The audit of one run: a sequence of problem sentences (empty: clean), and more.

    Iterating, ``len`` and truth see :attr:`findings` followed by one sentence per
    blocker, so a caller that only asks "any problem?" treats "could not audit" as not
    clean. ``replayed`` says whether the stage kind's replay ran in this audit.
    """

    findings: tuple[str, ...] = ()
    blockers: tuple[str, ...] = ()
    replayed: bool = False
    replay_note: str = ""
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


# -- small helpers -----------------------------------------------------------------------------


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _plain(value: Any) -> str:
    """A string as it is, any other value as :func:`_short` shows it."""
    return value if isinstance(value, str) and len(value) <= 160 else _short(value)


def _dig(data: Any, path: tuple[str, ...] | str) -> Any:
    parts = path.split(".") if isinstance(path, str) else path
    for part in parts:
        if not isinstance(data, dict) or part not in data:
            return _ABSENT
        data = data[part]
    return data


def _fits(value: Any, schema: Any, source: str, path: str, findings: list[str]) -> bool:
    try:
        validate(value, schema, source=source, path=path)
    except SchemaError as err:
        findings.append(str(err))
        return False
    return True


def _fields(
    doc: dict, required: dict, optional: dict, source: str, findings: list[str], prefix: str = ""
) -> dict:
    """The fields of ``doc`` that fit their schema; a finding for each missing or malformed one.
    Fields the schemas do not name are kept as they are (records may grow)."""
    good = {k: v for k, v in doc.items() if k not in required and k not in optional}
    for schemas, needed in ((required, True), (optional, False)):
        for key, schema in schemas.items():
            path = f"{prefix}{key}"
            if key not in doc:
                if needed:
                    findings.append(f"{source}: missing field {path}")
            elif _fits(doc[key], schema, source, path, findings):
                good[key] = doc[key]
    return good


def _inside(rel: str) -> bool:
    """Whether a relative path from a record stays inside the folder it is relative to."""
    path = PurePosixPath(rel)
    return bool(rel) and not path.is_absolute() and ".." not in path.parts and "\\" not in rel


def _load(path: Path, what: str, findings: list[str]) -> dict | None:
    """A JSON object from ``path``, or None with a finding (a missing file: None, no finding)."""
    if not path.is_file():
        return None
    try:
        data = read_json(path, what=what)
    except (OSError, ValueError) as err:  # UnicodeDecodeError is a ValueError
        findings.append(f"{path.name}: cannot be read as JSON ({err})")
        return None
    if not isinstance(data, dict):
        findings.append(f"{path.name}: holds a JSON {type(data).__name__}, not an object")
        return None
    return data


# -- the evidence ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Read:
    """One record asked of git: its bytes (``data`` None: git has no such record), or the
    reason it cannot be read intact (``problem``)."""

    data: bytes | None = None
    problem: str | None = None


@dataclass(frozen=True)
class Evidence:
    """Everything the audit's checks look at; gathered once by :func:`gather`, or made by
    hand in tests. A field left at its default was not gathered (or had nothing to read)."""

    root: Path
    run_dir: Path
    # -- the records, as loaded: their well-formed parts, and a finding per malformed part
    load_findings: tuple[str, ...] = ()
    manifest: dict | None = None  # the manifest's well-formed fields (None: none readable)
    items: tuple[dict, ...] = ()  # the well-formed fields of each of its items
    start: dict | None = None  # start.json's well-formed fields
    approval: dict | None = None  # the approval copy, when it fits the approval schema
    # -- the run folder
    listing: FolderListing | None = None  # the folder's entries (None: not listed)
    present: frozenset[str] = frozenset()  # the run files (start.json, ...) that are files
    run_bytes: Mapping[str, bytes] = field(default_factory=dict)  # run file name -> its bytes
    hashes: Mapping[str, dict] = field(default_factory=dict)  # listed file -> hash_entry now
    unreadable: Mapping[str, str] = field(default_factory=dict)  # file of the folder -> error
    approval_copy_sha256: str | None = None
    item_log: str | None = None  # items.jsonl decoded
    item_log_problem: str | None = None  # why items.jsonl cannot be read
    # junit.xml: (classname, name, outcome) of each testcase (name None: pytest's nameless one)
    junit_cases: tuple[tuple[str, str | None, str], ...] = ()
    junit_problem: str | None = None  # why junit.xml cannot be parsed
    # -- git
    git_problem: str | None = None  # why git cannot answer in root
    git_answers: bool = False  # git is installed and root is a repository
    history_problems: tuple[str, ...] = ()
    source_in_repo: bool | None = None  # the source commit is in the repository (None: not asked)
    source_tree: str | None = None  # the source commit's tree id (None: not read)
    committed_approval: Read | None = None  # plans/approvals/<run-id>.json at the source commit
    committed_bound: Mapping[str, Read] = field(default_factory=dict)  # plan, baseline there
    anchor_is_ancestor: bool | None = None  # the approval's source anchor precedes the commit
    changed_since_anchor: tuple[str, ...] = ()
    commit_problem: str | None = None  # git could not read the source commit intact
    plan: Any = None  # the plan committed at the source commit (prereg.kinds.plans.Plan)
    plan_problem: str | None = None  # why it does not load
    refs_checked: bool = False  # this is the repository the run was made in
    records: Mapping[str, Read] = field(default_factory=dict)  # ref -> the record git holds
    attempt_holder: str | None = None  # the run id git records as a stage's single attempt
    pinned_source: str | None = None  # the commit git pins for the run (None: no such ref)
    # SHA-256 at the source commit of the relative files the execution record's plugins name
    # (a value None: no such file there; the mapping None: not read)
    committed_sha256: Mapping[str, str | None] | None = None
    # -- bound inputs: name -> {"exists", "sha256"} (file) or {"repository", "has_commit"} (git)
    inputs: Mapping[str, dict] = field(default_factory=dict)
    # -- parts of the gathering that stopped on an unexpected error (blockers)
    gather_problems: tuple[str, ...] = ()

    @property
    def run_id(self) -> str | None:
        """The run id the records claim (manifest, else start record), if it has the id form."""
        for doc in (self.manifest, self.start):
            value = (doc or {}).get("run_id")
            if isinstance(value, str) and RUN_ID_PATTERN.match(value):
                return value
        name = self.run_dir.name
        return name if RUN_ID_PATTERN.match(name) else None

    @property
    def source_commit(self) -> str | None:
        for doc in (self.manifest, self.start):
            value = (doc or {}).get("source_commit")
            if isinstance(value, str):
                return value
        return None

    @property
    def source_checked(self) -> bool:
        """The source commit is in the repository, so the run can be checked against it."""
        return self.source_in_repo is True and self.source_commit is not None

    def record(self, ref: str) -> bytes | None:
        """git's record ``ref`` as gathered (None: absent, not asked, or not intact)."""
        read = self.records.get(ref)
        return None if read is None else read.data

    @property
    def stage(self) -> Any:
        return (self.manifest or self.start or {}).get("stage")


# -- gathering ---------------------------------------------------------------------------------


def _load_records(ev: Evidence) -> dict:
    files = RunFolder(ev.run_dir)  # read by path: the folder's name may be no run id
    found: list[str] = []
    manifest = None
    items: list[dict] = []
    raw = _load(files.manifest, "manifest", found)
    if raw is None and not files.manifest.is_file():
        found.append(f"{MANIFEST} is missing: the run is still going, or its controller was killed")
    if raw is not None:
        if raw.get("minimal") is True:
            required = MINIMAL_FIELDS
        elif raw.get("status") == COMPLETE:
            required = {**MANIFEST_FIELDS, **COMPLETE_FIELDS}
        else:
            required = MANIFEST_FIELDS
        every = {**MANIFEST_FIELDS, **COMPLETE_FIELDS, **OPTIONAL_FIELDS}
        optional = {k: v for k, v in every.items() if k not in required}
        manifest = _fields(raw, required, optional, MANIFEST, found)
        if manifest.get("format", FORMAT) != FORMAT:
            found.append(f"{MANIFEST}: field format is {manifest['format']!r}, not {FORMAT!r}")
        for index, item in enumerate(manifest.get("items", [])):
            items.append(
                _fields(
                    item, ITEM_FIELDS, ITEM_OPTIONAL_FIELDS, MANIFEST, found, f"items[{index}]."
                )
            )
    start = _load(files.start, "start record", found)
    if start is not None:
        start = _fields(start, START_FIELDS, {}, START_RECORD, found)
    approval = _load(files.approval_copy, "approval copy", found)
    if approval is not None and not _fits(approval, APPROVAL_SCHEMA, APPROVAL_COPY, "", found):
        approval = None
    return {
        "load_findings": tuple(found),
        "manifest": manifest,
        "items": tuple(items),
        "start": start,
        "approval": approval,
    }


def _hashes_now(
    run_dir: Path, listing: FolderListing, manifest: dict
) -> tuple[dict[str, dict], dict[str, str]]:
    """hash_entry of each file the manifest lists that is a regular file of the folder now,
    and the error of each such file that cannot be read."""
    present = set(listing.files)
    irregular = {e["path"] for e in listing.irregular}
    hashes, unreadable = {}, {}
    for rel in sorted(_listed_files(manifest)):
        if _inside(rel) and rel in present and rel not in irregular:
            try:
                hashes[rel] = hash_entry(run_dir, rel)
            except OSError as err:
                unreadable[rel] = str(err)
    return hashes, unreadable


def _read_folder(ev: Evidence) -> dict:
    files = RunFolder(ev.run_dir)
    by_name = {
        START_RECORD: files.start,
        MANIFEST: files.manifest,
        APPROVAL_COPY: files.approval_copy,
        ITEM_LOG: files.item_log,
        JUNIT: files.junit,
    }
    present = frozenset(name for name, path in by_name.items() if path.is_file())
    unreadable: dict[str, str] = {}
    run_bytes: dict[str, bytes] = {}
    got: dict[str, Any] = {"present": present, "run_bytes": run_bytes, "unreadable": unreadable}
    for name in (START_RECORD, MANIFEST, APPROVAL_COPY):
        if name in present:
            try:
                run_bytes[name] = by_name[name].read_bytes()
            except OSError as err:
                unreadable[name] = str(err)
    if APPROVAL_COPY in run_bytes:
        got["approval_copy_sha256"] = sha256_bytes(run_bytes[APPROVAL_COPY])
    try:
        listing = got["listing"] = list_folder(ev.run_dir)
    except OSError as err:
        unreadable["."] = str(err)
        listing = None
    if listing is not None and ev.manifest is not None:
        got["hashes"], hashes_unreadable = _hashes_now(ev.run_dir, listing, ev.manifest)
        unreadable.update(hashes_unreadable)
    if ITEM_LOG in present:
        try:
            got["item_log"] = files.item_log.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as err:
            got["item_log_problem"] = str(err)
    if JUNIT in present:
        try:
            tree = ET.parse(files.junit)
        except (ET.ParseError, OSError) as err:
            got["junit_problem"] = str(err)
        else:
            got["junit_cases"] = tuple(
                (case.get("classname", ""), case.get("name"), _junit_outcome(case))
                for case in tree.getroot().iter("testcase")
            )
    return got


def _ask_git(ev: Evidence) -> dict:
    try:
        gitrepo.toplevel(ev.root)
    except gitrepo.GitError as err:
        return {"git_problem": str(err)}
    got: dict[str, Any] = {"git_answers": True}
    got["history_problems"] = tuple(gitrepo.history_problems(ev.root))
    source = ev.source_commit
    if source is not None:
        got["source_in_repo"] = gitrepo.commit_exists(ev.root, source)
    return got


def _read_commit(ev: Evidence) -> dict:
    """What the source commit holds of the approval, its bound files and its anchor."""
    if not ev.source_checked:
        return {}
    root, source, a = ev.root, str(ev.source_commit), ev.approval
    got: dict[str, Any] = {}
    bound: dict[str, Read] = {}
    try:
        run_id = ev.run_id
        if run_id is not None and APPROVAL_COPY in ev.present:
            try:
                got["committed_approval"] = Read(
                    data=gitrepo.show_bytes(root, source, approval_record(run_id))
                )
            except gitrepo.GitError as err:
                got["committed_approval"] = Read(problem=str(err))
        if a is not None:
            for what in ("plan", "baseline"):
                path = _dig(a, f"{what}.path")
                if not isinstance(path, str):
                    continue
                try:
                    bound[what] = Read(data=gitrepo.show_bytes(root, source, path))
                except gitrepo.GitError as err:
                    bound[what] = Read(problem=str(err))
            anchor = a.get("source_anchor")
            if isinstance(anchor, str):
                follows = gitrepo.commit_exists(root, anchor) and gitrepo.is_ancestor(
                    root, anchor, source
                )
                got["anchor_is_ancestor"] = follows
                if follows:
                    got["changed_since_anchor"] = tuple(
                        gitrepo.changed_between(root, anchor, source)
                    )
    except gitrepo.GitError as err:
        got["commit_problem"] = str(err)
    got["committed_bound"] = bound
    return got


def _read_source_tree(ev: Evidence) -> dict:
    if not ev.source_checked:
        return {}
    return {"source_tree": gitrepo.commit_tree(ev.root, str(ev.source_commit))}


def _read_plan(ev: Evidence) -> dict:
    path = _dig(ev.manifest or {}, "plan.path")
    if path is _ABSENT:
        path = _dig(ev.approval or {}, "plan.path")
    if not ev.source_checked or not isinstance(path, str):
        return {}
    try:
        data = gitrepo.show_bytes(ev.root, str(ev.source_commit), path)
        return {"plan": _plan_from_bytes(ev.root, path, data)}
    except Exception as err:  # noqa: BLE001 -- a plan that does not load is a finding
        return {"plan_problem": f"{path} at the run's commit does not load as a plan: {err}"}


def _single_attempt_stage(ev: Evidence) -> str | None:
    """The run's stage, when the plan at the source commit allows it a single attempt."""
    stage = ev.stage
    if ev.plan is None or not isinstance(stage, str):
        return None
    try:
        single = ev.plan.stage(stage).get("single_attempt")
    except (KeyError, LookupError, AttributeError, TypeError):
        return None
    return stage if single else None


def _required_runs(ev: Evidence) -> list[tuple[str, dict]]:
    requires = (ev.approval or {}).get("requires")
    if not isinstance(requires, dict):
        return []
    return [(stage, bound) for stage, bound in sorted(requires.items()) if isinstance(bound, dict)]


def _read_ledger(ev: Evidence) -> dict:
    """The records :mod:`prereg.records.ledger` keeps in git for this run, its stage and its
    inputs."""
    run_id = ev.run_id
    if not ev.git_answers or run_id is None:
        return {}
    records: dict[str, Read] = {}

    def ask(ref: str) -> bytes | None:
        if ref not in records:
            try:
                records[ref] = Read(data=ledger.read(ev.root, ref))
            except gitrepo.GitError as err:
                records[ref] = Read(problem=str(err))
        return records[ref].data

    mine = ask(ledger.start_ref(run_id))
    got: dict[str, Any] = {"records": records}
    if not ev.source_checked and mine is None:
        return got  # not the repository the run was made in
    got["refs_checked"] = True
    ask(ledger.manifest_ref(run_id))
    got["pinned_source"] = ledger.pinned_source(ev.root, run_id)
    stage = _single_attempt_stage(ev)
    if stage is not None:
        recorded = ask(ledger.attempt_ref(stage))
        if recorded is not None and recorded != mine:
            got["attempt_holder"] = ledger.attempt_run_id(ev.root, stage)
    for _, bound in _required_runs(ev):
        required = bound.get("run_id")
        if isinstance(required, str) and RUN_ID_PATTERN.match(required):
            ask(ledger.manifest_ref(required))
    return got


def _execution_record(ev: Evidence) -> dict | None:
    env = (ev.manifest or {}).get("environment")
    record = env.get("execution") if isinstance(env, dict) else None
    return record if isinstance(record, dict) else None


def _hash_committed_plugins(ev: Evidence) -> dict:
    """SHA-256 at the source commit of each relative file the execution record's plugins name."""
    record = _execution_record(ev)
    plugins = (record or {}).get("plugins")
    if not ev.source_checked:
        return {}
    hashes: dict[str, str | None] = {}
    for plugin in plugins if isinstance(plugins, list) else ():
        rel = plugin.get("file") if isinstance(plugin, dict) else None
        if isinstance(rel, str) and not os.path.isabs(rel) and rel not in hashes:
            try:
                hashes[rel] = sha256_bytes(gitrepo.show_bytes(ev.root, str(ev.source_commit), rel))
            except gitrepo.GitError:
                hashes[rel] = None
    return {"committed_sha256": hashes}


def _read_inputs(ev: Evidence) -> dict:
    inputs = (ev.approval or {}).get("inputs")
    if not isinstance(inputs, dict):
        return {}
    seen: dict[str, dict] = {}
    for name, bound in sorted(inputs.items()):
        if not isinstance(bound, dict) or not isinstance(bound.get("path"), str):
            continue
        path = Path(bound["path"])
        if bound.get("kind") == "file":
            exists = path.is_file()
            seen[name] = {"exists": exists, "sha256": sha256_file(path) if exists else None}
        elif bound.get("kind") == "git" and ev.git_answers:
            commit = bound.get("commit")
            repository = path.is_dir()
            seen[name] = {
                "repository": repository,
                "has_commit": isinstance(commit, str)
                and repository
                and gitrepo.commit_exists(path, commit),
            }
    return {"inputs": seen}


# Each step reads what the steps before it gathered; its name says what stopped, if one does.
GATHER_STEPS: tuple[tuple[str, Callable[[Evidence], dict]], ...] = (
    ("the run's records", _load_records),
    ("the run folder", _read_folder),
    ("git's answers", _ask_git),
    ("the source commit", _read_commit),
    ("the source commit's tree", _read_source_tree),
    ("the plan at the source commit", _read_plan),
    ("git's records of the run", _read_ledger),
    ("the committed plugin files", _hash_committed_plugins),
    ("the bound inputs", _read_inputs),
)


def gather(root: Path, run_dir: Path) -> Evidence:
    """The evidence of one run folder, read once; never raises (a step that stops on an
    unexpected error leaves its fields at their defaults and is named in gather_problems)."""
    ev = Evidence(root=Path(root), run_dir=Path(run_dir))
    stopped: list[str] = []
    for what, step in GATHER_STEPS:
        try:
            ev = replace(ev, **step(ev))
        except Exception as err:  # noqa: BLE001 -- the audit reports, it never crashes
            stopped.append(
                f"gathering {what} stopped on an unexpected error (please report it): "
                f"{describe(err)}"
            )
    return replace(ev, gather_problems=tuple(stopped))


# -- hashes ------------------------------------------------------------------------------------


def _listed_files(manifest: dict) -> dict[str, dict]:
    """Every file the manifest hashes, by path relative to the run folder (valid entries only)."""
    listed: dict[str, dict] = {}

    def add(rel: str, entry: Any) -> None:
        if isinstance(entry, dict) and isinstance(entry.get("path"), str):
            listed[rel] = entry

    for entry in manifest.get("run_files") or []:
        if isinstance(entry, dict) and isinstance(entry.get("path"), str):
            add(entry["path"], entry)
    for item in manifest.get("items") or []:
        if not isinstance(item, dict) or not isinstance(item.get("output_dir"), str):
            continue
        for entry in item.get("outputs") or []:
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                add(RunFolder.item_file(item["output_dir"], entry["path"]), entry)
    for key in ("summary_files", "partial_summary_files"):
        for entry in manifest.get(key) or []:
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                add(RunFolder.summary_file(entry["path"]), entry)
    return listed


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
    for rel in sorted(present - set(listed) - {MANIFEST}):
        findings.append(f"extra file not in the manifest: {rel}")
    return findings + _irregular_findings(listing)


def _hash_findings(run_dir: Path, manifest: dict) -> list[str]:
    """:func:`hash_findings` of ``run_dir`` as it is now against ``manifest``."""
    listing = list_folder(run_dir)
    return hash_findings(listing, _hashes_now(run_dir, listing, manifest)[0], manifest)


def _irregular_findings(contents: FolderListing) -> list[str]:
    """Each entry of the run folder that is neither a regular file nor a folder."""
    return [
        f"not a regular file: {e['path']} is {e['kind']}; a run folder holds only regular files "
        "and folders (the audit neither follows a link nor reads a pipe, so nothing there is "
        "hashed): find what made it; the run cannot audit clean while it is there"
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
    if not _fits(value, MapOf(MapOf(EXTENSION_ORIGIN)), MANIFEST, where, found):
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
    if not _fits(env["environment_lock"], LOCK_SCHEMA, MANIFEST, where, found):
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
                f"changed during the run (tree {_short(snapshot.get('tree'))} at the start, "
                f"{_short(snapshot.get('tree_at_end'))} at the end): what ran is unknown"
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
                f"{where} is {_short(worker)}, not a worker record (an object with id and spec): "
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
                f"{label}: ran from a snapshot of commit {_plain(commit)}, not the approved "
                f"commit {source}; its results do not come from the approved code"
            )
        if tree != ev.source_tree:
            found.append(
                f"{label}: ran from tree {_plain(tree)}, not the approved commit's tree "
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
        value, approved = _dig(m, mine), _dig(a, theirs)
        if value is _ABSENT or approved is _ABSENT:
            continue
        if value != approved:
            found.append(
                f"{MANIFEST}: field {mine} is {_short(value)}, but {APPROVAL_COPY} field "
                f"{'.'.join(theirs)} is {_short(approved)}"
            )
    digest = ev.approval_copy_sha256
    recorded = _dig(m, "approval.sha256")
    if recorded is not _ABSENT and recorded != digest:
        found.append(
            f"{MANIFEST}: field approval.sha256 is {recorded}, but {APPROVAL_COPY} hashes {digest}"
        )
    if isinstance(a.get("run_id"), str):
        expected = approval_record(a["run_id"])
        path = _dig(m, "approval.path")
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
            value, started = _dig(ev.manifest, mine), s.get(theirs, _ABSENT)
            if value is _ABSENT or started is _ABSENT:
                continue
            if value != started:
                found.append(
                    f"{MANIFEST}: field {mine} is {_short(value)}, but {START_RECORD} field "
                    f"{theirs} is {_short(started)}"
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
                f"{_short(phases)}"
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
                    f"{'absent' if logged is _ABSENT else _short(logged)}, but {MANIFEST} "
                    f"field items[{index}].{key} is "
                    f"{'absent' if recorded is _ABSENT else _short(recorded)}"
                )
    for nodeid, (index, item) in sorted(by_id.items()):
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
            path, digest = _dig(a, f"{what}.path"), _dig(a, f"{what}.sha256")
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


# -- JUnit names -------------------------------------------------------------------------------


def _junit_key(nodeid: str) -> tuple[str, str]:
    """(classname, name) of a node id in pytest's JUnit report (as ``mangle_test_address``)."""
    path, _, rest = nodeid.partition("::")
    names = [path.replace("/", ".").removesuffix(".py")]
    if rest:
        params = ""
        if rest.endswith("]") and "[" in rest:
            rest, params = rest[: rest.index("[")], rest[rest.index("[") :]
        names += rest.split("::")
        names[-1] += params
    return ".".join(names[:-1]), names[-1]


def _junit_outcome(case: ET.Element) -> str:
    tags = {child.tag for child in case}
    for tag, outcome in (("failure", FAILED), ("error", ERROR), ("skipped", SKIPPED)):
        if tag in tags:
            return outcome
    return PASSED


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
        status=(ev.manifest or {}).get("status"),
        extensions=extensions,
    )


def _plan_from_bytes(root: Path, rel: str, data: bytes):
    """The plan as it was at the run's commit (the working copy may have moved on)."""
    source = f"{rel} (at the run's commit)"
    value = parse_json(data, what="plan", source=source)
    validate(value, PLAN_SCHEMA, source=source)
    return Plan(path=Path(root) / rel, sha256=sha256_bytes(data), data=value)


def audit_run_cached(root: Path, run_dir: Path) -> AuditResult:
    """A full audit whose replay verdict may come from the one stored by ``prereg audit``.

    Everything but the replay (hashes, records, git, inputs) is checked now. The replay
    is not run again when :mod:`prereg.records.verdicts` holds a clean replayed verdict for this
    manifest's SHA-256 and this audit code; otherwise it runs now, the note says why a
    stored verdict was not used (stale: manifest or code changed), and the new verdict
    is stored.
    """
    run_dir = Path(run_dir)
    record = verdicts.load(root, run_dir)
    stale = verdicts.staleness(record, run_dir)
    if (
        stale is None
        and record.get("replayed")
        and record.get("verdict") == CLEAN
        and not record.get("findings")
    ):
        result = audit_run(root, run_dir, replay=False)
        if not result:
            return AuditResult(
                replay_note=f"replay: not run again; {verdicts.describe(record)}",
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
    verdicts.store(root, run_dir, result)
    return result
