"""What a report knows about one run: read from the run folder, never written back.

A run folder ``runs/<run-id>/`` is complete or incomplete (its manifest says), or has a
start record and no manifest (running, or its controller was killed: the items come
from ``items.jsonl``). A refusal (``runs/refusals/*.json``) never spent a run id and has
status ``refused``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from prereg.base import gitrepo
from prereg.base.hashing import parse_json, read_json
from prereg.records import ledger
from prereg.records.runs import (
    COMPLETE,
    ITEM_LOG,
    START_RECORD,
    RunFolder,
    RunLayout,
    is_plan_superseded,
    plan_sha256_of,
    refusals_dir,
    valid_run_id,
)

REFUSED = "refused"
NO_MANIFEST = "no manifest"
NO_FOLDER = "no run folder"  # git records the start; runs/<run-id>/ was never written or is gone


class ReportInputError(ValueError):
    """The path given to the report is not a run folder or refusal record."""


@dataclass(frozen=True)
class RunRecord:
    """One run (or refusal) as the report shows it."""

    run_id: str
    path: Path  # the run folder, or the refusal record file
    stage: str | None
    status: str  # complete | incomplete | no manifest | refused
    start: dict | None
    manifest: dict | None
    items: tuple[dict, ...]  # manifest items, else the lines of items.jsonl
    refusal: dict | None = None

    @property
    def complete(self) -> bool:
        return self.status == COMPLETE

    @functools.cached_property
    def approval(self) -> dict:
        """The run's approval copy in its folder (empty for a refusal, or when unreadable)."""
        if self.refusal is not None:
            return {}
        try:
            found = read_json(self.files.approval_copy, what="approval copy")
        except (OSError, ValueError):
            return {}
        return found if isinstance(found, dict) else {}

    @property
    def rehearsals(self) -> list[dict] | None:
        """The rehearsals the run's approval disclosed; None when it holds no such list."""
        found = self.approval.get("rehearsals")
        return found if isinstance(found, list) else None

    @property
    def amendment(self) -> dict | None:
        """How the run's plan differs from its stage's previous approval's, and why."""
        found = self.approval.get("amendment")
        return found if isinstance(found, dict) else None

    @property
    def plan_sha256(self) -> str | None:
        """The SHA-256 of the plan the run ran under (its manifest's, else its start's)."""
        return plan_sha256_of(self.manifest, self.start)

    def plan_superseded(self, root: Path) -> bool:
        """The plan file the run ran under holds other bytes in the checkout now."""
        return is_plan_superseded(root, (self.manifest or {}).get("plan"))

    @property
    def files(self) -> RunFolder:
        """The paths inside the run folder (meaningless for a refusal record)."""
        return RunFolder(self.path)

    @property
    def when(self) -> str | None:
        if self.refusal is not None:
            return self.refusal.get("refused_at")
        return (self.manifest or self.start or {}).get("started_at")

    @property
    def elapsed_seconds(self) -> float | None:
        return (self.manifest or {}).get("elapsed_seconds")


def _item_log(run_dir: Path) -> tuple[dict, ...]:
    path = RunFolder(run_dir).item_log
    if not path.is_file():
        return ()
    items = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                items.append(parse_json(line, what=ITEM_LOG, source=f"line {number}"))
            except ValueError:
                items.append({"nodeid": f"(unreadable line {number} of {ITEM_LOG})"})
    return tuple(items)


def load_run(run_dir: Path) -> RunRecord:
    """The run in ``run_dir`` (a folder holding ``start.json``), or a refusal record file."""
    run_dir = Path(run_dir)
    if run_dir.is_file() and run_dir.suffix == ".json":
        return load_refusal(run_dir)
    if not RunFolder(run_dir).start.exists() and not RunFolder(run_dir).manifest.exists():
        recorded = recorded_start(run_dir)
        if recorded is not None:
            return recorded
    if not RunFolder(run_dir).start.is_file():
        raise ReportInputError(
            f"run_dir {run_dir} holds no {START_RECORD}: it is not a started run. Give a run "
            "folder (runs/<run-id>) or a refusal record (runs/refusals/<name>.json)"
        )
    try:
        return _load_started_run(run_dir)
    except (ValueError, KeyError, TypeError, AttributeError):
        return RunRecord(  # its audit names what is damaged
            run_id=run_dir.name,
            path=run_dir,
            stage=None,
            status="unreadable",
            start={},
            manifest=None,
            items=(),
        )


def recorded_start(run_dir: Path) -> RunRecord | None:
    """A spent run whose folder does not exist or holds no start record, from the start
    record git holds (None when git records no start for the folder's name)."""
    root, run_id = run_dir.parent.parent, run_dir.name
    try:
        data = ledger.read(root, ledger.start_ref(run_id)) if valid_run_id(run_id) else None
        start = parse_json(data, what="start record", source=ledger.start_ref(run_id))
    except (gitrepo.GitError, ValueError, TypeError):
        return None
    if not isinstance(start, dict):
        return None
    return RunRecord(
        run_id=run_id,
        path=run_dir,
        stage=start.get("stage"),
        status=NO_FOLDER,
        start=start,
        manifest=None,
        items=(),
    )


