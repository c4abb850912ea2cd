"""``prereg init`` lays out a project whose software checks pass at once, and never
overwrites a file."""

from __future__ import annotations

import json
import subprocess

import pytest

from prereg.commands import scaffold
from prereg.testing import ScratchProject
from support.scaffolded import prereg_imports

pytestmark = pytest.mark.software


def _snapshot(root) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


# The software check an earlier `prereg init` wrote, with the module paths of the release
# before the layer packages: projects keep it, so its imports resolve (with a warning).
EARLIER_CHECK = """\
from pathlib import Path

import pytest
from prereg.approval import baseline_problems, stage_module_problem
from prereg.plans import load_plan, validate_stage

pytestmark = pytest.mark.software


def test_every_plan_in_pytest_ini_loads_and_validates(pytestconfig):
    root = Path(pytestconfig.rootpath)
    for rel in pytestconfig.getini("prereg_plans"):
        plan = load_plan(root / rel)
        for stage, spec in plan.stages.items():
            validate_stage(plan, stage)
            problem = stage_module_problem(root, Path(rel), stage, spec["module"])
            assert problem is None, problem


def test_the_baseline_holds(pytestconfig):
    assert baseline_problems(Path(pytestconfig.rootpath)) == []
"""


def test_a_project_made_by_an_earlier_init_keeps_passing_its_software_checks(tmp_path):
    project = ScratchProject(tmp_path / "study")
    project.root.mkdir()
    project.prereg("init", ".", "--stage", "train", check=True)
    (project.root / "checks" / "test_project.py").write_text(EARLIER_CHECK)
    checked = project.pytest("-m", "software", "checks/test_project.py")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "2 passed" in checked.stdout, checked.stdout
    for old, new in (("approval", "decisions.approval"), ("plans", "kinds.plans")):
        assert f"prereg.{old} is prereg.{new} now" in checked.stdout, checked.stdout


def test_init_lays_out_a_project_whose_software_checks_pass(tmp_path):
    project = ScratchProject(tmp_path / "study")
    project.root.mkdir()
    done = project.prereg("init", ".", check=True)
    assert "ran git init" in done.stdout and "prereg approve" in done.stdout, done.stdout
    assert sorted(_snapshot(project.root)) == sorted(scaffold.FILES)
    project.git("config", "user.email", "researcher@example.org")
    project.git("config", "user.name", "Researcher")
    project.commit("Lay out a prereg project")
    checked = project.pytest("-m", "software")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "2 passed" in checked.stdout, checked.stdout
    assert project.git("status", "--porcelain") == "", "runs and caches are git-ignored"
    python = [text for name, text in scaffold.FILES.items() if name.endswith(".py")]
    assert {m for text in python for m in prereg_imports(text)} == {"prereg.api"}

    before = _snapshot(project.root)
    again = project.prereg("init", ".")
    assert again.returncode == 2, again.stdout + again.stderr
    assert "never overwrites" in again.stderr and "pytest.ini" in again.stderr, again.stderr
    assert _snapshot(project.root) == before


def test_init_refuses_one_existing_file_and_writes_nothing(tmp_path):
    root = tmp_path / "study"
    (root / "plans").mkdir(parents=True)
    (root / "plans" / "BASELINE.json").write_text('{"mine": true}\n')
    with pytest.raises(scaffold.InitRefused, match=r"plans/BASELINE.json; prereg init never"):
        scaffold.init_project(root)
    assert _snapshot(root) == {"plans/BASELINE.json": b'{"mine": true}\n'}
    assert not (root / ".git").exists()


def test_init_uses_an_existing_repository_and_refuses_a_subfolder_of_one(tmp_path):
    root = tmp_path / "study"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    written, initialised = scaffold.init_project(root)
    assert written == list(scaffold.FILES) and not initialised
    with pytest.raises(scaffold.InitRefused, match="lies inside the git checkout"):
        scaffold.init_project(root / "nested")
    assert not (root / "nested").exists()


def test_a_bad_plan_fails_the_software_checks_at_the_users_line_not_inside_prereg(tmp_path):
    """A seed namespace with a '/' in it: each check that loads the plan fails with the
    plan's error at the check's own line, without a page of prereg's loader."""
    project = ScratchProject(tmp_path / "study")
    project.root.mkdir()
    project.prereg("init", ".", "--stage", "train", check=True)
    plan = next((project.root / "plans").glob("*_PLAN.json"))
    data = json.loads(plan.read_text())
    data["stages"]["train"]["seed_namespace"] = "a/b"
    plan.write_text(json.dumps(data, indent=2))
    checked = project.pytest("-m", "software")
    assert checked.returncode != 0
    assert "seed_namespace 'a/b' cannot start a seed derivation" in checked.stdout
    assert "kinds/plans.py" not in checked.stdout, checked.stdout
