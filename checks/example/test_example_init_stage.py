"""``prereg init --stage NAME`` writes a working stage (a plan with this machine's pins, a
stage kind in the project's own code, its items and a software check), in a new project or
an existing one, and refuses, writing nothing, a bad name or a file that exists."""

from __future__ import annotations

import html
import json
import keyword
import re
import shutil
import subprocess
import sys
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import iniconfig
import pytest
from hypothesis import given
from hypothesis import strategies as st

from prereg.base.hashing import sha256_file
from prereg.base.provenance import deviations, pin_form, pinned_environment
from prereg.commands import scaffold
from prereg.decisions.audit import AuditResult
from prereg.records import STAGE_NAME, ledger, verdicts
from prereg.testing import ScratchProject
from support.scaffolded import prereg_imports

pytestmark = pytest.mark.software

STAGE = "demo-stage"
LAYOUT = scaffold.StageLayout(STAGE)
STAGE_FILES = [
    "plans/DEMO_STAGE_PLAN.json",
    "src/demo_stage/__init__.py",
    "src/demo_stage/kind.py",
    "experiments/test_demo_stage.py",
    "checks/test_demo_stage_kind.py",
]


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def _project(root: Path) -> ScratchProject:
    project = ScratchProject(root)
    project.git("config", "user.email", "researcher@example.org")
    project.git("config", "user.name", "Researcher")
    return project


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory) -> tuple[ScratchProject, str]:
    """A new project from ``prereg init --stage demo-stage``, committed; read it only."""
    project = ScratchProject(tmp_path_factory.mktemp("init-stage") / "study")
    project.root.mkdir()
    done = project.prereg("init", "--stage", STAGE, ".", check=True)
    _project(project.root).commit("Add stage demo-stage")
    return project, done.stdout


def test_a_new_project_gets_the_projects_files_and_the_stages(scaffolded):
    project, stdout = scaffolded
    assert sorted(_snapshot(project.root)) == sorted([*scaffold.FILES, *STAGE_FILES])
    assert [LAYOUT.plan, LAYOUT.kind_file, LAYOUT.module, LAYOUT.check] == [
        STAGE_FILES[0],
        *STAGE_FILES[2:],
    ]
    ini = iniconfig.IniConfig(project.root / "pytest.ini")
    assert ini["pytest"]["prereg_plans"].split() == [LAYOUT.plan]
    assert ini["pytest"]["pythonpath"] == "src"
    for expected in (
        "git add -A",
        f"pytest --research-stage={STAGE} --rehearse",
        "not a run, nothing spent",
        f"approve --stage {STAGE} --run-id {STAGE}-",
        "(and ran git init)",
    ):
        assert expected in stdout, stdout


def test_the_plan_pins_this_machines_environment_and_names_the_projects_kind(scaffolded):
    project, _ = scaffolded
    plan = json.loads((project.root / LAYOUT.plan).read_text())
    here = pinned_environment()
    assert plan["environment_pins"] == {k: pin_form(v) for k, v in here.items()}
    assert deviations(plan["environment_pins"], here) == []
    spec = plan["stages"][STAGE]
    assert spec["kind"] == "demo_stage.kind:KIND" and spec["module"] == LAYOUT.module
    assert spec["seed_namespace"] == "demo-stage-1.0"


def test_the_kind_and_its_check_import_only_prereg_api_and_the_module_the_plugin(scaffolded):
    project, _ = scaffolded
    for rel in (LAYOUT.kind_file, LAYOUT.check):
        assert prereg_imports((project.root / rel).read_text(encoding="utf-8")) == {"prereg.api"}
    # an experiments module is a pytest module: its helper comes from the pytest face
    module = (project.root / LAYOUT.module).read_text(encoding="utf-8")
    assert prereg_imports(module) == {"prereg.plugin.parametrize_items"}


