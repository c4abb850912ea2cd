"""Manifests serially and under xdist, failures and interruption, and the audit's findings."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from support.toy import (
    UNUSED_PLUGINS,
    ToyRepo,
    left_behind,
    make_toy_repo,
    private_tmp,
    stage_spec,
)

pytestmark = pytest.mark.software

SERIAL, PARALLEL = "toy-20261130-001", "toy-20261130-002"


def result_files(toy, run_id: str) -> dict[str, str]:
    base = toy.root / "runs" / run_id / "items"
    return {
        p.relative_to(base).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(base.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def honest(tmp_path_factory) -> ToyRepo:
    """The toy stage run complete serially (SERIAL), then on two workers (PARALLEL), both
    with the temporary folder ``scratch(toy)``."""
    toy = make_toy_repo(tmp_path_factory.mktemp("honest") / "toy")
    env = private_tmp(scratch(toy))
    toy.approve("toy", SERIAL)
    done = toy.pytest("--research-stage=toy", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    toy.approve("toy", PARALLEL)
    done = toy.pytest("--research-stage=toy", "-n", "2", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return toy


def scratch(toy: ToyRepo) -> Path:
    return toy.root.parent / "tmp"


def test_a_complete_run_leaves_nothing_in_the_temporary_folder(honest):
    """Its snapshot, its item listing and its workers' files are all removed."""
    assert left_behind(scratch(honest)) == []


@pytest.fixture
def honest_copy(honest: ToyRepo, tmp_path) -> ToyRepo:
    """A private copy of ``honest`` (its git records and runs) for a check that edits it."""
    target = tmp_path / "copy"
    shutil.copytree(honest.root, target, symlinks=True, ignore=shutil.ignore_patterns("audits"))
    return ToyRepo(target)


def test_serial_and_two_workers_give_identical_results_and_one_manifest(honest):
    toy = honest
    serial, parallel = toy.manifest(SERIAL), toy.manifest(PARALLEL)
    assert result_files(toy, SERIAL) == result_files(toy, PARALLEL)
    assert parallel["workers"] == 2 and serial["workers"] == 0
    assert [i["nodeid"] for i in parallel["items"]] == [i["nodeid"] for i in serial["items"]]
    for item in parallel["items"]:
        assert item["outcome"] == "passed"
        assert item["seeds"] == [f"toy-1.0/cell/{item['coords']['cell']}"]
        assert item["peak_rss_bytes"] > 0 and "own peak" in item["peak_rss_scope"]
        assert item["thread_settings"]["threads_per_process"] == 1
    assert parallel["status"] == "complete" and parallel["expected_items"] == 4
    assert {d["field"] for d in parallel["deviations"]} >= {"python", "platform"}
    assert "numpy" in parallel["environment"]["packages_imported"]
    for run in (SERIAL, PARALLEL):
        assert toy.audit(run).returncode == 0


def test_plugins_the_project_blocks_are_loaded_by_no_process_of_its_runs(honest):
    ini = (honest.root / "pytest.ini").read_text()
    assert all(f"-p no:{name}" in ini for name in ("randomly", *UNUSED_PLUGINS))
    for run in (SERIAL, PARALLEL):
        environment = honest.manifest(run)["environment"]
        plugins = environment["pytest_plugins"]
        assert set(UNUSED_PLUGINS) <= set(plugins["blocked"])
        assert "xdist.plugin" in plugins["loaded"]  # the plugins not blocked still load
        loaded = " ".join(plugins["loaded"])
        assert "anyio" not in loaded and "hypothesis" not in loaded
        imported = environment["packages_imported"]
        assert "anyio" not in imported and "hypothesis" not in imported


def test_a_failed_stage_keeps_partial_outputs_is_incomplete_and_spends_its_id(tmp_path):
    """An item that raises; a signal and a worker's exit end runs in checks/run/test_crash.py."""
    how = "raise"
    spec = stage_spec("toy", parameters={"cells": 4, "misbehave": {"cell": 1, "how": how}})
    toy = make_toy_repo(tmp_path / how, {"toy": spec})
    toy.approve("toy", "toy-20261130-001")
    args = ["--research-stage=toy"]
    done = toy.pytest(*args)
    assert done.returncode != 0
    manifest = toy.manifest("toy-20261130-001")
    assert manifest["status"] == "incomplete" and manifest["incomplete_reasons"]
    assert manifest["summary_files"] == []
    assert (
        toy.root / "runs" / "toy-20261130-001" / "items" / "test_cell[cell1]" / "partial.txt"
    ).exists()
    failed = next(i for i in manifest["items"] if i["nodeid"].endswith("[cell1]"))
    assert failed["outcome"] != "passed"
    assert "cell failed on purpose" in failed["tracebacks"]["call"]
    assert "partial.txt" in {o["path"] for o in failed["outputs"]}
    again = toy.pytest(*args, "--run-id=toy-20261130-001")
    assert again.returncode == 4 and "run-id-unused" in again.stdout + again.stderr


