"""Run manifests: the start record, the per-item log and the final manifest.

Only the controller process writes here. Items reach it through their reports
(``report.user_properties``), never through files the controller would have to find.

Crash safety: ``items.jsonl`` grows by whole lines (one ``write`` on an ``O_APPEND``
descriptor, then ``fsync``); a failed append is undone or left as a torn last line that
:func:`read_item_log` names and skips, and the failure becomes a reason in the manifest.
:func:`write_final` always leaves a manifest when the disk lets it: if the full one cannot
be built or written (a non-finite number, a failing summary, a full disk), a minimal
``incomplete`` one naming the error is written instead. Non-finite numbers never reach a
file: they are recorded as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` and named
as reasons, so the manifest stays strict JSON.
"""

from __future__ import annotations

import errno
import json
import math
import os
import platform
import shutil
import socket
import sys
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from prereg.base import gitrepo, provenance
from prereg.base.hashing import (
    canonical_json,
    entry_kind,
    file_entries,
    hash_entry,
    irregular_entries,
    list_folder,
    sha256_file,
    write_json,
)
from prereg.evidence import envlock
from prereg.kinds import registry
from prereg.records import (
    COMPLETE,
    INCOMPLETE,
    ITEM_LOG,
    ITEMS_DIR,
    MANIFEST_FORMAT,
    UNKNOWN,
    approval_record,
    documents,
)
from prereg.records.runs import RunFolder, RunLayout

FORMAT = MANIFEST_FORMAT


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def start_record(
    *,
    stage: str,
    run_id: str,
    approval_path: Path,
    plan_sha256: str,
    started_at: str,
    root: Path,
    remote_ledgers: list[dict],
    approval_timestamp: str | None = None,
) -> dict:
    """What ``start.json`` holds; its canonical bytes are also recorded in git
    (:mod:`prereg.records.ledger`). ``approval_timestamp``: the timestamp authority's token
    over the approval commit (:mod:`prereg.proof.timestamp`), when the approval names one."""
    stamped = {} if approval_timestamp is None else {"approval_timestamp": approval_timestamp}
    return {
        "stage": stage,
        "run_id": run_id,
        "started_at": started_at,
        "source_commit": gitrepo.head_commit(root),
        "plan_sha256": plan_sha256,
        "approval_sha256": sha256_file(approval_path),
        "host": socket.gethostname(),
        "remote_ledgers": remote_ledgers,
        **stamped,
    }


def write_start_record(run_dir: Path, *, record: dict, approval_path: Path) -> None:
    """Lay out the run folder of a run id just spent in git: the approval copy and start.json."""
    files = RunFolder(run_dir)
    files.folder.mkdir(parents=True, exist_ok=False)
    shutil.copyfile(approval_path, files.approval_copy)
    write_json(files.start, record)


# Disk space held from the start of a run for its end (junit.xml and the manifest), so a
# disk that fills up during the run still takes them: a base, a share per item, a cap.
RESERVE_BASE_BYTES = 1 << 20
RESERVE_PER_ITEM_BYTES = 16 << 10
RESERVE_CAP_BYTES = 64 << 20


