"""RP002A's four stages end to end on a tiny plan: the wiring CI proves without research."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess

import pytest

from prereg.api import RunFolder, RunLayout, load_plan
from prereg.base import gitrepo
from prereg.base.hashing import sha256_file, write_json
from prereg.decisions.audit import AuditResult, audit_run_cached
from prereg.records import ledger, verdicts
from prereg.rp002a import calibration_stage, config_stage, confirmatory_stage
from support.rp002a_clone import (
    TINY,
    prereg,
    rename_tests,
    run_pipeline,
    scratch_clone,
    steps,
    tiny_plan,
)

pytestmark = [pytest.mark.software, pytest.mark.slow]


def runs(root):
    """Stage name -> run folder, for every run with a manifest."""
    return {
        json.loads((p / "manifest.json").read_text())["stage"]: p
        for p in (root / "runs").iterdir()
        if (p / "manifest.json").exists()
    }


def test_every_stage_completes_and_the_decisions_follow_the_protocol_order(tiny_pipeline):
    by_stage = runs(tiny_pipeline)
    for stage in ("calibration", "target-variance", "confirmatory-config", "confirmatory"):
        manifest = json.loads((by_stage[stage] / "manifest.json").read_text())
        assert manifest["status"] == "complete", (stage, manifest["incomplete_reasons"])
    config = json.loads((tiny_pipeline / "plans/CONFIRMATORY_CONFIG.json").read_text())
    assert config["branch"] in {"precise", "resource-limited"} and config["n"] in {3, 4}
    assert set(config["inputs"]) == {"calibration", "target-variance"}
    decisions = json.loads((by_stage["confirmatory"] / "summary/decisions.json").read_text())
    plan = tiny_plan()
    assert [r["contrast"] for r in decisions["contrasts"]] == [
        c["id"] for c in plan["parameters"]["contrast_family"]
    ]
    for row in decisions["contrasts"]:
        assert row["decision"] in {row["kind"], "indeterminate", "analysis-failure"}
        assert row["n"] == config["n"]
        inflated, uninflated = row["inflated_interval"], row["uninflated_interval"]
        assert inflated["half_width"] == pytest.approx(2 * uninflated["half_width"])
    assert decisions["assumptions"] and decisions["limitations"] and decisions["rationale"]


def test_a_consistent_forgery_of_weights_is_caught_only_by_replay(tiny_pipeline):
    """An operator who rewrites every record (item log, manifest and its git record) passes
    the hash and record checks; the replay still catches the changed weights. What a
    dependent stage's gate and a report page ask (audit_run_cached) skips the replay of the
    honest run on the auditor's signed, replayed audit, and does not skip it for the forgery:
    the signed audit names the manifest the operator replaced."""
    run = runs(tiny_pipeline)["target-variance"]
    honest = audit_run_cached(tiny_pipeline, run)
    assert not honest and not honest.replayed, honest
    assert "not run again; an auditor replayed it and signed" in honest.replay_note
    manifest_path, log = run / "manifest.json", run / "items.jsonl"
    original, original_log = manifest_path.read_bytes(), log.read_bytes()
    ref = ledger.manifest_ref(run.name)
    recorded = ledger.read(tiny_pipeline, ref)
    manifest = json.loads(original)
    item = manifest["items"][0]
    weights = run / "items" / item["output_dir"] / "B1.weights"
    saved = weights.read_bytes()
    forged = bytearray(saved)
    forged[-5] ^= 0x40  # a changed weight
    try:
        weights.write_bytes(bytes(forged))
        for entry in item["outputs"]:
            if entry["path"] == "B1.weights":
                entry["sha256"] = hashlib.sha256(forged).hexdigest()
        lines = [json.loads(line) for line in original_log.decode().splitlines()]
        for line in lines:
            if line["nodeid"] == item["nodeid"]:
                line["outputs"] = item["outputs"]
        log.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
        for entry in manifest["run_files"]:
            if entry["path"] == "items.jsonl":
                entry.update(sha256=sha256_file(log), bytes=log.stat().st_size)
        write_json(manifest_path, manifest)
        assert prereg(tiny_pipeline, "audit", str(run), "--no-replay").returncode == 1
        _set_ref(tiny_pipeline, ref, manifest_path.read_bytes())  # the git record rewritten
        assert prereg(tiny_pipeline, "audit", str(run), "--no-replay").returncode == 0
        done = prereg(tiny_pipeline, "audit", str(run))
        assert done.returncode == 1
        assert "B1: the saved weights do not reproduce the saved probabilities" in done.stdout
        # A clean replayed verdict stored for the forged manifest, its bytes recorded in git:
        # a listing takes it, the gate's question does not.
        verdicts.store(tiny_pipeline, run, AuditResult(replayed=True, status="complete"))
        assert not audit_run_cached(tiny_pipeline, run, listing=True)
        relied = audit_run_cached(tiny_pipeline, run)
        assert relied.replayed and any("B1: the saved weights" in f for f in relied), relied
    finally:
        weights.write_bytes(saved)
        manifest_path.write_bytes(original)
        log.write_bytes(original_log)
        _set_ref(tiny_pipeline, ref, recorded)


def _set_ref(root, ref: str, data: bytes) -> None:
    def git(*args, data=None):
        command = ["git", "-C", str(root), *args]
        return subprocess.run(command, input=data, capture_output=True, check=True)

    blob = git("hash-object", "-w", "--stdin", data=data).stdout.decode().strip()
    git("update-ref", ref, blob)


def test_serial_and_two_workers_train_to_identical_bytes(tiny_pipeline, tmp_path):
    """Two workers, and the experiment's test function renamed (so every item folder name
    differs): the same bytes per unit, and the run audits clean (run_pipeline audits it)."""
    clone = scratch_clone(tmp_path, tiny_plan())
    rename_tests(clone, "experiments/test_target_variance.py", {"test_unit": "test_replicate_unit"})
    root = run_pipeline(clone, steps("target-variance", workers=2))
    ours, theirs = runs(root)["target-variance"], runs(tiny_pipeline)["target-variance"]

    def files(run):
        """(unit, file) -> bytes, the unit named by the coordinates its item recorded."""
        manifest = json.loads((run / "manifest.json").read_text())
        out = {}
        for item in manifest["items"]:
            unit = "{world}-r{replicate:03d}".format(**item["coords"])
            base = run / "items" / item["output_dir"]
            for p in sorted(base.rglob("*")):
                if p.is_file() and not p.name.endswith(".timing.json"):
                    out[unit, p.relative_to(base).as_posix()] = p.read_bytes()
        return out

    folders = {i["output_dir"] for i in json.loads((ours / "manifest.json").read_text())["items"]}
    assert all(f.startswith("test_replicate_unit[") for f in folders), folders
    assert files(ours) == files(theirs)


def test_the_confirmatory_stage_refuses_when_the_rule_allows_no_confirmation(
    tiny_pipeline, tmp_path
):
    """On calibration facts where no candidate count is eligible (the tiny pipeline's own
    calibration run, copied, its summary saying so), the frozen rule derives the branch
    no-eligible-count, and the confirmatory stage's gate check (run by prereg approve and by
    the gate) refuses that configuration. The rule's branches are checked on their own in
    checks/rp002a/stats/test_stats_planning.py."""
    by_stage = runs(tiny_pipeline)
    calibration = tmp_path / "runs" / by_stage["calibration"].name
    shutil.copytree(by_stage["calibration"], calibration)
    summary_path = RunFolder(calibration).summary_dir / calibration_stage.SUMMARY
    summary = json.loads(summary_path.read_text())
    for row in summary["eligibility_by_n"]:
        row["eligible"] = False
    write_json(summary_path, summary)
    plan = load_plan(tiny_pipeline / TINY)
    settings = config_stage.settings_of(plan.data)
    config = config_stage.derive_config(
        settings,
        {"calibration": calibration, "target-variance": by_stage["target-variance"]},
        source_commit=gitrepo.head_commit(tiny_pipeline),
        root=tiny_pipeline,
    )
    assert (config["branch"], config["n"], config["confirmation_allowed"]) == (
        "no-eligible-count",
        None,
        False,
    )
    derived_by = "confirmatory-config-20261130-009"
    for path in (
        config_stage.output_path(tmp_path, settings),
        RunLayout(tmp_path, derived_by).summary_dir / config_stage.CONFIG,
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, config)
    approval = {"requires": {config_stage.STAGE: {"run_id": derived_by}}}
    refused = confirmatory_stage.gate_check(tmp_path, plan, "confirmatory", approval)
    assert len(refused) == 1, refused
    assert "no confirmation" in refused[0] and "no-eligible-count" in refused[0]
