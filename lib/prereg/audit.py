"""``prereg audit``: recompute every hash, cross-check every record, replay the stage.

A run leaves several records of itself: ``manifest.json``, ``start.json``, the approval
copy, ``items.jsonl``, ``junit.xml``, the item outputs, and in git the committed approval
and plan at the run's commit and the refs :mod:`prereg.ledger` created when the run
started and ended. The audit checks each against the others and against the bound
inputs, so a post-hoc change of any one of them is a finding naming the file and field.

The audit never raises: an unreadable or malformed record is a finding; what keeps the
audit from checking at all (not a git repository, git missing, the run's commit absent)
is a *blocker*, and the verdict is then "could not audit" unless findings were made.
Replay is the stage kind's: it regenerates data from seeds and recomputes analysis from
saved predictions, never training anything; it runs only for a complete run whose
records all agree, and the result says whether it ran.
"""

from __future__ import annotations

import json
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from prereg import envlock, execution, gate, gitrepo, ledger
from prereg.hashing import (
    FolderListing,
    hash_entry,
    list_folder,
    parse_json,
    read_json,
    sha256_bytes,
    sha256_file,
)
from prereg.runs import (
    APPROVAL_COPY,
    COMPLETE,
    INCOMPLETE,
    ITEM_LOG,
    ITEMS_DIR,
    JUNIT,
    MANIFEST,
    RUN_ID_PATTERN,
    START_RECORD,
    RunFolder,
    valid_run_id,
)
from prereg.schema import (
    MapOf,
    NonNegativeFloat,
    NonNegativeInt,
    Nullable,
    OneOf,
    SchemaError,
    validate,
)

CLEAN = "clean"
FINDINGS = "findings"
COULD_NOT_AUDIT = "could not audit"
EXIT_CODES = {CLEAN: 0, FINDINGS: 1, COULD_NOT_AUDIT: 3}

# Outcomes the controller gives an item (prereg.plugin._outcome; "unknown": a folder under
# items/ that no item of the run claims, recorded with its files).
OUTCOMES = ("passed", "failed", "error", "skipped", "interrupted", "not run", "unknown")
# Phases whose report makes the controller append the item to items.jsonl ("???": xdist's
# report for an item whose worker crashed).
FINISHING_PHASES = ("teardown", "???")

FILE_ENTRY = {"path": str, "sha256": str, "bytes": NonNegativeInt}
HASH_LISTS = ("run_files", "summary_files", "partial_summary_files")

# Fields every manifest has (open: fields added later are not findings).
MANIFEST_FIELDS = {
    "format": str,
    "stage": str,
    "run_id": str,
    "status": OneOf((COMPLETE, INCOMPLETE)),
    "incomplete_reasons": [str],
    "source_commit": str,
    "source_anchor": str,
    "plan": {"path": str, "sha256": str},
    "approval": {"path": str, "sha256": str},
    "baseline_sha256": str,
    "seed_namespace": Nullable(str),
    "deviations": [dict],
    "requires": MapOf(dict),
    "inputs": MapOf(dict),
    "expected_items": NonNegativeInt,
    "items": [dict],
    "run_files": [FILE_ENTRY],
    "summary_files": [FILE_ENTRY],
}
# Fields a complete run's manifest has; a minimal manifest written after a crash may lack them.
COMPLETE_FIELDS = {
    "environment": dict,
    "workers": NonNegativeInt,
    "started_at": str,
    "ended_at": str,
    "elapsed_seconds": NonNegativeFloat,
    "budget": dict,
}
OPTIONAL_FIELDS = {"partial_summary_files": [FILE_ENTRY]}
# A minimal manifest (``"minimal": true``), written when the full one could not be: always
# incomplete, holding what the start record and the run folder tell for sure.
MINIMAL_FIELDS = {
    "format": str,
    "stage": str,
    "run_id": str,
    "status": OneOf((INCOMPLETE,)),
    "incomplete_reasons": [str],
    "source_commit": Nullable(str),
    "plan": {"path": Nullable(str), "sha256": Nullable(str)},
    "approval": {"path": str, "sha256": Nullable(str)},
    "expected_items": NonNegativeInt,
    "items": [dict],
    "run_files": [FILE_ENTRY],
    "summary_files": [FILE_ENTRY],
}
ITEM_FIELDS = {"nodeid": str, "outcome": OneOf(OUTCOMES), "phases": MapOf(str)}
ITEM_OPTIONAL_FIELDS = {"output_dir": str, "outputs": [FILE_ENTRY]}
START_FIELDS = {
    "stage": str,
    "run_id": str,
    "started_at": str,
    "source_commit": str,
    "plan_sha256": str,
    "approval_sha256": str,
}
# The approval's fields the manifest repeats: manifest field -> approval field path.
FROM_APPROVAL = {
    "stage": ("stage",),
    "run_id": ("run_id",),
    "deviations": ("deviations",),
    "seed_namespace": ("seed_namespace",),
    "requires": ("requires",),
    "inputs": ("inputs",),
    "source_anchor": ("source_anchor",),
    "baseline_sha256": ("baseline", "sha256"),
    "plan.path": ("plan", "path"),
    "plan.sha256": ("plan", "sha256"),
}
# start.json field -> manifest field.
FROM_START = {
    "stage": "stage",
    "run_id": "run_id",
    "started_at": "started_at",
    "source_commit": "source_commit",
    "plan_sha256": "plan.sha256",
    "approval_sha256": "approval.sha256",
}


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


