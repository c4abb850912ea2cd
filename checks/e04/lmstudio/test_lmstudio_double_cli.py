"""``python -m prereg.e04.lmstudio_double`` as a user starts it, driven over its control API."""

import pytest

pytestmark = pytest.mark.software

import hashlib
import json
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import numpy as np

from prereg.e04.backends import build_backend
from prereg.e04.embeddings import LMStudioResidencyError, lmstudio_client
from prereg.e04.lmstudio_double import RESIDENCY_ENDPOINTS, double_embedding
from support.e04_doubles import CONTEXT_LENGTH, DIMENSION, KEY, LLM_KEY, STOP_SECONDS, stop_double

MODULE = "prereg.e04.lmstudio_double"
READY_SECONDS = 60


def _first_line(stream) -> str:
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    return lines.get(timeout=READY_SECONDS)


@pytest.fixture
def cli_double(tmp_path: Path):
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            MODULE,
            "--port",
            "0",
            "--model",
            KEY,
            "--context-length",
            str(CONTEXT_LENGTH),
            "--dimension",
            str(DIMENSION),
            "--models-dir",
            str(tmp_path / "models"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = _first_line(process.stdout)
        assert line, process.stderr.read() if process.poll() is not None else "no ready line"
        yield process, json.loads(line)
    finally:
        stop_double(process)


def test_help_documents_every_option():
    done = subprocess.run(
        [sys.executable, "-m", MODULE, "--help"],
        capture_output=True,
        text=True,
        timeout=READY_SECONDS,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for option in ("--port", "--model", "--llm", "--context-length", "--dimension", "--models-dir"):
        assert option in done.stdout


def test_a_bad_option_is_refused_naming_it():
    done = subprocess.run(
        [sys.executable, "-m", MODULE, "--port", "0", "--model", KEY, "--dimension", "0"],
        capture_output=True,
        text=True,
        timeout=READY_SECONDS,
        check=False,
    )
    assert done.returncode == 2 and "dimension=0" in done.stderr


def test_the_command_serves_a_plan_pinned_to_lmstudio(cli_double, tmp_path):
    process, ready = cli_double
    api_host = ready["api_host"]
    assert api_host.startswith("127.0.0.1:") and ready["models_dir"] == str(tmp_path / "models")
    (served,) = ready["loaded"]
    assert (served["modelKey"], served["identifier"]) == (KEY, KEY)
    assert served["contextLength"] == CONTEXT_LENGTH
    weights = Path(ready["models_dir"]) / served["path"]
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == served["weights_sha256"]
    # the plan a researcher writes from the ready line
    embedding = {
        "backend": "lmstudio",
        "identity": {
            "backend": "lmstudio",
            "model": KEY,
            "weights_sha256": served["weights_sha256"],
            "max_sequence_length": CONTEXT_LENGTH,
            "dimension": DIMENSION,
            "normalisation": "l2",
            "dtype": "float32",
            "chunker_version": "go-function-text-1",
        },
        "encode_batch_size": 4,
        "lmstudio": {"api_host": api_host, "models_dir": ready["models_dir"]},
    }
    with lmstudio_client(api_host) as client:
        backend = build_backend(embedding, lmstudio_client=lambda: client)
        vectors = backend.embed(["func Run() error"])
        raw = np.asarray(double_embedding(KEY, "func Run() error", DIMENSION))
        np.testing.assert_allclose(vectors[0], raw / np.linalg.norm(raw), rtol=1e-6)
        # an LLM loaded mid-run through the control API is refused at the next call
        loaded = httpx.post(
            f"http://{api_host}/lmstudio-double/load",
            json={"key": LLM_KEY, "kind": "llm"},
            timeout=READY_SECONDS,
        )
        assert loaded.status_code == 200 and loaded.json()["identifier"] == LLM_KEY
        with pytest.raises(LMStudioResidencyError, match=f"llm '{LLM_KEY}'"):
            backend.embed(["type Runner struct{}"])
    calls = httpx.get(f"http://{api_host}/lmstudio-double/calls", timeout=READY_SECONDS).json()
    assert {c["endpoint"] for c in calls} == {"listLoaded", "getModelInfo", "embedString"}
    assert not [c for c in calls if c["endpoint"] in RESIDENCY_ENDPOINTS]
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=STOP_SECONDS) == 0


def test_the_control_api_refuses_unknown_fields_and_paths(cli_double):
    _process, ready = cli_double
    base = f"http://{ready['api_host']}"
    bad = httpx.post(f"{base}/lmstudio-double/load", json={"model": KEY}, timeout=READY_SECONDS)
    assert bad.status_code == 400 and "model" in bad.json()["error"]
    gone = httpx.post(f"{base}/lmstudio-double/unload", json={"identifier": "x"}, timeout=30)
    assert gone.status_code == 400 and "'x'" in gone.json()["error"]
    assert httpx.get(f"{base}/nowhere", timeout=READY_SECONDS).status_code == 404
    unloaded = httpx.post(f"{base}/lmstudio-double/unload", json={"all": True}, timeout=30)
    assert unloaded.json() == {"loaded": []}
    state = httpx.get(f"{base}/lmstudio-double/state", timeout=READY_SECONDS).json()
    assert state["loaded"] == []