def test_an_enforced_budget_ends_the_stage_incomplete(tmp_path):
    toy = make_toy_repo(
        tmp_path / "budget", {"toy": stage_spec("toy", budget_seconds=1e-6, budget_enforced=True)}
    )
    toy.approve("toy", "toy-20261130-001")
    assert toy.pytest("--research-stage=toy").returncode != 0
    manifest = toy.manifest("toy-20261130-001")
    assert manifest["status"] == "incomplete" and manifest["budget"]["exceeded"]
    assert any(
        "BudgetExceeded" in t for i in manifest["items"] for t in i.get("tracebacks", {}).values()
    )


DEADLINE_PROBE = """
import json
import pytest

pytestmark = pytest.mark.research_stage("toy")


@pytest.mark.parametrize("cell", [0, 1])
def test_cell(cell, research):
    research.coords(cell=cell)
    (research.outputs / "deadline.json").write_text(json.dumps(research.deadline))
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "two-workers"])
def test_an_enforced_budget_counts_from_the_spend(tmp_path, workers):
    """Every item's deadline is the start record's time (when the run id was spent) plus the
    budget, not the earlier moment the gate passed."""
    from datetime import datetime

    spec = stage_spec("toy", budget_seconds=600, budget_enforced=True)
    toy = make_toy_repo(tmp_path / "budget", {"toy": spec})
    (toy.root / spec["module"]).write_text(DEADLINE_PROBE)
    toy.commit("A probe of the deadline")
    toy.approve("toy", "toy-20261130-001")
    done = toy.pytest("--research-stage=toy", *workers)
    assert done.returncode == 0, done.stdout + done.stderr
    start = json.loads(toy.layout("toy-20261130-001").start.read_text())
    spent = datetime.fromisoformat(start["started_at"]).timestamp()
    items = toy.run_dir("toy-20261130-001") / "items"
    deadlines = {json.loads(p.read_text()) for p in items.glob("*/deadline.json")}
    assert deadlines == {spent + 600}, (deadlines, spent)


def test_audit_names_a_flipped_byte_a_deleted_file_and_an_added_file(honest_copy):
    toy = honest_copy
    assert toy.audit("toy-20261130-001").returncode == 0
    items = toy.root / "runs" / "toy-20261130-001" / "items"
    flipped = items / "test_cell[cell0]" / "result.json"
    data = bytearray(flipped.read_bytes())
    data[3] ^= 1
    flipped.write_bytes(bytes(data))
    (items / "test_cell[cell1]" / "result.json").unlink()
    (items / "test_cell[cell2]" / "extra.bin").write_bytes(b"\0")
    done = toy.audit("toy-20261130-001")
    assert done.returncode == 1
    assert "changed file: items/test_cell[cell0]/result.json" in done.stdout
    assert "missing file: items/test_cell[cell1]/result.json" in done.stdout
    assert "extra file not in the manifest: items/test_cell[cell2]/extra.bin" in done.stdout


def test_audit_checks_the_approval_binding(honest_copy):
    toy = honest_copy
    assert toy.audit("toy-20261130-001").returncode == 0
    copy = toy.root / "runs" / "toy-20261130-001" / "approval.json"
    copy.write_text(copy.read_text().replace("toy-1.0", "toy-2.0"))
    done = toy.audit("toy-20261130-001")
    assert done.returncode == 1 and "approval" in done.stdout


def test_a_summary_that_fails_halfway_is_kept_hashed_and_never_an_aggregate(honest_copy):
    from prereg.base.hashing import write_json
    from prereg.decisions.audit.checks import _hash_findings
    from prereg.decisions.manifest import build_manifest

    toy = honest_copy
    run = toy.run_dir("toy-20261130-001")
    (run / "summary").mkdir()
    (run / "summary" / "half.json").write_text("{}")
    complete = toy.manifest("toy-20261130-001")
    rebuilt = build_manifest(
        run_dir=run,
        start=json.loads((run / "start.json").read_text()),
        approval=json.loads((run / "approval.json").read_text()),
        plan_path=complete["plan"]["path"],
        stage_spec=stage_spec("toy"),
        items=complete["items"],
        expected=[],
        reasons=["the stage summary failed"],
        ended_at=complete["ended_at"],
        elapsed=1.0,
        env={},
        workers=0,
    )
    assert rebuilt["status"] == "incomplete" and rebuilt["summary_files"] == []
    assert [e["path"] for e in rebuilt["partial_summary_files"]] == ["half.json"]
    write_json(run / "manifest.json", rebuilt)
    assert _hash_findings(run, rebuilt) == []
    (run / "summary" / "half.json").write_text("{ }")
    assert _hash_findings(run, rebuilt) == [
        "changed file: summary/half.json (SHA-256 differs from the manifest)"
    ]