def reserve_space(root: Path, run_id: str, items: int) -> Path | None:
    """Hold disk space on the filesystem of ``runs/`` (a file beside the progress log,
    outside the hashed run folder); None when even that cannot be had (best effort)."""
    path = RunLayout(root, run_id).reserve
    size = min(RESERVE_BASE_BYTES + RESERVE_PER_ITEM_BYTES * items, RESERVE_CAP_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(fd, 0, size)
            else:
                for _ in range(0, size, 1 << 16):
                    os.write(fd, bytes(1 << 16))
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        release_space(path)
        return None
    return path


def release_space(path: Path | None) -> None:
    """Give the space :func:`reserve_space` held back to the end of the run."""
    if path is not None:
        try:
            os.unlink(path)
        except OSError:
            pass


def finite(value: object, where: str) -> tuple[object, list[str]]:
    """``value`` with each NaN or infinity replaced by its name as a string, and a sentence
    naming where each one was (JSON cannot hold them; ``canonical_json`` refuses them)."""
    problems: list[str] = []

    def walk(node: object, path: str) -> object:
        if isinstance(node, float) and not math.isfinite(node):
            text = "NaN" if math.isnan(node) else "Infinity" if node > 0 else "-Infinity"
            problems.append(
                f"non-finite number at {path}: {text}, which JSON cannot hold "
                f"(recorded as the string {text!r}); find what produced it"
            )
            return text
        if isinstance(node, dict):
            return {key: walk(item, f"{path}.{key}") for key, item in node.items()}
        if isinstance(node, (list, tuple)):
            return [walk(item, f"{path}[{_label(item, index)}]") for index, item in enumerate(node)]
        return node

    return walk(value, where), problems


def _label(item: object, index: int) -> str:
    """An item record by its node id, anything else by its index."""
    return (
        item["nodeid"]
        if isinstance(item, dict) and isinstance(item.get("nodeid"), str)
        else str(index)
    )


def append_item(run_dir: Path, entry: dict) -> str | None:
    """Append one finished item's record to ``items.jsonl`` as one whole line.

    One ``os.write`` of the whole line on an ``O_APPEND`` descriptor, then ``fsync``, so
    a killed controller leaves whole lines. A short write (disk full) is cut back off;
    a line torn earlier is closed by a newline first, so it stays a line of its own.
    Returns None, or a sentence saying why the record is not in the log: the run goes on
    and the sentence belongs in the manifest's reasons.
    """
    nodeid = entry.get("nodeid", "?")
    try:
        clean, _ = finite(entry, "item")  # the manifest names non-finite numbers
        line = (json.dumps(clean, sort_keys=True, allow_nan=False) + "\n").encode()
    except (TypeError, ValueError) as err:
        return f"{ITEM_LOG}: the record of {nodeid} is not JSON ({err}); it is not in the log"
    size = None
    try:
        fd = os.open(RunFolder(run_dir).item_log, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as err:
        return f"{ITEM_LOG}: could not open it to append the record of {nodeid}: {err}"
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        written = os.write(fd, line)
        if written != len(line):
            raise OSError(errno.ENOSPC, f"only {written} of {len(line)} bytes written (disk full?)")
        os.fsync(fd)
    except OSError as err:
        if size is not None:
            try:
                os.ftruncate(fd, size)  # no torn line left behind when the disk allows it
            except OSError:
                pass
        return f"{ITEM_LOG}: could not append the record of {nodeid}: {err}"
    finally:
        os.close(fd)
    return None


def read_item_log(run_dir: Path) -> tuple[list[dict], list[str]]:
    """The records in ``items.jsonl``, and a sentence for each line that is not one.

    A last line without its newline is a record torn by a crash or a full disk: it is
    skipped and named as torn. A missing log gives no records and no problems.
    """
    path = RunFolder(run_dir).item_log
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], []
    records, problems = [], []
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        torn = number == len(lines)  # after the last newline: no newline of its own
        error: Exception | None = None
        try:
            record = documents.loads(raw, f"line {number}")
        except ValueError as err:
            record, error = None, err
        if not isinstance(record, dict):
            what = (
                "torn (no newline: the write stopped mid-line)"
                if torn
                else f"not a whole record (torn by an earlier failed write?): {error}"
                if record is None
                else "not a JSON object"
            )
            problems.append(f"{ITEM_LOG} line {number} is {what}; skipped")
            continue
        if torn:
            problems.append(f"{ITEM_LOG} line {number} has no newline (the write stopped); kept")
        records.append(record)
    return records, problems


def every_file(root: Path) -> list[dict]:
    """Like :func:`prereg.base.hashing.file_entries`, but every file, a writer's temporary file
    left by an interruption included: the audit sees them all, so the manifest lists them."""
    return file_entries(root, temporaries=True)


IRREGULAR_ITEM = (
    "its output folder holds entries that are not regular files or folders named in UTF-8, "
    "which prereg neither follows nor reads, so they are not hashed: {entries}; an item must "
    "write regular files with UTF-8 names only"
)


IRREGULAR_FOLDER = (
    "its output folder {folder} is {kind}, not a folder, which prereg neither follows nor "
    "reads, so nothing there is hashed; an item must write regular files only"
)


def _named(entries: list[dict]) -> str:
    return ", ".join(f"{e['path']} ({e['kind']})" for e in entries)


def irregular_reason(run_dir: Path) -> str | None:
    """A sentence naming every entry of the run folder that is neither a regular file nor a
    folder (a symbolic link, a named pipe, ...), or None: such a run is incomplete."""
    entries = irregular_entries(run_dir)
    if not entries:
        return None
    return (
        f"the run folder holds {len(entries)} entr{'y' if len(entries) == 1 else 'ies'} that "
        f"{'is' if len(entries) == 1 else 'are'} not a regular file or folder named in UTF-8, "
        f"which prereg neither follows nor reads nor hashes: {_named(entries)}; the stage's "
        "code must write regular files with UTF-8 names only (the audit finds them too)"
    )


def hash_item_folders(
    run_dir: Path, items: list[dict], folder_of: Callable[[str], str]
) -> list[dict]:
    """Every folder under ``items/`` hashed into the record of its item.

    An item that ran to its report keeps the hashes its process took, unless files were
    added or removed since; an interrupted, crashed or unreported item (or a folder no
    item claims) gets the hashes of what its folder holds now, so a partial output is
    recorded, never an extra file. ``folder_of`` maps a node id to its folder name.

    No symbolic link is followed and nothing but a regular file is read: an entry of an
    item folder that is not a regular file or folder (a link, a named pipe) is named in
    the item's ``irregular_outputs`` and, unless the item already has one, its
    ``record_error`` (the run is then incomplete and its summary does not run); such an
    entry directly under ``items/`` is an item of its own with outcome ``unknown``.
    """
    base = RunFolder(run_dir).items_dir
    by_folder = {}
    for item in items:
        by_folder[item.get("output_dir") or folder_of(item["nodeid"])] = item
    if base.is_symlink() or not base.is_dir():
        return items
    extra = []

    def item_of(name: str) -> dict:
        item = by_folder.get(name)
        if item is None:
            unclaimed = RunFolder.item_folder(name)
            item = {"nodeid": f"(no item of this run: {unclaimed})", "phases": {}}
            item["outcome"] = UNKNOWN
            extra.append(item)
        return item

    def mark(item: dict, entries: list[dict], error: str) -> None:
        item["irregular_outputs"] = entries
        item.setdefault("record_error", error)

    with os.scandir(base) as listing:
        entries = sorted(listing, key=lambda e: e.name)
    for entry in entries:
        if entry.is_file(follow_symlinks=False):
            continue  # a stray file in items/ itself: the audit finds it
        if not entry.is_dir(follow_symlinks=False):
            kind = entry_kind(entry.stat(follow_symlinks=False).st_mode, entry.path)
            error = IRREGULAR_FOLDER.format(folder=f"{ITEMS_DIR}/{entry.name}", kind=kind)
            mark(item_of(entry.name), [{"path": ".", "kind": kind}], error)
            continue
        folder = Path(entry.path)
        listing = list_folder(folder)
        present = [hash_entry(folder, rel) for rel in listing.files]
        item = item_of(folder.name)
        recorded = item.get("outputs")
        if recorded is None:
            item["outputs"] = present
            item["outputs_rehashed"] = "hashed by the controller: the item's process recorded none"
        elif {e["path"] for e in recorded} != {e["path"] for e in present}:
            item["outputs"] = present
            item["outputs_rehashed"] = "files were added or removed after the item's report"
        if listing.irregular:
            odd = list(listing.irregular)
            mark(item, odd, IRREGULAR_ITEM.format(entries=_named(odd)))
        item["output_dir"] = folder.name
    return items + extra


def environment(
    plugins: dict[str, list[str]], imported: dict[str, str], threads: dict, execution: dict
) -> dict:
    """The manifest's ``environment``; ``execution`` is :func:`prereg.evidence.execution.record` at
    the gate.

    ``extensions``: every installed extension (stage kind, law family, harness kind) this
    controller loaded, e.g. while the gate parsed the kind's settings or the summary ran:
    group -> name -> distribution, entry point and file
    (:func:`prereg.kinds.registry.loaded_origins`; the project's built-in entries are tracked code
    and never listed).
    """
    return {
        "interpreter": sys.executable,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "pins_view": provenance.pinned_environment(),
        "packages_imported": imported,
        "thread_settings": threads,
        "pytest_plugins": plugins,
        "execution": execution,
        "extensions": registry.loaded_origins(),
        # What was installed when the manifest was written (the gate checked it at the start).
        "environment_lock": envlock.lock(),
        "host": socket.gethostname(),
    }


def build_manifest(
    *,
    run_dir: Path,
    start: dict,
    approval: dict,
    plan_path: str,
    stage_spec: dict,
    items: list[dict],
    expected: list[str],
    reasons: list[str],
    ended_at: str,
    elapsed: float,
    env: dict,
    workers: int,
) -> dict:
    budget = stage_spec["budget_seconds"]
    files = RunFolder(run_dir)
    irregular = irregular_reason(files.folder)
    reasons = [*reasons, irregular] if irregular else reasons
    status = COMPLETE if not reasons else INCOMPLETE
    run_files = [e for e in file_entries(files.folder) if e["path"] in files.RUN_FILES]
    summary = every_file(files.summary_dir) if files.summary_dir.exists() else []
    return {
        "format": FORMAT,
        "stage": start["stage"],
        "run_id": start["run_id"],
        "status": status,
        "incomplete_reasons": reasons,
        "source_commit": start["source_commit"],
        "source_anchor": approval["source_anchor"],
        "plan": {"path": plan_path, "sha256": start["plan_sha256"]},
        "approval": {
            "path": approval_record(start["run_id"]),
            "sha256": start["approval_sha256"],
        },
        "baseline_sha256": approval["baseline"]["sha256"],
        "seed_namespace": approval["seed_namespace"],
        "deviations": approval["deviations"],
        "requires": approval["requires"],
        "inputs": approval["inputs"],
        "environment": env,
        "workers": workers,
        "started_at": start["started_at"],
        "ended_at": ended_at,
        "elapsed_seconds": round(elapsed, 3),
        "budget": {
            "seconds": budget,
            "enforced": stage_spec["budget_enforced"],
            # An item stopped by the enforced deadline exceeded it, whatever the elapsed time.
            "exceeded": elapsed > budget or any(i.get("budget_exceeded") for i in items),
        },
        "expected_items": len(expected),
        "items": items,
        "run_files": run_files,
        "summary_files": summary if status == COMPLETE else [],
        # What a summary that failed halfway left behind: kept and hashed, never an aggregate.
        "partial_summary_files": [] if status == COMPLETE else summary,
    }


def settle(manifest: dict) -> dict:
    """The manifest as it can be written: non-finite numbers named as reasons (the run is
    then ``incomplete``, its summary only partial) and replaced by their names."""
    clean, problems = finite(manifest, "manifest")
    if problems:
        clean["status"] = INCOMPLETE
        clean["incomplete_reasons"] = list(clean.get("incomplete_reasons") or []) + problems
        partial = list(clean.get("partial_summary_files") or [])
        clean["partial_summary_files"] = partial + list(clean.get("summary_files") or [])
        clean["summary_files"] = []
    return clean


def write_manifest(run_dir: Path, manifest: dict) -> bytes:
    """Write ``manifest.json`` atomically (settled first); return the bytes written."""
    data = canonical_json(settle(manifest)).encode("utf-8")
    write_atomic(RunFolder(run_dir).manifest, data)
    return data


def write_atomic(path: Path, data: bytes) -> None:
    """Temporary file, fsync, rename: a crash or a full disk leaves no half file behind."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    try:
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    except OSError:
        pass  # the rename happened; a folder fsync is best effort


def minimal_manifest(
    *,
    run_dir: Path,
    start: dict | None,
    stage: str,
    run_id: str,
    plan_path: str | None,
    items: list[dict],
    expected: list[str],
    reasons: list[str],
    error: str,
    ended_at: str,
) -> dict:
    """What is known for sure when the full manifest failed: always ``incomplete``.

    The same fields as :func:`build_manifest` where they can be known from the start
    record and the run folder (the audit checks the same things), ``None`` elsewhere,
    and ``manifest_error`` naming what failed.
    """
    start = start or {}
    files = RunFolder(run_dir)
    try:
        irregular = irregular_reason(files.folder)
    except OSError as err:
        irregular = f"the run folder could not be listed: {err}"
    reasons = [*reasons, irregular] if irregular else reasons
    try:
        run_files = [e for e in file_entries(files.folder) if e["path"] in files.RUN_FILES]
    except OSError as err:
        run_files, reasons = [], [*reasons, f"the run files could not be hashed: {err}"]
    try:
        partial = every_file(files.summary_dir) if files.summary_dir.exists() else []
    except OSError as err:
        partial, reasons = [], [*reasons, f"the summary files could not be hashed: {err}"]
    return {
        "format": FORMAT,
        "minimal": True,
        "manifest_error": error,
        "stage": start.get("stage", stage),
        "run_id": start.get("run_id", run_id),
        "status": INCOMPLETE,
        "incomplete_reasons": [*reasons, f"the full manifest failed: {error}"],
        "source_commit": start.get("source_commit"),
        "plan": {"path": plan_path, "sha256": start.get("plan_sha256")},
        "approval": {
            "path": approval_record(start.get("run_id", run_id)),
            "sha256": start.get("approval_sha256"),
        },
        "started_at": start.get("started_at"),
        "ended_at": ended_at,
        "expected_items": len(expected),
        "items": items,
        "run_files": run_files,
        "summary_files": [],
        "partial_summary_files": partial,
    }


def write_final(
    run_dir: Path, build: Callable[[], dict], fallback: Callable[[str], dict]
) -> tuple[bytes | None, list[str]]:
    """Write the manifest ``build()`` makes; if building or writing it fails for any
    reason, write ``fallback(error)`` (see :func:`minimal_manifest`) instead.

    Returns the bytes of the manifest written (None if even the fallback failed) and a
    sentence for each failure met, for the terminal.
    """
    errors: list[str] = []
    for make in (build, lambda: fallback(errors[0])):
        try:
            return write_manifest(run_dir, make()), errors
        except Exception as err:  # noqa: BLE001 -- any failure still leaves a manifest
            errors.append(describe(err))
    return None, errors


def describe(err: BaseException) -> str:
    """An exception in one line with the place it was raised."""
    frames = traceback.extract_tb(err.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(err).__name__}: {err}{where}"
