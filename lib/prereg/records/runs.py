"""Where runs live and what state each is in (``runs/<run-id>/``, git-ignored)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from prereg import records
from prereg.base import gitrepo
from prereg.base.hashing import read_json, sha256_file
from prereg.records import (  # the names, in prereg.records; the paths, here
    APPROVAL_COPY,
    ATTESTATION,
    ATTESTATION_TIMESTAMP,
    AUDITS_DIR,
    ITEM_LOG,
    ITEMS_DIR,
    JUNIT,
    MANIFEST,
    PROGRESS_DIR,
    REFUSALS_DIR,
    REHEARSAL_NAME_PATTERN,
    REHEARSAL_PROGRESS,
    REHEARSAL_RECORD,
    REHEARSALS_DIR,
    REPORTS_DIR,
    RUN_ID_PATTERN,
    RUNS_DIR,
    START_RECORD,
    SUMMARY_DIR,
    ledger,
    passed_whole_stage,
)

# A manifest's status (prereg.records).
COMPLETE = records.COMPLETE
INCOMPLETE = records.INCOMPLETE
RUNNING_OR_KILLED = "started, no manifest (running, or the controller was killed)"


class RunIdError(ValueError):
    pass


def check_run_id(run_id: str, stage: str) -> None:
    """Run ids have the protocol's form ``<stage>-YYYYMMDD-NNN``."""
    match = RUN_ID_PATTERN.fullmatch(run_id) if isinstance(run_id, str) else None
    if not match or match["stage"] != stage:
        raise RunIdError(
            f"run id {run_id!r} does not have the form {stage}-YYYYMMDD-NNN "
            f"(for example {stage}-20261009-001)"
        )


def valid_run_id(run_id: object) -> bool:
    return isinstance(run_id, str) and RUN_ID_PATTERN.fullmatch(run_id) is not None


def require_run_id(run_id: object) -> str:
    """``run_id`` if it has the form ``<stage>-YYYYMMDD-NNN``; a path is never built from
    another."""
    if not valid_run_id(run_id):
        raise RunIdError(
            f"run id {run_id!r} does not have the form <stage>-YYYYMMDD-NNN "
            "(lower-case stage name, for example calibration-20261009-001)"
        )
    return run_id


def runs_dir(root: Path) -> Path:
    return Path(root) / RUNS_DIR


def run_dir(root: Path, run_id: str) -> Path:
    return RunLayout(root, run_id).folder


def contained(root: Path, path: Path) -> Path:
    """``path``, after checking that it resolves inside the repository ``root`` (links included)."""
    resolved, base = Path(path).resolve(), Path(root).resolve()
    if resolved != base and base not in resolved.parents:
        raise RunIdError(
            f"{path} resolves to {resolved}, outside the repository {base}: prereg writes only "
            "inside the checkout (is runs/ a link to elsewhere?)"
        )
    return Path(path)


def refusals_dir(root: Path) -> Path:
    """Refusal records (``runs/refusals/*.json``): a refusal spends no run id."""
    return runs_dir(root) / REFUSALS_DIR


def progress_dir(root: Path) -> Path:
    """Live progress logs and disk reserves of runs (outside the hashed run folders)."""
    return runs_dir(root) / PROGRESS_DIR


def progress_log(root: Path, run_id: str) -> Path:
    """Live progress lines of a run; not part of the manifest (timing is not a result)."""
    return progress_dir(root) / f"{require_run_id(run_id)}.log"


def audits_dir(root: Path) -> Path:
    """Stored audit verdicts (``runs/audits/<run-id>.json``, :mod:`prereg.records.verdicts`)."""
    return runs_dir(root) / AUDITS_DIR


def reports_dir(root: Path) -> Path:
    """HTML reports (``runs/reports/``): beside the run folders, never inside one."""
    return runs_dir(root) / REPORTS_DIR


def report_page(run_id: str) -> str:
    """The file name of a run's report in ``runs/reports/`` (pages there link each other)."""
    return f"{require_run_id(run_id)}.html"


