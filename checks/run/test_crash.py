"""Crash safety: every failure still leaves an honest manifest.

Each check performs the failure for real in a toy repository: a signal to the
controller (SIGTERM) serially and under ``-n 2`` (each further ending signal installs the same
handler, checked in this process), a worker that ``os._exit``s, a
NaN in an item's record or in a stage summary, an environment probe that raises, a full
disk while ``items.jsonl`` grows. The manifest is ``incomplete`` and names the cause,
finished items keep their true outcome, the partial outputs of every item folder are
hashed (so the audit finds no extra file), and the manifest's bytes are recorded in git.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prereg.decisions import manifest
from prereg.records import INCOMPLETE, ITEM_LOG, MANIFEST, ledger
from prereg.runtime import signals
from prereg.testing import outer_environment, terminal_signals
from support.toy import ToyRepo, make_toy_repo, stage_spec

pytestmark = [pytest.mark.software, pytest.mark.attack]

RUN = "toy-20261130-001"


def misbehaving(tmp_path: Path, how: str, cell: int, conftest: str = "") -> ToyRepo:
    spec = stage_spec("toy", parameters={"cells": 4, "misbehave": {"cell": cell, "how": how}})
    toy = make_toy_repo(tmp_path / how, {"toy": spec})
    if conftest:
        with open(toy.root / "conftest.py", "a") as handle:
            handle.write(conftest)
        toy.commit("A conftest that breaks the end of the run")
    toy.approve("toy", RUN)
    return toy


def strict_json(data: bytes) -> object:
    def refuse(constant: str) -> None:
        raise AssertionError(f"non-finite {constant} in a record")

    return json.loads(data, parse_constant=refuse)


def item(manifest_data: dict, cell: int) -> dict:
    return next(i for i in manifest_data["items"] if i["nodeid"].endswith(f"[cell{cell}]"))


def check_honest(toy: ToyRepo, cause: str) -> dict:
    """Incomplete, naming ``cause``; every item folder hashed; the audit finds nothing (an
    honest interrupted run audits clean); passed items passed in every phase; the manifest's
    bytes recorded in git."""
    path = toy.run_dir(RUN) / MANIFEST
    data = strict_json(path.read_bytes())
    assert data["status"] == INCOMPLETE
    assert any(cause in reason for reason in data["incomplete_reasons"]), data["incomplete_reasons"]
    hashed = {
        f"{i['output_dir']}/{o['path']}": o["sha256"]
        for i in data["items"]
        for o in i.get("outputs", [])
    }
    base = toy.run_dir(RUN) / "items"
    present = {
        p.relative_to(base).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in base.rglob("*")
        if p.is_file()
    }
    assert present == hashed
    for entry in data["items"]:
        if entry["outcome"] == "passed":
            assert entry["phases"] == {"setup": "passed", "call": "passed", "teardown": "passed"}
    audit = toy.audit(RUN)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert ledger.read(toy.root, ledger.manifest_ref(RUN)) == path.read_bytes()
    return data


@pytest.mark.parametrize("name", signals.ENDING_SIGNALS)
def test_every_ending_signal_interrupts_the_run_naming_itself(name):
    """A session installs one handler for each of the ending signals (SIGHUP from a closed
    terminal, SIGXCPU from a CPU-time limit such as ``ulimit -t``); the runs below end a
    real run with SIGTERM, Ctrl-C and a worker's exit, so each further signal is checked
    here, in this process, with the handler a session installs."""
    number = getattr(signal, name)
    before = signal.signal(number, signal.SIG_DFL)
    saved = signals.install_signal_handlers()
    try:
        assert number in saved
        with pytest.raises(KeyboardInterrupt, match=f"^{name} received"):
            os.kill(os.getpid(), number)
    finally:
        signals.restore_signals(saved)
        signal.signal(number, before)


@pytest.mark.parametrize(
    "how, cause",
    [
        ("sigterm", "SIGTERM"),  # the item signals its own process: the serial controller
        ("sigterm-controller", "SIGTERM"),
        ("sigint-controller", "KeyboardInterrupt"),
    ],
)
def test_a_signalled_serial_run_writes_an_incomplete_manifest_hashing_partial_outputs(
    tmp_path, how, cause
):
    toy = misbehaving(tmp_path, how, cell=1)
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 2, done.stdout + done.stderr  # interrupted
    data = check_honest(toy, cause)
    assert item(data, 0)["outcome"] == "passed"
    interrupted = item(data, 1)
    assert interrupted["outcome"] == "interrupted"
    assert {"partial.txt", "result.json"} <= {o["path"] for o in interrupted["outputs"]}
    assert [item(data, c)["outcome"] for c in (2, 3)] == ["not run", "not run"]
    log = (toy.run_dir(RUN) / ITEM_LOG).read_bytes().splitlines()
    assert [strict_json(line)["nodeid"] for line in log] == [item(data, 0)["nodeid"]]


def test_a_signalled_two_worker_run_keeps_the_true_outcome_of_items_that_finished(tmp_path):
    # Cell 0 signals the controller and hangs; the other worker's items finish just
    # after the signal, while xdist stops the workers: they passed and must say so.
    toy = misbehaving(tmp_path, "sigterm-controller", cell=0)
    done = toy.pytest("--research-stage=toy", "-n", "2")
    assert done.returncode == 2, done.stdout + done.stderr
    data = check_honest(toy, "SIGTERM")
    hung = item(data, 0)
    assert hung["outcome"] == "interrupted"
    assert {"partial.txt", "signalled.txt"} <= {o["path"] for o in hung["outputs"]}
    others = [item(data, c) for c in (1, 2, 3)]
    started = [
        i for i in others if (toy.run_dir(RUN) / "items" / i["nodeid"].split("::")[-1]).is_dir()
    ]
    assert started, "the other worker ran none of its items"
    for entry in others:
        assert entry["outcome"] == ("passed" if entry in started else "not run"), entry


def test_ctrl_c_of_a_two_worker_run_keeps_every_finished_item_and_hashes_the_rest(tmp_path):
    # Ctrl-C in a terminal: SIGINT to the controller and its workers at once (their own
    # process group here, so the signal reaches no one else).
    toy = misbehaving(tmp_path, "ctrl-c", cell=0)
    env = outer_environment()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--research-stage=toy"]
        + ["-n", "2"],
        cwd=toy.root,
        env=env,
        capture_output=True,
        text=True,
        start_new_session=True,
        check=False,
        preexec_fn=terminal_signals,
        timeout=300,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    data = check_honest(toy, "KeyboardInterrupt")
    assert item(data, 0)["outcome"] == "interrupted"
    for entry in data["items"]:
        if entry["phases"].get("teardown") == "passed" and entry["phases"].get("call") == "passed":
            assert entry["outcome"] == "passed"
        if entry.get("outputs"):
            assert entry["outcome"] != "not run"


def test_a_manifest_that_cannot_be_recorded_in_git_stays_and_the_terminal_says_so(tmp_path):
    toy = misbehaving(tmp_path, "none", cell=-1)
    planted = subprocess.run(
        ["git", "-C", str(toy.root), "hash-object", "-w", "--stdin"],
        input=b"not this run's manifest",
        capture_output=True,
        check=True,
    )
    toy.git("update-ref", ledger.manifest_ref(RUN), planted.stdout.decode().strip())
    done = toy.pytest("--research-stage=toy")
    assert "WARNING: the manifest's SHA-256 could not be recorded in git" in done.stdout
    assert ledger.manifest_ref(RUN) in done.stdout
    assert strict_json((toy.run_dir(RUN) / MANIFEST).read_bytes())["status"] == "complete"
    assert ledger.read(toy.root, ledger.manifest_ref(RUN)) == b"not this run's manifest"
    audit = toy.audit(RUN)  # the record in git does not match: the audit says so
    assert audit.returncode == 1 and ledger.manifest_ref(RUN) in audit.stdout, audit.stdout


HANDLERS = """
import json, signal
from prereg.plugin import project_root


