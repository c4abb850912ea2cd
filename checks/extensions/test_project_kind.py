"""A stage kind in the project's own tracked code (``"kind": "module:attribute"``).

The kind needs no install: ``prereg approve`` and the gate import it from the checkout
(pytest.ini's ``pythonpath`` names its folder), the run imports it from the snapshot, so
the approved commit binds it; an edit committed after approval is refused as any source
edit is, and an installed copy of the module is refused rather than run.
"""

from __future__ import annotations

import json
import sys

import pytest

from prereg.kinds import stages
from support.toy import make_toy_repo, stage_spec

pytestmark = pytest.mark.software

RUN = "toy-20261202-001"
KIND = """
import json
from dataclasses import dataclass
from prereg.kinds.stages import StageKind


@dataclass(frozen=True)
class Settings:
    cells: int


def settings(plan_data, stage):
    cells = plan_data["stages"][stage]["parameters"]["cells"]
    if not isinstance(cells, int) or cells < 1:
        raise ValueError(f"stages.{stage}.parameters.cells must be a positive integer, got {cells!r}")
    return Settings(cells=cells)


def summarise(view):
    total = sum(
        len(json.loads((view.run_dir / "items" / i["output_dir"] / "result.json").read_text())["x"])
        for i in view.items
    )
    (view.run_dir / "summary").mkdir(exist_ok=True)
    (view.run_dir / "summary" / "count.json").write_text(json.dumps({"values": total, "by": MARK}))


MARK = "project kind"
KIND = StageKind(name="mylab.kind:KIND", settings=settings, summarise=summarise)
"""


def _project(tmp_path, cells=2):
    spec = stage_spec("toy", kind="mylab.kind:KIND")
    spec["parameters"]["cells"] = cells
    toy = make_toy_repo(tmp_path / "p", {"toy": spec})
    (toy.root / "src" / "mylab").mkdir(parents=True)
    (toy.root / "src" / "mylab" / "__init__.py").write_text("")
    (toy.root / "src" / "mylab" / "kind.py").write_text(KIND)
    ini = toy.root / "pytest.ini"
    ini.write_text(ini.read_text().replace("[pytest]\n", "[pytest]\npythonpath = src\n", 1))
    toy.commit("A stage kind in the project's code")
    return toy


def test_a_kind_in_the_projects_code_approves_runs_from_the_snapshot_and_audits_clean(tmp_path):
    toy = _project(tmp_path)
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy", "-n", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = toy.manifest(RUN)
    assert manifest["status"] == "complete", manifest["incomplete_reasons"]
    summary = json.loads((toy.run_dir(RUN) / "summary" / "count.json").read_text())
    assert summary == {"values": 6, "by": "project kind"}
    audit = toy.audit(RUN)
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_the_kind_edited_and_committed_after_approval_is_refused(tmp_path):
    toy = _project(tmp_path)
    toy.approve("toy", RUN)
    kind = toy.root / "src" / "mylab" / "kind.py"
    kind.write_text(kind.read_text().replace('MARK = "project kind"', 'MARK = "edited"'))
    toy.commit("Edit the kind after approval")
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "src/mylab/kind.py" in done.stderr and "[clean-source]" in done.stderr, done.stderr
    assert not (toy.run_dir(RUN) / "start.json").exists()


def test_bad_settings_of_a_project_kind_are_refused_at_approve(tmp_path):
    toy = _project(tmp_path, cells=0)
    done = toy.approve("toy", RUN, check=False)
    assert done.returncode != 0
    assert "parameters.cells must be a positive integer" in done.stderr, done.stderr
    assert not (toy.root / "plans" / "approvals" / f"{RUN}.json").exists()


def test_a_project_kind_that_does_not_import_names_the_module_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(stages.UnknownStageKind, match="nosuchmod does not import.*pythonpath"):
        stages.load_kind("nosuchmod:KIND")
    (tmp_path / "notakind.py").write_text("KIND = 3\n")
    with pytest.raises(stages.UnknownStageKind, match="notakind.KIND is int, not a prereg"):
        stages.load_kind("notakind:KIND")


def test_an_installed_copy_of_a_project_kind_is_refused(site, monkeypatch):
    """The stale-install trap: the module comes from site-packages, not the project."""
    (site / "stalekind.py").write_text(
        "from prereg.kinds.stages import StageKind\nKIND = StageKind(name='stalekind:KIND')\n"
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "stalekind", raising=False)
    with pytest.raises(stages.UnknownStageKind, match="an installed package, not the project"):
        stages.load_kind("stalekind:KIND")


@pytest.fixture
def confined(tmp_path, monkeypatch):
    """This process's project is ``tmp_path / "project"`` (as a run's or a command's is)."""
    monkeypatch.setattr(stages, "_PROJECT_ROOTS", [])
    stages.confine_project_kinds(tmp_path / "project")
    return tmp_path


