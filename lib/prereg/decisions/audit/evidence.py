"""What the audit looks at: :func:`gather` reads a run folder, its records and what git
answers, once, into a frozen :class:`Evidence` (the checks of :mod:`.checks` take it, so they
are tested on evidence made by hand as well as on real runs)."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Mapping
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
from prereg.base.schema import SchemaError, validate
from prereg.base.typed_settings import SettingsError, parse_as
from prereg.decisions.manifest import describe
from prereg.kinds.plans import PLAN_SCHEMA, Plan, signing_required
from prereg.proof import attest, commits
from prereg.proof.keys import RUNNERS
from prereg.proof.verify import witness_disagrees
from prereg.records import (
    APPROVAL_COPY,
    COMPLETE,
    COMPLETE_FIELDS,
    ERROR,
    FAILED,
    ITEM_FIELDS,
    ITEM_LOG,
    ITEM_OPTIONAL_FIELDS,
    JUNIT,
    MANIFEST,
    MANIFEST_FIELDS,
    MINIMAL_FIELDS,
    OPTIONAL_FIELDS,
    PASSED,
    RUN_ID_PATTERN,
    SKIPPED,
    START_FIELDS,
    START_RECORD,
    approval_record,
    formats,
    ledger,
)
from prereg.records import MANIFEST_FORMAT as FORMAT
from prereg.records.runs import RunFolder

# The item outcomes junit.xml records too (a testcase passed, failed, errored or was skipped).
JUNIT_OUTCOMES = (PASSED, FAILED, ERROR, SKIPPED)


_ABSENT = object()


# -- small helpers -----------------------------------------------------------------------------


def _abbreviated(value: Any, limit: int = 160) -> str:
    """``value`` as JSON, cut to ``limit`` characters for a finding."""
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _as_text(value: Any) -> str:
    """A string as it is, any other value as :func:`_abbreviated` shows it."""
    return value if isinstance(value, str) and len(value) <= 160 else _abbreviated(value)


def _value_at(data: Any, path: tuple[str, ...] | str) -> Any:
    """The value at a dotted path of nested objects, or ``_ABSENT`` when a step is missing."""
    parts = path.split(".") if isinstance(path, str) else path
    for part in parts:
        if not isinstance(data, dict) or part not in data:
            return _ABSENT
        data = data[part]
    return data


def _fits_schema(value: Any, schema: Any, source: str, path: str, findings: list[str]) -> bool:
    """Whether ``value`` fits ``schema``; a finding when it does not."""
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
            elif _fits_schema(doc[key], schema, source, path, findings):
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
    # -- what prereg.proof judges of the run (read with git and the witness once)
    signature_problems: tuple[str, ...] = ()  # its approval commit's, when its plan requires it
    attestation_problems: tuple[str, ...] = ()  # its attestation against the run folder and git
    witness_problems: tuple[str, ...] = ()  # what the witness its approval names says
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
    if approval is not None:
        try:
            parse_as(formats.Approval, approval, path="")
        except SettingsError as err:
            found.append(f"{APPROVAL_COPY}: {err}")
            approval = None
    return {
        "load_findings": tuple(found),
        "manifest": manifest,
        "items": tuple(items),
        "start": start,
        "approval": approval,
    }


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
                path = _value_at(a, f"{what}.path")
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
    path = _value_at(ev.manifest or {}, "plan.path")
    if path is _ABSENT:
        path = _value_at(ev.approval or {}, "plan.path")
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
def _judge_proof(ev: Evidence) -> dict:
    """What :mod:`prereg.proof` finds of the run: the approval commit's signature (when the
    plan requires one: the gate's function), the attestation, and the witness (when it
    answers)."""
    run_id, source = ev.run_id, ev.source_commit
    if not ev.source_checked or not ev.refs_checked or run_id is None or source is None:
        return {}
    got: dict[str, Any] = {}
    plan = ev.plan
    if plan is not None and ev.stage in plan.stages and signing_required(plan.stage(ev.stage)):
        got["signature_problems"] = tuple(
            commits.signing_problems(ev.root, source, at_approval=False)
        )
    got["attestation_problems"] = tuple(
        attest.problems(
            ev.run_dir,
            ledger.read(ev.root, ledger.attestation_ref(run_id)),
            commits.role_file(ev.root, source, RUNNERS),
        )
    )
    url = ((ev.approval or {}).get("witness") or {}).get("url")
    start = ev.run_bytes.get(START_RECORD)
    if url and start is not None:
        got["witness_problems"] = tuple(witness_disagrees(ev.root, url, run_id, start) or ())
    return got


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
    ("the signatures, the attestation and the witness", _judge_proof),
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


def _plan_from_bytes(root: Path, rel: str, data: bytes):
    """The plan as it was at the run's commit (the working copy may have moved on)."""
    source = f"{rel} (at the run's commit)"
    value = parse_json(data, what="plan", source=source)
    validate(value, PLAN_SCHEMA, source=source)
    return Plan(path=Path(root) / rel, sha256=sha256_bytes(data), data=value)