def _names():
    return [str(getattr(signal.getsignal(s), "__name__", signal.getsignal(s))) for s in
            (signal.SIGTERM, signal.SIGHUP)]


SEEN = {"configure": _names()}


def pytest_runtest_call(item):
    SEEN["item"] = _names()


def pytest_unconfigure(config):
    SEEN["end"] = _names()
    (project_root(config) / "handlers.json").write_text(json.dumps(SEEN))
"""


SIGTERM_IN_THE_LISTING = """
import sys as _sys
if any(arg.startswith("--prereg-list-items") for arg in _sys.argv):  # the clean listing only
    os.kill(os.getpid(), signal.SIGTERM)
"""


FIXTURE_CONFTEST = "import pytest\n\n\n@pytest.fixture\ndef unused():\n    return 1\n"


def test_a_sigterm_that_ends_the_clean_listing_is_an_interruption_not_a_refusal(tmp_path):
    # A batch scheduler's SIGTERM can reach the clean listing before the session: that says
    # nothing of the stage, so it is no whole-stage refusal; nothing is spent or recorded.
    toy = make_toy_repo(tmp_path / "toy")
    with open(toy.root / "experiments" / "test_toy.py", "a") as handle:
        handle.write(SIGTERM_IN_THE_LISTING)
    # A conftest.py with a fixture of its own: more than prereg's plugin declaration, so the
    # session lists the stage in a clean process (prereg.runtime.collection).
    (toy.root / "experiments" / "conftest.py").write_text(FIXTURE_CONFTEST)
    toy.commit("A stage whose clean listing is ended by SIGTERM")
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy")
    said = done.stdout + done.stderr
    assert done.returncode == 2, said  # interrupted
    assert "the clean listing of the stage's items was ended by SIGTERM" in said, said
    assert f"run {RUN} interrupted before its run id was spent" in said, said
    assert toy.refusals() == []
    assert ledger.read(toy.root, ledger.start_ref(RUN)) is None
    assert not toy.run_dir(RUN).exists()


def test_sigterm_and_sighup_handlers_live_from_the_gate_to_the_manifest_only(tmp_path):
    toy = misbehaving(tmp_path, "none", cell=-1, conftest=HANDLERS)
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads((toy.root / "handlers.json").read_text())
    # Outside the run, SIGTERM ends the session through its boot (which deletes the snapshot).
    assert seen["configure"] == seen["end"] == ["_exit_on_signal", str(signal.SIG_DFL)]
    assert seen["item"] == ["_raise_keyboard_interrupt"] * 2


def test_a_run_started_under_nohup_keeps_ignoring_sighup(tmp_path):
    toy = misbehaving(tmp_path, "none", cell=-1, conftest=HANDLERS)

    def nohup() -> None:
        terminal_signals()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--research-stage=toy"],
        cwd=toy.root,
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=nohup,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads((toy.root / "handlers.json").read_text())
    assert seen["item"] == ["_raise_keyboard_interrupt", str(signal.SIG_IGN)]
    assert seen["end"] == ["_exit_on_signal", str(signal.SIG_IGN)]


SECOND_SIGNALS = """
import os, signal
from prereg.plugin import project_root