@pytest.mark.parametrize("requiring", [False, True], ids=["stage", "stage-that-requires"])
def test_the_written_code_passes_ruff_with_its_default_settings(scaffolded, tmp_path, requiring):
    project, _ = scaffolded
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (the dev extra installs it)")
    if requiring:  # and a stage that decides from it, in a copy
        project = ScratchProject(tmp_path / "study")
        shutil.copytree(scaffolded[0].root, project.root, symlinks=True)
        project.prereg(
            "init", "--stage", "a-long-decision-name", "--requires", STAGE, ".", check=True
        )
    files = sorted(str(p.relative_to(project.root)) for p in project.root.rglob("*.py"))
    assert len(files) == (10 if requiring else 6), files
    common = ["--isolated", "--no-cache", "--target-version", "py39"]
    checked = project.run(ruff, "check", *common, "--select", "E,F,W,I,B,UP", *files)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    formatted = project.run(ruff, "format", "--check", *common, *files)
    assert formatted.returncode == 0, formatted.stdout + formatted.stderr


def test_the_stage_passes_its_checks_approves_at_its_pins_runs_and_audits_clean(
    scaffolded, tmp_path
):
    """The whole way, in a copy of the scaffolded project: software checks, a rehearsal,
    approve without --accept-deviations (the pins are this machine's), run, audit with the
    replay, report."""
    root = tmp_path / "study"
    shutil.copytree(scaffolded[0].root, root, symlinks=True)
    project = _project(root)
    checked = project.pytest("-m", "software")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "5 passed" in checked.stdout, checked.stdout
    rehearsed = project.pytest(f"--research-stage={STAGE}", "--rehearse")
    assert rehearsed.returncode == 0, rehearsed.stdout + rehearsed.stderr
    assert "not a run, nothing spent" in rehearsed.stdout, rehearsed.stdout

    run_id = f"{STAGE}-{datetime.now(timezone.utc):%Y%m%d}-001"
    approved = project.prereg("approve", "--stage", STAGE, "--run-id", run_id, check=True)
    assert "listed in the record: 1 (1 passed; 1 of the whole stage; 1 wrote a summary" in (
        approved.stdout
    )
    assert "no passing rehearsal" not in approved.stderr, approved.stderr
    project.commit(f"Approve {run_id}")
    done = project.pytest(f"--research-stage={STAGE}")
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = project.manifest(run_id)
    assert manifest["status"] == "complete", manifest.get("incomplete_reasons")
    assert len(manifest["items"]) == 4
    summary = json.loads((project.run_dir(run_id) / "summary" / "summary.json").read_text())
    assert [r["replicate"] for r in summary["replicates"]] == [0, 1, 2, 3]
    # The rehearsal drew from its own seeds: it showed that the stage works, not its outcome.
    [rehearsed] = (root / "runs" / "rehearsals").glob("*/summary/summary.json")
    assert json.loads(rehearsed.read_text())["mean_of_means"] != summary["mean_of_means"]
    [disclosed] = json.loads((project.run_dir(run_id) / "approval.json").read_text())["rehearsals"]
    assert disclosed["name"] == rehearsed.parents[1].name and disclosed["summary_files"] == 1

    audit = project.audit(run_id)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert f"clean (run status: complete; replayed (stage kind '{LAYOUT.kind}')" in audit.stdout
    report = project.prereg("report", str(project.run_dir(run_id).relative_to(root)))
    assert report.returncode == 0, report.stdout + report.stderr
    page = Path(report.stdout.strip().splitlines()[-1]).read_text()
    assert f'id="{STAGE}"' in page and "mean_of_means" in page
    assert "Rehearsals since the stage" in page and disclosed["name"] in page
    plan = json.loads((root / LAYOUT.plan).read_text())
    assert 'id="preregistration"' in page and html.escape(plan["protocol"]) in page
    assert "<dt>replicates</dt><dd>4</dd>" in page
    listed = project.prereg("runs", "--no-audit", check=True).stdout
    assert f"result: mean of means {summary['mean_of_means']:.4f}" in listed, listed
    assert "rehearsed before approval: 1 (1 passed;" in listed, listed

    # The kind's code moves on: the old run still audits clean, replayed with its own commit.
    kind_file = root / "src" / LAYOUT.package / "kind.py"
    source = kind_file.read_text()
    changed = source.replace('"mean": draws.mean()', '"mean": draws.mean() + 1.0')
    assert changed != source
    kind_file.write_text(changed)
    project.commit("Shift every mean: the kind's code after the run")
    later = project.audit(run_id)
    assert later.returncode == 0, later.stdout + later.stderr
    commit = manifest["source_commit"]
    assert f"with the code of commit {commit[:12]}" in later.stdout, later.stdout


