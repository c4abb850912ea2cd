"""Every refusal of the gate, made real in a temporary git repository."""

from __future__ import annotations

import json

import pytest

from prereg.decisions import gate
from support.toy import make_toy_repo, stage_spec

pytestmark = pytest.mark.software

RUN = "toy-20261130-001"
USAGE_ERROR = 4


def assert_refused(toy, done, condition: str, *phrases: str, spent_before: bool = False) -> None:
    assert done.returncode == USAGE_ERROR, done.stdout + done.stderr
    text = done.stdout + done.stderr
    assert f"[{condition}]" in text, text
    for phrase in phrases:
        assert phrase in text, text
    if not spent_before:
        assert not (toy.root / "runs" / RUN / "start.json").exists(), (
            "a refusal must not spend the run id"
        )
    assert any(condition in {x["condition"] for x in r["refusals"]} for r in toy.refusals())


def test_a_committed_approval_lets_the_stage_run_and_spends_the_run_id(approved_toy):
    toy = approved_toy
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 0, done.stdout + done.stderr
    # Only the stage's module is collected: the stray research item in checks/ is not even
    # imported, so nothing is deselected.
    assert "4 passed" in done.stdout and "stray" not in done.stdout, done.stdout
    assert "deselected" not in done.stdout and "collected 4 items" in done.stdout, done.stdout
    assert toy.manifest(RUN)["status"] == "complete"
    again = toy.pytest("--research-stage=toy", f"--run-id={RUN}")
    assert_refused(toy, again, "run-id-unused", "one approval, one run", spent_before=True)


def test_dirty_tree_is_refused(approved_toy):
    toy = approved_toy
    (toy.root / "notes.txt").write_text("uncommitted")
    assert_refused(toy, toy.pytest("--research-stage=toy"), "clean-source", "notes.txt")
    (toy.root / "notes.txt").unlink()
    assert toy.pytest("--research-stage=toy").returncode == 0, (
        "fixing the cause lets the same approval run"
    )


def test_a_commit_beyond_the_approval_record_is_refused(approved_toy):
    toy = approved_toy
    (toy.root / "experiments" / "helper.py").write_text("X = 1\n")
    toy.commit("Change the source after approval")
    assert_refused(toy, toy.pytest("--research-stage=toy"), "clean-source", "experiments/helper.py")


def test_an_edited_plan_is_refused(approved_toy):
    toy = approved_toy
    plan = json.loads((toy.root / "plans" / "TOY_PLAN.json").read_text())
    plan["stages"]["toy"]["parameters"]["cells"] = 5
    (toy.root / "plans" / "TOY_PLAN.json").write_text(json.dumps(plan))
    toy.commit("Edit the plan")
    assert_refused(toy, toy.pytest("--research-stage=toy"), "plan-hash", "TOY_PLAN.json")


def test_an_edited_baseline_file_is_refused(approved_toy):
    toy = approved_toy
    (toy.root / "plans" / "CONFIG_PROPOSAL.json").write_text('{"historical": false}\n')
    toy.commit("Rewrite history")
    assert_refused(toy, toy.pytest("--research-stage=toy"), "baseline", "CONFIG_PROPOSAL.json")


def test_an_approval_for_another_stage_is_refused(tmp_path):
    toy = make_toy_repo(tmp_path / "two", {"toy": stage_spec("toy"), "other": stage_spec("other")})
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=other", f"--run-id={RUN}")
    assert_refused(toy, done, "stage-and-run-id", "'toy'", "'other'")


def test_an_unnamed_environment_deviation_is_refused(approved_toy):
    toy = approved_toy
    record_path = toy.root / "plans" / "approvals" / f"{RUN}.json"
    record = json.loads(record_path.read_text())
    record["deviations"] = [d for d in record["deviations"] if d["field"] != "python"]
    record_path.write_text(json.dumps(record))
    toy.commit("Approval without the python deviation")
    assert_refused(toy, toy.pytest("--research-stage=toy"), "environment", "python")


def test_no_approval_and_unknown_stage_are_usage_errors(toy):
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == USAGE_ERROR and "prereg approve --stage toy" in done.stderr
    done = toy.pytest("--research-stage=nosuch")
    assert done.returncode == USAGE_ERROR and "known stages: toy" in done.stderr