def pytest_sessionfinish(session):
    if (project_root(session.config) / "runs" / "toy-20261130-001").is_dir():  # the run, not the listing
        os.kill(os.getpid(), signal.SIGHUP)  # the terminal closes while the run ends
        os.kill(os.getpid(), signal.SIGINT)  # and Ctrl-C is pressed again
"""

FAILING_SESSION_END = """
from prereg.plugin import project_root


def pytest_sessionfinish(session):
    if (project_root(session.config) / "runs" / "toy-20261130-001").is_dir():  # the run, not the listing
        raise RuntimeError("a plugin broke at the session end")
"""


def test_signals_during_the_session_end_are_noted_and_the_manifest_still_written(tmp_path):
    toy = misbehaving(tmp_path, "sigterm", cell=1, conftest=SECOND_SIGNALS)
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 2, done.stdout + done.stderr
    check_honest(toy, "SIGTERM")
    for name in ("SIGHUP", "SIGINT"):
        assert f"WARNING: {name} arrived while the manifest was written" in done.stdout


def test_a_plugin_failing_at_the_session_end_still_leaves_a_manifest_naming_it(tmp_path):
    toy = misbehaving(tmp_path, "none", cell=-1, conftest=FAILING_SESSION_END)
    done = toy.pytest("--research-stage=toy")
    assert done.returncode != 0
    data = check_honest(toy, "a plugin broke at the session end")
    assert [i["outcome"] for i in data["items"]] == ["passed"] * 4


def test_a_worker_that_exits_leaves_its_partial_outputs_hashed_and_the_rest_passed(tmp_path):
    toy = misbehaving(tmp_path, "exit", cell=1)
    done = toy.pytest("--research-stage=toy", "-n", "2")
    assert done.returncode != 0
    data = check_honest(toy, "went down")
    crashed = item(data, 1)
    assert crashed["outcome"] == "error"
    assert {"partial.txt", "result.json"} <= {o["path"] for o in crashed["outputs"]}
    assert [item(data, c)["outcome"] for c in (0, 2, 3)] == ["passed"] * 3


def test_a_nan_in_an_item_record_leaves_an_incomplete_manifest_naming_it(tmp_path):
    toy = misbehaving(tmp_path, "nonfinite", cell=1)
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 1, done.stdout + done.stderr
    data = check_honest(toy, "coords.score: NaN")
    assert item(data, 1)["coords"]["score"] == "NaN"
    assert all(i["outcome"] == "passed" for i in data["items"])
    for line in (toy.run_dir(RUN) / ITEM_LOG).read_bytes().splitlines():
        strict_json(line)


NAN_SUMMARY = """
import dataclasses, math
import prereg.kinds.stages
from prereg.base.hashing import write_json


