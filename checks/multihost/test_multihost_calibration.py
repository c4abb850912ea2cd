"""The RP002A calibration stage (tiny plan) over two socket hosts equals its serial run.

The controller and each host run a clone of this repository with its own ``lib/`` first on
``PYTHONPATH`` (as ``prereg demo`` does), so each proves the prereg package and stage kind
it imports are its own checkout's. One stage is enough for what the hosts add (execnet's
socket gateways, a checkout per host): that training gives the same bytes in whichever
worker process it runs is checked on the target-variance stage with two workers
(checks/rp002a/pipeline/test_rp002a_pipeline.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from prereg.testing import ScratchProject
from support import rp002a_clone
from support.hosts import SocketHost, clone_host, start_socket_host

pytestmark = pytest.mark.software


def _outputs(folder: Path) -> dict[str, bytes]:
    """Every output file's bytes, CPU timings aside (``*.timing.json``: measured, not computed)."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and ".timing." not in p.name
    }


def test_a_pipeline_stage_over_two_socket_hosts_equals_the_serial_run(tmp_path):
    stage = "calibration"
    reason = SocketHost.unavailable()
    if reason:
        pytest.skip(reason)
    root = rp002a_clone.scratch_clone(tmp_path / "controller", rp002a_clone.tiny_plan())
    project = ScratchProject(root)
    env = {"PYTHONPATH": str(root / "lib")}

    def approve(run_id: str) -> None:
        project.run(
            sys.executable, "-m", "prereg.cli", "approve", "--stage", stage, "--run-id", run_id,
            "--plan", rp002a_clone.TINY, "--accept-deviations", check=True, env=env,
        )  # fmt: skip
        project.git("add", "plans/approvals")
        project.git("commit", "-q", "-m", f"Approve {run_id}")

    spread, serial = f"{stage}-20261130-001", f"{stage}-20261130-002"
    approve(spread)
    hosts = []
    try:
        for name in ("host-a", "host-b"):
            clone = clone_host(root, tmp_path / name)
            hosts.append(start_socket_host(clone, root, env={"PYTHONPATH": str(clone / "lib")}))
        tx = [a for h in hosts for a in ("--tx", h.spec)]
        done = project.run(
            sys.executable, "-m", "pytest", f"--research-stage={stage}", "-p", "no:cacheprovider",
            "--dist", "load", "--max-worker-restart=0", *tx, env=env,
        )  # fmt: skip
    finally:
        for host in hosts:
            host.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    audit = project.run(sys.executable, "-m", "prereg.cli", "audit", f"runs/{spread}", env=env)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    manifest = project.manifest(spread)
    workers = manifest["environment"]["workers"]
    assert sorted(w["checkout"] for w in workers) == sorted(str(h.clone.resolve()) for h in hosts)
    assert {i["worker"] for i in manifest["items"]} <= {w["id"] for w in workers}

    approve(serial)
    alone = project.run(
        sys.executable, "-m", "pytest", f"--research-stage={stage}", "-p", "no:cacheprovider",
        env=env,
    )  # fmt: skip
    assert alone.returncode == 0, alone.stdout + alone.stderr
    for part in ("items", "summary"):
        assert any(".timing." not in p for p in _outputs(project.run_dir(serial) / part))
        assert _outputs(project.run_dir(spread) / part) == _outputs(
            project.run_dir(serial) / part
        ), part
