"""A stage across hosts: xdist socket gateways into separate clones that cannot see the
controller's folder.

Each "host" is an execnet socket server on 127.0.0.1 started in its own clone of the toy
project, inside its own mount namespace where the controller's checkout is covered by an
empty tmpfs: a worker that used the controller's path would find nothing there.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from prereg.records import snapshot as snapshots
from prereg.runtime import remote
from support.hosts import SocketHost, clone_host, start_socket_host
from support.toy import ToyRepo, make_toy_repo, stage_spec

pytestmark = pytest.mark.software

RUN = "toy-20261130-001"
SERIAL = "toy-20261130-002"


@pytest.fixture
def hosts():
    """Start socket hosts; each is stopped (by its process id) when the check ends."""
    reason = SocketHost.unavailable()
    if reason:
        pytest.skip(reason)
    started: list[SocketHost] = []

    def start(clone: Path, hide: Path, env: dict | None = None, **how) -> SocketHost:
        host = start_socket_host(clone, hide, env=env, **how)
        started.append(host)
        return host

    yield start
    for host in started:
        host.stop()


def _toy(tmp_path: Path, **overrides) -> ToyRepo:
    toy = make_toy_repo(tmp_path / "controller", {"toy": stage_spec("toy", **overrides)})
    toy.approve("toy", RUN)
    return toy


def _two_hosts(tmp_path: Path, toy: ToyRepo, hosts, env2: dict | None = None):
    one = hosts(clone_host(toy.root, tmp_path / "host-a"), toy.root)
    two = hosts(clone_host(toy.root, tmp_path / "host-b"), toy.root, env2)
    return one, two


def _run(toy: ToyRepo, *workers: SocketHost) -> subprocess.CompletedProcess:
    args = ["--dist", "load", "--max-worker-restart=0"]
    for host in workers:
        args += ["--tx", host.spec]
    return toy.pytest("--research-stage=toy", *args)


def _outputs(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_a_stage_over_two_socket_hosts_equals_the_serial_run(tmp_path, hosts):
    toy = _toy(tmp_path)
    one, two = _two_hosts(tmp_path, toy, hosts)
    done = _run(toy, one, two)
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = toy.manifest(RUN)
    assert manifest["status"] == "complete", manifest["incomplete_reasons"]
    audit = toy.audit(RUN)
    assert audit.returncode == 0, audit.stdout + audit.stderr

    workers = manifest["environment"]["workers"]
    assert sorted(w["spec"] for w in workers) == sorted([one.spec, two.spec])
    assert sorted(w["checkout"] for w in workers) == sorted(
        [str(one.clone.resolve()), str(two.clone.resolve())]
    )
    for worker in workers:
        assert worker["problems"] == []
        assert worker["python"] and worker["host"] and worker["packages"]["numpy"]
        assert "OMP_NUM_THREADS" in worker["thread_variables"]
    ran_by = {item["worker"] for item in manifest["items"]}
    assert ran_by <= {w["id"] for w in workers} and ran_by
    # Each host ran from its own snapshot of the approved commit, deleted when it exited.
    ran = manifest["environment"]["snapshot"]
    for worker, host in zip(
        sorted(workers, key=lambda w: w["spec"]), sorted((one, two), key=lambda h: h.spec)
    ):
        assert worker["remote"] is True
        assert worker["snapshot"]["commit"] == ran["commit"]
        assert worker["snapshot"]["tree"] == ran["tree"]
        assert worker["snapshot"]["folder"] not in (ran["folder"], worker["checkout"])
        host.process.wait(timeout=60)  # the socket server serves one connection, then exits
        assert not Path(worker["snapshot"]["folder"]).exists()
    # Nothing was written into the hosts' clones: the outputs came back through xdist.
    for host in (one, two):
        assert not (host.clone / "runs").exists() or not any((host.clone / "runs").rglob("*.json"))
        assert (
            subprocess.run(
                ["git", "status", "--porcelain"],
                cwd=host.clone,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            == ""
        )

    toy.approve("toy", SERIAL)
    serial = toy.pytest("--research-stage=toy")
    assert serial.returncode == 0, serial.stdout + serial.stderr
    assert _outputs(toy.run_dir(RUN) / "items") == _outputs(toy.run_dir(SERIAL) / "items")
    assert _outputs(toy.run_dir(RUN) / "summary") == _outputs(toy.run_dir(SERIAL) / "summary")
    here = {i["nodeid"]: i["outputs"] for i in manifest["items"]}
    there = {i["nodeid"]: i["outputs"] for i in toy.manifest(SERIAL)["items"]}
    assert here == there


def test_a_worker_that_entered_its_snapshot_imports_nothing_from_its_checkout(tmp_path):
    """After :func:`remote.enter`, the interpreter's folder, its ``sys.path`` entries inside
    the checkout and a package already imported from the checkout all come from the
    snapshot: an edit to the checkout after the proof changes nothing that runs."""
    checkout, snap = tmp_path / "clone", tmp_path / "prereg-snapshot-x"
    for top in (checkout, snap):
        (top / "src" / "pkg").mkdir(parents=True)
        (top / "src" / "pkg" / "__init__.py").write_text("WHERE = 'approved'\n")
        (top / "tools").mkdir()
    script = f"""
