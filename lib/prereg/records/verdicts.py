"""Stored audit verdicts: ``runs/audits/<run-id>.json``, bound to a manifest and to the code.

``prereg audit`` stores the verdict of every audit of a run with a manifest
(:func:`store`); ``prereg report`` and ``prereg runs`` (through
:func:`prereg.decisions.audit.audit_run_cached`) take the replay's verdict from a stored record
only when it matches the run now (:func:`staleness`): git records the verdict file's
bytes (``refs/prereg/runs/<run-id>/verdict``, written with it, so an edited or hand-made
file is not trusted), the SHA-256 of ``manifest.json`` is the one audited, and the code
that audited is this code. Every other check (hashes, records, git
records, inputs) is cheap and runs again every time, so a stored verdict saves the
replay only, and a stored verdict cannot hide a file changed since.

The code is identified by :func:`code_identity`: the SHA-256 of every ``.py`` file of the
``prereg`` package in use (sorted by path; the audit, the replays of each stage kind and
everything they import live there), which decides a match, and, for the reader, the git
commit of the checkout the package was imported from (``None`` outside a git checkout)
and whether its files differ from that commit. Binding to the file hash rather than the
commit means a commit that changes no code (docs, plans, approvals) does not make every
stored verdict stale, while any change to the package's code does.

Record (JSON; its schema is :data:`prereg.records.VERDICT_SCHEMA`)::

    {"format": "prereg-audit-verdict/2", "run_id": ..., "manifest_sha256": ...,
     "code": {"package_sha256": ..., "source_commit": ..., "source_dirty": ...},
     "verdict": "clean" | "findings" | "could not audit", "findings": [...],
     "blockers": [...], "replayed": bool, "replay_note": ..., "status": ...,
     "audited_at": "<UTC ISO time>"}
"""

from __future__ import annotations

import hashlib
import subprocess
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

import prereg
from prereg.base.gitrepo import GitError
from prereg.base.hashing import read_json, sha256_file, write_json
from prereg.records import VERDICT_FORMAT, ledger
from prereg.records.runs import RunFolder, RunIdError, RunLayout

FORMAT = VERDICT_FORMAT


def package_dir() -> Path:
    return Path(prereg.__file__).resolve().parent


@lru_cache(maxsize=1)
def code_identity() -> dict[str, Any]:
    """What audited: the package files' SHA-256 and its checkout's commit (see module doc)."""
    folder = package_dir()
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    commit = dirty = None
    try:
        commit = _git(folder, "rev-parse", "HEAD") or None
        if commit:
            dirty = bool(_git(folder, "status", "--porcelain", "--", "."))
    except (OSError, subprocess.SubprocessError):
        commit = dirty = None
    return {"package_sha256": digest.hexdigest(), "source_commit": commit, "source_dirty": dirty}


def _git(folder: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(folder), *args], check=False, capture_output=True, text=True, timeout=30
    )
    return done.stdout.strip() if done.returncode == 0 else ""


def store_path(root: Path, run_dir: Path) -> Path | None:
    """``runs/audits/<run-id>.json`` of the run folder ``run_dir`` (its name is the run id);
    None for a folder whose name is no run id (no path is built from it)."""
    try:
        return RunLayout(root, Path(run_dir).name).verdict
    except RunIdError:
        return None


def store(root: Path, run_dir: Path, result: Any) -> Path | None:
    """Store ``result`` (an :class:`prereg.decisions.audit.AuditResult`) for the run; None if no
    manifest.

    A store that cannot be written is not an error (the audit stands); returns None then.
    """
    manifest = RunFolder(run_dir).manifest
    path = store_path(root, run_dir)
    if path is None or not manifest.is_file():
        return None
    record = {
        "format": FORMAT,
        "run_id": Path(run_dir).name,
        "manifest_sha256": sha256_file(manifest),
        "code": code_identity(),
        "verdict": result.verdict,
        "findings": list(result.findings),
        "blockers": list(result.blockers),
        "replayed": bool(result.replayed),
        "replay_note": result.replay_note,
        "status": result.status,
        "audited_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    try:
        write_json(path, record)
        ledger.record_verdict(root, record["run_id"], path.read_bytes())
    except (OSError, GitError):
        path.unlink(missing_ok=True)  # a verdict git does not record would never be used
        return None
    return path


def load(root: Path, run_dir: Path) -> dict | None:
    """The stored record, or None when there is none or it cannot be read."""
    path = store_path(root, run_dir)
    if path is None or not path.is_file():
        return None
    try:
        record = read_json(path, what="stored audit verdict")
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def staleness(root: Path, record: dict | None, run_dir: Path) -> str | None:
    """Why ``record`` (:func:`load`) does not match the run and this code now (None: it
    matches)."""
    if record is None:
        return "no stored verdict"
    if record.get("format") != FORMAT:
        return f"the stored verdict has format {record.get('format')!r}, not {FORMAT!r}"
    manifest = RunFolder(run_dir).manifest
    if not manifest.is_file():
        return f"the run has no {manifest.name}"
    now = sha256_file(manifest)
    if record.get("manifest_sha256") != now:
        return (
            f"{manifest.name} changed since that audit (SHA-256 "
            f"{str(record.get('manifest_sha256'))[:12]} then, {now[:12]} now)"
        )
    code = record.get("code") if isinstance(record.get("code"), dict) else {}
    mine = code_identity()
    if code.get("package_sha256") != mine["package_sha256"]:
        return (
            f"the audit code changed since that audit ({code_label(code)} then, "
            f"{code_label(mine)} now)"
        )
    return _unbound(root, run_dir)


def _unbound(root: Path, run_dir: Path) -> str | None:
    """Why the verdict file is not the one git records for the run (None: it is)."""
    path = store_path(root, run_dir)
    ref = ledger.verdict_ref(Path(run_dir).name)
    try:
        recorded = ledger.read(root, ref)
        stored = path.read_bytes() if path is not None else None
    except (OSError, GitError) as err:
        return f"the stored verdict cannot be compared with git's record {ref} ({err})"
    if recorded is None:
        return f"git records no stored verdict for the run ({ref})"
    if stored != recorded:
        return f"the stored verdict file is not the one git records ({ref}): edited since"
    return None


def code_label(code: dict) -> str:
    """``prereg package 1a2b3c4d5e6f at commit 0123abcd4567``; a package imported from
    outside a git checkout (a wheel install) is ``... (installed, no git commit)``."""
    commit = code.get("source_commit")
    where = f"at commit {str(commit)[:12]}" if commit else "(installed, no git commit)"
    return f"prereg package {str(code.get('package_sha256'))[:12]} {where}"


def describe(record: dict) -> str:
    """``the verdict stored in runs/audits/<id>.json at <time> (prereg package ...)``."""
    code = record.get("code") if isinstance(record.get("code"), dict) else {}
    where = store_path(Path(), Path(str(record.get("run_id"))))  # relative to the root
    return (
        f"the verdict stored in {where.as_posix() if where else 'runs/audits/'} at "
        f"{record.get('audited_at')} for this manifest SHA-256 and this audit code "
        f"({code_label(code)})"
    )
