"""Where runs live and what state each is in (``runs/<run-id>/``, git-ignored)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from prereg.hashing import read_json

RUN_ID_PATTERN = re.compile(r"^(?P<stage>[a-z][a-z0-9-]*)-(?P<date>\d{8})-(?P<seq>\d{3})$")

START_RECORD = "start.json"
MANIFEST = "manifest.json"
ITEM_LOG = "items.jsonl"
JUNIT = "junit.xml"
APPROVAL_COPY = "approval.json"
ITEMS_DIR = "items"
SUMMARY_DIR = "summary"

COMPLETE = "complete"
INCOMPLETE = "incomplete"
RUNNING_OR_KILLED = "started, no manifest (running, or the controller was killed)"


class RunIdError(ValueError):
    pass


def check_run_id(run_id: str, stage: str) -> None:
    """Run ids have the protocol's form ``<stage>-YYYYMMDD-NNN``."""
    match = RUN_ID_PATTERN.match(run_id)
    if not match or match["stage"] != stage:
        raise RunIdError(
            f"run id {run_id!r} does not have the form {stage}-YYYYMMDD-NNN "
            f"(for example {stage}-20261009-001)"
        )


def valid_run_id(run_id: object) -> bool:
    return isinstance(run_id, str) and RUN_ID_PATTERN.match(run_id) is not None


def require_run_id(run_id: object) -> str:
    """``run_id`` if it has the form ``<stage>-YYYYMMDD-NNN``; a path is never built from another."""
    if not valid_run_id(run_id):
        raise RunIdError(
            f"run id {run_id!r} does not have the form <stage>-YYYYMMDD-NNN "
            "(lower-case stage name, for example calibration-20261009-001)"
        )
    return run_id


def runs_dir(root: Path) -> Path:
    return Path(root) / "runs"


def run_dir(root: Path, run_id: str) -> Path:
    return runs_dir(root) / require_run_id(run_id)


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
    return runs_dir(root) / "refusals"


def progress_log(root: Path, run_id: str) -> Path:
    """Live progress lines of a run; not part of the manifest (timing is not a result)."""
    return runs_dir(root) / "progress" / f"{run_id}.log"


def audits_dir(root: Path) -> Path:
    return runs_dir(root) / "audits"


@dataclass(frozen=True)
class RunLayout:
    """Every path of one run: its folder ``runs/<run-id>/`` and the files beside it.

    The one home of the run-folder layout: nothing else spells these names. Build one with
    ``RunLayout(root, run_id)`` (the run id is validated before any path is built) or, for a
    folder given on the command line, :meth:`of`.
    """

    root: Path
    run_id: str

    def __post_init__(self) -> None:
        require_run_id(self.run_id)
        object.__setattr__(self, "root", Path(self.root))

    @classmethod
    def of(cls, folder: Path) -> RunLayout:
        """The layout of the run folder ``folder`` (``<root>/runs/<run-id>``)."""
        folder = Path(folder)
        return cls(folder.parent.parent, folder.name)

    @property
    def folder(self) -> Path:
        return runs_dir(self.root) / self.run_id

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
    def items_dir(self) -> Path:
        return self.folder / ITEMS_DIR

    def item_dir(self, output_dir: str) -> Path:
        """The folder of one item (``output_dir`` as its manifest record names it)."""
        return self.items_dir / output_dir

    @property
    def summary_dir(self) -> Path:
        return self.folder / SUMMARY_DIR

    @property
    def progress_log(self) -> Path:
        return progress_log(self.root, self.run_id)


def has_started(root: Path, run_id: str) -> bool:
    """The run folder holds a start record (see also :func:`prereg.ledger.is_spent`)."""
    return (run_dir(root, run_id) / START_RECORD).exists()


@dataclass(frozen=True)
class RunState:
    run_id: str
    path: Path
    stage: str | None
    status: str
    manifest: dict | None


UNREADABLE = "unreadable (its manifest or start record is not valid JSON of the right shape)"


def run_state(path: Path) -> RunState:
    """What a run folder says of itself; a damaged record is a state, never a crash."""
    manifest_path = path / MANIFEST
    try:
        if manifest_path.exists():
            manifest = read_json(manifest_path, what="manifest")
            return RunState(path.name, path, manifest.get("stage"), manifest["status"], manifest)
        start = read_json(path / START_RECORD, what="start record")
        return RunState(path.name, path, start.get("stage"), RUNNING_OR_KILLED, None)
    except (ValueError, KeyError, TypeError, AttributeError, OSError):
        return RunState(path.name, path, None, UNREADABLE, None)


def all_runs(root: Path) -> list[RunState]:
    base = runs_dir(root)
    if not base.exists():
        return []
    return [
        run_state(p) for p in sorted(base.iterdir()) if p.is_dir() and (p / START_RECORD).exists()
    ]
