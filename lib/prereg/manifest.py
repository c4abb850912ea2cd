"""Run manifests: the start record, the per-item log and the final manifest.

Only the controller process writes here. Items reach it through their reports
(``report.user_properties``), never through files the controller would have to find.
"""

from __future__ import annotations

import json
import platform
import shutil
import socket
import sys
import traceback
from datetime import datetime, timezone
from pathlib import Path

from prereg import gitrepo, provenance
from prereg.hashing import file_entries, sha256_file, write_json
from prereg.runs import (
    APPROVAL_COPY,
    COMPLETE,
    INCOMPLETE,
    ITEM_LOG,
    JUNIT,
    MANIFEST,
    START_RECORD,
    SUMMARY_DIR,
)

FORMAT = "prereg-manifest-1"


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def start_record(
    *, stage: str, run_id: str, approval_path: Path, plan_sha256: str, started_at: str, root: Path
) -> dict:
    """What ``start.json`` holds; its canonical bytes are also recorded in git (:mod:`prereg.ledger`)."""
    return {
        "stage": stage,
        "run_id": run_id,
        "started_at": started_at,
        "source_commit": gitrepo.head_commit(root),
        "plan_sha256": plan_sha256,
        "approval_sha256": sha256_file(approval_path),
        "host": socket.gethostname(),
    }


def write_start_record(run_dir: Path, *, record: dict, approval_path: Path) -> None:
    """Lay out the run folder of a run id just spent in git: the approval copy and start.json."""
    run_dir.mkdir(parents=True, exist_ok=False)
    shutil.copyfile(approval_path, run_dir / APPROVAL_COPY)
    write_json(run_dir / START_RECORD, record)


def append_item(run_dir: Path, entry: dict) -> None:
    """Append one finished item to items.jsonl at once, so a killed run keeps it."""
    with open(run_dir / ITEM_LOG, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry, sort_keys=True) + "\n")


def environment(plugins: dict[str, list[str]], imported: dict[str, str], threads: dict) -> dict:
    return {
        "interpreter": sys.executable,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "pins_view": provenance.pinned_environment(),
        "packages_imported": imported,
        "thread_settings": threads,
        "pytest_plugins": plugins,
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
    status = COMPLETE if not reasons else INCOMPLETE
    tracked = {START_RECORD, APPROVAL_COPY, ITEM_LOG, JUNIT}
    run_files = [e for e in file_entries(run_dir) if e["path"] in tracked]
    summary = file_entries(run_dir / SUMMARY_DIR) if (run_dir / SUMMARY_DIR).exists() else []
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
            "path": f"plans/approvals/{start['run_id']}.json",
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
            "exceeded": elapsed > budget,
        },
        "expected_items": len(expected),
        "items": items,
        "run_files": run_files,
        "summary_files": summary if status == COMPLETE else [],
        # What a summary that failed halfway left behind: kept and hashed, never an aggregate.
        "partial_summary_files": [] if status == COMPLETE else summary,
    }


def write_manifest(run_dir: Path, manifest: dict) -> Path:
    path = run_dir / MANIFEST
    write_json(path, manifest)
    return path


def format_exception() -> str:
    return traceback.format_exc()