def _nan_summary(view):
    write_json(view.summary_dir / "partial.json", {"begun": True})
    write_json(view.summary_dir / "score.json", {"score": math.nan})


prereg.kinds.stages.PLAIN = dataclasses.replace(prereg.kinds.stages.PLAIN, summarise=_nan_summary)
"""

FAILING_PROBE = """
import prereg.decisions.manifest


def _probe(**_):
    raise RuntimeError("the environment probe broke")


prereg.decisions.manifest.environment = _probe
"""


def test_a_nan_in_the_stage_summary_leaves_an_incomplete_manifest_with_the_partial_summary(
    tmp_path,
):
    toy = misbehaving(tmp_path, "none", cell=-1, conftest=NAN_SUMMARY)
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 1, done.stdout + done.stderr
    data = check_honest(toy, "the stage summary failed")
    assert any("not JSON compliant" in r for r in data["incomplete_reasons"])
    assert data["summary_files"] == []
    assert [e["path"] for e in data["partial_summary_files"]] == ["partial.json"]


def test_a_failing_environment_probe_still_leaves_a_minimal_manifest(tmp_path):
    toy = misbehaving(tmp_path, "none", cell=-1, conftest=FAILING_PROBE)
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 1, done.stdout + done.stderr
    data = check_honest(toy, "the environment probe broke")
    assert data["minimal"] is True and "RuntimeError" in data["manifest_error"]
    assert [i["outcome"] for i in data["items"]] == ["passed"] * 4
    assert data["source_commit"] and data["approval"]["sha256"] and data["plan"]["sha256"]


FILL_DISK = """
import os
import pytest
from prereg.plugin import project_root


FREE_UP = True


def pytest_runtest_setup(item):
    if item.callspec.params["cell"] == 3 and FREE_UP:
        (project_root(item.config) / "runs" / "filler").unlink()  # the disk frees up again


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    if item.callspec.params["cell"] == 1:  # after its outputs: fill runs/ to the last byte
        item.funcargs["research"].coords(padding="x" * 16384)  # more than a page left over
        fd = os.open(project_root(item.config) / "runs" / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, bytes(65536)):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
    return result
"""


def on_tmpfs(toy: ToyRepo, size: str) -> Path:
    """Mount a tmpfs of ``size`` over the toy's runs/ (skip when this machine will not)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs over runs/ needs root; the in-process checks cover it")
    runs = toy.root / "runs"
    runs.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(runs)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    return runs


