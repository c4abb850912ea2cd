"""The researcher's workflow around approvals: the next free run id, the runs an approval
binds (and a warning when a newer run of a required stage is not complete), prereg status."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prereg.base.hashing import sha256_file
from prereg.commands.status import (
    COMMITTED,
    EDITED,
    NOT_COMMITTED,
    commit_state,
    project_status,
    render,
)
from prereg.decisions.approval import (
    ApprovalError,
    bound_run_warnings,
    next_free_run_id,
    used_run_ids,
    write_refusal,
)
from prereg.decisions.gate import Refusal
from prereg.records import RUN_ID_PATTERN, STAGE_NAME, ledger
from prereg.testing import ScratchProject
from support.toy import ToyRepo, make_toy_repo, stage_spec

pytestmark = pytest.mark.software

DAY = "20261130"


def _git_repo(root: Path) -> Path:
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def test_next_free_run_id_skips_approvals_spent_ids_run_folders_and_refusals(tmp_path):
    root = _git_repo(tmp_path / "repo")
    assert next_free_run_id(root, "toy", today=DAY) == f"toy-{DAY}-001"
    approvals = root / "plans" / "approvals"
    approvals.mkdir(parents=True)
    (approvals / f"toy-{DAY}-001.json").write_text("{}")
    assert next_free_run_id(root, "toy", today=DAY) == f"toy-{DAY}-002"
    ledger.spend(root, f"toy-{DAY}-002", b'{"run_id": "x"}', single_attempt_stage=None)
    assert next_free_run_id(root, "toy", today=DAY) == f"toy-{DAY}-003"
    (root / "runs" / f"toy-{DAY}-003").mkdir(parents=True)
    assert next_free_run_id(root, "toy", today=DAY) == f"toy-{DAY}-004"
    write_refusal(root, None, "toy", f"toy-{DAY}-004", [Refusal("clean-source", "dirty")])
    assert next_free_run_id(root, "toy", today=DAY) == f"toy-{DAY}-005"
    # Ids of another stage or another day leave this stage's and day's ids free.
    (approvals / "toy-20261129-005.json").write_text("{}")
    (approvals / f"other-{DAY}-005.json").write_text("{}")
    (root / "runs" / f"toy-else-{DAY}-005").mkdir()
    assert next_free_run_id(root, "toy", today=DAY) == f"toy-{DAY}-005"
    assert next_free_run_id(root, "toy-else", today=DAY) == f"toy-else-{DAY}-001"
    # A gap is filled: the smallest free number wins.
    assert next_free_run_id(root, "other", today=DAY) == f"other-{DAY}-001"


def test_a_refusal_named_by_its_stage_still_uses_the_run_id_it_records(tmp_path):
    root = _git_repo(tmp_path / "repo")
    folder = root / "runs" / "refusals"
    folder.mkdir(parents=True)
    (folder / "toy-20261130T010203000000Z.json").write_text(
        json.dumps({"run_id": f"toy-{DAY}-001"})
    )
    assert used_run_ids(root) == {f"toy-{DAY}-001"}
    assert next_free_run_id(root, "toy", today=DAY) == f"toy-{DAY}-002"


def test_next_free_run_id_defaults_to_today_in_utc_and_refuses_a_bad_date_or_stage(tmp_path):
    root = _git_repo(tmp_path / "repo")
    before = datetime.now(timezone.utc).strftime("%Y%m%d")
    chosen = next_free_run_id(root, "toy")
    after = datetime.now(timezone.utc).strftime("%Y%m%d")  # midnight may pass meanwhile
    assert chosen in {f"toy-{before}-001", f"toy-{after}-001"}
    with pytest.raises(ApprovalError, match="'2026-11-30' is not a date YYYYMMDD"):
        next_free_run_id(root, "toy", today="2026-11-30")
    with pytest.raises(ApprovalError, match="stage 'Toy' gives no run id"):
        next_free_run_id(root, "Toy", today=DAY)
    every = {f"toy-{DAY}-{n:03d}" for n in range(1, 1000)}
    with pytest.raises(ApprovalError, match=f"every run id from toy-{DAY}-001 to toy-{DAY}-999"):
        next_free_run_id(root, "toy", today=DAY, used=every)


run_ids = st.builds(
    "{}-{}-{:03d}".format,
    st.sampled_from(["toy", "toy-a", "other"]),
    st.sampled_from([DAY, "20261201"]),
    st.integers(1, 12),
)


@settings(max_examples=200, deadline=None)
@given(
    stage=st.from_regex(rf"\A{STAGE_NAME}\Z").filter(lambda s: len(s) <= 30),
    used=st.sets(run_ids | st.text(max_size=20), max_size=30),
    day=st.sampled_from([DAY, "20261201"]),
)
def test_next_free_run_id_is_never_used_matches_the_pattern_and_is_the_smallest(stage, used, day):
    chosen = next_free_run_id(Path("/nonexistent"), stage, today=day, used=used)
    assert chosen not in used
    match = RUN_ID_PATTERN.fullmatch(chosen)
    assert match and match["stage"] == stage and match["date"] == day
    smaller = {f"{stage}-{day}-{n:03d}" for n in range(1, int(match["seq"]))}
    assert smaller <= used


# -- one project, built once, that the tests below only read ----------------------------------

FAILING_CELL = "    if cell == 1:\n        raise RuntimeError('cell 1 fails in the newer run')\n"


def _approve(toy: ToyRepo, stage: str, *extra: str, commit: bool = True):
    done = toy.prereg("approve", "--stage", stage, "--accept-deviations", *extra)
    assert done.returncode == 0, done.stdout + done.stderr
    if commit:
        toy.commit(f"Approve the next run of {stage}")
    return done


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """toy-D-001 complete, toy-D-002 incomplete (a newer, failed run); after-D-001 consumed
    toy-D-001 and ran; toy-D-003 approved and committed; after-D-002 approved, uncommitted."""
    cells = {"cells": 2, "misbehave": {"cell": -1, "how": "none"}}
    stages = {
        "toy": stage_spec("toy", parameters=cells),
        "after": stage_spec("after", requires=["toy"], parameters=cells),
    }
    toy = make_toy_repo(tmp_path_factory.mktemp("workflow") / "toy", stages)
    day = datetime.now(timezone.utc).strftime("%Y%m%d")
    steps = {"day": day, "toy": toy}
    steps["approve_toy"] = _approve(toy, "toy")
    assert toy.pytest("--research-stage=toy").returncode == 0
    module = toy.root / "experiments" / "test_toy.py"
    source = module.read_text()
    module.write_text(
        source.replace(
            "    research.coords(cell=cell)\n", FAILING_CELL + "    research.coords(cell=cell)\n"
        )
    )
    toy.commit("Cell 1 fails")
    _approve(toy, "toy")
    assert toy.pytest("--research-stage=toy").returncode == 1
    steps["approve_after"] = _approve(toy, "after")
    assert toy.pytest("--research-stage=after").returncode == 0
    _approve(toy, "toy")
    steps["approve_after_again"] = _approve(toy, "after", commit=False)
    steps["status"] = toy.prereg("status")
    steps["status_json"] = toy.prereg("status", "--json")
    return steps


@pytest.mark.slow  # the shared project makes three real runs
def test_approve_without_a_run_id_picks_and_says_the_next_free_one(project):
    day, toy = project["day"], project["toy"]
    assert f"run id toy-{day}-001: the next free run id of stage toy today (UTC)" in (
        project["approve_toy"].stdout
    )
    assert (
        json.loads((toy.root / "plans" / "approvals" / f"toy-{day}-001.json").read_text())["run_id"]
        == f"toy-{day}-001"
    )
    assert toy.manifest(f"toy-{day}-001")["status"] == "complete"
    assert toy.manifest(f"toy-{day}-002")["status"] == "incomplete"
    assert f"git commit -m 'Approve after-{day}-002'" in project["approve_after_again"].stdout


@pytest.mark.slow  # the shared project makes three real runs
def test_approve_prints_the_bound_run_and_warns_of_a_newer_incomplete_one(project):
    day, done = project["day"], project["approve_after"]
    assert f"requires toy: bound run toy-{day}-001 (its latest complete run)" in done.stdout
    assert "prereg approve: warning:" in done.stderr
    assert f"run toy-{day}-002, newer than the bound run toy-{day}-001, is incomplete" in (
        done.stderr
    )
    assert "--use-run toy=RUN_ID" in done.stderr
    unrequired = project["approve_toy"].stderr  # no requirement: no bound-run warning
    assert "newer than the bound run" not in unrequired and "--use-run" not in unrequired
    record = project["toy"].root / "plans" / "approvals" / f"after-{day}-001.json"
    assert json.loads(record.read_text())["requires"]["toy"]["run_id"] == f"toy-{day}-001"


@pytest.mark.slow  # the shared project makes three real runs
def test_no_warning_when_the_bound_run_is_the_newest(project):
    day, root = project["day"], project["toy"].root
    assert bound_run_warnings(root, {"toy": {"run_id": f"toy-{day}-002"}}) == []
    assert len(bound_run_warnings(root, {"toy": {"run_id": f"toy-{day}-001"}})) == 1


@pytest.mark.slow  # the shared project makes three real runs
def test_status_shows_approvals_next_ids_latest_runs_and_consumption(project):
    day, done = project["day"], project["status"]
    assert done.returncode == 0, done.stderr
    text = done.stdout
    toy_part, after_part = text.split("stage after ")
    assert "stage toy (plans/TOY_PLAN.json)" in toy_part
    assert f"unspent approval:    toy-{day}-003 (committed)" in toy_part
    assert f"toy-{day}-001" not in toy_part.split("next free")[0]  # spent: not unspent
    assert f"next free run id:    toy-{day}-004" in toy_part
    assert f"latest complete run: toy-{day}-001 (2 runs under runs/)" in toy_part
    plan = sha256_file(project["toy"].root / "plans" / "TOY_PLAN.json")
    assert f"plan sha256:         {plan}" in toy_part
    assert (
        f"under plan {plan[:12]} (the plan file now): toy-{day}-001 (complete), "
        f"toy-{day}-002 (incomplete)" in toy_part
    )
    assert "superseded" not in text
    assert (
        f"toy-{day}-001 is consumed by: after-{day}-001, after-{day}-002 (approved, not run yet)"
        in toy_part
    )
    assert (
        f"unspent approval:    after-{day}-002 (not committed: git add plans/approvals/after-{day}-002.json && git commit"
        in after_part
    )
    assert f"next free run id:    after-{day}-003" in after_part
    assert f"latest complete run: after-{day}-001" in after_part
    assert f"after-{day}-001 consumed: toy toy-{day}-001" in after_part
    assert f"after-{day}-002 binds (approved, not run yet): toy toy-{day}-001" in after_part


@pytest.mark.slow  # the shared project makes three real runs
def test_status_json_holds_the_same_for_scripts(project):
    day = project["day"]
    data = json.loads(project["status_json"].stdout)
    stages = {s["stage"]: s for s in data["stages"]}
    assert list(stages) == ["toy", "after"] and data["problems"] == []
    toy, after = stages["toy"], stages["after"]
    assert toy["unspent_approvals"] == [
        {
            "run_id": f"toy-{day}-003",
            "path": f"plans/approvals/toy-{day}-003.json",
            "commit_state": "committed",
            "committed": True,
        }
    ]
    assert [a["committed"] for a in after["unspent_approvals"]] == [False]
    assert (toy["next_free_run_id"], after["next_free_run_id"]) == (
        f"toy-{day}-004",
        f"after-{day}-003",
    )
    assert toy["latest_complete_run"] == f"toy-{day}-001"
    assert {r["run_id"]: r["status"] for r in toy["runs"]} == {
        f"toy-{day}-001": "complete",
        f"toy-{day}-002": "incomplete",
    }
    assert toy["plan_sha256"] == sha256_file(project["toy"].root / "plans" / "TOY_PLAN.json")
    assert {(r["plan_sha256"], r["plan_superseded"]) for r in toy["runs"]} == {
        (toy["plan_sha256"], False)
    }
    assert toy["consumed_by"] == {
        f"toy-{day}-001": [
            {"run_id": f"after-{day}-001", "state": "run"},
            {"run_id": f"after-{day}-002", "state": "approved"},
        ]
    }
    assert after["consumes"] == [
        {"run_id": f"after-{day}-001", "state": "run", "requires": {"toy": f"toy-{day}-001"}},
        {"run_id": f"after-{day}-002", "state": "approved", "requires": {"toy": f"toy-{day}-001"}},
    ]


def test_commit_state_tells_committed_edited_and_new_records_apart(tmp_path):
    repo = ScratchProject(tmp_path / "repo")
    repo.root.mkdir()
    repo.init(plans=[])
    record = repo.root / "plans" / "approvals" / f"toy-{DAY}-001.json"
    assert commit_state(repo.root, record.parent / "x.json") == NOT_COMMITTED  # no commit yet
    record.write_text("{}")
    assert commit_state(repo.root, record) == NOT_COMMITTED
    repo.commit("Approve")
    assert commit_state(repo.root, record) == COMMITTED
    record.write_text('{"edited": true}')
    assert commit_state(repo.root, record) == EDITED


def test_status_names_an_unreadable_plan_and_a_damaged_approval_without_failing(tmp_path):
    repo = ScratchProject(tmp_path / "repo")
    repo.root.mkdir()
    repo.init(plans=["plans/MISSING_PLAN.json"])
    (repo.root / "plans" / "approvals" / f"toy-{DAY}-001.json").write_text("{not json")
    status = project_status(repo.root, today=DAY)
    assert status["stages"] == []
    assert any("plans/MISSING_PLAN.json" in p for p in status["problems"]), status
    assert any(f"plans/approvals/toy-{DAY}-001.json" in p for p in status["problems"]), status
    assert render(status)[-1].startswith("problem: ")
    # The damaged record still holds its run id: it is not offered again.
    assert next_free_run_id(repo.root, "toy", today=DAY) == f"toy-{DAY}-002"


def test_status_of_an_empty_project_says_what_to_do(tmp_path):
    empty = ScratchProject(tmp_path / "empty")
    empty.root.mkdir()
    empty.init(plans=[])
    empty.commit("Empty project")
    done = empty.prereg("status")
    assert done.returncode == 0, done.stderr
    assert "no stages: pytest.ini names no plan under prereg_plans" in done.stdout
    assert json.loads(empty.prereg("status", "--json").stdout) == {"stages": [], "problems": []}


MODULE_RUN_ID = "toy-20261202-001"


# -- what approve checks before anything can be spent -------------------------------------------


@pytest.mark.parametrize(
    ("module", "message"),
    [
        ("experiments/test_missing.py", "is no file in the checkout: a run would have no items"),
        ("checks/test_soft.py", "is not under pytest.ini's prereg_research_paths ['experiments']"),
    ],
)
def test_approve_refuses_a_stage_module_no_run_would_collect(tmp_path, module, message):
    toy = make_toy_repo(tmp_path / "toy")
    plan = toy.root / "plans" / "TOY_PLAN.json"
    data = json.loads(plan.read_text())
    data["stages"]["toy"]["module"] = module
    plan.write_text(json.dumps(data, indent=2))
    toy.commit("A stage module no run collects")
    refused = toy.approve("toy", MODULE_RUN_ID, check=False)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"stages.toy.module {module!r} {message}" in refused.stderr, refused.stderr
    assert not (toy.root / "plans" / "approvals" / f"{MODULE_RUN_ID}.json").exists()


def test_approve_of_an_unknown_stage_lists_the_stages_and_the_closest_name(tmp_path):
    toy = make_toy_repo(tmp_path / "toy", {s: stage_spec(s) for s in ("toy", "after")})
    done = toy.prereg("approve", "--stage", "tyo", "--accept-deviations")
    assert done.returncode != 0
    assert "has a stage 'tyo'; did you mean 'toy'? The stages are: after, toy." in done.stderr
    assert list((toy.root / "plans" / "approvals").glob("*.json")) == []