def folderless_runs(root: Path) -> list[RunRecord]:
    """Every run id git records as spent whose folder under runs/ was never written."""
    found = []
    for run_id in ledger.spent_run_ids(root):
        folder = RunLayout(root, run_id).folder if valid_run_id(run_id) else None
        written = (
            folder is None
            or RunFolder(folder).start.exists()
            or RunFolder(folder).manifest.exists()
        )
        record = None if written else recorded_start(folder)
        if record is not None:
            found.append(record)
    return found


def _load_started_run(run_dir: Path) -> RunRecord:
    files = RunFolder(run_dir)
    start = read_json(files.start, what="start record")
    if files.manifest.is_file():
        manifest = read_json(files.manifest, what="manifest")
        return RunRecord(
            run_id=manifest["run_id"],
            path=run_dir,
            stage=manifest["stage"],
            status=manifest["status"],
            start=start,
            manifest=manifest,
            items=tuple(manifest["items"]),
        )
    return RunRecord(
        run_id=start["run_id"],
        path=run_dir,
        stage=start.get("stage"),
        status=NO_MANIFEST,
        start=start,
        manifest=None,
        items=_item_log(run_dir),
    )


def load_refusal(path: Path) -> RunRecord:
    data = read_json(path, what="refusal record")
    return RunRecord(
        run_id=data.get("run_id") or Path(path).stem,
        path=Path(path),
        stage=data.get("stage"),
        status=REFUSED,
        start=None,
        manifest=None,
        items=(),
        refusal=data,
    )


def refusals(root: Path) -> list[RunRecord]:
    folder = refusals_dir(root)
    return [load_refusal(p) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


@dataclass(frozen=True)
class PeakMemory:
    """The largest per-item peak RSS, where it was measured and in what scope(s)."""

    bytes: int
    nodeid: str
    scopes: tuple[str, ...]  # every distinct peak_rss_scope among the items


def peak_memory(items: tuple[dict, ...]) -> PeakMemory | None:
    """Max of ``peak_rss_bytes`` over items that recorded one (None when none did)."""
    measured = [i for i in items if isinstance(i.get("peak_rss_bytes"), int)]
    if not measured:
        return None
    top = max(measured, key=lambda i: i["peak_rss_bytes"])
    scopes = tuple(sorted({str(i.get("peak_rss_scope", "unstated")) for i in measured}))
    return PeakMemory(top["peak_rss_bytes"], top["nodeid"], scopes)


@dataclass(frozen=True)
class Missing:
    """What an incomplete run lacks: expected vs present items and the items not passed."""

    expected: int | None  # None: unknown (no manifest)
    present: int
    passed: int
    not_passed: tuple[tuple[str, str], ...]  # (nodeid, outcome)


def missing_items(record: RunRecord) -> Missing:
    expected = (record.manifest or {}).get("expected_items")
    present = [i for i in record.items if i.get("phases")]
    not_passed = tuple(
        (i.get("nodeid", "?"), i.get("outcome", "?"))
        for i in record.items
        if i.get("outcome") != "passed"
    )
    passed = sum(1 for i in record.items if i.get("outcome") == "passed")
    return Missing(expected, len(present), passed, not_passed)


def outcome_summary(record: RunRecord) -> str:
    """The items' outcome in a few words (``3 of 4 passed; 1 failed``), beside the audit's
    verdict, which judges the records and not the items: a run whose items all failed can
    audit clean."""
    if record.status == REFUSED:
        return "no item ran"
    if record.status == NO_FOLDER:
        return "no item record (no run folder)"
    counts: dict[str, int] = {}
    for item in record.items:
        outcome = str(item.get("outcome", "no outcome"))
        counts[outcome] = counts.get(outcome, 0) + 1
    passed = counts.pop("passed", 0)
    expected = (record.manifest or {}).get("expected_items")
    if isinstance(expected, int) and not isinstance(expected, bool):
        text = f"{passed} of {expected} passed"
        recorded = passed + sum(counts.values())
        if expected > recorded:
            counts["no record"] = counts.get("no record", 0) + expected - recorded
    else:
        text = f"{passed} of {len(record.items)} recorded passed (expected count unknown)"
    others = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
    return f"{text}; {others}" if others else text


@functools.lru_cache(maxsize=64)
def _committed_file(root: str, commit: str, rel: str) -> bytes | None:
    """File ``rel`` at ``commit`` (None when git has no such commit), read once per process:
    a report of every run reads each run's plan for its page and again for the index."""
    if not gitrepo.commit_exists(root, commit):
        return None
    return gitrepo.show_bytes(root, commit, rel)


def plan_at_run(root: Path, record: RunRecord) -> tuple[dict | None, str]:
    """The plan as it was at the run's source commit, and where it was read from.

    Falls back to the working copy (said so) when the commit or path is not available.
    """
    manifest = record.manifest
    commit = (manifest or {}).get("source_commit") or (record.start or {}).get("source_commit")
    rel = (manifest or {}).get("plan", {}).get("path")
    if rel is None and record.path.is_dir():
        approval = record.files.approval_copy
        if approval.is_file():
            rel = read_json(approval, what="approval copy")["plan"]["path"]
    if rel is None:
        return None, "no plan path recorded"
    if commit:
        try:
            data = _committed_file(str(root), commit, rel)
            if data is not None:
                source = f"{rel} at {commit[:12]}"
                return parse_json(data, what="plan", source=source), source
        except (gitrepo.GitError, ValueError):
            pass
    path = Path(root) / rel
    if path.is_file():
        return read_json(path, what="plan"), f"{rel} (working copy: the run's commit is not here)"
    return None, f"{rel} not found"