def test_a_full_disk_while_items_jsonl_grows_leaves_whole_lines_and_a_manifest(tmp_path):
    toy = misbehaving(tmp_path, "none", cell=-1, conftest=FILL_DISK)
    runs = on_tmpfs(toy, "1m")  # too small for the space reserve: the disk frees up instead
    try:
        done = toy.pytest("--research-stage=toy")
        assert done.returncode == 1, done.stdout + done.stderr
        # Clean: items.jsonl lacks a finished item, and the manifest says why (log_error).
        data = check_honest(toy, f"{ITEM_LOG}: could not append the record")
        assert (
            item(data, 1)["outcome"] == "passed" and "bytes written" in item(data, 1)["log_error"]
        )
        assert item(data, 2)["outcome"] == "failed"  # its result.json met the full disk
        assert "No space left on device" in item(data, 2)["tracebacks"]["call"]
        records, problems = manifest.read_item_log(toy.run_dir(RUN))
        assert problems == []  # the short write was cut back off: no torn line
        assert item(data, 1)["nodeid"] not in {r["nodeid"] for r in records}
        assert item(data, 3)["nodeid"] in {r["nodeid"] for r in records}
    finally:
        subprocess.run(["umount", "-l", str(runs)], check=False)


def test_a_disk_that_stays_full_still_takes_junit_and_the_manifest_from_the_reserve(tmp_path):
    toy = misbehaving(
        tmp_path, "none", cell=-1, conftest=FILL_DISK.replace("FREE_UP = True", "FREE_UP = False")
    )
    runs = on_tmpfs(toy, "4m")
    try:
        done = toy.pytest("--research-stage=toy")
        assert done.returncode == 1, done.stdout + done.stderr
        assert (runs / "filler").exists()  # still full when the run ended
        data = check_honest(toy, "did not pass")
        assert [item(data, c)["outcome"] for c in range(4)] == [
            "passed",
            "passed",
            "failed",
            "failed",
        ]
        assert (toy.run_dir(RUN) / "junit.xml").is_file()
        assert not list((runs / "progress").glob("*.reserve"))
    finally:
        subprocess.run(["umount", "-l", str(runs)], check=False)


# -- in process: manifest.py's own guarantees ------------------------------------------------


def entry(n: int, **extra) -> dict:
    return {"nodeid": f"experiments/test_toy.py::test_cell[cell{n}]", "phases": {}, **extra}


def test_a_short_write_is_cut_back_and_named_and_the_next_append_is_whole(tmp_path, monkeypatch):
    assert manifest.append_item(tmp_path, entry(0)) is None
    before = (tmp_path / ITEM_LOG).read_bytes()
    real_write = os.write
    monkeypatch.setattr(manifest.os, "write", lambda fd, data: real_write(fd, data[:7]))
    problem = manifest.append_item(tmp_path, entry(1))
    assert problem and ITEM_LOG in problem and "cell1" in problem and "7 of" in problem
    assert (tmp_path / ITEM_LOG).read_bytes() == before
    monkeypatch.setattr(manifest.os, "write", real_write)
    assert manifest.append_item(tmp_path, entry(2)) is None
    records, problems = manifest.read_item_log(tmp_path)
    assert [r["nodeid"][-6:-1] for r in records] == ["cell0", "cell2"] and problems == []