@pytest.mark.parametrize(
    "option", [["-k", "cell0"], ["--collect-only"], ["experiments/test_toy.py"]]
)
def test_a_research_stage_runs_whole(approved_toy, option):
    toy = approved_toy
    done = toy.pytest("--research-stage=toy", *option)
    assert done.returncode == USAGE_ERROR and "runs whole" in done.stderr
    assert not (toy.root / "runs" / RUN / "start.json").exists()


def test_approve_refuses_a_dirty_tree_a_bad_run_id_and_undeclared_deviations(toy):
    (toy.root / "scratch.txt").write_text("x")
    done = toy.approve("toy", RUN, check=False)
    assert done.returncode == 2 and "not clean" in done.stderr and "scratch.txt" in done.stderr
    (toy.root / "scratch.txt").unlink()
    done = toy.approve("toy", "toy-2026-11-30", check=False)
    assert done.returncode == 2 and "toy-YYYYMMDD-NNN" in done.stderr
    import sys

    done = toy.run(sys.executable, "-m", "prereg.cli", "approve", "--stage", "toy", "--run-id", RUN)
    assert done.returncode == 2 and "--accept-deviations" in done.stderr


def test_a_dependent_stage_refuses_until_its_requirement_ran_complete(tmp_path):
    stages = {
        "toy": stage_spec("toy", parameters={"cells": 2, "misbehave": {"cell": 1, "how": "raise"}}),
        "after": stage_spec("after", requires=["toy"]),
    }
    toy = make_toy_repo(tmp_path / "dep", stages)
    done = toy.approve("after", "after-20261130-001", check=False)
    assert done.returncode == 2 and "requires a complete run of toy" in done.stderr
    toy.approve("toy", RUN)
    assert toy.pytest("--research-stage=toy").returncode == 1
    done = toy.approve("after", "after-20261130-001", check=False)
    assert done.returncode == 2 and "requires a complete run of toy" in done.stderr
    done = toy.approve("after", "after-20261130-001", f"--use-run=toy={RUN}", check=False)
    assert done.returncode == 2 and "is incomplete, not complete" in done.stderr


def test_software_runs_never_collect_research_items(toy):
    for args in ([], ["-m", "software"], ["-k", "cell"], ["-m", "research_stage"]):
        done = toy.pytest("-q", *args)
        assert "test_cell" not in done.stdout and "stray" not in done.stdout.replace(
            "deselected", ""
        )
        assert "never runs" not in done.stdout
    done = toy.pytest("-q", "-m", "software")
    assert done.returncode == 0 and "1 passed" in done.stdout


def test_a_seed_namespace_used_by_another_stage_is_refused(tmp_path):
    stages = {"toy": stage_spec("toy"), "other": stage_spec("other", seed_namespace="toy-1.0")}
    toy = make_toy_repo(tmp_path / "ns", stages)
    toy.approve("toy", RUN)
    done = toy.approve("other", "other-20261130-001", check=False)
    assert done.returncode == 2
    assert "seed namespace 'toy-1.0' is already used" in done.stderr


def test_a_single_attempt_stage_cannot_be_approved_twice(tmp_path):
    toy = make_toy_repo(
        tmp_path / "once", {"toy": stage_spec("toy", single_attempt=True, signing="optional")}
    )
    toy.approve("toy", RUN)
    done = toy.approve("toy", "toy-20261130-002", check=False)
    assert done.returncode == 2 and "single attempt" in done.stderr


def test_a_deferred_check_runs_beside_the_caller_and_gives_its_problems_or_its_error():
    import threading

    from prereg.runtime.controller import Deferred

    started, release = threading.Event(), threading.Event()

    def slow() -> list[str]:
        started.set()
        assert release.wait(30)
        return ["the cache is another model's"]

    deferred = Deferred(slow, name="check")
    assert started.wait(30)  # running while this thread goes on
    release.set()
    assert deferred.wait() == ["the cache is another model's"]

    def broken() -> list[str]:
        raise LookupError("no such input")

    with pytest.raises(LookupError, match="no such input"):
        Deferred(broken, name="check").wait()


class _Interrupted(Exception):
    pass


