import pytest

pytestmark = pytest.mark.software

import hashlib
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from prereg.e04.cache import (
    VectorCache,
    VectorCacheConflictError,
    VectorCacheError,
    embed_with_cache,
    embed_with_cache_report,
    float32_sha256,
    text_sha256,
)
from prereg.e04.runvectors import VECTORS_FILE, Condition, RunTexts, bind_run_vectors
from support.checkout import CHECKS
from support.e04_doubles import HashingBackend


@given(
    hnp.arrays(
        st.sampled_from(["<f4", ">f4"]),
        hnp.array_shapes(min_dims=1, max_dims=2, max_side=6),
        elements=st.floats(width=32, allow_nan=False),
    ),
    st.booleans(),
)
def test_float32_sha256_is_the_hash_of_little_endian_c_order_bytes(vectors, transposed):
    view = vectors.T if transposed else vectors  # a Fortran-ordered view when 2-D
    expected = hashlib.sha256(np.ascontiguousarray(view, dtype="<f4").tobytes()).hexdigest()
    assert float32_sha256(view) == expected


def open_cache(path: Path, atol: float = 0.0) -> VectorCache:
    return VectorCache(path, conflict_atol=atol, busy_timeout_seconds=10)


def test_text_key_is_sha256_of_utf8() -> None:
    # sha256("abc") from FIPS 180-2, appendix B.1
    assert text_sha256("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_only_misses_are_embedded_in_batches(tmp_path: Path) -> None:
    backend = HashingBackend()
    texts = [f"func F{i}()" for i in range(7)]
    with open_cache(tmp_path / "v.sqlite") as cache:
        first = embed_with_cache_report(backend, cache, texts[:5] + texts[:2], batch_size=2)
        assert (first.misses, first.hits, first.backend_calls) == (5, 0, 3)
        assert [len(c) for c in backend.calls] == [2, 2, 1]
        second = embed_with_cache_report(backend, cache, texts, batch_size=2)
        assert (second.misses, second.hits, second.backend_calls) == (2, 5, 1)
        assert backend.calls[-1] == texts[5:]
        np.testing.assert_array_equal(second.vectors[:5], first.vectors[:5])
        np.testing.assert_array_equal(second.vectors, HashingBackend().embed(texts))
        assert cache.count() == 7


def test_vectors_persist_and_are_returned_byte_identical(tmp_path: Path) -> None:
    texts = ["alpha beta", "gamma"]
    with open_cache(tmp_path / "v.sqlite") as cache:
        a = embed_with_cache(HashingBackend(), cache, texts, batch_size=8)
    backend = HashingBackend()
    with open_cache(tmp_path / "v.sqlite") as cache:
        b = embed_with_cache(backend, cache, texts, batch_size=8)
    assert backend.calls == [] and a.tobytes() == b.tobytes()


def test_a_vector_is_read_from_the_file_once_per_cache_object(tmp_path: Path) -> None:
    """Corpora that share most texts: each vector is read once, returned read-only, and a
    second request for it (and for texts not stored) reads only what is not yet read."""
    backend = HashingBackend()
    identity = backend.identity()
    with open_cache(tmp_path / "v.sqlite") as cache:
        embed_with_cache(backend, cache, ["a", "b"], batch_size=4)
    statements: list[str] = []
    with open_cache(tmp_path / "v.sqlite") as cache:
        cache._connection.set_trace_callback(statements.append)
        texts = ["a", "b"]
        keys = [text_sha256(text) for text in texts]
        first = cache.get_many(identity, keys)
        reads = [s for s in statements if s.startswith("SELECT text_sha256")]
        assert len(reads) == 1
        again = cache.get_many(identity, [*keys, text_sha256("never stored")])
        reads = [s for s in statements if s.startswith("SELECT text_sha256")]
        assert len(reads) == 2 and text_sha256("a") not in reads[-1]
        assert again.keys() == first.keys()
        for key, vector in zip(keys, HashingBackend().embed(texts)):
            assert again[key].tobytes() == vector.tobytes()
            with pytest.raises(ValueError, match="read-only"):
                again[key][0] = 1.0
    with open_cache(tmp_path / "v.sqlite") as other:
        assert other.get_many(identity, keys)[keys[0]].tobytes() == first[keys[0]].tobytes()


def test_a_vector_replaced_in_the_file_after_a_worker_read_it_is_refused_at_binding(
    tmp_path: Path,
) -> None:
    """A worker keeps what it read, so it searches the vector it read first even when the
    row is replaced in the file afterwards (by hand, or by a tool that writes INSERT OR
    REPLACE); the summary binds from a cache object of its own and refuses the run."""
    backend = HashingBackend()
    identity = backend.identity()
    chunks, query = ["func A() {}", "func B() {}"], "find b"
    worker = open_cache(tmp_path / "v.sqlite")
    vectors = embed_with_cache(backend, worker, [*chunks, query], batch_size=4)

    def record_hash(rows: np.ndarray) -> str:
        return hashlib.sha256(np.ascontiguousarray(rows, dtype="<f4").tobytes()).hexdigest()

    record = {
        "index": {
            "chunk_vectors_sha256": record_hash(vectors[:2]),
            "query_vector_sha256": record_hash(vectors[2:]),
        }
    }
    keys = [text_sha256(t) for t in [*chunks, query]]
    texts = RunTexts(
        texts=dict(zip(keys, [*chunks, query])),
        labels={k: f"text {i}" for i, k in enumerate(keys)},
        conditions=[
            Condition("T1-H008-s0", "s002.json", "T1", "H008", tuple(keys[:2]),
                      ("a.go", "b.go"), keys[2], record)
        ],
    )  # fmt: skip
    with sqlite3.connect(tmp_path / "v.sqlite") as connection:
        other = np.roll(vectors[1], 1).astype("<f4").tobytes()
        connection.execute("UPDATE vectors SET vector = ? WHERE text_sha256 = ?", (other, keys[1]))
    assert worker.get_many(identity, keys[1:2])[keys[1]].tobytes() == vectors[1].tobytes()
    worker.close()
    settings = SimpleNamespace(embedding={"identity": identity})
    with (
        open_cache(tmp_path / "v.sqlite") as summary,
        pytest.raises(ValueError, match="now holds other vectors than the items searched"),
    ):
        bind_run_vectors(tmp_path, settings, texts, summary)
    assert not (tmp_path / VECTORS_FILE).exists()


def test_another_identity_never_sees_the_vectors(tmp_path: Path) -> None:
    with open_cache(tmp_path / "v.sqlite") as cache:
        embed_with_cache(HashingBackend(name="one"), cache, ["x y"], batch_size=4)
        other = HashingBackend(name="two")
        assert cache.get_many(other.identity(), [text_sha256("x y")]) == {}
        report = embed_with_cache_report(other, cache, ["x y"], batch_size=4)
        assert report.misses == 1 and cache.count(other.identity()) == 1 and cache.count() == 2


def test_insert_or_ignore_keeps_the_first_vector_within_tolerance(tmp_path: Path) -> None:
    identity = HashingBackend().identity()
    first = np.array([[0.6, 0.8]], dtype=np.float32)
    nudged = first + np.float32(1e-7)
    with open_cache(tmp_path / "v.sqlite", atol=1e-6) as cache:
        assert cache.put_many(identity, ["k"], first) == 1
        assert cache.put_many(identity, ["k"], nudged) == 0
        np.testing.assert_array_equal(cache.get_many(identity, ["k"])["k"], first[0])


def test_a_different_vector_for_an_existing_key_is_an_error(tmp_path: Path) -> None:
    identity = HashingBackend().identity()
    with open_cache(tmp_path / "v.sqlite") as cache:
        cache.put_many(identity, ["k"], np.array([[0.6, 0.8]], dtype=np.float32))
        with pytest.raises(VectorCacheConflictError, match="different vector for text k"):
            cache.put_many(
                identity, ["new", "k"], np.array([[1.0, 0.0], [0.8, 0.6]], dtype=np.float32)
            )
        assert cache.get_many(identity, ["new"]) == {}  # the failed batch wrote nothing
        with pytest.raises(VectorCacheConflictError, match="dims 2 vs 3"):
            cache.put_many(identity, ["k"], np.array([[1.0, 0.0, 0.0]], dtype=np.float32))


def test_a_corrupt_file_is_an_error_naming_the_path(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(VectorCacheError, match="corrupt.sqlite"):
        open_cache(path)


def test_a_foreign_sqlite_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "foreign.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE embeddings (id INTEGER, v BLOB)")
    with pytest.raises(VectorCacheError, match=r"foreign.sqlite.*another schema"):
        open_cache(path)


def test_another_schema_version_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "v.sqlite"
    open_cache(path).close()
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE meta SET value = '0' WHERE key = 'version'")
    with pytest.raises(VectorCacheError, match="version '0'"):
        open_cache(path)


def test_a_damaged_vector_row_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "v.sqlite"
    backend = HashingBackend()
    with open_cache(path) as cache:
        embed_with_cache(backend, cache, ["x"], batch_size=1)
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE vectors SET vector = x'0000'")
    with open_cache(path) as cache, pytest.raises(VectorCacheError, match="corrupt"):
        embed_with_cache(backend, cache, ["x"], batch_size=1)


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(VectorCacheError, match="conflict_atol=-1"):
        VectorCache(tmp_path / "v.sqlite", conflict_atol=-1, busy_timeout_seconds=1)
    with open_cache(tmp_path / "v.sqlite") as cache:
        with pytest.raises(VectorCacheError, match="float32"):
            cache.put_many({}, ["k"], np.zeros((1, 2)))
        with pytest.raises(VectorCacheError, match="batch_size=0"):
            embed_with_cache(HashingBackend(), cache, ["x"], batch_size=0)


def test_two_processes_write_overlapping_keys_at_once(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    start = tmp_path / "go"
    worker = textwrap.dedent(
        f"""
        import sys, time, pathlib
        sys.path.insert(0, {str(CHECKS)!r})
        from support.e04_doubles import HashingBackend
        from prereg.e04.cache import VectorCache, embed_with_cache
        offset = int(sys.argv[1])
        texts = [f"func F{{i}}() int {{{{ return {{i}} }}}}" for i in range(offset, offset + 300)]
        cache = VectorCache({str(path)!r}, conflict_atol=0.0, busy_timeout_seconds=30)
        while not pathlib.Path({str(start)!r}).exists():
            time.sleep(0.001)
        for chunk in range(0, 300, 10):
            embed_with_cache(HashingBackend(), cache, texts[chunk:chunk + 10], batch_size=3)
        cache.close()
        print("done")
        """
    )
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", worker, str(offset)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for offset in (0, 150)
    ]
    start.touch()
    outputs = [p.communicate(timeout=120) for p in processes]
    for process, (out, err) in zip(processes, outputs):
        assert process.returncode == 0, err
        assert out.strip() == "done"
    texts = [f"func F{i}() int {{ return {i} }}" for i in range(450)]
    with open_cache(path) as cache:
        assert cache.count() == 450
        backend = HashingBackend()
        vectors = embed_with_cache(backend, cache, texts, batch_size=50)
        assert backend.calls == []
        np.testing.assert_array_equal(vectors, HashingBackend().embed(texts))
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_workers_opening_a_fresh_cache_at_the_same_moment_all_succeed(tmp_path: Path) -> None:
    # Two xdist workers start together on a new cache file: switching it to WAL needs an
    # exclusive lock that SQLite's busy handler does not wait for, so one used to fail.
    worker = textwrap.dedent(
        """
        import sys, time, pathlib
        from prereg.e04.cache import VectorCache
        path, start = sys.argv[1], pathlib.Path(sys.argv[2])
        while not start.exists():
            time.sleep(0.0005)
        VectorCache(path, conflict_atol=0.0, busy_timeout_seconds=30).close()
        print("opened")
        """
    )
    for attempt in range(8):
        path, start = tmp_path / f"fresh{attempt}.sqlite", tmp_path / f"go{attempt}"
        processes = [
            subprocess.Popen([sys.executable, "-c", worker, str(path), str(start)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(4)
        ]  # fmt: skip
        time.sleep(0.5)  # let every process reach the barrier (a late one only makes it easier)
        start.touch()
        for process in processes:
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, err
            assert out.strip() == "opened"