def test_every_rehearsal_is_disclosed_once_by_the_next_approval_whatever_its_folder(
    scaffolded, tmp_path
):
    """Rehearsals are kept in git from their start: a deleted runs/ (a clean checkout) does
    not hide one; the next approval lists those since the previous one; approving a tree no
    passing whole-stage rehearsal ran warns."""
    root = tmp_path / "study"
    shutil.copytree(scaffolded[0].root, root, symlinks=True)
    project = _project(root)
    day = f"{datetime.now(timezone.utc):%Y%m%d}"
    first = project.prereg("approve", "--stage", STAGE, "--run-id", f"{STAGE}-{day}-001")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "listed in the record: none" in first.stdout
    assert "no passing rehearsal of the whole stage demo-stage ran this commit" in first.stderr
    project.commit("Approve 001")

    whole = project.pytest(f"--research-stage={STAGE}", "--rehearse")
    assert whole.returncode == 0, whole.stdout + whole.stderr
    some = project.pytest(f"--research-stage={STAGE}", "--rehearse", "-k", "replicate0")
    assert some.returncode == 0, some.stdout + some.stderr
    shutil.rmtree(root / "runs")  # git clean -fdx, or a researcher tidying up
    second = project.prereg("approve", "--stage", STAGE, "--run-id", f"{STAGE}-{day}-002")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "listed in the record: 2 (2 passed; 1 of the whole stage; 1 wrote a summary" in (
        second.stdout
    )
    record = json.loads((root / "plans" / "approvals" / f"{STAGE}-{day}-002.json").read_text())
    assert [d["selection"] for d in record["rehearsals"]] == [None, "-k 'replicate0'"]
    assert "no passing rehearsal" not in second.stderr, second.stderr
    project.commit("Approve 002")

    third = project.prereg("approve", "--stage", STAGE, "--run-id", f"{STAGE}-{day}-003")
    assert third.returncode == 0, third.stdout + third.stderr
    assert "listed in the record: none" in third.stdout  # each rehearsal is listed once


def test_a_plan_changed_after_an_outcome_needs_a_recorded_amendment_shown_with_the_run(
    scaffolded, tmp_path
):
    """Run the stage, relax the plan after seeing the outcome, approve again: refused
    until --amend says why, naming each changed field and the runs with outcomes; then the
    amendment is in the approval, and prereg runs shows it and marks the superseded run."""
    root = tmp_path / "study"
    shutil.copytree(scaffolded[0].root, root, symlinks=True)
    project = _project(root)
    day = f"{datetime.now(timezone.utc):%Y%m%d}"
    first, second = f"{STAGE}-{day}-001", f"{STAGE}-{day}-002"
    project.prereg("approve", "--stage", STAGE, "--run-id", first, check=True)
    project.commit("Approve 001")
    ran = project.pytest(f"--research-stage={STAGE}")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    unchanged = project.prereg("approve", "--stage", STAGE, "--run-id", second, "--amend", "x")
    assert unchanged.returncode == 2 and "no amendment to record" in unchanged.stderr

    plan = root / LAYOUT.plan
    data = json.loads(plan.read_text())
    draws = data["stages"][STAGE]["parameters"]["draws"]
    data["stages"][STAGE]["parameters"]["draws"] = draws + 1
    plan.write_text(json.dumps(data, indent=2) + "\n")
    project.commit("One more draw")
    refused = project.prereg("approve", "--stage", STAGE, "--run-id", second)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    field = f"stages.{STAGE}.parameters.draws: {draws} -> {draws + 1}"
    assert field in refused.stderr and first in refused.stderr and "--amend" in refused.stderr
    assert not (root / "plans" / "approvals" / f"{second}.json").exists()

    amended = project.prereg("approve", "--stage", STAGE, "--run-id", second, "--amend", "why")
    assert amended.returncode == 0, amended.stdout + amended.stderr
    assert f"the plan changed since {first}" in amended.stdout
    record = json.loads((root / "plans" / "approvals" / f"{second}.json").read_text())
    assert record["amendment"]["changed"] == [
        {
            "field": f"stages.{STAGE}.parameters.draws",
            "change": "changed",
            "from": draws,
            "to": draws + 1,
        }
    ]
    assert record["amendment"]["complete_runs_before"] == [first]
    assert record["amendment"]["reason"] == "why"
    project.commit("Approve 002, amended")
    again = project.pytest(f"--research-stage={STAGE}")
    assert again.returncode == 0, again.stdout + again.stderr
    listed = project.prereg("runs", "--no-audit", check=True).stdout
    assert listed.count("plan superseded") == 1, listed
    status = project.prereg("status", check=True).stdout
    runs = {r["run_id"]: r for r in json.loads(project.prereg("runs", "--json").stdout)}
    old_plan, new_plan = runs[first]["plan_sha256"], runs[second]["plan_sha256"]
    assert old_plan != new_plan and new_plan == sha256_file(plan)
    assert f"under plan {new_plan[:12]} (the plan file now): {second} (complete)" in status
    assert f"under plan {old_plan[:12]} (superseded): {first} (complete)" in status
    assert old_plan[:12] in listed and new_plan[:12] in listed
    assert f"amended plan: the plan changed since {first}" in listed, listed
    assert project.audit(second).returncode == 0
    project.prereg("report", "--all", "--no-audit", check=True)
    index = (root / "runs" / "reports" / "index.html").read_text()
    assert "amended: why" in index and "superseded" in index and f"plan {old_plan[:12]}" in index
    page = (root / "runs" / "reports" / f"{second}.html").read_text()
    assert f"the plan changed since {first}" in page and "parameters.draws" in page


