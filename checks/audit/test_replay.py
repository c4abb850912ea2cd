"""The audit's replay runs in a process of its own with the code of the run's source
commit: a project's kind as committed then (whatever the checkout holds now), and prereg
from that commit when the project is prereg's own checkout. What it cannot load, and a
process that dies, are said, never a crash of the audit."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import prereg
from prereg.decisions import replay
from prereg.evidence import hermetic
from prereg.kinds.plans import Plan

pytestmark = pytest.mark.software

KIND = "studykind:KIND"
PLAN = Plan(path=Path("plans/P.json"), sha256="0" * 64, data={"stages": {}})


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def _commit(root: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", message)
    return _git(root, "rev-parse", "HEAD")


def _kind(findings: str) -> str:
    """A project kind whose replay returns ``findings`` (Python source of a list)."""
    return (
        "from prereg import api\n\n"
        f"KIND = api.StageKind(name={KIND!r}, replay=lambda view: {findings})\n"
    )


@pytest.fixture
def study(tmp_path) -> Path:
    root = tmp_path / "study"
    root.mkdir()
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "r@example.org")
    _git(root, "config", "user.name", "R")
    return root


def _replay(root: Path, commit: str, kind: str = KIND) -> replay.Replay:
    run = replay.request(root, root / "runs" / "r", PLAN, "s", kind, items=[])
    return replay.replay_run(root, commit, run)


def test_the_replay_runs_the_kind_of_the_runs_commit_not_the_checkouts(study):
    (study / "pytest.ini").write_text("[pytest]\npythonpath = src\n")
    then = _commit(study, {"src/studykind.py": _kind("[]")}, "the kind the run ran")
    _commit(study, {"src/studykind.py": _kind("['today']")}, "the kind moved on")
    done = _replay(study, then)
    assert done.replayed and done.findings == (), done
    assert f"with the code of commit {then[:12]}" in done.note
    assert f"prereg installed at {Path(prereg.__file__).resolve().parent}" in done.note
    later = _replay(study, _git(study, "rev-parse", "HEAD"))
    assert later.findings == ("today",)


def test_a_kind_the_commit_does_not_hold_is_a_blocker_naming_the_commit(study):
    commit = _commit(study, {"README": "no kind here\n"}, "no kind")
    done = _replay(study, commit)
    assert not done.replayed and done.findings == ()
    [blocker] = done.blockers
    assert f"'{KIND}' cannot be loaded from the code of commit {commit[:12]}" in blocker
    assert "studykind" in blocker


def test_a_replay_that_raises_is_a_finding_with_its_place(study):
    source = _kind("[]").replace("lambda view: []", "lambda view: 1 / 0")
    commit = _commit(study, {"studykind.py": source}, "a replay that raises")
    [finding] = _replay(study, commit).findings
    assert finding.startswith(f"the replay of stage kind '{KIND}' failed: ZeroDivisionError")
    assert "(at studykind.py:3)" in finding


def test_a_replay_process_that_dies_is_a_finding_not_a_crash(study):
    source = _kind("[]").replace("lambda view: []", "lambda view: __import__('os')._exit(3)")
    commit = _commit(study, {"studykind.py": source}, "a replay that dies")
    [finding] = _replay(study, commit).findings
    assert "ended with exit code 3 and wrote no result" in finding


def test_a_commit_git_cannot_write_out_is_a_blocker(study):
    _commit(study, {"README": "x\n"}, "one commit")
    done = _replay(study, "0" * 40)
    assert not done.replayed
    assert done.blockers and "0" * 40 in done.blockers[0]


def test_in_prereg_s_own_checkout_the_replay_imports_prereg_from_the_commit(study, monkeypatch):
    """When prereg's package lies in the checkout, the snapshot's prereg is imported (here
    a stand-in whose api answers with where it was loaded from)."""
    stand_in = (
        "import os\n\n"
        "class Plan:\n    def __init__(self, **kw): pass\n\n"
        "class RunView(Plan): pass\n\n"
        "class _Kind:\n    replay = staticmethod(lambda view: [os.path.abspath(__file__)])\n\n"
        "def load_kind(name):\n    return _Kind()\n"
    )
    commit = _commit(
        study, {"lib/prereg/__init__.py": "", "lib/prereg/api.py": stand_in}, "prereg's own"
    )
    monkeypatch.setattr(prereg, "__file__", str(study / "lib" / "prereg" / "__init__.py"))
    done = _replay(study, commit)
    [where] = done.findings
    assert Path(where).name == "api.py" and "prereg-snapshot-" in where
    assert done.note.endswith("prereg of that commit (lib/prereg)")


def test_snapshot_paths_put_the_snapshots_prereg_first_when_it_is_part_of_the_source(tmp_path):
    package = Path(prereg.__file__).resolve().parent
    source, folder = package.parents[1], tmp_path / "snap"
    paths, used = hermetic.snapshot_paths(folder, source, pythonpath=None)
    inside = package.relative_to(source)
    assert paths == [str(folder / inside.parent)] and used == folder / inside
    outside, used = hermetic.snapshot_paths(folder, tmp_path / "elsewhere", pythonpath=None)
    assert outside == [] and used == package