import importlib.util, os, sys
sys.path[:0] = [{str(checkout / "tools")!r}, {str(checkout / "nowhere")!r}]
sys.meta_path.append(type("Finder", (), {{"find_spec": staticmethod(
    lambda name, path=None, target=None: importlib.util.spec_from_file_location(
        "pkg", {str(checkout / "src/pkg/__init__.py")!r}) if name == "pkg" else None)}}))
import pkg
assert pkg.WHERE == "approved"
from prereg.runtime import remote
remote.enter({str(checkout)!r}, {str(snap)!r})
open({str(checkout / "src/pkg/__init__.py")!r}, "w").write("WHERE = 'edited'")
import pkg
print(pkg.WHERE, pkg.__file__, os.getcwd(), os.environ["HYPOTHESIS_STORAGE_DIRECTORY"], sys.dont_write_bytecode)
print([p for p in sys.path if p.startswith({str(tmp_path)!r})])
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=checkout, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    hypothesis = snapshots.scratch(snap) / "hypothesis"  # its cache never enters the snapshot
    assert first == f"approved {snap / 'src/pkg/__init__.py'} {snap} {hypothesis} True"
    # "" (python -c: the current folder, the checkout) becomes the snapshot itself
    assert ast.literal_eval(second) == [str(snap / "src"), str(snap / "tools"), str(snap)]
    assert not snap.exists()  # deleted when the interpreter exited


def test_a_host_whose_snapshot_cannot_be_written_or_differs_is_a_problem(tmp_path):
    """A host's checkout passed, but its repository lacks the controller's commit, or its
    objects give another tree: a problem (the run is refused) and no snapshot is left."""
    toy = _toy(tmp_path)
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=toy.root, capture_output=True, text=True, check=True
    ).stdout.strip()
    # Only this test's snapshots (of its two commits): other processes make and delete theirs
    # in the same temporary folder meanwhile.
    mine = [f"prereg-snapshot-{commit[:12]}-*" for commit in ("f" * 40, head)]
    before = {p for pattern in mine for p in Path(tempfile.gettempdir()).glob(pattern)}
    state: dict = {}
    (missing,) = remote._own_snapshot(toy.root, "f" * 40, "0" * 40, state)
    assert "could not be written" in missing and "git fetch" in missing, missing
    (other,) = remote._own_snapshot(toy.root, head, "0" * 40, state)
    assert "the controller's " + "0" * 40 in other and "git fsck" in other, other
    assert state == {} and os.getcwd() != str(toy.root)
    assert {p for pattern in mine for p in Path(tempfile.gettempdir()).glob(pattern)} == before


def _refused(toy: ToyRepo, done: subprocess.CompletedProcess, *needles: str) -> str:
    """The run was refused with condition ``worker`` before spending; the refusal's text."""
    text = done.stdout + done.stderr
    assert done.returncode != 0, text
    assert not (toy.run_dir(RUN) / "start.json").exists(), "the run id was spent"
    (record,) = toy.refusals()
    assert {r["condition"] for r in record["refusals"]} == {"worker"}, record
    messages = " ".join(r["message"] for r in record["refusals"])
    for needle in needles:
        assert needle in text and needle in messages, (needle, text)
    return messages


def test_a_host_at_another_commit_is_refused_before_spending(tmp_path, hosts):
    toy = _toy(tmp_path)
    clone = clone_host(toy.root, tmp_path / "host-b")
    (clone / "experiments" / "extra_note.txt").write_text("a later change\n")
    subprocess.run(["git", "add", "-A"], cwd=clone, check=True)
    subprocess.run(
        ["git", "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "later"],
        cwd=clone,
        check=True,
    )
    one = hosts(clone_host(toy.root, tmp_path / "host-a"), toy.root)
    two = hosts(clone, toy.root)
    text = _refused(toy, _run(toy, one, two), two.spec, "extra_note.txt")
    assert "differs from the approved anchor" in text


def test_a_dirty_host_is_refused_before_spending(tmp_path, hosts):
    toy = _toy(tmp_path)
    clone = clone_host(toy.root, tmp_path / "host-b")
    module = clone / "experiments" / "test_toy.py"
    module.write_text(module.read_text() + "\n# edited on the host\n")
    one = hosts(clone_host(toy.root, tmp_path / "host-a"), toy.root)
    two = hosts(clone, toy.root)
    _refused(toy, _run(toy, one, two), two.spec, "experiments/test_toy.py")


def test_a_host_with_another_numpy_is_refused_before_spending(tmp_path, hosts):
    """The host's environment reports numpy 0.0.1 (a distribution's metadata first on its
    PYTHONPATH): an environment deviation the approval does not name."""
    toy = _toy(tmp_path)
    shim = tmp_path / "other-env"
    info = shim / "numpy-0.0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: numpy\nVersion: 0.0.1\n")
    one, two = _two_hosts(tmp_path, toy, hosts, env2={"PYTHONPATH": str(shim)})
    text = _refused(toy, _run(toy, one, two), two.spec)
    assert "numpy: plan pins" in text and "'0.0.1'" in text
    assert one.spec not in text  # the other host's state was proved