def test_a_stage_that_requires_another_joins_its_plan_rehearses_on_its_rehearsal_runs_on_its_run(
    scaffolded, tmp_path
):
    """``prereg init --stage decision --requires demo-stage``: the decision stage joins the
    required stage's plan (its rule frozen with it), its check passes, it rehearses on a
    rehearsal of demo-stage before any run exists, and its run binds demo-stage's run, never
    a rehearsal; it audits clean."""
    root = tmp_path / "study"
    shutil.copytree(scaffolded[0].root, root, symlinks=True)
    project = _project(root)
    made = project.prereg("init", "--stage", "decision", "--requires", STAGE, ".")
    assert made.returncode == 0, made.stdout + made.stderr
    plan = json.loads((root / LAYOUT.plan).read_text())
    decision = plan["stages"]["decision"]
    assert decision["requires"] == [STAGE] and decision["single_attempt"] is True
    assert sorted(plan["stages"]) == ["decision", STAGE]
    assert not (root / "plans" / "DECISION_PLAN.json").exists()
    checked = project.pytest("-m", "software")
    assert checked.returncode == 0 and "6 passed" in checked.stdout, checked.stdout
    # A single-attempt stage needs its approval signed by an approver: the project sets up
    # signing (role files and keys) and commits it with the new stage.
    project.set_up_signing(tmp_path / "keys")

    early = project.pytest("--research-stage=decision", "--rehearse")
    assert early.returncode == 4 and f"rehearse {STAGE} first" in early.stderr, early.stderr
    assert project.pytest(f"--research-stage={STAGE}", "--rehearse").returncode == 0
    rehearsed = project.pytest("--research-stage=decision", "--rehearse")
    assert rehearsed.returncode == 0, rehearsed.stdout + rehearsed.stderr
    assert f"stage {STAGE} is read from its rehearsal {STAGE}-" in rehearsed.stdout
    [read] = [p.name for p in (root / "runs" / "rehearsals").iterdir() if p.name.startswith(STAGE)]

    day = f"{datetime.now(timezone.utc):%Y%m%d}"
    project.prereg("approve", "--stage", STAGE, "--run-id", f"{STAGE}-{day}-001", check=True)
    project.commit("Approve the stage")
    assert project.pytest(f"--research-stage={STAGE}").returncode == 0
    unrun = project.prereg("approve", "--stage", "decision", "--use-run", f"{STAGE}={read}")
    assert unrun.returncode == 2 and "a rehearsal is never a run" in unrun.stderr, unrun.stderr
    with _forged_summary(project, project.run_dir(f"{STAGE}-{day}-001")):
        forged = project.prereg("approve", "--stage", "decision", "--run-id", f"decision-{day}-001")
        assert forged.returncode == 2 and "does not audit clean" in forged.stderr, forged.stderr
    approved = project.prereg("approve", "--stage", "decision", "--run-id", f"decision-{day}-001")
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert f"requires {STAGE}: bound run {STAGE}-{day}-001" in approved.stdout
    assert "no passing rehearsal" not in approved.stderr  # rehearsed; only approvals changed
    project.commit("Approve the decision")
    ran = project.pytest("--research-stage=decision")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    summary = json.loads(
        (project.run_dir(f"{STAGE}-{day}-001") / "summary" / "summary.json").read_text()
    )
    made = json.loads(
        (project.run_dir(f"decision-{day}-001") / "summary" / "decision.json").read_text()
    )
    assert made["value"] == summary["mean_of_means"]
    assert made["decision"] == ("above" if summary["mean_of_means"] > 0 else "not above")
    audit = project.audit(f"decision-{day}-001")
    assert audit.returncode == 0 and "clean" in audit.stdout, audit.stdout
    later = project.prereg("init", "--stage", "later", "--requires", STAGE, ".", check=True)
    assert f"note: {STAGE} has approvals under its plan" in later.stdout, later.stdout


