"""A demo-sized E04 run reports progress while it runs, times reuse honestly, embeds each
text once across two workers, and its stored audit verdict spares the report's replay.

One scratch E04 project (token-hash backend, two tasks), a serial run watched while it
runs, then a two-worker run on a fresh (cold) vector cache.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prereg.decisions.audit import audit_run_cached
from prereg.testing import outer_environment
from support.e04_project import check_plan, make_project

pytestmark = pytest.mark.software

SERIAL = "e04-20260201-001"
PARALLEL = "e04-20260201-002"


def _watch(project, run_id: str, *args: str) -> tuple[subprocess.CompletedProcess, list[int]]:
    """Run the stage; sample the progress log's line count while the process is alive."""
    log = project.root / "runs" / "progress" / f"{run_id}.log"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--research-stage=e04"]
    command += ["--run-id", run_id, *args]
    outer = outer_environment()
    outer["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{outer.get('PATH', '')}"
    process = subprocess.Popen(
        command,
        cwd=project.root,
        env=outer,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    samples: list[int] = []
    while process.poll() is None:
        if log.is_file():
            samples.append(len(log.read_text(encoding="utf-8").splitlines()))
        time.sleep(0.05)
    output = process.stdout.read()
    return subprocess.CompletedProcess(command, process.returncode, output, ""), samples


@pytest.fixture(scope="module")
def runs(tmp_path_factory, e04_fixture):
    project = make_project(tmp_path_factory.mktemp("project") / "p", e04_fixture, check_plan())
    project.approve(SERIAL)
    serial = _watch(project, SERIAL)
    assert serial[0].returncode == 0, serial[0].stdout
    shutil.rmtree(project.root / "cache")  # the two-worker run starts cold
    project.approve(PARALLEL)
    parallel = _watch(project, PARALLEL, "-n", "2")
    return project, {SERIAL: serial, PARALLEL: parallel}


def _log(project, run_id: str) -> list[str]:
    return (project.root / "runs" / "progress" / f"{run_id}.log").read_text().splitlines()


@pytest.mark.parametrize("run_id", [SERIAL, PARALLEL])
def test_the_progress_log_grows_while_the_run_runs(runs, run_id):
    project, done = runs
    result, samples = done[run_id]
    assert result.returncode == 0, result.stdout
    lines = _log(project, run_id)
    items = len(project.manifest(run_id)["items"])
    # Written while the process was alive, not only at its end:
    assert samples and max(samples) > 0, "no progress line appeared while the run was running"
    # Items' own lines come before the controller's line for the last item:
    last = next(i for i, line in enumerate(lines) if f"prereg item {items}/{items}" in line)
    worker_lines = [line for line in lines[:last] if "controller:" not in line]
    for what in ("inputs:", "corpus: read", "index: building", "index: built", "query:", "done in"):
        assert any(what in line for line in worker_lines), (what, lines)
    assert any("embedding:" in line and "texts/s" in line for line in lines), lines


@pytest.mark.parametrize("run_id", [SERIAL, PARALLEL])
def test_the_controller_prints_one_line_per_finished_item_with_an_eta(runs, run_id):
    project, done = runs
    result, _ = done[run_id]
    items = len(project.manifest(run_id)["items"])
    printed = [line for line in result.stdout.splitlines() if line.startswith("prereg item ")]
    assert len(printed) == items, result.stdout
    assert any("ETA" in line for line in printed), printed
    assert f"prereg item {items}/{items}" in printed[-1] and "all items finished" in printed[-1]
    logged = [line for line in _log(project, run_id) if "controller: prereg item" in line]
    assert len(logged) == items


def _timings(project, run_id: str) -> list[dict]:
    items = project.run_dir(run_id) / "items"
    return [json.loads(p.read_text()) for p in sorted(items.glob("*/cell.timing.json"))]


def test_a_reused_index_or_record_records_its_cost_now_not_the_original_build(runs):
    project, _ = runs
    timings = _timings(project, SERIAL)
    reused = [t["baseline"] for t in timings if not t["baseline"]["computed_in_this_cell"]]
    assert reused, "the serial run computes each task's baseline once"
    for record in reused:
        assert record["build_seconds"] == 0.0 and record["embedding_misses"] == 0
        assert record["index_reused"] is True
    s002 = [t["S002"] for t in timings if t["S002"]["index_reused"]]
    for record in s002:  # H010 reuses H008's index: no embedding, lookup cost only
        assert record["embedding_misses"] == 0 and record["embedding_calls"] == 0


def _dense_queries(project, run_id: str) -> set[str]:
    queries = set()
    for path in (project.run_dir(run_id) / "items").glob("*/s002.json"):
        record = json.loads(path.read_text())
        if record["index"]["query_vector_sha256"] is not None:
            queries.add(record["query"])
    return queries


def test_two_workers_on_a_cold_cache_embed_each_text_once(runs):
    """Texts embedded (summed over both workers' cells) equal the vectors stored."""
    project, _ = runs
    manifest = project.manifest(PARALLEL)
    workers = {item.get("worker") for item in manifest["items"]}
    assert len(workers - {None}) == 2, workers
    embedded = sum(
        t[condition]["embedding_misses"]
        for t in _timings(project, PARALLEL)
        for condition in ("baseline", "S001", "S002")
    )
    with sqlite3.connect(project.cache) as db:
        (stored,) = db.execute("SELECT COUNT(*) FROM vectors").fetchone()
        (claims,) = db.execute("SELECT COUNT(*) FROM claims").fetchone()
    # Query vectors are embedded at search time, outside the index-build counts.
    assert embedded + len(_dense_queries(project, PARALLEL)) == stored
    assert claims == 0  # every claim ended with its vectors stored


def test_a_listing_after_audit_does_not_replay_the_e04_run(runs):
    project, _ = runs
    audit = project.audit(SERIAL)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "replay" in audit.stdout and "verdict stored in runs/audits/" in audit.stdout
    result = audit_run_cached(project.root, project.run_dir(SERIAL), listing=True)
    assert not result and not result.replayed
    assert "not run again" in result.replay_note
