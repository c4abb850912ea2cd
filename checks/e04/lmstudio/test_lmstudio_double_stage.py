"""A whole E04 run pinned to LM Studio, against the double started as a user starts it.

The scratch project's plan names backend ``lmstudio`` with the ``api_host``,
``models_dir`` and ``weights_sha256`` the double prints; approval, the gate, every cell
(the SDK in each pytest process) and the audit talk to it over the SDK's protocol.
"""

import pytest

pytestmark = pytest.mark.software

import json
import subprocess
import sys

from prereg.e04.lmstudio_double import RESIDENCY_ENDPOINTS
from support.e04_doubles import KEY, stop_double
from support.e04_project import check_plan, make_project

RUN_ID = "e04-20260101-001"
READY_SECONDS = 60
DIMENSION = 32  # what this double serves; the plan copies it from the ready line


@pytest.fixture
def served(tmp_path):
    """(process, ready line) of ``python -m prereg.e04.lmstudio_double`` on a free port."""
    import queue
    import threading

    process = subprocess.Popen(
        [sys.executable, "-m", "prereg.e04.lmstudio_double", "--port", "0", "--model", KEY]
        + ["--dimension", str(DIMENSION), "--models-dir", str(tmp_path / "models")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(process.stdout.readline()), daemon=True).start()
    try:
        yield process, json.loads(lines.get(timeout=READY_SECONDS))
    finally:
        stop_double(process)


def _calls(api_host: str) -> list[dict]:
    import httpx

    return httpx.get(f"http://{api_host}/lmstudio-double/calls", timeout=READY_SECONDS).json()


def _plan_on(ready: dict) -> dict:
    """The check plan pinned to the double's model, from its ready line."""
    (model,) = ready["loaded"]
    plan = check_plan()
    embedding = plan["stages"]["e04"]["parameters"]["embedding"]
    embedding["backend"] = "lmstudio"
    embedding["identity"].update(
        backend="lmstudio",
        model=model["modelKey"],
        weights_sha256=model["weights_sha256"],
        max_sequence_length=model["contextLength"],
        dimension=ready["dimension"],
    )
    embedding["lmstudio"] = {"api_host": ready["api_host"], "models_dir": ready["models_dir"]}
    return plan


def test_an_e04_run_pinned_to_lmstudio_completes_and_audits_on_the_double(
    served, tmp_path, e04_fixture
):
    _process, ready = served
    project = make_project(tmp_path / "p", e04_fixture, _plan_on(ready))
    project.approve(RUN_ID)
    done = project.pytest("--research-stage=e04", "--run-id", RUN_ID)
    assert done.returncode == 0, done.stdout + done.stderr
    assert project.manifest(RUN_ID)["status"] == "complete"
    during_run = _calls(ready["api_host"])
    audit = project.audit(RUN_ID)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    calls = _calls(ready["api_host"])
    assert [c for c in calls if c["endpoint"] in RESIDENCY_ENDPOINTS] == []
    assert len([c for c in during_run if c["endpoint"] == "embedString"]) > 0


def test_approval_refuses_a_plan_whose_weights_pin_the_server_does_not_serve(
    served, tmp_path, e04_fixture
):
    _process, ready = served
    plan = _plan_on(ready)
    plan["stages"]["e04"]["parameters"]["embedding"]["identity"]["weights_sha256"] = "0" * 64
    project = make_project(tmp_path / "p", e04_fixture, plan)
    refused = project.approve(RUN_ID, check=False)
    assert refused.returncode != 0
    output = refused.stdout + refused.stderr
    assert "hash to" in output and "weights_sha256" in output, output
    assert [c for c in _calls(ready["api_host"]) if c["endpoint"] in RESIDENCY_ENDPOINTS] == []
