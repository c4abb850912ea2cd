"""Workers claim the texts they embed in the vector cache: no text is embedded twice.

Real processes share one SQLite cache with a slow, counting backend (so their batches
overlap in time); a claim left by a dead process is taken over; the controller's ETA line
helper is checked by properties.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prereg.e04.backends import TokenHashBackend
from prereg.e04.cache import (
    CLAIM_STALE_SECONDS,
    VectorCache,
    embed_with_cache_report,
    text_sha256,
)
from prereg.runtime import eta

pytestmark = pytest.mark.software

TEXTS = [
    f"func Handler{i}(w Writer, r *Request) error {{ return serve{i % 7}(w, r) }}"
    for i in range(96)
]
BATCH = 8


class SlowCountingBackend(TokenHashBackend):
    """Token-hash vectors, a pause per batch, and every embedded text logged to a file."""

    def __init__(self, log: Path) -> None:
        super().__init__(16, "go-function-text-1")
        self.log = log

    def embed(self, texts):
        time.sleep(0.02)
        with open(self.log, "a", encoding="utf-8") as handle:
            handle.writelines(json.dumps(t) + "\n" for t in texts)
        return super().embed(texts)


def _worker(cache_path: str, log: str, start: str) -> None:
    while not Path(start).exists():
        time.sleep(0.005)
    with VectorCache(cache_path, conflict_atol=0.0, busy_timeout_seconds=30) as cache:
        report = embed_with_cache_report(
            SlowCountingBackend(Path(log)), cache, TEXTS, batch_size=BATCH
        )
    assert report.vectors.shape == (len(TEXTS), 16)


@pytest.mark.parametrize("workers", [2, 3])
def test_workers_sharing_a_cold_cache_embed_each_text_once(tmp_path, workers):
    cache, start = tmp_path / "cache.sqlite", tmp_path / "go"
    context = multiprocessing.get_context("spawn")
    logs = [tmp_path / f"embedded-{i}.jsonl" for i in range(workers)]
    processes = [
        context.Process(target=_worker, args=(str(cache), str(log), str(start))) for log in logs
    ]
    for process in processes:
        process.start()
    time.sleep(0.5)  # let every process import and wait at the start line
    start.write_text("")
    for process in processes:
        process.join(120)
        assert process.exitcode == 0
    embedded = [
        json.loads(line) for log in logs if log.exists() for line in log.read_text().splitlines()
    ]
    assert sorted(embedded) == sorted(TEXTS), "a text was embedded twice or not at all"
    with sqlite3.connect(cache) as db:
        assert db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0] == len(TEXTS)
        assert db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0


def _dead_pid() -> int:
    context = multiprocessing.get_context("spawn")
    process = context.Process(target=time.sleep, args=(0,))
    process.start()
    process.join()
    return process.pid


def _plant_claim(cache_path: Path, identity: dict, text: str, pid: int, age: float) -> None:
    from prereg.e04.embeddings import identity_sha256

    with sqlite3.connect(cache_path) as db:
        db.execute(
            "INSERT INTO claims VALUES (?, ?, ?, ?, ?, ?)",
            (identity_sha256(identity), text_sha256(text), "someone", pid,
             os.uname().nodename, time.time() - age),
        )  # fmt: skip


@pytest.mark.parametrize(
    ("pid", "age"),
    [("dead", 0.0), ("alive", CLAIM_STALE_SECONDS + 1)],
    ids=["owner-process-gone", "claim-too-old"],
)
def test_a_stale_claim_is_taken_over_and_the_text_embedded(tmp_path, pid, age):
    backend = SlowCountingBackend(tmp_path / "log.jsonl")
    path = tmp_path / "cache.sqlite"
    with VectorCache(path, conflict_atol=0.0, busy_timeout_seconds=5) as cache:
        cache.register_identity(backend.identity())
        owner = _dead_pid() if pid == "dead" else os.getpid()
        _plant_claim(path, backend.identity(), TEXTS[0], owner, age)
        report = embed_with_cache_report(backend, cache, TEXTS[:3], batch_size=BATCH)
    assert report.misses == 3 and report.hits == 0


def test_a_live_claim_is_waited_for_not_embedded_again(tmp_path):
    """A text another live process claimed is not embedded here; its vector is awaited."""
    import threading

    backend = SlowCountingBackend(tmp_path / "log.jsonl")
    path = tmp_path / "cache.sqlite"
    with VectorCache(path, conflict_atol=0.0, busy_timeout_seconds=5) as cache:
        identity = backend.identity()
        cache.register_identity(identity)
        _plant_claim(path, identity, TEXTS[0], os.getppid(), 0.0)  # a live process's claim

        def deliver() -> None:
            time.sleep(0.5)
            with VectorCache(path, conflict_atol=0.0, busy_timeout_seconds=5) as other:
                other.put_many(identity, [text_sha256(TEXTS[0])], backend.embed([TEXTS[0]]))

        thread = threading.Thread(target=deliver)
        thread.start()
        report = embed_with_cache_report(backend, cache, TEXTS[:2], batch_size=BATCH)
        thread.join()
    assert report.misses == 1 and report.hits == 1  # TEXTS[0] came from the other owner
    assert (tmp_path / "log.jsonl").read_text().count(json.dumps(TEXTS[0])) == 1


# -- the controller's item line --------------------------------------------------------------


@given(st.integers(1, 500), st.integers(0, 500), st.floats(0, 1e6, allow_nan=False))
def test_eta_is_the_mean_pace_times_the_items_left(total, done, elapsed):
    left = eta.eta_seconds(done, total, elapsed)
    if done < 1 or done > total:
        assert left is None
    else:
        assert left == pytest.approx(elapsed / done * (total - done))
        line = eta.finished_line(
            nodeid="experiments/test_x.py::test_cell[a]", outcome="passed", seconds=1.0,
            done=done, total=total, elapsed=elapsed,
        )  # fmt: skip
        assert line.startswith(f"prereg item {done}/{total} passed test_cell[a]")
        assert ("all items finished" in line) == (done == total)
        assert ("ETA" in line) == (done < total)


@given(st.floats(0, 1e7, allow_nan=False))
def test_durations_read_as_seconds_minutes_or_hours(seconds):
    text = eta.duration(seconds)
    assert text.endswith((" s", " min"))
    assert text.split()[0].isdigit()