def test_a_host_that_dies_mid_run_makes_the_run_incomplete_naming_it(tmp_path, hosts):
    toy = _toy(tmp_path, parameters={"cells": 4, "misbehave": {"cell": 1, "how": "exit"}})
    one, two = _two_hosts(tmp_path, toy, hosts)
    done = _run(toy, one, two)
    assert done.returncode != 0
    manifest = toy.manifest(RUN)
    assert manifest["status"] == "incomplete"
    crashed = [i for i in manifest["items"] if i["nodeid"].endswith("[cell1]")]
    (item,) = crashed
    assert item["outcome"] != "passed"
    reasons = " ".join(manifest["incomplete_reasons"])
    assert f"worker {item['worker']} went down" in reasons, reasons
    assert any(w["id"] == item["worker"] for w in manifest["environment"]["workers"])
    audit = toy.audit(RUN)
    assert "could not audit" not in audit.stdout, audit.stdout


def test_outputs_past_the_size_limit_fail_clearly(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "big.bin").write_bytes(b"x" * 33)
    with pytest.raises(remote.TooLarge, match="33 bytes, beyond the 32 bytes"):
        remote.pack(folder, limit=32)
    chunks = remote.pack(folder, limit=33)
    target = tmp_path / "back"
    assert remote.unpack(chunks, target) == []
    assert (target / "big.bin").read_bytes() == b"x" * 33


def test_an_output_path_leaving_the_item_folder_is_not_written(tmp_path):
    chunk = json.dumps({"path": "../escape.txt", "part": 0, "parts": 1, "data": "eA=="})
    problems = remote.unpack([chunk], tmp_path / "item")
    assert problems and "leaves the item folder" in problems[0]
    assert not (tmp_path / "escape.txt").exists()


def test_a_socket_server_that_served_a_run_before_is_refused(tmp_path, hosts):
    """execnet's own script serves connections in a loop in one process, keeping the modules
    an earlier run loaded: a second run through it is refused."""
    toy = _toy(tmp_path)
    looping = hosts(
        clone_host(toy.root, tmp_path / "host-a"), toy.root, server="execnet.script.socketserver"
    )
    clone = clone_host(toy.root, tmp_path / "host-b")
    (clone / "stray.txt").write_text("untracked\n")
    first = _run(toy, looping, hosts(clone, toy.root))
    assert first.returncode != 0 and "stray.txt" in first.stdout + first.stderr
    assert remote.SERVED_BEFORE not in first.stdout + first.stderr
    (clone / "stray.txt").unlink()
    second = _run(toy, looping, hosts(clone, toy.root))
    text = second.stdout + second.stderr
    assert second.returncode != 0, text
    assert remote.SERVED_BEFORE in text.replace("\n  ", " ") or "already served a run" in text
    assert looping.spec in text and not (toy.run_dir(RUN) / "start.json").exists()


def test_a_required_run_must_be_on_each_host(tmp_path, hosts):
    """A stage that consumes an earlier run reads it on the host: a clone without it is
    refused; with the run folder copied and git's records fetched, the stage runs."""
    later = "later-20261130-001"
    stages = {"toy": stage_spec("toy"), "later": stage_spec("later", requires=["toy"])}
    toy = make_toy_repo(tmp_path / "controller", stages)
    toy.approve("toy", RUN)
    assert toy.pytest("--research-stage=toy").returncode == 0
    toy.approve("later", later)
    clones = [clone_host(toy.root, tmp_path / n) for n in ("host-a", "host-b")]

    def run() -> subprocess.CompletedProcess:
        tx = [a for c in clones for a in ("--tx", hosts(c, toy.root).spec)]
        return toy.pytest("--research-stage=later", "--dist", "load", *tx)

    done = run()
    assert done.returncode != 0 and not (toy.run_dir(later) / "start.json").exists()
    (record,) = toy.refusals()
    assert {r["condition"] for r in record["refusals"]} == {"worker"}
    assert all("[inputs]" in r["message"] for r in record["refusals"]), record
    for clone in clones:
        shutil.copytree(toy.run_dir(RUN), clone / "runs" / RUN)
        subprocess.run(
            ["git", "fetch", "-q", "origin", "refs/prereg/*:refs/prereg/*"], cwd=clone, check=True
        )
    done = run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert toy.manifest(later)["status"] == "complete"
    assert toy.audit(later).returncode == 0