def reports_index(root: Path) -> Path:
    """The page listing every run and refusal (``prereg report --all``)."""
    return reports_dir(root) / "index.html"


def item_dir_name(nodeid: str) -> str:
    """The folder under ``runs/<run-id>/items/`` of the item ``nodeid``."""
    return re.sub(r"[^A-Za-z0-9._=+\[\]-]", "_", nodeid.split("::", 1)[-1])


MEASURED_SUFFIX = ".timing.json"
"""The name ending of an output file that holds what was measured, not computed (seconds,
peak memory, which vectors came from a cache): it differs between honest runs, so no
comparison of results reads it (:meth:`RunFolder.result_files`)."""


class RunFolder:
    """The files inside one run folder, wherever the folder is.

    Nothing is built from the folder's name here, so the auditor and the report can read a
    folder given on the command line (copied elsewhere, or renamed) through it;
    :class:`RunLayout` adds the paths beside the folder that are built from the run id.
    """

    folder: Path

    # The run's own records, hashed in the manifest's run_files (relative to the folder).
    RUN_FILES = (START_RECORD, APPROVAL_COPY, ITEM_LOG, JUNIT)

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def __setattr__(self, name: str, value: object) -> None:
        if name in self.__dict__:  # frozen: a path, once built, never changes
            raise AttributeError(f"{type(self).__name__}.{name} cannot change")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        return f"RunFolder({self.folder!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.folder == self.folder

    def __hash__(self) -> int:
        return hash(self.folder)

    @property
    def start(self) -> Path:
        return self.folder / START_RECORD

    @property
    def manifest(self) -> Path:
        return self.folder / MANIFEST

    @property
    def item_log(self) -> Path:
        return self.folder / ITEM_LOG

    @property
    def junit(self) -> Path:
        return self.folder / JUNIT

    @property
    def approval_copy(self) -> Path:
        return self.folder / APPROVAL_COPY

    @property
    def attestation(self) -> Path:
        return self.folder / ATTESTATION

    @property
    def attestation_timestamp(self) -> Path:
        return self.folder / ATTESTATION_TIMESTAMP

    @property
    def items_dir(self) -> Path:
        return self.folder / ITEMS_DIR

    def item_dir(self, output_dir: str) -> Path:
        """The folder of one item (``output_dir`` as its manifest record names it)."""
        return self.items_dir / output_dir

    @property
    def summary_dir(self) -> Path:
        return self.folder / SUMMARY_DIR

    def result_files(self) -> dict[str, Path]:
        """Every item and summary file that holds a result, by its path relative to the
        folder (sorted): the files two honest runs of one approved stage agree on byte for
        byte, so not the run's records and no :data:`MEASURED_SUFFIX` file."""
        return {
            path.relative_to(self.folder).as_posix(): path
            for top in (self.items_dir, self.summary_dir)
            for path in sorted(top.rglob("*"))
            if path.is_file() and not path.name.endswith(MEASURED_SUFFIX)
        }

    @staticmethod
    def item_folder(output_dir: str) -> str:
        """An item's folder relative to the run folder (``items/<dir>``), as records name it."""
        return f"{ITEMS_DIR}/{output_dir}"

    @staticmethod
    def item_file(output_dir: str, path: str) -> str:
        """An item output file's path relative to the run folder (``items/<dir>/<path>``)."""
        return f"{RunFolder.item_folder(output_dir)}/{path}"

    @staticmethod
    def summary_file(path: str) -> str:
        """A summary file's path relative to the run folder (``summary/<path>``)."""
        return f"{SUMMARY_DIR}/{path}"