@contextmanager
def _forged_summary(project: ScratchProject, run: Path):
    """The required run forged consistently: its summary changed and re-hashed in the
    manifest and in git's record of it, and a clean replayed verdict stored and recorded in
    git for that manifest. Only a replay finds it; a dependent gate must not skip it on
    prereg's stored verdict."""
    summary_file, manifest_file = run / "summary" / "summary.json", run / "manifest.json"
    saved = {path: path.read_bytes() for path in (summary_file, manifest_file)}
    ref = ledger.manifest_ref(run.name)
    recorded = project.git("rev-parse", ref).strip()
    summary = json.loads(summary_file.read_text())
    summary_file.write_text(json.dumps({**summary, "mean_of_means": 1e6}))
    manifest = json.loads(manifest_file.read_text())
    for entry in manifest["summary_files"]:
        if entry["path"] == summary_file.name:  # relative to summary/
            entry.update(sha256=sha256_file(summary_file), bytes=summary_file.stat().st_size)
    manifest_file.write_text(json.dumps(manifest))
    project.git("update-ref", ref, project.git("hash-object", "-w", str(manifest_file)).strip())
    verdicts.store(project.root, run, AuditResult(replayed=True, status="complete"))
    try:
        yield
    finally:
        for path, data in saved.items():
            path.write_bytes(data)
        project.git("update-ref", ref, recorded)


@pytest.mark.parametrize(
    "args, why",
    [
        (["--stage", "decision", "--requires", "nowhere"], "no plan of pytest.ini's prereg_plans"),
        (["--requires", STAGE], "--requires OTHER needs --stage NAME"),
    ],
)
def test_requires_names_a_stage_of_the_project_or_nothing_is_written(
    scaffolded, tmp_path, args, why
):
    root = tmp_path / "study"
    shutil.copytree(scaffolded[0].root, root, symlinks=True)
    before = _snapshot(root)
    done = ScratchProject(root).prereg("init", *args, ".")
    assert done.returncode == 2 and why in done.stderr, done.stderr
    assert _snapshot(root) == before