def _hash_findings(run_dir: Path, manifest: dict) -> list[str]:
    """Each file the manifest lists that is missing or hashes otherwise, each unlisted file,
    and each entry that is neither a regular file nor a folder (a symbolic link, a named
    pipe: never followed nor read)."""
    findings = []
    listed = _listed_files(manifest)
    contents = list_folder(run_dir)
    present = set(contents.files)
    irregular = {e["path"] for e in contents.irregular}
    for rel, entry in sorted(listed.items()):
        if not _inside(rel):
            findings.append(f"{MANIFEST}: lists {rel!r}, a path outside the run folder")
        elif rel in irregular:
            continue  # named below
        elif rel not in present:
            findings.append(f"missing file: {rel}")
        elif _differs(hash_entry(run_dir, rel), entry):
            findings.append(f"changed file: {rel} (SHA-256 differs from the manifest)")
    for rel in sorted(present - set(listed) - {MANIFEST}):
        findings.append(f"extra file not in the manifest: {rel}")
    return findings + _irregular_findings(contents)


def _irregular_findings(contents: FolderListing) -> list[str]:
    """Each entry of the run folder that is neither a regular file nor a folder."""
    return [
        f"not a regular file: {e['path']} is {e['kind']}; a run folder holds only regular files "
        "and folders (the audit neither follows a link nor reads a pipe, so nothing there is "
        "hashed): find what made it; the run cannot audit clean while it is there"
        for e in contents.irregular
    ]


# -- the audit ---------------------------------------------------------------------------------


