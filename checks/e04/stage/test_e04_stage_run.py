import pytest

pytestmark = pytest.mark.software

import hashlib
import json
import shutil
from pathlib import Path

from prereg.e04.replay import replay_run
from prereg.kinds.plans import load_plan
from prereg.kinds.stages import RunView
from support.e04_project import result_files

SERIAL, PARALLEL = "e04-20260101-001", "e04-20260101-002"


def _cells(run_dir: Path) -> dict[str, Path]:
    return {p.name[len("test_cell[") : -1]: p for p in sorted((run_dir / "items").iterdir())}


def test_serial_run_completes_with_one_item_per_cell_and_audits_clean(e04_runs):
    project, results = e04_runs
    assert results[SERIAL].returncode == 0, results[SERIAL].stdout + results[SERIAL].stderr
    manifest = project.manifest(SERIAL)
    assert manifest["status"] == "complete"
    ids = [item["nodeid"].split("[")[1][:-1] for item in manifest["items"]]
    # 2 tasks x 3 harnesses x 3 seed coordinates, ids task-harness-s<coordinate>
    assert len(ids) == 18 and "SYN01-H008-s1" in ids
    item = next(i for i in manifest["items"] if i["nodeid"].endswith("[SYN02-H010-s2]"))
    assert item["coords"] == {"task": "SYN02", "harness": "H010", "seed_coordinate": 2, "dose": 10}
    assert item["seeds"] == ["e04-check/SYN02/distractors"]
    audit = project.audit(SERIAL)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "clean" in audit.stdout


def test_two_workers_give_byte_identical_result_files(e04_runs):
    project, results = e04_runs
    assert results[PARALLEL].returncode == 0, results[PARALLEL].stdout + results[PARALLEL].stderr
    assert project.manifest(PARALLEL)["workers"] == 2
    serial, parallel = (
        result_files(project.run_dir(SERIAL)),
        result_files(project.run_dir(PARALLEL)),
    )
    # 3 records per cell; the summary (JSON, text) and the bound vectors (.npy, keys)
    assert len(serial) == 18 * 3 + 4
    assert serial.keys() == parallel.keys()
    assert [k for k in serial if serial[k] != parallel[k]] == []
    assert project.audit(PARALLEL).returncode == 0


def test_s001_is_one_unit_per_task_and_harness_copied_identically(e04_runs):
    project, _ = e04_runs
    run_dir = project.run_dir(SERIAL)
    cells = _cells(run_dir)
    for name in ("s001.json", "baseline.json"):
        groups: dict[str, set[bytes]] = {}
        for cell_id, folder in cells.items():
            record = json.loads((folder / name).read_text())
            unit = cell_id.rsplit("-s", 1)[0]  # task-harness
            assert record["shared_key"].endswith(unit.replace("-", "/"))
            groups.setdefault(record["shared_key"], set()).add((folder / name).read_bytes())
        assert len(groups) == 6  # 2 tasks x 3 harnesses (45 for the real 15 x 3)
        assert all(len(copies) == 1 for copies in groups.values())
    summary = json.loads((run_dir / "summary" / "e04_summary.json").read_text())
    assert summary["units"]["S001_task_harness"] == 6
    assert summary["units"]["baseline_task_harness"] == 6
    assert summary["units"]["S002_task_harness_dose"] == 18
    assert [row["tasks"] for row in summary["S001"]] == [2, 2, 2]
    s001 = json.loads((cells["SYN01-H000-s0"] / "s001.json").read_text())
    assert s001["index_commit"] != s001["label_commit"]  # built at the first parent


def test_distractor_doses_nest_and_carry_source_path_and_hash(e04_runs):
    import hashlib

    project, _ = e04_runs
    cells = _cells(project.run_dir(SERIAL))
    for unit in ("SYN01-H000", "SYN02-H010"):
        doses = [json.loads((cells[f"{unit}-s{c}"] / "s002.json").read_text()) for c in range(3)]
        assert [len(d["distractors"]) for d in doses] == [1, 5, 10]
        assert doses[0]["distractors"] == doses[1]["distractors"][:1]
        assert doses[1]["distractors"] == doses[2]["distractors"][:5]
        for d in doses[2]["distractors"]:
            assert d["path"].startswith("__harness_distractors__/")
            assert hashlib.sha256(d["source"].encode()).hexdigest() == d["sha256"]
        assert doses[2]["index"]["files"] == doses[0]["index"]["files"] + 9
    # the same task's distractors do not depend on the harness
    a = json.loads((cells["SYN01-H000-s2"] / "s002.json").read_text())["generated_sha256"]
    b = json.loads((cells["SYN01-H010-s2"] / "s002.json").read_text())["generated_sha256"]
    assert a == b