def test_ctrl_c_reaches_a_session_waiting_for_its_deferred_check_whichever_thread_takes_it():
    """The kernel hands a process's SIGINT to any of its threads that does not block it.
    Taken by the check's thread, Python runs the handler only once the main thread runs
    Python code again: the wait must come back to it, not block until the check ends (a
    check that waits for a server would hold Ctrl-C for its whole timeout)."""
    import signal
    import sys
    import threading
    import time

    from prereg.runtime.controller import Deferred

    released, finished = threading.Event(), threading.Event()
    main = threading.get_ident()

    def main_thread_waits() -> bool:
        frame = sys._current_frames().get(main)
        return frame is not None and frame.f_code.co_name in ("join", "_wait_for_tstate_lock")

    def check_that_takes_the_signal() -> list[str]:
        while not main_thread_waits():  # the signal comes once the caller waits
            time.sleep(0.01)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        released.wait(60)  # a safety bound, far beyond the wait
        finished.set()
        return []

    def interrupt(signum, frame):
        raise _Interrupted(finished.is_set())

    saved = signal.signal(signal.SIGINT, interrupt)
    try:
        with pytest.raises(_Interrupted) as interrupted:
            Deferred(check_that_takes_the_signal, name="check").wait()
        assert interrupted.value.args == (False,), "the interruption waited for the check to end"
    finally:
        released.set()
        signal.signal(signal.SIGINT, saved)


def test_every_gate_condition_names_the_audit_check_that_judges_it_again_or_why_none_can():
    import inspect
    import re
    from pathlib import Path

    from prereg.decisions import audit, gate

    table = (Path(__file__).resolve().parents[2] / "docs/reference/gate.md").read_text()
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^\| `([a-z-]+)` \| .* \| ([^|]*) \|$", table, re.MULTILINE)
    }
    checks = {check.__name__ for check in audit.CHECKS}
    conditions = dict.fromkeys((*gate.RUN_CONDITIONS, *gate.APPROVE_CONDITIONS, gate.item_set))
    for condition in conditions:
        name = condition.__name__
        marked = getattr(condition, "audited", None)
        assert isinstance(marked, gate.Audited), f"gate.{name} is not marked with @audited"
        assert bool(marked.checks) != bool(marked.why_not), f"gate.{name}: checks or why_not"
        assert set(marked.checks) <= checks, f"gate.{name}: {marked.checks} not all in CHECKS"
        given = set(re.findall(r'Refusal\(\s*"([a-z-]+)"', inspect.getsource(condition)))
        assert given <= {marked.refusal}, f"gate.{name} gives {given}, marked {marked.refusal}"
        row = rows.get(marked.refusal)
        assert row is not None, f"docs/reference/gate.md's table has no row `{marked.refusal}`"
        for check in marked.checks:
            assert f"`{check}`" in row, f"gate.md row `{marked.refusal}` omits `{check}`"
        if marked.why_not:
            assert row.startswith("not judged again"), f"gate.md row `{marked.refusal}`"


def test_a_launchers_gate_leaves_to_its_session_what_the_session_judges_before_the_spend(
    approved_toy, monkeypatch
):
    """One judgement per run: the launcher (``session_follows``) never asks the remotes or
    the witness, checks the approval commit's signature or hashes the bound inputs; its
    session does all four before it spends (the same gather without ``session_follows``)."""
    asked = []

    def recorder(name, result):
        return lambda *args, **kwargs: asked.append(name) or result

    monkeypatch.setattr(gate, "signing_required", lambda spec: True)
    monkeypatch.setattr(gate.commits, "signing_problems", recorder("signature", []))
    monkeypatch.setattr(gate.ledger, "consult_remotes", recorder("remotes", ()))
    monkeypatch.setattr(gate, "witness_problems", recorder("witness", []))
    monkeypatch.setattr(gate.bindings, "input_problems", recorder("inputs", []))
    path = approved_toy.root / "plans" / "approvals" / f"{RUN}.json"
    record = json.loads(path.read_text())

    gate.gather(approved_toy.root, record, path, stage="toy", session_follows=True)
    assert asked == []
    gate.gather(approved_toy.root, record, path, stage="toy")
    assert sorted(asked) == ["inputs", "remotes", "signature", "witness"]