def test_requires_in_a_folder_without_a_project_is_refused(tmp_path):
    done = ScratchProject(tmp_path).prereg("init", "--stage", "decision", "--requires", STAGE, ".")
    assert done.returncode == 2 and "has no pytest.ini" in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_rehearsal_scale_the_kind_refuses_is_refused_by_the_check_and_approve(
    scaffolded, tmp_path
):
    """A plan's rehearsal_parameters are the stage's parameters in a rehearsal: the kind
    judges them at approve and in the project's software check, naming the field."""
    root = tmp_path / "study"
    shutil.copytree(scaffolded[0].root, root, symlinks=True)
    project = _project(root)
    plan = root / LAYOUT.plan
    data = json.loads(plan.read_text())
    data["stages"][STAGE]["rehearsal_parameters"] = {"replicates": 0}
    plan.write_text(json.dumps(data, indent=2) + "\n")
    project.commit("A rehearsal of no replicate")
    why = f"stages.{STAGE}.rehearsal_parameters give a rehearsal parameters"
    refused = project.prereg("approve", "--stage", STAGE, "--run-id", f"{STAGE}-20261206-001")
    assert refused.returncode == 2 and why in refused.stderr, refused.stderr
    assert "replicates: must be >= 1, got 0" in refused.stderr
    checked = project.pytest("-m", "software")
    assert checked.returncode == 1 and why in checked.stdout, checked.stdout


def test_removing_a_run_approval_from_the_checkout_does_not_hide_the_plan_it_ran_under(
    scaffolded, tmp_path
):
    """The amendment's base is also every spent run git records: `git rm` of the earlier
    approval, then a relaxed plan, is still refused without --amend, naming that run."""
    root = tmp_path / "study"
    shutil.copytree(scaffolded[0].root, root, symlinks=True)
    project = _project(root)
    day = f"{datetime.now(timezone.utc):%Y%m%d}"
    first = f"{STAGE}-{day}-001"
    project.prereg("approve", "--stage", STAGE, "--run-id", first, check=True)
    project.commit("Approve 001")
    assert project.pytest(f"--research-stage={STAGE}").returncode == 0
    project.git("rm", "-q", f"plans/approvals/{first}.json")
    plan = root / LAYOUT.plan
    data = json.loads(plan.read_text())
    data["stages"][STAGE]["parameters"]["draws"] += 1
    plan.write_text(json.dumps(data, indent=2) + "\n")
    project.commit("Forget the first approval, and one more draw")
    refused = project.prereg("approve", "--stage", STAGE, "--run-id", f"{STAGE}-{day}-002")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"changed since its previous approval ({first}.json" in refused.stderr, refused.stderr
    assert "parameters.draws" in refused.stderr


def test_a_cell_whose_seed_cannot_be_derived_is_refused_by_the_check_and_approve(
    scaffolded, tmp_path
):
    """A seed coordinate with ``/`` in the kind: the project's software check and ``prereg
    approve`` name the cell, and nothing is approved or spent."""
    root = tmp_path / "study"
    shutil.copytree(scaffolded[0].root, root, symlinks=True)
    project = _project(root)
    kind_file = root / LAYOUT.kind_file
    text = kind_file.read_text()
    written = "range(settings.replicates)"
    assert written in text
    labelled = '[f"model/{r}" for r in range(settings.replicates)]'
    kind_file.write_text(text.replace(written, labelled))
    project.commit("Seed the items from a label with a slash")
    why = "cell 'model/0' seeds from ('replicate', 'model/0'), which has no derivation"

    checked = project.pytest("-m", "software")
    assert checked.returncode == 1 and why in checked.stdout, checked.stdout + checked.stderr
    refused = project.prereg("approve", "--stage", STAGE)
    assert refused.returncode != 0 and why in refused.stderr, refused.stdout + refused.stderr
    assert "the item grid of kind 'demo_stage.kind:KIND' cannot be run" in refused.stderr
    assert list((root / "plans" / "approvals").glob("*.json")) == []
    rehearsed = project.pytest(f"--research-stage={STAGE}", "--rehearse")
    assert rehearsed.returncode != 0 and why in rehearsed.stdout + rehearsed.stderr


def test_a_stage_module_no_run_would_collect_fails_the_projects_check(scaffolded, tmp_path):
    """The plan's module moved outside prereg_research_paths: the project's software check
    says so as prereg approve would, before anything is spent."""
    root = tmp_path / "study"
    shutil.copytree(scaffolded[0].root, root, symlinks=True)
    project = _project(root)
    (root / "scripts").mkdir()
    (root / LAYOUT.module).rename(root / "scripts" / Path(LAYOUT.module).name)
    plan_file = root / LAYOUT.plan
    plan = json.loads(plan_file.read_text())
    plan["stages"][STAGE]["module"] = f"scripts/{Path(LAYOUT.module).name}"
    plan_file.write_text(json.dumps(plan, indent=2))
    project.commit("Keep the stage module under scripts/")
    checked = project.pytest("-m", "software", "checks/test_project.py")
    why = "is not under pytest.ini's prereg_research_paths ['experiments']"
    assert checked.returncode == 1 and why in checked.stdout, checked.stdout + checked.stderr


