import pytest

pytestmark = pytest.mark.software

import json
from pathlib import Path

from prereg.api import InputsRefused
from prereg.e04.stage import check_inputs
from prereg.kinds.plans import Plan
from support.e04_project import CODE_REVISION, check_plan

PROJECT = Path(__file__).resolve().parents[3]


def _plan(data: dict) -> Plan:
    return Plan(path=Path("plans/E04_PLAN.json"), sha256="0" * 64, data=data)


def _inputs(fixture, **override: Path) -> dict[str, Path]:
    return {
        "repository": fixture.repository,
        "tasks": fixture.tasks_file,
        "reformulations": fixture.reformulations_file,
        **override,
    }


def _edited_tasks(fixture, tmp_path: Path, edit) -> Path:
    document = json.loads(fixture.tasks_file.read_text())
    edit(document["tasks"])
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(document))
    return path


def test_valid_inputs_pass(e04_fixture):
    check_inputs(_plan(check_plan()), "e04", _inputs(e04_fixture))


def test_a_task_file_breaking_the_schema_is_refused_naming_task_and_field(e04_fixture, tmp_path):
    tasks = _edited_tasks(e04_fixture, tmp_path, lambda t: t[1].pop("gold_files"))
    with pytest.raises(InputsRefused, match=r"task 'SYN02': field 'gold_files': missing field"):
        check_inputs(_plan(check_plan()), "e04", _inputs(e04_fixture, tasks=tasks))


def test_an_unknown_commit_is_refused_naming_task_and_field(e04_fixture, tmp_path):
    def unknown(tasks):
        tasks[0]["base_commit"] = "0123456789abcdef0123456789abcdef01234567"

    tasks = _edited_tasks(e04_fixture, tmp_path, unknown)
    with pytest.raises(InputsRefused, match=r"task 'SYN01': field 'base_commit'"):
        check_inputs(_plan(check_plan()), "e04", _inputs(e04_fixture, tasks=tasks))


def test_a_gold_file_absent_at_the_base_commit_is_refused(e04_fixture, tmp_path):
    def absent(tasks):
        tasks[1]["gold_files"].append("no/such/file.go")

    tasks = _edited_tasks(e04_fixture, tmp_path, absent)
    with pytest.raises(InputsRefused, match=r"task 'SYN02': field 'gold_files\[1\]'"):
        check_inputs(_plan(check_plan()), "e04", _inputs(e04_fixture, tasks=tasks))


def test_a_missing_reformulation_is_refused_naming_the_task(e04_fixture, tmp_path):
    document = json.loads(e04_fixture.reformulations_file.read_text())
    del document["reformulations"]["SYN02"]
    path = tmp_path / "reformulations.json"
    path.write_text(json.dumps(document))
    with pytest.raises(InputsRefused, match=r"no reformulation for task 'SYN02'"):
        check_inputs(_plan(check_plan()), "e04", _inputs(e04_fixture, reformulations=path))


def test_reformulations_of_another_code_revision_are_refused(e04_fixture, tmp_path):
    document = json.loads(e04_fixture.reformulations_file.read_text())
    document["code_revision"] = "f" * 40
    path = tmp_path / "reformulations.json"
    path.write_text(json.dumps(document))
    with pytest.raises(InputsRefused, match=CODE_REVISION):
        check_inputs(_plan(check_plan()), "e04", _inputs(e04_fixture, reformulations=path))


def test_the_research_plan_refuses_synthetic_inputs_and_a_wrong_task_count(e04_fixture):
    real = json.loads((PROJECT / "plans" / "E04_PLAN.json").read_text())
    with pytest.raises(InputsRefused, match=r"synthetic task file .*allow_synthetic false"):
        check_inputs(_plan(real), "e04", _inputs(e04_fixture))
    with pytest.raises(InputsRefused, match=r"holds 2 tasks .* tasks.count is 3"):
        check_inputs(_plan(check_plan(tasks=3)), "e04", _inputs(e04_fixture))


def test_prereg_approve_refuses_invalid_inputs_and_writes_no_record(e04_project, tmp_path):
    def unknown(tasks):
        tasks[0]["base_commit"] = "0123456789abcdef0123456789abcdef01234567"

    tasks = _edited_tasks(e04_project.fixture, tmp_path, unknown)
    done = e04_project.approve("e04-20260101-001", check=False, tasks=tasks)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "task 'SYN01': field 'base_commit'" in done.stderr
    assert not (e04_project.root / "plans" / "approvals" / "e04-20260101-001.json").exists()