def test_a_kind_from_another_checkout_on_sys_path_is_refused(confined, monkeypatch):
    """An editable install of another checkout puts its folder on sys.path: a plan naming a
    module there would run code no approved commit holds, edited whenever that checkout is."""
    other = confined / "other-checkout" / "src"
    (other / "otherlab").mkdir(parents=True)
    (other / "otherlab" / "__init__.py").write_text("")
    (other / "otherlab" / "kind.py").write_text(
        "from prereg.kinds.stages import StageKind\nKIND = StageKind(name='otherlab.kind:KIND')\n"
    )
    mine = confined / "project" / "src" / "mylab"
    mine.mkdir(parents=True)
    (mine / "__init__.py").write_text("")
    (mine / "kind.py").write_text((other / "otherlab" / "kind.py").read_text())
    for folder in (other, mine.parent):
        monkeypatch.syspath_prepend(str(folder))
    for name in ("otherlab", "otherlab.kind", "mylab", "mylab.kind"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(stages.UnknownStageKind) as refused:
        stages.load_kind("otherlab.kind:KIND")
    assert f"was imported from {other / 'otherlab' / 'kind.py'}, outside the project" in str(
        refused.value
    )
    assert stages.load_kind("mylab.kind:KIND").name == "otherlab.kind:KIND"  # the project's


def test_a_kind_package_symlinked_into_the_project_from_outside_is_refused(confined, monkeypatch):
    """A symbolic link in src/ to a package elsewhere: git holds the link, not the code."""
    outside = confined / "outside" / "linked"
    outside.mkdir(parents=True)
    (outside / "__init__.py").write_text("")
    (outside / "kind.py").write_text(
        "from prereg.kinds.stages import StageKind\nKIND = StageKind(name='linked.kind:KIND')\n"
    )
    src = confined / "project" / "src"
    src.mkdir(parents=True)
    (src / "linked").symlink_to(outside, target_is_directory=True)
    monkeypatch.syspath_prepend(str(src))
    for name in ("linked", "linked.kind"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(stages.UnknownStageKind, match="outside the project"):
        stages.load_kind("linked.kind:KIND")


def test_a_kind_found_through_a_pythonpath_outside_the_checkout_is_refused_at_approve(tmp_path):
    """``pythonpath = ../elsewhere``: the kind would come from code no commit holds."""
    toy = _project(tmp_path)
    elsewhere = tmp_path / "elsewhere" / "mylab"
    elsewhere.mkdir(parents=True)
    for name in ("__init__.py", "kind.py"):
        (elsewhere / name).write_text((toy.root / "src" / "mylab" / name).read_text())
    toy.git("rm", "-rq", "src")
    ini = toy.root / "pytest.ini"
    ini.write_text(ini.read_text().replace("pythonpath = src", "pythonpath = ../elsewhere"))
    toy.commit("The kind lives outside the checkout")
    done = toy.approve("toy", RUN, check=False)
    assert done.returncode != 0
    assert f"mylab.kind was imported from {elsewhere / 'kind.py'}, outside the project" in (
        done.stderr
    )
    assert not (toy.root / "plans" / "approvals" / f"{RUN}.json").exists()


def test_an_uncommitted_file_in_the_kinds_package_is_refused_at_approve(tmp_path):
    toy = _project(tmp_path)
    (toy.root / "src" / "mylab" / "extra.py").write_text("VALUE = 1\n")
    done = toy.approve("toy", RUN, check=False)
    assert done.returncode != 0 and "src/mylab/extra.py" in done.stderr, done.stderr


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["serial", "n2"])
def test_a_variable_the_kinds_gate_check_sets_is_refused_before_spending(tmp_path, workers):
    """The session runs a kind's own gate check beside its workers' start; what that check
    sets in os.environ (a library it loads, or the kind configuring one by a variable) is
    judged before the spend as the gate judges what a conftest sets: the workers would
    inherit it."""
    from prereg.records import ledger

    toy = _project(tmp_path)
    kind = toy.root / "src" / "mylab" / "kind.py"
    kind.write_text(
        kind.read_text().replace(
            'KIND = StageKind(name="mylab.kind:KIND", settings=settings, summarise=summarise)',
            "def gate_check(root, plan, stage, record):\n"
            "    import os\n"
            '    os.environ["SET_BY_THE_KINDS_CHECK"] = "1"\n'
            "    return []\n\n\n"
            'KIND = StageKind(name="mylab.kind:KIND", settings=settings, summarise=summarise,\n'
            "                 gate_check=gate_check)",
        )
    )
    toy.commit("The kind's gate check sets a variable")
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy", *workers)
    out = done.stdout + done.stderr
    assert done.returncode == 4, out
    assert "[execution] the session's code set SET_BY_THE_KINDS_CHECK" in out, out
    assert not ledger.is_spent(toy.root, RUN) and not toy.run_dir(RUN).exists()


def _kind_whose_check_takes_ten_minutes(toy, started) -> None:
    """The project's kind gets a gate check that, in the session, touches ``started`` and
    sleeps ten minutes (``prereg approve`` runs it too, and returns at once)."""
    kind = toy.root / "src" / "mylab" / "kind.py"
    kind.write_text(
        kind.read_text().replace(
            'KIND = StageKind(name="mylab.kind:KIND", settings=settings, summarise=summarise)',
            "def gate_check(root, plan, stage, record):\n"
            "    import sys, time\n"
            "    if '--research-stage=toy' in sys.argv:  # the session, not prereg approve\n"
            f"        open({str(started)!r}, 'a').close()\n"
            "        time.sleep(600)\n"
            "    return []\n\n\n"
            'KIND = StageKind(name="mylab.kind:KIND", settings=settings, summarise=summarise,\n'
            "                 gate_check=gate_check)",
        )
    )


# -n 2: the check runs while the session starts its workers (pytest then ends the session
# without its sessionfinish hooks); serially it is waited for once the items are collected,
# after the session started (pytest then writes the junit report, unless prereg drops it).
@pytest.mark.parametrize("workers", [("-n", "2"), ()], ids=["two-workers", "serial"])
def test_ctrl_c_while_the_kinds_gate_check_runs_spends_nothing(tmp_path, workers):
    """The kind's own check runs in a thread beside the workers' start; Ctrl-C while it
    runs (here it would wait ten minutes) ends the session, nothing is spent, the run folder
    is not made and the terminal says so."""
    import os
    import signal
    import subprocess
    import time

    from prereg.records import ledger
    from prereg.testing import terminal_signals

    toy = _project(tmp_path)
    started = tmp_path / "check-started"
    _kind_whose_check_takes_ten_minutes(toy, started)
    toy.commit("A kind whose gate check takes ten minutes")
    toy.approve("toy", RUN)
    session = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--research-stage=toy",
            *workers,
        ],
        cwd=toy.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=terminal_signals,  # noqa: PLW1509 -- this test process starts no threads
    )
    try:
        for _ in range(600):  # the check has started (a safety bound, not a timing)
            if started.exists() or session.poll() is not None:
                break
            time.sleep(0.1)
        assert started.exists(), session.communicate()[0]
        os.kill(session.pid, signal.SIGINT)
        out = session.communicate(timeout=300)[0]  # a safety bound, far below the check's
    finally:
        if session.poll() is None:
            session.kill()
    assert session.returncode != 0, out
    # No stray runs/<run-id>/ (a junit.xml there would block the next attempt): the id is free.
    assert not ledger.is_spent(toy.root, RUN) and not toy.run_dir(RUN).exists(), out
    assert f"run {RUN} interrupted before its run id was spent: nothing spent" in out, out