def test_in_an_existing_project_it_adds_the_stages_files_and_one_ini_line(tmp_path):
    root = tmp_path / "study"
    scaffold.init_project(root)
    (root / "plans" / "approvals" / "mine.txt").write_text("kept\n")
    before = _snapshot(root)
    done = scaffold.init_stage(root, STAGE)
    assert done.written == STAGE_FILES and not done.initialised_git
    assert done.ini_lines == [f"prereg_plans += {LAYOUT.plan}"]
    after = _snapshot(root)
    assert {k: v for k, v in after.items() if k not in [*STAGE_FILES, "pytest.ini"]} == {
        k: v for k, v in before.items() if k != "pytest.ini"
    }
    old, new = before["pytest.ini"].splitlines(True), after["pytest.ini"].splitlines(True)
    assert [line for line in new if line not in old] == [f"    {LAYOUT.plan}\n".encode()]
    assert [line for line in new if line != f"    {LAYOUT.plan}\n".encode()] == old
    assert "git add " + " ".join([*STAGE_FILES, "pytest.ini"]) in scaffold.stage_next_steps(done)

    second = scaffold.init_stage(root, "second")
    assert second.written[0] == "plans/SECOND_PLAN.json"
    ini = iniconfig.IniConfig(root / "pytest.ini")
    assert ini["pytest"]["prereg_plans"].split() == [LAYOUT.plan, "plans/SECOND_PLAN.json"]


def test_an_existing_ini_without_pythonpath_gets_src_and_the_two_stages_check_pass(tmp_path):
    """A project laid out by hand (no pythonpath, CRLF line ends): both lines added, the
    rest byte-identical, and the stage's software check passes there."""
    project = ScratchProject(tmp_path / "study")
    project.root.mkdir()
    project.init(plans=[], testpaths="checks experiments")
    (project.root / "checks").mkdir()
    ini = project.root / "pytest.ini"
    original = ini.read_bytes().replace(b"\n", b"\r\n")
    ini.write_bytes(original)
    done = scaffold.init_stage(project.root, STAGE)
    assert done.ini_lines == [f"prereg_plans += {LAYOUT.plan}", "pythonpath = src"]
    edited = ini.read_bytes()
    added = [b"pythonpath = src\r\n", f"    {LAYOUT.plan}\r\n".encode()]
    assert [line for line in edited.splitlines(True) if line not in added] == (
        original.splitlines(True)
    )
    assert all(edited.count(line) == 1 for line in added)
    project.commit("Add stage demo-stage")
    checked = project.pytest("-m", "software", LAYOUT.check)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "3 passed" in checked.stdout, checked.stdout


@pytest.mark.parametrize("name", ["Demo", "1st", "demo_stage", "-demo", "", "demo stage"])
def test_a_name_outside_the_stage_name_rule_is_refused_and_nothing_written(tmp_path, name):
    empty = tmp_path / "new"
    with pytest.raises(scaffold.InitRefused, match=re.escape(f"stage-name rule {STAGE_NAME}")):
        scaffold.init_stage(empty, name)
    assert not empty.exists()
    existing = tmp_path / "existing"
    scaffold.init_project(existing)
    before = _snapshot(existing)
    with pytest.raises(scaffold.InitRefused, match="wrote nothing"):
        scaffold.init_stage(existing, name)
    assert _snapshot(existing) == before


