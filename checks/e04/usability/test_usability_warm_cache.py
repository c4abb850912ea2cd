"""E04 as its users run it, with the embedded MiniLM backend: a cold run, a warm run on the
cache it filled, and a run on a cache that another tool filled in part, in one project,
serial and on two workers, one of them with a CPU-bound process beside it. Every run
completes and audits clean, and all have byte-identical result files.

The token-hash backend of the other E04 checks sets no environment variable when it
loads; MiniLM's libraries do (sentence-transformers, scikit-learn), and on a warm cache
the gate's probe loads them before the session's execution is recorded."""

import pytest

pytestmark = [pytest.mark.software, pytest.mark.slow]

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from prereg.e04.backends import TokenHashBackend
from prereg.e04.cache import VectorCache
from prereg.e04.runvectors import VECTOR_KEYS_FILE, VECTOR_ORIGIN_FILE, VECTORS_FILE
from support.checkout import CHECKOUT
from support.e04_project import check_plan, make_project, result_files

COLD, WARM, SHARED = "e04-20260301-001", "e04-20260301-002", "e04-20260301-003"


def minilm_plan() -> dict:
    """The check plan with the demo plan's embedding section (MiniLM, as users run it)."""
    plan = check_plan()
    demo = json.loads((CHECKOUT / "plans" / "demo" / "E04_PLAN.json").read_text())
    embedding = demo["stages"]["e04"]["parameters"]["embedding"]
    plan["stages"]["e04"]["parameters"]["embedding"] = embedding
    plan["plan_id"] = "e04-robustness-1.0-check-minilm"
    return plan


def bound_vectors(run_dir: Path) -> tuple[list[str], np.ndarray]:
    keys = json.loads((run_dir / "summary" / VECTOR_KEYS_FILE).read_text())["text_sha256"]
    return keys, np.load(run_dir / "summary" / VECTORS_FILE)


def origin(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary" / VECTOR_ORIGIN_FILE).read_text())


def run_stage(project, run_id: str, *args: str, load_beside: bool = False):
    project.approve(run_id)
    burner = None
    if load_beside:  # a CPU-bound process for the whole run, as other work on the machine
        burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        done = project.pytest("--research-stage=e04", "--run-id", run_id, *args)
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert project.manifest(run_id)["status"] == "complete"
    return done


@pytest.fixture(scope="module")
def minilm_runs(tmp_path_factory: pytest.TempPathFactory, e04_fixture):
    """COLD (serial, empty cache), WARM (-n 2, every vector cached), then SHARED: the cache
    moved away, a new one filled by another tool with half of the run's vectors (and with
    another model's vectors beside them), run on two workers with a CPU-bound process."""
    project = make_project(tmp_path_factory.mktemp("e04minilm") / "p", e04_fixture, minilm_plan())
    run_stage(project, COLD, "-p", "no:xdist")
    run_stage(project, WARM, "-n", "2")
    keys, vectors = bound_vectors(project.run_dir(COLD))
    project.cache.rename(project.cache.with_name("cold-run.sqlite"))
    identity = project.identity()
    other = TokenHashBackend(8, identity["chunker_version"])
    with VectorCache(project.cache, conflict_atol=0.0, busy_timeout_seconds=30) as tool:
        tool.put_many(identity, keys[::2], vectors[::2])
        tool.put_many(other.identity(), keys[:3], other.embed(["a", "b", "c"]))
    run_stage(project, SHARED, "-n", "2", load_beside=True)
    return project, keys


@pytest.mark.parametrize("run_id", [COLD, WARM, SHARED])
def test_each_run_audits_clean(minilm_runs, run_id):
    """COLD is replayed: every measure recomputed, nothing read from the cache, a sample of
    its bound vectors embedded again. WARM and SHARED hold byte-identical result files (the
    check below) from the same plan, inputs and code, and the replay reads neither the cache
    nor the record of which vectors were read from it, so theirs could only repeat COLD's:
    their hashes and records are audited."""
    project, _ = minilm_runs
    audit = project.audit(run_id, *(() if run_id == COLD else ("--no-replay",)))
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "clean" in audit.stdout


def test_cold_warm_and_shared_cache_runs_have_byte_identical_result_files(minilm_runs):
    project, _ = minilm_runs
    cold = result_files(project.run_dir(COLD))
    cells = len(project.manifest(COLD)["items"])
    assert len(cold) == cells * 3 + 4  # three records per cell, the summary and bound vectors
    for run_id in (WARM, SHARED):
        other = result_files(project.run_dir(run_id))
        assert other.keys() == cold.keys()
        assert [name for name in cold if cold[name] != other[name]] == [], run_id


def test_the_origin_file_says_which_vectors_each_run_computed_and_read(minilm_runs):
    project, keys = minilm_runs
    cold, warm, shared = (origin(project.run_dir(r)) for r in (COLD, WARM, SHARED))
    assert (cold["computed"], cold["read"]) == (len(keys), 0)
    assert cold["computed_text_sha256"] == keys
    assert (warm["computed"], warm["read"]) == (0, len(keys))
    assert shared["computed_text_sha256"] == sorted(set(keys) - set(keys[::2]))
    assert shared["read"] == len(keys[::2])
    embedded = [
        text
        for path in project.run_dir(SHARED).glob("items/*/cell.timing.json")
        for text in json.loads(path.read_text())["embedded_text_sha256"]
    ]
    assert sorted(embedded) == shared["computed_text_sha256"]  # each computed exactly once


def test_what_the_libraries_set_is_recorded_beside_the_environment_they_started_with(
    minilm_runs,
):
    project, _ = minilm_runs
    execution = project.manifest(WARM)["environment"]["execution"]
    set_since = execution["environment_set_in_session"]
    assert "KMP_DUPLICATE_LIB_OK" in set_since  # scikit-learn, loaded by the gate's probe
    assert not set(set_since) & set(execution["environment_names"])
    assert "HF_HUB_OFFLINE" not in set_since  # the backend loads with local_files_only