def test_every_output_of_a_synthetic_task_file_is_labelled_synthetic(e04_runs):
    project, _ = e04_runs
    run_dir = project.run_dir(SERIAL)
    for path in (run_dir / "items").rglob("*.json"):
        if not path.name.endswith(".timing.json"):
            assert json.loads(path.read_text())["synthetic"] is True, path
    assert json.loads((run_dir / "summary" / "e04_summary.json").read_text())["synthetic"] is True
    assert "SYNTHETIC" in (run_dir / "summary" / "SUMMARY.md").read_text()


def _tampered_copy(project, run_id: str, copy_id: str) -> Path:
    source, copy = project.run_dir(run_id), project.run_dir(copy_id)
    shutil.copytree(source, copy)
    target = copy / "items" / "test_cell[SYN01-H008-s1]" / "s002.json"
    record = json.loads(target.read_text())
    tasks = json.loads(project.fixture.tasks_file.read_text())["tasks"]
    gold = set(next(t for t in tasks if t["task_id"] == "SYN01")["gold_files"])
    files = record["ranking"]["files"]
    assert any(path in gold for path, _ in files[:10])  # a gold file in the top 10...
    files.sort(key=lambda entry: entry[0] in gold)  # ...is moved to the bottom
    target.write_text(json.dumps(record, sort_keys=True, indent=2) + "\n")
    return copy


def test_audit_catches_a_tampered_ranking(e04_runs):
    project, _ = e04_runs
    copy = _tampered_copy(project, SERIAL, "e04-20260101-901")
    try:
        # prereg audit: the file no longer hashes as the manifest says
        audit = project.audit("e04-20260101-901")
        assert audit.returncode != 0
        assert "test_cell[SYN01-H008-s1]/s002.json" in audit.stdout + audit.stderr
        # replay alone (as if the manifest had been rewritten too): measures and rebuild differ
        manifest = json.loads((copy / "manifest.json").read_text())
        view = RunView(
            root=project.root,
            run_dir=copy,
            plan=load_plan(project.root / "plans" / "E04_PLAN.json"),
            stage="e04",
            items=tuple(manifest["items"]),
        )
        findings = replay_run(view)
        assert any("SYN01-H008-s1]/s002.json: measures" in f for f in findings), findings
        assert any("rebuilt ranking differ" in f for f in findings), findings
    finally:
        shutil.rmtree(copy)


def _view(project, run_dir: Path) -> RunView:
    return RunView(
        root=project.root,
        run_dir=run_dir,
        plan=load_plan(project.root / "plans" / "E04_PLAN.json"),
        stage="e04",
        items=tuple(json.loads((run_dir / "manifest.json").read_text())["items"]),
    )


def test_the_run_binds_the_vectors_it_searched_and_the_audit_never_reads_the_cache(e04_runs):
    project, _ = e04_runs
    run_dir = project.run_dir(SERIAL)
    keys = json.loads((run_dir / "summary" / "e04_vectors.json").read_text())
    manifest = project.manifest(SERIAL)
    assert {"e04_vectors.npy", "e04_vectors.json"} <= {f["path"] for f in manifest["summary_files"]}
    assert keys["count"] == len(keys["text_sha256"]) and keys["dimension"] == 32
    cache = project.root / "cache" / "e04-vectors.sqlite"
    backup = cache.with_suffix(".backup")
    shutil.move(cache, backup)  # no cache at all: the audit replays from the bound vectors
    try:
        assert replay_run(_view(project, run_dir)) == []
        assert not cache.exists()  # the replay created no cache
    finally:
        shutil.move(backup, cache)


def test_replay_reports_a_vector_missing_from_the_bound_file_without_embedding(e04_runs):
    import numpy as np

    project, _ = e04_runs
    copy = project.run_dir("e04-20260101-902")
    shutil.copytree(project.run_dir(SERIAL), copy)
    try:
        keys_path = copy / "summary" / "e04_vectors.json"
        record = json.loads(keys_path.read_text())
        matrix = np.load(copy / "summary" / "e04_vectors.npy")
        record["text_sha256"] = record["text_sha256"][1:]  # drop one text and its row
        np.save(copy / "summary" / "e04_vectors.npy", matrix[1:])
        record["vectors_sha256"] = hashlib.sha256(
            (copy / "summary" / "e04_vectors.npy").read_bytes()
        ).hexdigest()
        keys_path.write_text(json.dumps(record))
        findings = replay_run(_view(project, copy))
        assert findings and all("H000" not in f for f in findings)  # BM25 needs no vector
        assert any("have no vector" in f and "does not embed" in f for f in findings), findings
    finally:
        shutil.rmtree(copy)