def test_an_enospc_append_is_a_reason_not_an_exception(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(manifest.os, "write", full)
    problem = manifest.append_item(tmp_path, entry(0))
    assert "No space left on device" in problem


def test_a_torn_line_is_closed_before_the_next_append(tmp_path):
    (tmp_path / ITEM_LOG).write_bytes(b'{"nodeid": "a"}\n{"nodeid": "b", "pha')
    assert manifest.append_item(tmp_path, entry(0)) is None
    records, problems = manifest.read_item_log(tmp_path)
    assert [r["nodeid"] for r in records] == ["a", entry(0)["nodeid"]]
    assert len(problems) == 1 and "line 2" in problems[0] and "torn" in problems[0]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=8), max_size=3),
        min_size=1,
        max_size=5,
    ),
    st.floats(0, 1),
)
def test_the_reader_returns_the_whole_records_before_any_cut(tmp_path_factory, records, where):
    folder = tmp_path_factory.mktemp("log")
    for n, record in enumerate(records):
        assert manifest.append_item(folder, {**record, "nodeid": str(n)}) is None
    data = (folder / ITEM_LOG).read_bytes()
    cut = int(where * len(data))
    (folder / ITEM_LOG).write_bytes(data[:cut])
    read, problems = manifest.read_item_log(folder)
    whole = data[:cut].count(b"\n")
    assert [r["nodeid"] for r in read][:whole] == [str(n) for n in range(whole)]
    assert len(read) in (whole, whole + 1)  # cut just before a newline keeps a whole record
    assert bool(problems) == (cut > 0 and data[cut - 1 : cut] != b"\n")


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=12,
)


def count_nonfinite(value: object) -> int:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return sum(count_nonfinite(v) for v in value.values())
    if isinstance(value, list):
        return sum(count_nonfinite(v) for v in value)
    return 0


@given(JSONISH)
def test_finite_names_every_non_finite_number_and_leaves_strict_json(value):
    clean, problems = manifest.finite(value, "x")
    json.dumps(clean, allow_nan=False)
    assert len(problems) == count_nonfinite(value)


def minimal_inputs(run_dir: Path) -> dict:
    return {
        "run_dir": run_dir,
        "start": {"stage": "toy", "run_id": RUN, "plan_sha256": "p", "approval_sha256": "a"},
        "stage": "toy",
        "run_id": RUN,
        "plan_path": "plans/TOY_PLAN.json",
        "items": [entry(0, outcome="passed", score=math.inf)],
        "expected": [entry(0)["nodeid"]],
        "reasons": ["interrupted"],
        "ended_at": "now",
    }


def test_a_failing_build_writes_the_minimal_manifest_naming_the_error(tmp_path):
    def build() -> dict:
        raise KeyError("budget_seconds")

    data, errors = manifest.write_final(
        tmp_path,
        build,
        lambda error: manifest.minimal_manifest(**minimal_inputs(tmp_path), error=error),
    )
    written = strict_json((tmp_path / MANIFEST).read_bytes())
    assert data == (tmp_path / MANIFEST).read_bytes() and len(errors) == 1
    assert written["status"] == INCOMPLETE and written["minimal"] is True
    reasons = " | ".join(written["incomplete_reasons"])
    assert "KeyError" in reasons and "budget_seconds" in reasons and "interrupted" in reasons
    assert "score: Infinity" in reasons