class RunLayout(RunFolder):
    """Every path of one run: its folder ``runs/<run-id>/`` and the files beside it.

    The one home of the run-folder layout: nothing else spells these names. Build one with
    ``RunLayout(root, run_id)`` (the run id is validated before any path is built) or, for a
    folder given on the command line, :meth:`of`. A folder whose name is no run id is read
    through :class:`RunFolder`.
    """

    root: Path
    run_id: str

    def __init__(self, root: Path, run_id: str) -> None:
        self.root = Path(root)
        self.run_id = require_run_id(run_id)
        super().__init__(runs_dir(self.root) / self.run_id)

    def __repr__(self) -> str:
        return f"RunLayout(root={self.root!r}, run_id={self.run_id!r})"

    @classmethod
    def of(cls, folder: Path) -> RunLayout:
        """The layout of the run folder ``folder`` (``<root>/runs/<run-id>``)."""
        folder = Path(folder)
        return cls(folder.parent.parent, folder.name)

    @property
    def progress_log(self) -> Path:
        """``runs/progress/<run-id>.log``: live progress lines (timing is not a result)."""
        return progress_log(self.root, self.run_id)

    @property
    def reserve(self) -> Path:
        """``runs/progress/<run-id>.reserve``: disk space held for the end of the run."""
        return progress_dir(self.root) / f"{self.run_id}.reserve"

    @property
    def verdict(self) -> Path:
        """``runs/audits/<run-id>.json``: the stored audit verdict
        (:mod:`prereg.records.verdicts`)."""
        return audits_dir(self.root) / f"{self.run_id}.json"

    @property
    def report(self) -> Path:
        """``runs/reports/<run-id>.html``: the run's HTML report."""
        return reports_dir(self.root) / report_page(self.run_id)


def has_started(root: Path, run_id: str) -> bool:
    """The run folder holds a start record (see also :func:`prereg.records.ledger.is_spent`)."""
    return RunLayout(root, run_id).start.exists()


NOTHING_SPENT = "this refusal spent no run id"


def refusal_note(root: Path, run_id: str | None) -> str:
    """What a refusal says of its run id: refusing spends none, and a run id an earlier run
    spent (git records its start, or ``runs/<run-id>/start.json`` exists) stays spent."""
    if not valid_run_id(run_id):
        return NOTHING_SPENT
    try:
        spent = has_started(root, run_id) or ledger.is_spent(root, run_id)
    except (gitrepo.GitError, OSError):
        return NOTHING_SPENT
    if spent:
        return (
            f"this refusal spent nothing; run id {run_id} was spent by an earlier run and "
            "cannot run again"
        )
    return NOTHING_SPENT


def is_plan_superseded(root: Path, plan: object) -> bool:
    """The plan file a run ran under (``plan``: a manifest's ``{"path", "sha256"}``) holds
    other bytes in the checkout now, or is gone; False when ``plan`` names no file and hash."""
    if not isinstance(plan, dict) or not plan.get("path") or not plan.get("sha256"):
        return False
    try:
        return sha256_file(Path(root) / plan["path"]) != plan["sha256"]
    except OSError:
        return True


def plan_sha256_of(manifest: dict | None, start: dict | None) -> str | None:
    """The SHA-256 of the plan a run ran under: its manifest's, else its start record's."""
    found = ((manifest or {}).get("plan") or {}).get("sha256")
    return found or (start or {}).get("plan_sha256")


@dataclass(frozen=True)
class RunState:
    run_id: str
    path: Path
    stage: str | None
    status: str
    manifest: dict | None
    plan_sha256: str | None = None  # of the plan the run ran under (its manifest, else start)


UNREADABLE = "unreadable (its manifest or start record is not valid JSON of the right shape)"


def run_state(path: Path) -> RunState:
    """What a run folder says of itself; a damaged record is a state, never a crash."""
    files = RunFolder(path)
    try:
        if files.manifest.exists():
            manifest = read_json(files.manifest, what="manifest")
            return RunState(
                path.name,
                path,
                manifest.get("stage"),
                manifest["status"],
                manifest,
                plan_sha256_of(manifest, None),
            )
        start = read_json(files.start, what="start record")
        return RunState(
            path.name,
            path,
            start.get("stage"),
            RUNNING_OR_KILLED,
            None,
            plan_sha256_of(None, start),
        )
    except (ValueError, KeyError, TypeError, AttributeError, OSError):
        return RunState(path.name, path, None, UNREADABLE, None)


