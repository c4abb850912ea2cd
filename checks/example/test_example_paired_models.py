"""The paired-models example (examples/prereg-paired-models), a stage kind from its own
installed package, run by a newcomer's project end to end: ``prereg init``, plan, approve,
commit, run serially and on two workers, audit, report; and attacks on its outputs, which
the audit (hashes) and the kind's replay (recomputation) both find."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from example_project import STAGE, example_project, result_files, run_stage

from prereg.kinds import registry
from prereg.kinds.plans import load_plan
from prereg.kinds.stages import RunView, load_kind

pytestmark = [pytest.mark.software, pytest.mark.slow]

SERIAL = "paired-models-20261201-001"
TWO_WORKERS = "paired-models-20261201-002"
FINDINGS = 1
STAGE_KIND = "paired-models.compare"


def test_a_newcomer_runs_the_example_serially_and_on_two_workers(tmp_path):
    project = example_project(tmp_path / "study")
    serial = run_stage(project, SERIAL)
    audited = project.audit(SERIAL)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert "clean" in audited.stdout and "replayed (stage kind 'paired-models.compare')" in (
        audited.stdout
    ), audited.stdout
    # The approval binds the installed package the kind comes from, and the run recorded it.
    kind = load_kind(STAGE_KIND)
    installed = {
        registry.STAGE_KINDS: {kind.name: registry.origin(registry.STAGE_KINDS, kind.name)}
    }
    approval = json.loads((serial / "approval.json").read_text())
    assert approval["extensions"] == installed, approval.get("extensions")
    assert project.manifest(SERIAL)["environment"]["extensions"] == installed

    reported = project.prereg("report", f"runs/{SERIAL}", check=True)
    page = Path(reported.stdout.strip().splitlines()[-1]).read_text()
    summary = json.loads((serial / "summary" / "comparison.json").read_text())
    assert 'id="paired-models"' in page, "the kind's own section (StageKind.render)"
    assert "Ridge regression against k-nearest neighbours" in page
    assert summary["decision"] in page and "paired t interval" in page

    parallel = run_stage(project, TWO_WORKERS, "-n", "2")
    audited = project.audit(TWO_WORKERS)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    serial_files, parallel_files = result_files(serial), result_files(parallel)
    replicates = json.loads((tmp_path / "study" / "plans" / "PAIRED_MODELS_PLAN.json").read_text())
    count = replicates["stages"][STAGE]["parameters"]["replicates"]
    assert len(serial_files) == 2 * count + 1, sorted(serial_files)
    assert parallel_files == serial_files, "two workers give byte-identical result files"


def _replay(project, run_id: str) -> list[str]:
    """The kind's replay alone, on the run folder as it is now (no hash checks first)."""
    manifest = project.manifest(run_id)
    plan = load_plan(project.root / manifest["plan"]["path"])
    kind = load_kind(plan.stage(STAGE)["kind"])
    view = RunView(
        root=project.root,
        run_dir=project.run_dir(run_id),
        plan=plan,
        stage=STAGE,
        items=tuple(manifest["items"]),
    )
    return kind.replay(view)


def _edit_json(path: Path, change) -> bytes:
    original = path.read_bytes()
    data = json.loads(original)
    change(data)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return original


def test_tampered_outputs_and_summaries_are_findings(tmp_path):
    project = example_project(tmp_path / "study", replicates=3)
    run_dir = run_stage(project, SERIAL)
    assert _replay(project, SERIAL) == []
    item = run_dir / "items" / "test_replicate[replicate1]"

    def bump_prediction(data):
        data["b"][7] += 1e-3

    def flip_decision(data):
        data["decision"] = "A better" if data["decision"] != "A better" else "B better"

    def shift_loss(data):
        data["loss_b"] -= 0.05
        data["difference"] -= 0.05

    tampering = (
        (item / "predictions.json", bump_prediction, "replicate1 predictions.json.b"),
        (item / "replicate.json", shift_loss, "replicate1 replicate.json.difference"),
        (run_dir / "summary" / "comparison.json", flip_decision, "comparison.json.decision"),
    )
    originals = {path: _edit_json(path, change) for path, change, _ in tampering}
    try:  # one audit of the three edits: each is named by the hashes and by the replay
        audited = project.audit(SERIAL)
        text = audited.stdout + audited.stderr
        assert audited.returncode == FINDINGS, text
        replayed = _replay(project, SERIAL)
        for path, _, what in tampering:
            assert f"{path.relative_to(run_dir).as_posix()}" in text, (path, text)
            assert any(what in finding for finding in replayed), (what, replayed)
    finally:
        for path, original in originals.items():
            path.write_bytes(original)
    assert _replay(project, SERIAL) == []
    audited = project.audit(SERIAL)
    assert audited.returncode == 0, audited.stdout + audited.stderr

    # Seeds that are not the plan's derivation (the manifest edited; the audit's record
    # checks find that too): the replay names the item without recomputing it.
    manifest = run_dir / "manifest.json"
    _edit_json(manifest, lambda data: data["items"][0].update(seeds=["paired-models-1.0/x/9"]))
    replayed = _replay(project, SERIAL)
    assert any("recorded seeds" in f and "replicate0" in f for f in replayed), replayed