def test_ctrl_c_during_collection_while_the_kinds_check_runs_ends_the_session(tmp_path):
    """pytest runs the collection-finish hook from a ``finally``: a Ctrl-C that lands while
    the session collects (here the stage module sends it to its own process once the kind's
    check has started) must end the session there, not after the check (which would take
    ten minutes)."""
    import subprocess

    from prereg.records import ledger
    from prereg.testing import terminal_signals

    toy = _project(tmp_path)
    started = tmp_path / "check-started"
    _kind_whose_check_takes_ten_minutes(toy, started)
    module = toy.root / "experiments" / "test_toy.py"
    module.write_text(
        module.read_text()
        + "\n\nimport os as _os, signal as _signal, sys as _sys, time as _time\n\n"
        "if '--research-stage=toy' in _sys.argv and not any(\n"
        "    a.startswith('--prereg-list-items') for a in _sys.argv\n"
        "):  # the session's collection, not its clean listing\n"
        "    for _ in range(1200):  # until the kind's check runs (a safety bound)\n"
        f"        if _os.path.exists({str(started)!r}):\n"
        "            break\n"
        "        _time.sleep(0.05)\n"
        "    _os.kill(_os.getpid(), _signal.SIGINT)\n"
    )
    toy.commit("A stage module interrupted at collection while the kind's check runs")
    toy.approve("toy", RUN)
    session = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--research-stage=toy"],
        cwd=toy.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=terminal_signals,  # noqa: PLW1509 -- this test process starts no threads
    )  # fmt: skip
    try:
        out = session.communicate(timeout=120)[0]  # a safety bound, far below the check's
    finally:
        if session.poll() is None:
            session.kill()
    assert started.exists(), out
    assert session.returncode != 0, out
    assert not ledger.is_spent(toy.root, RUN) and not toy.run_dir(RUN).exists(), out
    assert f"run {RUN} interrupted before its run id was spent: nothing spent" in out, out