class _Audit:
    def __init__(self, root: Path, run_dir: Path) -> None:
        self.root = root
        self.run_dir = run_dir
        self.files = RunFolder(run_dir)  # read by path: the folder's name may be no run id
        self.findings: list[str] = []
        self.blockers: list[str] = []
        self.git = False
        self.manifest: dict | None = None  # the manifest's well-formed fields
        self.items: list[dict] = []  # its well-formed items
        self.start: dict | None = None
        self.approval: dict | None = None
        self._plan: Any = _ABSENT
        self.extensions: dict | None = None  # environment.extensions, when well-formed
        self.git_answers = False  # git is installed and the root is a repository

    def find(self, message: str) -> None:
        self.findings.append(message)

    # records ---------------------------------------------------------------------------------

    def load(self) -> None:
        raw = _load(self.files.manifest, "manifest", self.findings)
        if raw is None and not self.files.manifest.is_file():
            self.find(
                f"{MANIFEST} is missing: the run is still going, or its controller was killed"
            )
        if raw is not None:
            if raw.get("minimal") is True:
                required = MINIMAL_FIELDS
            elif raw.get("status") == COMPLETE:
                required = {**MANIFEST_FIELDS, **COMPLETE_FIELDS}
            else:
                required = MANIFEST_FIELDS
            every = {**MANIFEST_FIELDS, **COMPLETE_FIELDS, **OPTIONAL_FIELDS}
            optional = {k: v for k, v in every.items() if k not in required}
            self.manifest = _fields(raw, required, optional, MANIFEST, self.findings)
            from prereg.manifest import FORMAT

            if self.manifest.get("format", FORMAT) != FORMAT:
                self.find(
                    f"{MANIFEST}: field format is {self.manifest['format']!r}, not {FORMAT!r}"
                )
            for index, item in enumerate(self.manifest.get("items", [])):
                self.items.append(
                    _fields(
                        item,
                        ITEM_FIELDS,
                        ITEM_OPTIONAL_FIELDS,
                        MANIFEST,
                        self.findings,
                        prefix=f"items[{index}].",
                    )
                )
        start = _load(self.files.start, "start record", self.findings)
        if start is not None:
            self.start = _fields(start, START_FIELDS, {}, START_RECORD, self.findings)
        self.approval = self._load_approval()

    def _load_approval(self) -> dict | None:
        data = _load(self.files.approval_copy, "approval copy", self.findings)
        if data is None:
            return None
        try:
            from prereg.approval import APPROVAL_SCHEMA
        except ImportError:  # the schema moved: the fields compared below are still checked
            return data
        return data if _fits(data, APPROVAL_SCHEMA, APPROVAL_COPY, "", self.findings) else None

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

    # cross-checks ------------------------------------------------------------------------------

    def check_files(self) -> None:
        m = self.manifest
        if m is None:
            self.findings.extend(_irregular_findings(list_folder(self.run_dir)))
            return
        self.findings.extend(_hash_findings(self.run_dir, m))
        listed = {e["path"] for e in m.get("run_files", [])}
        f = self.files
        required = [(START_RECORD, f.start), (APPROVAL_COPY, f.approval_copy)]
        if any(set(i.get("phases", {})) & set(FINISHING_PHASES) for i in self.items):
            required.append((ITEM_LOG, f.item_log))
        if any(i.get("phases") for i in self.items) or m.get("status") == COMPLETE:
            required.append((JUNIT, f.junit))
        for name, path in required:
            if name not in listed:
                self.find(f"{MANIFEST}: field run_files does not list {name}, a run file")
                if not path.is_file():
                    self.find(f"missing file: {name}")
        for item in self.items:
            if "output_dir" in item and not _inside(item["output_dir"]):
                self.find(
                    f"{MANIFEST}: item {item.get('nodeid')!r} has output_dir "
                    f"{item['output_dir']!r}, a path outside {ITEMS_DIR}/"
                )

    def check_extensions(self) -> None:
        """``environment.extensions``: installed stage kinds, law families and harness kinds
        the controller loaded, each with its distribution, entry point and file; well-formed
        or a finding (a manifest written before they were recorded has none: not a finding)."""
        env = (self.manifest or {}).get("environment")
        bound = (self.approval or {}).get("extensions") or {}
        if not isinstance(env, dict) or "extensions" not in env:
            if bound:
                self.find(
                    f"{MANIFEST}: the approval binds installed extensions "
                    f"({', '.join(sorted(bound))}), but environment.extensions is missing"
                )
            return
        from prereg.registry import EXTENSION_ORIGIN, GROUPS

        where = "environment.extensions"
        value = env["extensions"]
        if not _fits(value, MapOf(MapOf(EXTENSION_ORIGIN)), MANIFEST, where, self.findings):
            return
        unknown = sorted(set(value) - set(GROUPS))
        for group in unknown:
            self.find(
                f"{MANIFEST}: field {where} names {group!r}, not an extension group "
                f"(one of {', '.join(GROUPS)})"
            )
        if not unknown:
            self.extensions = value
        for group, entries in sorted(bound.items()) if isinstance(bound, dict) else ():
            for name, approved in sorted(entries.items()) if isinstance(entries, dict) else ():
                ran = value.get(group, {}).get(name) if isinstance(value.get(group), dict) else None
                if ran != approved:
                    self.find(
                        f"{MANIFEST}: {where}.{group}.{name} is {ran!r}, but the approval binds "
                        f"{approved!r}: the run loaded other extension code than approved"
                    )

    def check_environment_lock(self) -> None:
        """``environment.environment_lock``: the interpreter and installed distributions the run
        saw equal the approval's lock (prereg.envlock); an approval without one binds none."""
        bound = (self.approval or {}).get("environment_lock")
        env = (self.manifest or {}).get("environment")
        if bound is None or (self.manifest or {}).get("minimal"):
            return  # a minimal manifest records no environment (its reasons say why)
        where = "environment.environment_lock"
        if not isinstance(env, dict) or "environment_lock" not in env:
            self.find(f"{MANIFEST}: the approval binds an environment lock, but {where} is missing")
            return
        if not _fits(env["environment_lock"], envlock.LOCK_SCHEMA, MANIFEST, where, self.findings):
            return
        for problem in envlock.lock_problems(bound, env["environment_lock"], when="in the run"):
            self.find(f"{MANIFEST}: {where}: {problem}")

    def check_unbound_kind(self) -> None:
        """The run's stage kind, when the run loaded it from an installed package, is one the
        approval binds (an approval whose ``extensions`` field was removed by hand binds none,
        and any installed version of the kind could have run)."""
        from prereg.registry import STAGE_KINDS

        ran = (self.extensions or {}).get(STAGE_KINDS) or {}
        bound = (self.approval or {}).get("extensions")
        bound = bound.get(STAGE_KINDS) if isinstance(bound, dict) else None
        stage = (self.manifest or {}).get("stage")
        plan = self.plan_at_source() if ran else None
        if plan is None or not isinstance(stage, str) or stage not in plan.stages:
            return
        kind = plan.stage(stage)["kind"]
        if kind in ran and not (isinstance(bound, dict) and kind in bound):
            self.find(
                f"{MANIFEST}: the run loaded stage kind {kind!r} from the installed "
                f"{ran[kind].get('distribution')}, but the approval binds no installed package "
                "for it (its extensions field lacks it): nothing shows the code approved ran"
            )

    def read_record(self, ref: str) -> bytes | None:
        """git's record ``ref`` (None when absent, or damaged: then named as a finding)."""
        try:
            return ledger.read(self.root, ref)
        except gitrepo.GitError as err:
            self.find(f"git's record {ref} cannot be read intact: {err}")
            return None

    def check_execution(self) -> None:
        """Re-judge, from the manifest, the conditions under which the run's code ran: it ran
        from a snapshot whose tree is the source commit's, at the start and at the end
        (:func:`prereg.gate.hermetic`), and its recorded execution escapes neither the
        snapshot nor the installed packages (:func:`prereg.execution.recorded_problems`)."""
        env = (self.manifest or {}).get("environment")
        source = self.source_commit
        if not isinstance(env, dict) or not self.git or source is None:
            return
        snapshot = env.get("snapshot")
        if not isinstance(snapshot, dict):
            self.find(
                f"{MANIFEST}: environment.snapshot is missing: nothing shows the run executed a "
                "snapshot of the approved commit (a research run started with `pytest "
                "--research-stage=NAME` always records one)"
            )
        else:
            source_tree = gitrepo.commit_tree(self.root, source)
            for key in ("tree", "tree_at_end"):
                facts = gate.Facts(
                    stage=str(self.manifest.get("stage")),
                    record=self.approval or {},
                    record_rel="",
                    snapshot_tree=str(snapshot.get(key)),
                    source_tree=source_tree,
                )
                for refusal in gate.hermetic(facts):
                    self.find(f"{MANIFEST}: environment.snapshot.{key}: {refusal.message}")
        record = env.get("execution")
        if isinstance(record, dict):

            def committed(rel: str) -> str | None:
                try:
                    return sha256_bytes(gitrepo.show_bytes(self.root, source, rel))
                except gitrepo.GitError:
                    return None

            for problem in execution.recorded_problems(record, committed):
                self.find(f"{MANIFEST}: environment.execution: {problem}")

    def check_run_id(self) -> None:
        for name, doc in ((MANIFEST, self.manifest), (START_RECORD, self.start)):
            value = (doc or {}).get("run_id")
            if value is None:
                continue
            if not RUN_ID_PATTERN.match(value):
                self.find(
                    f"{name}: field run_id {value!r} does not have the form <stage>-YYYYMMDD-NNN"
                )
            elif value != self.run_dir.name:
                self.find(
                    f"{name}: field run_id is {value!r}, but the run folder is named "
                    f"{self.run_dir.name!r} (a run folder is never renamed)"
                )

    def check_against_approval(self) -> None:
        m, a = self.manifest, self.approval
        if m is None or a is None:
            return
        for mine, theirs in FROM_APPROVAL.items():
            value, approved = _dig(m, mine), _dig(a, theirs)
            if value is _ABSENT or approved is _ABSENT:
                continue
            if value != approved:
                self.find(
                    f"{MANIFEST}: field {mine} is {_short(value)}, but {APPROVAL_COPY} field "
                    f"{'.'.join(theirs)} is {_short(approved)}"
                )
        digest = sha256_file(self.files.approval_copy)
        recorded = _dig(m, "approval.sha256")
        if recorded is not _ABSENT and recorded != digest:
            self.find(
                f"{MANIFEST}: field approval.sha256 is {recorded}, but {APPROVAL_COPY} hashes {digest}"
            )
        if isinstance(a.get("run_id"), str):
            expected = f"plans/approvals/{a['run_id']}.json"
            path = _dig(m, "approval.path")
            if path is not _ABSENT and path != expected:
                self.find(f"{MANIFEST}: field approval.path is {path!r}, not {expected!r}")

    def check_against_start(self) -> None:
        s = self.start
        if s is None:
            return
        if self.manifest is not None:
            for theirs, mine in FROM_START.items():
                value, started = _dig(self.manifest, mine), s.get(theirs, _ABSENT)
                if value is _ABSENT or started is _ABSENT:
                    continue
                if value != started:
                    self.find(
                        f"{MANIFEST}: field {mine} is {_short(value)}, but {START_RECORD} field "
                        f"{theirs} is {_short(started)}"
                    )
        copy = self.files.approval_copy
        if copy.is_file() and "approval_sha256" in s and sha256_file(copy) != s["approval_sha256"]:
            self.find(
                f"{START_RECORD}: field approval_sha256 does not match {APPROVAL_COPY}'s SHA-256"
            )

    def check_status(self) -> None:
        m = self.manifest
        if m is None or "status" not in m:
            return
        status, reasons = m["status"], m.get("incomplete_reasons")
        nodeids = [i["nodeid"] for i in self.items if "nodeid" in i]
        for nodeid in sorted({n for n in nodeids if nodeids.count(n) > 1}):
            self.find(f"{MANIFEST}: field items lists {nodeid} more than once")
        for item in self.items:
            phases = item.get("phases", {})
            if item.get("outcome") == "passed" and not (
                phases.get("call") == "passed"
                and "teardown" in phases
                and all(v == "passed" for v in phases.values())
            ):
                self.find(
                    f"{MANIFEST}: item {item.get('nodeid')} has outcome passed but phases "
                    f"{_short(phases)}"
                )
        if status == COMPLETE:
            if reasons:
                self.find(
                    f"{MANIFEST}: field status is complete but incomplete_reasons is not empty"
                )
            not_passed = [i.get("nodeid", "?") for i in self.items if i.get("outcome") != "passed"]
            if not_passed:
                self.find(
                    f"{MANIFEST}: field status is complete but {len(not_passed)} item(s) did not "
                    f"pass: {', '.join(not_passed[:5])}"
                )
            expected = m.get("expected_items")
            if expected is not None and expected != len(m.get("items", [])):
                self.find(
                    f"{MANIFEST}: field status is complete but expected_items is {expected} and "
                    f"items holds {len(m.get('items', []))}"
                )
            if not m.get("items"):
                self.find(f"{MANIFEST}: field status is complete but items is empty")
            if m.get("partial_summary_files"):
                self.find(f"{MANIFEST}: field partial_summary_files is not empty in a complete run")
        elif status == INCOMPLETE:
            expected, held = m.get("expected_items"), len(m.get("items", []))
            if expected is not None and "minimal" not in m and held < expected:
                self.find(
                    f"{MANIFEST}: field items holds {held} item(s), fewer than expected_items "
                    f"({expected}): every expected item has a record, run or not"
                )
            if not reasons:
                self.find(f"{MANIFEST}: field status is incomplete but incomplete_reasons is empty")
            if m.get("summary_files"):
                self.find(
                    f"{MANIFEST}: field summary_files is not empty in an incomplete run "
                    "(a summary exists only for a complete run)"
                )

    def check_item_log(self) -> None:
        path = self.files.item_log
        if self.manifest is None or not path.is_file():
            return
        by_id = {i["nodeid"]: (n, i) for n, i in enumerate(self.items) if "nodeid" in i}
        seen: set[str] = set()
        try:
            lines = path.read_bytes().decode("utf-8").split("\n")
        except (OSError, UnicodeDecodeError) as err:
            self.find(f"{ITEM_LOG}: cannot be read ({err})")
            return
        if lines and lines[-1] == "":
            lines.pop()
        elif lines:
            self.find(f"{ITEM_LOG}: the last line has no line end (torn or edited)")
        for number, line in enumerate(lines, start=1):
            where = f"{ITEM_LOG} line {number}"
            try:
                entry = parse_json(line, what="line", source=f"{number}")
            except ValueError as err:
                self.find(f"{where}: not valid JSON ({err})")
                continue
            if not isinstance(entry, dict) or not isinstance(entry.get("nodeid"), str):
                self.find(f"{where}: not an item record with a nodeid")
                continue
            nodeid = entry["nodeid"]
            if nodeid in seen:
                self.find(f"{where}: item {nodeid} is logged more than once")
            seen.add(nodeid)
            if nodeid not in by_id:
                self.find(f"{where}: item {nodeid} is not in {MANIFEST} field items")
                continue
            index, item = by_id[nodeid]
            for key in sorted(set(entry) | {"outcome", "phases", "outputs"}):
                if key == "outputs" and "outputs_rehashed" in item:
                    continue  # the controller re-hashed the folder and says why
                logged, recorded = entry.get(key, _ABSENT), item.get(key, _ABSENT)
                if logged != recorded:
                    self.find(
                        f"{where} ({nodeid}): field {key} is "
                        f"{'absent' if logged is _ABSENT else _short(logged)}, but {MANIFEST} "
                        f"field items[{index}].{key} is "
                        f"{'absent' if recorded is _ABSENT else _short(recorded)}"
                    )
        for nodeid, (index, item) in sorted(by_id.items()):
            if nodeid not in seen and set(item.get("phases", {})) & set(FINISHING_PHASES):
                self.find(
                    f"{MANIFEST}: field items[{index}] ({nodeid}) finished, but {ITEM_LOG} has no "
                    "line for it"
                )

    def check_junit(self) -> None:
        path = self.files.junit
        if self.manifest is None or not path.is_file():
            return
        try:
            tree = ET.parse(path)
        except (ET.ParseError, OSError) as err:
            self.find(f"{JUNIT}: cannot be parsed as XML ({err})")
            return
        by_key = {_junit_key(i["nodeid"]): i for i in self.items if "nodeid" in i}
        seen = set()
        for case in tree.getroot().iter("testcase"):
            name = case.get("name")
            if name is None:
                continue  # pytest writes a nameless testcase for an item interrupted mid-call
            key = (case.get("classname", ""), name)
            label = f"{key[0]}.{name}" if key[0] else name
            item = by_key.get(key)
            if item is None:
                self.find(f"{JUNIT}: testcase {label} is not an item of {MANIFEST}")
                continue
            seen.add(key)
            said = _junit_outcome(case)
            outcome = item.get("outcome")
            if outcome in ("passed", "failed", "error", "skipped") and said != outcome:
                self.find(
                    f"{JUNIT}: testcase {label} {said}, but {MANIFEST} gives item "
                    f"{item['nodeid']} outcome {outcome}"
                )
        for key, item in sorted(by_key.items()):
            if key not in seen and item.get("outcome") in ("passed", "failed", "error", "skipped"):
                self.find(
                    f"{MANIFEST}: item {item['nodeid']} has outcome {item['outcome']}, but "
                    f"{JUNIT} has no testcase for it"
                )

    # git ----------------------------------------------------------------------------------------

    def check_git(self) -> None:
        try:
            gitrepo.toplevel(self.root)
        except gitrepo.GitError as err:
            self.blockers.append(
                f"git cannot answer in {self.root}: {err}. Run the audit in the checkout the run "
                "was made in (or pass --repo), with git installed"
            )
            return
        self.git_answers = True
        for problem in gitrepo.history_problems(self.root):
            self.find(f"the repository's history cannot be trusted: {problem}")
        source = self.source_commit
        if source is None:
            self.blockers.append(
                f"no readable source_commit in {MANIFEST} or {START_RECORD}: nothing to check "
                "the run against in git"
            )
        elif not gitrepo.commit_exists(self.root, source):
            self.blockers.append(
                f"source commit {source[:12]} is not in the repository at {self.root}; fetch it "
                "(git fetch) or audit in the repository the run was made in"
            )
        else:
            self.git = True
            try:
                self.check_committed(source)
            except gitrepo.GitError as err:
                self.find(f"git cannot read the run's commit {source[:12]} intact: {err}")
        run_id = self.run_id
        known = run_id is not None and self.read_record(ledger.start_ref(run_id)) is not None
        if self.git or known:  # else this is not the repository the run was made in
            self.check_refs()

    def check_committed(self, source: str) -> None:
        a, copy = self.approval, self.files.approval_copy
        run_id = self.run_id
        if run_id is not None and copy.is_file():
            rel = f"plans/approvals/{run_id}.json"
            try:
                if gitrepo.show_bytes(self.root, source, rel) != copy.read_bytes():
                    self.find(f"{rel} at {source[:12]} differs from the run's {APPROVAL_COPY}")
            except gitrepo.GitError:
                self.find(
                    f"{rel} is not committed at the run's commit {source[:12]}: the run did not "
                    "start under a committed approval"
                )
        if a is None:
            return
        for what, path, digest in (
            ("plan", _dig(a, "plan.path"), _dig(a, "plan.sha256")),
            ("baseline", _dig(a, "baseline.path"), _dig(a, "baseline.sha256")),
        ):
            if not isinstance(path, str) or not isinstance(digest, str):
                continue
            try:
                data = gitrepo.show_bytes(self.root, source, path)
            except gitrepo.GitError as err:
                self.find(f"{APPROVAL_COPY}: field {what}.path: {err}")
                continue
            if sha256_bytes(data) != digest:
                self.find(
                    f"{path} at {source[:12]} does not hash as {APPROVAL_COPY} field "
                    f"{what}.sha256 says"
                )
        anchor = a.get("source_anchor")
        if not isinstance(anchor, str):
            return
        if not gitrepo.commit_exists(self.root, anchor) or not gitrepo.is_ancestor(
            self.root, anchor, source
        ):
            self.find(
                f"{APPROVAL_COPY}: field source_anchor {anchor[:12]} is not an ancestor of the "
                f"run's commit {source[:12]}"
            )
            return
        record = f"plans/approvals/{a.get('run_id')}.json"
        beyond = [p for p in gitrepo.changed_between(self.root, anchor, source) if p != record]
        if beyond:
            self.find(
                f"the run's source differs from the approved anchor beyond the record: {beyond[:5]}"
            )

    def check_refs(self) -> None:
        run_id = self.run_id
        if run_id is None:
            return
        for name, path, ref in (
            (START_RECORD, self.files.start, ledger.start_ref(run_id)),
            (MANIFEST, self.files.manifest, ledger.manifest_ref(run_id)),
        ):
            try:
                recorded = self.read_record(ref)
            except gitrepo.GitError as err:
                self.blockers.append(str(err))
                return
            if recorded is None and name == MANIFEST and not path.is_file():
                continue  # the missing manifest is the finding already
            if recorded is None:
                self.find(
                    f"git has no record {ref}: the run's {name} was never recorded in git (a run "
                    "made outside the controller, or the ref was deleted)"
                )
            elif not path.is_file():
                self.find(f"{name} is missing, but git records it ({ref})")
            elif path.read_bytes() != recorded:
                self.find(
                    f"{name} differs from its record in git ({ref}): it was changed after it was written"
                )
        self.check_single_attempt(run_id)
        self.check_required_runs()

    def check_required_runs(self) -> None:
        """Each required run the approval binds is recorded in git with the bound manifest."""
        requires = (self.approval or {}).get("requires")
        if not isinstance(requires, dict):
            return
        for stage, bound in sorted(requires.items()):
            if not isinstance(bound, dict):
                continue
            run_id, digest = bound.get("run_id"), bound.get("manifest_sha256")
            where = f"{APPROVAL_COPY} field requires.{stage}"
            if not isinstance(run_id, str) or not RUN_ID_PATTERN.match(run_id):
                self.find(f"{where}.run_id {run_id!r} is not a run id")
                continue
            ref = ledger.manifest_ref(run_id)
            recorded = self.read_record(ref)
            if recorded is None:
                self.find(
                    f"{where}: git has no record {ref}: the required run {run_id} was not "
                    "recorded by a controller"
                )
            elif sha256_bytes(recorded) != digest:
                self.find(
                    f"{where}.manifest_sha256 is {digest}, but git records run {run_id}'s "
                    f"manifest ({ref}) as {sha256_bytes(recorded)}: the run consumed a changed "
                    "manifest"
                )

    def check_single_attempt(self, run_id: str) -> None:
        plan = self.plan_at_source()
        stage = (self.manifest or self.start or {}).get("stage")
        if plan is None or not isinstance(stage, str):
            return
        try:
            single = plan.stage(stage).get("single_attempt")
        except (KeyError, LookupError, AttributeError, TypeError):
            return
        if not single:
            return
        ref = ledger.attempt_ref(stage)
        recorded = self.read_record(ref)
        if recorded is None:
            self.find(f"stage {stage} allows a single attempt, but git has no record {ref}")
            return
        mine = self.read_record(ledger.start_ref(run_id))
        if recorded != mine:
            other = ledger.attempt_run_id(self.root, stage)
            self.find(
                f"stage {stage} allows a single attempt and git records it as run {other} "
                f"({ref}); this run {run_id} is another attempt"
            )

    def plan_at_source(self):
        """The plan as committed at the run's commit (None when it cannot be read)."""
        if self._plan is _ABSENT:
            self._plan = None
            path = _dig(self.manifest or {}, "plan.path")
            if path is _ABSENT:
                path = _dig(self.approval or {}, "plan.path")
            if self.git and isinstance(path, str):
                try:
                    data = gitrepo.show_bytes(self.root, self.source_commit, path)
                    self._plan = _plan_from_bytes(self.root, path, data)
                except Exception as err:  # noqa: BLE001 -- a plan that does not load is a finding
                    self.find(f"{path} at the run's commit does not load as a plan: {err}")
        return self._plan

    # inputs and replay ---------------------------------------------------------------------------

    def check_inputs(self) -> None:
        inputs = (self.approval or {}).get("inputs")
        if not isinstance(inputs, dict):
            return
        for name, bound in sorted(inputs.items()):
            where = f"{APPROVAL_COPY} field inputs.{name}"
            if not isinstance(bound, dict) or not isinstance(bound.get("path"), str):
                continue
            path = Path(bound["path"])
            if bound.get("kind") == "file":
                if not path.is_file():
                    self.find(f"{where}: the bound file {path} is missing; it cannot be re-hashed")
                    continue
                digest = sha256_file(path)
                if digest != bound.get("sha256"):
                    self.find(
                        f"{where}: {path} hashes {digest}, the approval binds "
                        f"{bound.get('sha256')} (the input changed after approval)"
                    )
            elif bound.get("kind") == "git" and self.git_answers:
                commit = bound.get("commit")
                if not isinstance(commit, str) or not path.is_dir():
                    self.find(f"{where}: the bound repository {path} is missing")
                elif not gitrepo.commit_exists(path, commit):
                    self.find(f"{where}: the repository {path} lacks the bound commit {commit}")

    def replay(self) -> tuple[bool, str]:
        m = self.manifest or {}
        if m.get("status") != COMPLETE:
            return False, "not replayed: the run is not complete"
        if self.findings or self.blockers:
            return False, "not replayed: the records do not agree"
        plan = self.plan_at_source()
        if plan is None:
            return False, "not replayed: the plan could not be read at the run's commit"
        from prereg.stages import RunView, load_kind

        try:
            kind = load_kind(plan.stage(m["stage"])["kind"])
        except Exception as err:  # noqa: BLE001 -- a kind that is not available here
            self.blockers.append(f"the stage kind cannot be loaded here, so no replay: {err}")
            return False, "not replayed: the stage kind is not available"
        if kind.replay is None:
            return False, f"no replay: stage kind {kind.name!r} has none (hashes and records only)"
        view = RunView(
            root=self.root,
            run_dir=self.run_dir,
            plan=plan,
            stage=m["stage"],
            items=tuple(self.items),
        )
        try:
            self.findings.extend(kind.replay(view))
        except Exception as err:  # noqa: BLE001 -- a replay that fails is a finding, never a crash
            self.find(f"the replay of stage kind {kind.name!r} failed: {_describe(err)}")
        return True, f"replayed (stage kind {kind.name!r})"


