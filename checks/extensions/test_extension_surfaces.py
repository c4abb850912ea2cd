"""The extension surfaces (stage kinds from installed packages, checkout metadata, approval
bindings): each check performs one way around them and expects a refusal."""

from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path

import pytest

from prereg.evidence import execution
from support.distributions import checkout_with_metadata

pytestmark = [pytest.mark.software, pytest.mark.attack]


def _checkout_with_metadata(root: Path, folder: str, entry_points: str) -> execution.Checkout:
    """A committed checkout holding lib/prereg/, and uncommitted metadata ``lib/<folder>``."""
    checkout_with_metadata(root, folder, entry_points)
    return execution.Checkout.read(root, strict=True)


@pytest.mark.parametrize("folder", ["other.EGG-INFO", "other.Dist-Info"])
def test_checkout_metadata_with_an_upper_case_suffix_is_checked_too(tmp_path, folder):
    """importlib.metadata (and so pytest's plugin autoload) finds ``*.EGG-INFO`` as well as
    ``*.egg-info``: the suffix is matched without regard to case, so the check must be too."""
    checkout = _checkout_with_metadata(tmp_path / "scratch", folder, "[pytest11]\nx = prereg.cli\n")
    found = [
        p
        for d in importlib.metadata.distributions(path=[str(tmp_path / "scratch" / "lib")])
        for p in d.entry_points
        if p.group == "pytest11"
    ]
    assert [p.value for p in found] == ["prereg.cli"], "importlib.metadata reads the folder"
    problems = execution._ignored_problems(checkout, [])
    assert len(problems) == 1 and "pytest plugin" in problems[0], problems


def test_an_approval_whose_extensions_field_was_removed_by_hand_is_refused(tmp_path):
    """Approve a stage whose kind comes from an installed package, then delete the approval's
    ``extensions`` field (and commit): without it nothing bound the installed package, so any
    version of it (reinstalled after approval) would run; the gate refuses instead."""
    import json
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "example"))
    try:
        from example_project import STAGE, example_project
    finally:
        sys.path.pop(0)
    from prereg.decisions.approval import approval_path

    project = example_project(tmp_path / "study", replicates=2)
    run_id = f"{STAGE}-20261201-001"
    project.approve(STAGE, run_id)
    record = approval_path(project.root, run_id)
    data = json.loads(record.read_text())
    assert set(data["extensions"]) == {"prereg.stage_kinds"}, data.get("extensions")
    del data["extensions"]
    record.write_text(json.dumps(data, indent=2) + "\n")
    project.commit("Drop the extensions binding")
    done = project.pytest(f"--research-stage={STAGE}", f"--run-id={run_id}")
    assert done.returncode != 0, done.stdout + done.stderr
    assert "binds no installed package" in done.stdout + done.stderr, done.stdout + done.stderr


@pytest.mark.parametrize("linked", ["experiments", "plans", "plans/approvals"])
def test_prereg_init_writes_nothing_through_a_symbolic_link(tmp_path, linked):
    """A folder whose ``experiments`` (or ``plans``) is a link to another project's: init
    would write ``.gitkeep`` or ``BASELINE.json`` into that project; it refuses instead."""
    from prereg.commands.scaffold import InitRefused, init_project

    elsewhere = tmp_path / "other-project" / "folder"
    elsewhere.mkdir(parents=True)
    folder = tmp_path / "new"
    (folder / linked).parent.mkdir(parents=True, exist_ok=True)
    (folder / linked).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(InitRefused, match="symbolic link"):
        init_project(folder)
    assert list(elsewhere.iterdir()) == [], "nothing written through the link"
    assert sorted(p.name for p in folder.iterdir()) == [linked.split("/")[0]]


def test_the_audit_finds_a_stage_kind_the_approval_does_not_bind(tmp_path):
    """The audit's side of the removed ``extensions`` field: the run's manifest says its
    stage kind came from an installed package, the approval binds none."""
    from types import SimpleNamespace

    from prereg.decisions.audit import Evidence, check_extensions, check_unbound_kind

    origin = {
        "distribution": "toykind 1.0",
        "entry_point": "toykind_mod:KIND",
        "file": "/site/toykind_mod.py",
        "record_sha256": "0" * 64,
    }
    plan = SimpleNamespace(stages={"toy": {}}, stage=lambda name: {"kind": "toy.kind"})

    def findings(approval: dict) -> list[str]:
        evidence = Evidence(
            root=tmp_path,
            run_dir=tmp_path / "runs" / "toy-20261201-001",
            approval=approval,
            manifest={
                "stage": "toy",
                "environment": {"extensions": {"prereg.stage_kinds": {"toy.kind": origin}}},
            },
            plan=plan,
        )
        return check_extensions(evidence) + check_unbound_kind(evidence)

    assert findings({"extensions": {"prereg.stage_kinds": {"toy.kind": origin}}}) == []
    (finding,) = findings({})
    assert "binds no installed package" in finding and "toy.kind" in finding, finding


def test_prereg_init_refuses_a_folder_inside_a_git_folder(tmp_path):
    """``git rev-parse --show-toplevel`` fails inside ``.git``, which looked like "no
    checkout": init wrote a project (and ran git init) inside another repository's .git."""
    from prereg.commands.scaffold import InitRefused, init_project

    subprocess.run(["git", "init", "-q", str(tmp_path / "host")], check=True)
    with pytest.raises(InitRefused, match="inside a git repository's own folder"):
        init_project(tmp_path / "host" / ".git" / "project")
    assert not (tmp_path / "host" / ".git" / "project").exists()


def test_metadata_in_an_untracked_folder_on_sys_path_is_checked(tmp_path, monkeypatch):
    """An untracked top-level folder put on sys.path (PYTHONPATH=extra) is where pytest's
    autoload reads entry points too: its metadata is checked like lib/'s."""
    root = tmp_path / "scratch"
    _checkout_with_metadata(root, "other.egg-info", "[console_scripts]\n")
    extra = root / "extra" / "evil.egg-info"
    extra.mkdir(parents=True)
    (extra / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: evil\nVersion: 0.1.0\n")
    (extra / "entry_points.txt").write_text("[pytest11]\nevil = prereg.cli\n")
    monkeypatch.syspath_prepend(str(root / "extra"))
    checkout = execution.Checkout.read(root, strict=True)
    problems = execution._ignored_problems(checkout, [])
    assert len(problems) == 1 and "extra/evil.egg-info" in problems[0], problems