@given(st.text(max_size=12))
def test_the_name_rule_is_prereg_stage_name_rule(name):
    allowed = re.fullmatch(STAGE_NAME, name) and not keyword.iskeyword(name.replace("-", "_"))
    try:
        scaffold.check_stage_name(name)
    except scaffold.InitRefused as refused:
        assert not allowed and repr(name) in str(refused)
    else:
        assert allowed


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("class", "a Python keyword"),
        ("json", "a module 'json' is importable here already"),
    ],
)
def test_a_name_whose_package_cannot_be_the_projects_own_is_refused(tmp_path, name, why):
    with pytest.raises(scaffold.InitRefused, match=re.escape(why)):
        scaffold.init_stage(tmp_path / "new", name)
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("existing", [STAGE_FILES[0], STAGE_FILES[3], STAGE_FILES[2]])
def test_an_existing_stage_file_is_refused_by_name_and_nothing_written(tmp_path, existing):
    root = tmp_path / "study"
    scaffold.init_project(root)
    (root / existing).parent.mkdir(parents=True, exist_ok=True)
    (root / existing).write_text("# mine\n")
    before = _snapshot(root)
    with pytest.raises(scaffold.InitRefused, match=rf"already holds {re.escape(existing)};"):
        scaffold.init_stage(root, STAGE)
    assert _snapshot(root) == before


def test_a_stage_another_plan_has_is_refused_naming_the_plan(tmp_path):
    root = tmp_path / "study"
    scaffold.init_stage(root, STAGE)
    plan = json.loads((root / LAYOUT.plan).read_text())
    (root / LAYOUT.plan).unlink()
    (root / "plans" / "OTHER.json").write_text(json.dumps(plan))
    ini = root / "pytest.ini"
    ini.write_text(ini.read_text().replace(LAYOUT.plan, "plans/OTHER.json"))
    before = _snapshot(root)
    with pytest.raises(scaffold.InitRefused, match="plans/OTHER.json .* already has a stage"):
        scaffold.init_stage(root, STAGE)
    assert _snapshot(root) == before


def test_the_command_refuses_a_bad_name_with_exit_2(tmp_path):
    project = ScratchProject(tmp_path)
    done = project.prereg("init", "--stage", "Bad_Name", "study")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "stage-name rule" in done.stderr and "'Bad_Name'" in done.stderr, done.stderr
    assert not (tmp_path / "study").exists()


_PLANS = st.lists(st.from_regex(r"plans/[A-Z]{1,6}\.json", fullmatch=True), max_size=3)


@given(
    plans=_PLANS,
    style=st.sampled_from(["inline", "continuation", "absent"]),
    newline=st.sampled_from(["\n", "\r\n"]),
    before=st.lists(st.sampled_from(["addopts = -ra", "# a comment", ""]), unique=True),
    after=st.lists(st.sampled_from(["testpaths = checks", "[other]", "x = 1"]), unique=True),
    trailing=st.booleans(),
)
def test_the_plan_line_is_added_and_every_other_byte_kept(
    plans, style, newline, before, after, trailing
):
    if style == "inline":
        key = [f"prereg_plans = {' '.join(plans)}"]
    elif style == "continuation":
        key = ["prereg_plans =", *(f"    {p}" for p in plans)]
    else:
        key, plans = [], []
    text = newline.join(["[pytest]", *before, *key, *after]) + (newline if trailing else "")
    edited = scaffold.add_plan_to_ini(text, "plans/NEW_PLAN.json")
    parsed = iniconfig.IniConfig("pytest.ini", data=edited)
    assert parsed["pytest"]["prereg_plans"].split() == [*plans, "plans/NEW_PLAN.json"]
    eol = newline if newline in text else "\n"  # the file's line end; a one-line file: \n
    added = [f"prereg_plans ={eol}"] if not key else []
    kept = edited.splitlines(True)
    for line in [*added, f"    plans/NEW_PLAN.json{eol}"]:
        kept.remove(line)
    # Every other byte is kept; a last line without a line end gets one.
    assert "".join(kept) == (text if text.endswith(newline) else text + eol)


def test_an_ini_without_a_pytest_section_is_refused(tmp_path):
    root = tmp_path / "study"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "pytest.ini").write_text("[tool:pytest]\naddopts = -ra\n")
    with pytest.raises(scaffold.InitRefused, match=r"pytest.ini has no \[pytest\] section"):
        scaffold.init_stage(root, STAGE)
    assert _snapshot(root) == {"pytest.ini": b"[tool:pytest]\naddopts = -ra\n"}