def _describe(err: BaseException) -> str:
    """An error in one line: its type, message and where it was raised (no traceback)."""
    frames = traceback.extract_tb(err.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(err).__name__}: {err}{where}"


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
    for tag, outcome in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
        if tag in tags:
            return outcome
    return "passed"


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


def audit_run(root: Path, run_dir: Path, *, replay: bool = True) -> AuditResult:
    """All findings for one run directory; never raises (an empty result: clean)."""
    root, run_dir = Path(root), Path(run_dir)
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
    audit = _Audit(root, run_dir)
    replayed, note = False, "not replayed (--no-replay)"
    checks = [
        audit.load,
        audit.check_files,
        audit.check_extensions,
        audit.check_environment_lock,
        audit.check_run_id,
        audit.check_against_approval,
        audit.check_against_start,
        audit.check_status,
        audit.check_item_log,
        audit.check_junit,
        audit.check_git,
        audit.check_execution,
        audit.check_unbound_kind,
        audit.check_inputs,
    ]
    for check in checks:
        try:
            check()
        except Exception as err:  # noqa: BLE001 -- the audit reports, it never crashes
            audit.blockers.append(
                f"{check.__name__} stopped on an unexpected error (please report it): "
                f"{_describe(err)}"
            )
    if replay:
        try:
            replayed, note = audit.replay()
        except Exception as err:  # noqa: BLE001
            audit.blockers.append(f"the replay could not start: {_describe(err)}")
    status = (audit.manifest or {}).get("status")
    return AuditResult(
        findings=tuple(audit.findings),
        blockers=tuple(audit.blockers),
        replayed=replayed,
        replay_note=note,
        status=status,
        extensions=audit.extensions,
    )


def _plan_from_bytes(root: Path, rel: str, data: bytes):
    """The plan as it was at the run's commit (the working copy may have moved on)."""
    from prereg.plans import PLAN_SCHEMA, Plan

    source = f"{rel} (at the run's commit)"
    value = parse_json(data, what="plan", source=source)
    validate(value, PLAN_SCHEMA, source=source)
    return Plan(path=Path(root) / rel, sha256=sha256_bytes(data), data=value)


def audit_run_cached(root: Path, run_dir: Path) -> AuditResult:
    """A full audit whose replay verdict may come from the one stored by ``prereg audit``.

    Everything but the replay (hashes, records, git, inputs) is checked now. The replay
    is not run again when :mod:`prereg.verdicts` holds a clean replayed verdict for this
    manifest's SHA-256 and this audit code; otherwise it runs now, the note says why a
    stored verdict was not used (stale: manifest or code changed), and the new verdict
    is stored.
    """
    from dataclasses import replace

    from prereg import verdicts

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