def all_runs(root: Path) -> list[RunState]:
    base = runs_dir(root)
    if not base.exists():
        return []
    return [
        run_state(p) for p in sorted(base.iterdir()) if p.is_dir() and RunFolder(p).start.exists()
    ]


# -- rehearsals: the same code path as a run, without an approval; never a run ----------------

# What every rehearsal prints and records: it proves nothing and spends nothing.
REHEARSAL_NOTE = "rehearsal: not a run, nothing spent"


def rehearsals_dir(root: Path) -> Path:
    """``runs/rehearsals/``: one folder per rehearsal, apart from the run folders."""
    return runs_dir(root) / REHEARSALS_DIR


class RehearsalLayout(RunFolder):
    """Every path of one rehearsal: ``runs/rehearsals/<name>/`` holds its record
    (``rehearsal.json``, never ``start.json`` or ``manifest.json``), its items' folders,
    its summary, its JUnit report and its progress log."""

    root: Path
    name: str

    def __init__(self, root: Path, name: str) -> None:
        if not REHEARSAL_NAME_PATTERN.match(name):
            raise RunIdError(f"rehearsal name {name!r} is not <stage>-YYYYMMDDTHHMMSSZ[-N]")
        self.root = Path(root)
        self.name = name
        super().__init__(rehearsals_dir(self.root) / name)

    def __repr__(self) -> str:
        return f"RehearsalLayout(root={self.root!r}, name={self.name!r})"

    @property
    def record(self) -> Path:
        return self.folder / REHEARSAL_RECORD

    @property
    def progress_log(self) -> Path:
        return self.folder / REHEARSAL_PROGRESS


def new_rehearsal_name(root: Path, stage: str, now: datetime | None = None) -> str:
    """A name no rehearsal folder has yet: ``<stage>-YYYYMMDDTHHMMSSZ``, then ``-2``, ``-3``..."""
    stamp = f"{stage}-{(now or datetime.now(timezone.utc)):%Y%m%dT%H%M%S}Z"
    name, n = stamp, 1
    while (rehearsals_dir(root) / name).exists():
        n += 1
        name = f"{stamp}-{n}"
    return name


def is_rehearsal(folder: Path) -> bool:
    """A rehearsal's folder: it holds a rehearsal record (wherever it was copied to)."""
    return (Path(folder) / REHEARSAL_RECORD).exists()


def whole_rehearsals(root: Path, stage: str) -> list[str]:
    """The names of the rehearsals of ``stage`` that passed over the whole stage, oldest
    first (names sort by their UTC stamp): what a rehearsal of a stage requiring it may read
    in place of a run."""
    return [
        r["name"] for r in all_rehearsals(root) if r.get("stage") == stage and passed_whole_stage(r)
    ]


def consumed_folder(root: Path, name: str) -> Path:
    """The folder of a run a stage consumes, ``runs/<run-id>/``; in a rehearsal it may be a
    rehearsal of the required stage, ``runs/rehearsals/<name>/`` (no run ever consumes one:
    its name is no run id)."""
    if REHEARSAL_NAME_PATTERN.match(name):
        return RehearsalLayout(root, name).folder
    return RunLayout(root, name).folder


def all_rehearsals(root: Path) -> list[dict]:
    """Every rehearsal's record under ``runs/rehearsals/`` (by name); a damaged one says so."""
    base = rehearsals_dir(root)
    if not base.is_dir():
        return []
    found = []
    for folder in sorted(p for p in base.iterdir() if p.is_dir()):
        try:
            record = read_json(folder / REHEARSAL_RECORD, what="rehearsal record")
            if not isinstance(record, dict):
                raise TypeError("not an object")
        except (ValueError, TypeError, OSError):
            record = {"status": UNREADABLE}
        found.append({"name": folder.name, "path": folder, **record})
    return found