def test_a_full_disk_at_the_manifest_leaves_the_smaller_minimal_one_and_no_temporary_file(
    tmp_path, monkeypatch
):
    real = manifest.write_atomic
    calls = []

    def first_fails(path, data):
        calls.append(len(data))
        if len(calls) == 1:
            real(path, data[: len(data) // 2])  # leaves nothing half-written: it is replaced
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, data)

    monkeypatch.setattr(manifest, "write_atomic", first_fails)
    data, errors = manifest.write_final(
        tmp_path,
        lambda: {"status": "complete", "budget": {"seconds": math.nan}},
        lambda error: manifest.minimal_manifest(**minimal_inputs(tmp_path), error=error),
    )
    assert data is not None and "No space left" in errors[0]
    written = strict_json((tmp_path / MANIFEST).read_bytes())
    assert any("No space left on device" in r for r in written["incomplete_reasons"])
    assert [p.name for p in tmp_path.iterdir()] == [MANIFEST]


def test_when_even_the_minimal_manifest_fails_nothing_half_written_is_left(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(manifest.os, "write", full)
    data, errors = manifest.write_final(
        tmp_path,
        lambda: {"status": "complete"},
        lambda error: manifest.minimal_manifest(**minimal_inputs(tmp_path), error=error),
    )
    assert data is None and len(errors) == 2
    assert list(tmp_path.iterdir()) == []


def test_a_nan_budget_makes_the_manifest_incomplete_instead_of_losing_it(tmp_path):
    built = {"status": "complete", "incomplete_reasons": [], "budget": {"seconds": math.nan}}
    built["summary_files"] = [{"path": "s.json", "sha256": "0", "bytes": 1}]
    written = strict_json(manifest.write_manifest(tmp_path, built))
    assert written["status"] == INCOMPLETE and written["budget"]["seconds"] == "NaN"
    assert (
        written["summary_files"] == [] and written["partial_summary_files"][0]["path"] == "s.json"
    )
    assert "manifest.budget.seconds: NaN" in written["incomplete_reasons"][0]


def test_every_item_folder_is_hashed_temporary_files_and_unclaimed_folders_included(tmp_path):
    items_dir = tmp_path / "items"
    for name in ("test_cell[cell0]", "test_cell[cell1]", "stray"):
        (items_dir / name).mkdir(parents=True)
        (items_dir / name / "result.json").write_text("{}")
    (items_dir / "test_cell[cell1]" / ".result.json.99.tmp").write_text("{")  # interrupted write
    recorded = [{"path": "result.json", "sha256": "x", "bytes": 2}]
    items = [
        entry(0, output_dir="test_cell[cell0]", outputs=recorded, outcome="passed"),
        entry(1, outcome="interrupted"),  # no report with outputs came
    ]
    hashed = manifest.hash_item_folders(tmp_path, items, lambda n: n.split("::")[-1])
    by_dir = {i["output_dir"]: i for i in hashed}
    assert by_dir["test_cell[cell0]"]["outputs"] == recorded  # its own process's hashes kept
    assert "outputs_rehashed" not in by_dir["test_cell[cell0]"]
    cell1 = by_dir["test_cell[cell1]"]
    assert [o["path"] for o in cell1["outputs"]] == [".result.json.99.tmp", "result.json"]
    assert "recorded none" in cell1["outputs_rehashed"]
    assert by_dir["stray"]["outcome"] == "unknown" and "items/stray" in by_dir["stray"]["nodeid"]


def test_a_run_folder_that_cannot_be_written_after_the_spend_still_has_a_record(tmp_path):
    """The run id is spent in git, then the disk is full: no item runs, the refusal says the
    run is spent, ``prereg runs`` lists it and ``prereg audit`` names it (exit 1)."""
    toy = misbehaving(tmp_path, "none", cell=-1)
    runs = on_tmpfs(toy, "64k")
    try:
        fd = os.open(runs / "filler", os.O_WRONLY | os.O_CREAT)  # full from the start
        try:
            while os.write(fd, bytes(4096)):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        done = toy.pytest("--research-stage=toy")
        assert done.returncode == 4, done.stdout + done.stderr
        assert f"run {RUN} is spent" in done.stderr and "could not be written" in done.stderr
        assert ledger.is_spent(toy.root, RUN)
        listed = toy.prereg("runs", "--no-audit")
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert RUN in listed.stdout, listed.stdout
        audit = toy.audit(RUN)
        assert audit.returncode == 1, audit.stdout + audit.stderr
        if (toy.run_dir(RUN) / "start.json").is_file():  # the start record fitted, no more
            assert "manifest.json is missing" in audit.stdout, audit.stdout
        else:
            assert "no run folder" in listed.stdout, listed.stdout
            assert ledger.start_ref(RUN) in audit.stdout, audit.stdout
    finally:
        subprocess.run(["umount", "-l", str(runs)], check=False)


def test_a_run_whose_folder_was_never_written_is_listed_and_audited_from_git(tmp_path):
    toy = misbehaving(tmp_path, "none", cell=-1)
    assert toy.pytest("--research-stage=toy").returncode == 0
    shutil.rmtree(toy.run_dir(RUN))  # as if it had never been written
    listed = toy.prereg("runs", "--no-audit")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    line = next(line for line in listed.stdout.splitlines() if RUN in line)
    assert "no run folder" in line and "toy" in line, listed.stdout
    audit = toy.audit(RUN)
    assert audit.returncode == 1 and ledger.start_ref(RUN) in audit.stdout, audit.stdout
    report = toy.prereg("report", "--all")
    assert report.returncode == 0, report.stdout + report.stderr
