"""One SQLite vector cache shared by workers, keyed by (model identity, SHA-256 of text).

File format (schema ``prereg-vector-cache``, version 1)::

    meta(key TEXT PRIMARY KEY, value TEXT)              -- schema, version
    identities(identity_sha256 TEXT PRIMARY KEY,
               identity_json TEXT)                      -- canonical JSON of the identity
    vectors(identity_sha256 TEXT, text_sha256 TEXT,
            dims INTEGER, dtype TEXT, vector BLOB,      -- little-endian float32 bytes
            PRIMARY KEY (identity_sha256, text_sha256)) WITHOUT ROWID

    claims(identity_sha256 TEXT, text_sha256 TEXT,      -- work in progress (no result)
           owner TEXT, pid INTEGER, host TEXT, claimed_at REAL,
           PRIMARY KEY (identity_sha256, text_sha256)) WITHOUT ROWID

``claims`` gives each missing text one owner: a process embeds only texts it claimed
(in one ``BEGIN IMMEDIATE`` transaction, skipping texts stored or claimed by another live
process), and waits for the vectors of texts another process claimed. A claim of a
process that is gone (same host) or older than :data:`CLAIM_STALE_SECONDS` is taken
over; a takeover can only repeat work, never change a stored vector (first one stays).
The table holds no result: a cache without it (older files) gains it when opened.

The database runs in WAL mode with a busy timeout so that several processes
(pytest-xdist workers) can read and write at once. Writes are ``INSERT OR
IGNORE``: the first vector stored for a key stays; a later vector for the same
key must equal it within ``conflict_atol`` (max absolute difference) or the
write fails. :func:`embed_with_cache` returns the vectors read back from the
file, so every process uses the same bytes for a key.
"""

from __future__ import annotations

import hashlib
import math
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from prereg.e04 import progress
from prereg.e04.embeddings import (
    EmbeddingBackend,
    EmbeddingOutputError,
    canonical_identity_json,
    checked_texts,
    identity_sha256,
)

SCHEMA_NAME = "prereg-vector-cache"
SCHEMA_VERSION = "1"
_DTYPE = "float32"
_STORED = np.dtype("<f4")
_SELECT_BATCH = 500

_LOCK_RETRY_SECONDS = 0.05  # polling interval while another process sets the cache up
CLAIM_STALE_SECONDS = 600.0  # a claim this old is taken over (its owner hung or died)
_CLAIM_POLL_SECONDS = 0.1  # polling interval while waiting for another process's vectors
_CLAIMS_TABLE = (
    "CREATE TABLE IF NOT EXISTS claims (identity_sha256 TEXT NOT NULL, "
    "text_sha256 TEXT NOT NULL, owner TEXT NOT NULL, pid INTEGER NOT NULL, "
    "host TEXT NOT NULL, claimed_at REAL NOT NULL, "
    "PRIMARY KEY (identity_sha256, text_sha256)) WITHOUT ROWID"
)


class VectorCacheError(ValueError):
    """The cache file cannot be used: corrupt, foreign, other version, or bad input."""


class VectorCacheConflictError(VectorCacheError):
    """A different vector is already stored for the same (identity, text) key."""


@lru_cache(maxsize=1 << 16)
def text_sha256(text: str) -> str:
    """SHA-256 (hex) of the UTF-8 bytes of ``text``; the cache's text key."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def float32_sha256(vectors: np.ndarray) -> str:
    """SHA-256 (hex) of ``vectors`` as little-endian float32 in C order: how a record names
    the vectors an index searched (hashed in place when they already are that)."""
    return hashlib.sha256(np.ascontiguousarray(vectors, dtype=_STORED)).hexdigest()


class VectorCache:
    """An open vector cache file.

    Parameters
    ----------
    path : str or Path
        The SQLite file; created with the schema if missing or empty.
    conflict_atol : float
        Largest max-absolute difference tolerated between a stored vector and a
        new one for the same key (0 = bitwise equal). From the plan.
    busy_timeout_seconds : float
        How long a writer waits for another process's lock (SQLite busy timeout).

    Attributes
    ----------
    inserted : list of str
        The text SHA-256 of every vector this object stored (first for its key), in order:
        what this process computed, as against what it read.

    Notes
    -----
    A stored vector is never replaced (writes are ``INSERT OR IGNORE``), so each vector
    this object has read is kept, read-only, and not read from the file again: a process
    that indexes many corpora sharing most of their texts reads each vector once.
    """

    def __init__(
        self, path: str | Path, *, conflict_atol: float, busy_timeout_seconds: float
    ) -> None:
        if (
            not isinstance(conflict_atol, (int, float))
            or not math.isfinite(conflict_atol)
            or (conflict_atol < 0)
        ):
            raise VectorCacheError(f"conflict_atol={conflict_atol!r} must be a finite number >= 0")
        if not isinstance(busy_timeout_seconds, (int, float)) or busy_timeout_seconds <= 0:
            raise VectorCacheError(
                f"busy_timeout_seconds={busy_timeout_seconds!r} must be a number > 0"
            )
        self.path = Path(path)
        self.conflict_atol = float(conflict_atol)
        self.inserted: list[str] = []
        self._read: dict[tuple[str, str], np.ndarray] = {}
        try:
            self._connection = sqlite3.connect(
                self.path, timeout=busy_timeout_seconds, isolation_level=None
            )
        except sqlite3.Error as error:
            raise VectorCacheError(
                f"cannot open vector cache {str(self.path)!r}: {error}"
            ) from error
        try:
            self._connection.execute(f"PRAGMA busy_timeout = {int(busy_timeout_seconds * 1000)}")
            self._set_up(busy_timeout_seconds)
        except sqlite3.DatabaseError as error:
            self._connection.close()
            if _is_lock_error(error):
                raise VectorCacheError(
                    f"vector cache {str(self.path)!r} stayed locked by another process for "
                    f"more than busy_timeout_seconds={busy_timeout_seconds}: {error}"
                ) from error
            raise VectorCacheError(
                f"{str(self.path)!r} is not a usable vector cache ({error}); it may be corrupt "
                "or not an SQLite file. Move it away and let the run rebuild the cache."
            ) from error
        except VectorCacheError:
            self._connection.close()
            raise

    def _set_up(self, busy_timeout_seconds: float) -> None:
        """WAL mode and schema, retried while another process holds the lock.

        Switching a fresh file to WAL needs an exclusive lock and SQLite does not call
        its busy handler there, so two workers opening a new cache at once would fail
        at once without this loop (bounded by ``busy_timeout_seconds``).
        """
        deadline = time.monotonic() + busy_timeout_seconds
        while True:
            try:
                self._connection.execute("PRAGMA journal_mode = WAL")
                self._initialise()
                return
            except sqlite3.OperationalError as error:
                if not _is_lock_error(error) or time.monotonic() >= deadline:
                    raise
                if self._connection.in_transaction:
                    self._connection.execute("ROLLBACK")
                time.sleep(_LOCK_RETRY_SECONDS)

    def _initialise(self) -> None:
        connection = self._connection
        tables = {
            row[0]
            for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if tables and "meta" not in tables:
            raise VectorCacheError(
                f"{str(self.path)!r} is an SQLite file of another schema (tables "
                f"{sorted(tables)}), not a {SCHEMA_NAME}; point the cache at another path"
            )
        if not tables:
            connection.execute("BEGIN IMMEDIATE")
            try:
                connection.execute(
                    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
                )
                connection.execute(
                    "CREATE TABLE IF NOT EXISTS identities (identity_sha256 TEXT PRIMARY KEY, "
                    "identity_json TEXT NOT NULL)"
                )
                connection.execute(
                    "CREATE TABLE IF NOT EXISTS vectors (identity_sha256 TEXT NOT NULL, "
                    "text_sha256 TEXT NOT NULL, dims INTEGER NOT NULL, dtype TEXT NOT NULL, "
                    "vector BLOB NOT NULL, PRIMARY KEY (identity_sha256, text_sha256)) "
                    "WITHOUT ROWID"
                )
                connection.executemany(
                    "INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
                    [("schema", SCHEMA_NAME), ("version", SCHEMA_VERSION)],
                )
                connection.execute("COMMIT")
            except BaseException:
                connection.execute("ROLLBACK")
                raise
        meta = dict(connection.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("schema") != SCHEMA_NAME:
            raise VectorCacheError(
                f"{str(self.path)!r} has schema {meta.get('schema')!r}, not {SCHEMA_NAME!r}; "
                "point the cache at another path"
            )
        if meta.get("version") != SCHEMA_VERSION:
            raise VectorCacheError(
                f"{str(self.path)!r} is {SCHEMA_NAME} version {meta.get('version')!r}; this "
                f"code reads version {SCHEMA_VERSION!r}. Use a new cache path."
            )
        if "claims" not in tables:
            connection.execute(_CLAIMS_TABLE)

    def close(self) -> None:
        """Close the connection."""
        self._connection.close()

    def __enter__(self) -> VectorCache:  # noqa: PYI034 - typing.Self needs Python 3.11
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _guarded(self, action: str) -> _DatabaseErrors:
        return _DatabaseErrors(self.path, action)

    def register_identity(self, identity: dict) -> str:
        """Store the identity's canonical JSON; return its SHA-256 (the model key)."""
        key = identity_sha256(identity)
        text = canonical_identity_json(identity)
        with self._guarded("registering a model identity"):
            self._connection.execute(
                "INSERT OR IGNORE INTO identities (identity_sha256, identity_json) VALUES (?, ?)",
                (key, text),
            )
            (stored,) = self._connection.execute(
                "SELECT identity_json FROM identities WHERE identity_sha256 = ?", (key,)
            ).fetchone()
        if stored != text:
            raise VectorCacheError(
                f"{str(self.path)!r} stores identity {key} with other JSON {stored!r}"
            )
        return key

    def get_many(self, identity: dict, text_hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored vectors (float32, read-only) of ``text_hashes`` under ``identity``; misses
        are absent."""
        key = identity_sha256(identity)
        unique = list(dict.fromkeys(text_hashes))
        found = {h: self._read[key, h] for h in unique if (key, h) in self._read}
        unread = [h for h in unique if h not in found]
        with self._guarded("reading vectors"):
            for start in range(0, len(unread), _SELECT_BATCH):
                batch = unread[start : start + _SELECT_BATCH]
                marks = ",".join("?" * len(batch))
                rows = self._connection.execute(
                    "SELECT text_sha256, dims, dtype, vector FROM vectors "
                    f"WHERE identity_sha256 = ? AND text_sha256 IN ({marks})",
                    (key, *batch),
                ).fetchall()
                for text_hash, dims, dtype, blob in rows:
                    vector = self._decode(text_hash, dims, dtype, blob)
                    vector.flags.writeable = False
                    found[text_hash] = self._read[key, text_hash] = vector
        return found

    def _decode(self, text_hash: str, dims: int, dtype: str, blob: bytes) -> np.ndarray:
        if dtype != _DTYPE or len(blob) != dims * _STORED.itemsize:
            raise VectorCacheError(
                f"{str(self.path)!r}: vector for text {text_hash} has dtype {dtype!r}, dims "
                f"{dims} and {len(blob)} bytes; the file is corrupt, move it away"
            )
        return np.frombuffer(blob, dtype=_STORED).astype(np.float32)

    def put_many(self, identity: dict, text_hashes: Sequence[str], vectors: np.ndarray) -> int:
        """Insert vectors (INSERT OR IGNORE) in one transaction; return how many were new.

        A key already present must hold a vector of the same dims within
        ``conflict_atol``, else :class:`VectorCacheConflictError` and nothing is written.
        """
        array = np.asarray(vectors)
        if array.ndim != 2 or array.shape[0] != len(text_hashes):
            raise VectorCacheError(
                f"vectors has shape {array.shape}; expected [{len(text_hashes)}, d]"
            )
        if array.dtype != np.float32:
            raise VectorCacheError(f"vectors dtype is {array.dtype}; the cache stores float32")
        key = self.register_identity(identity)
        dims = int(array.shape[1])
        new: list[str] = []
        with self._guarded("writing vectors"):
            self._connection.execute("BEGIN IMMEDIATE")
            try:
                for text_hash, row in zip(text_hashes, array):
                    cursor = self._connection.execute(
                        "INSERT OR IGNORE INTO vectors (identity_sha256, text_sha256, dims, "
                        "dtype, vector) VALUES (?, ?, ?, ?, ?)",
                        (key, text_hash, dims, _DTYPE, row.astype(_STORED).tobytes()),
                    )
                    self._connection.execute(
                        "DELETE FROM claims WHERE identity_sha256 = ? AND text_sha256 = ?",
                        (key, text_hash),
                    )
                    if cursor.rowcount == 1:
                        new.append(text_hash)
                        continue
                    stored_dims, dtype, blob = self._connection.execute(
                        "SELECT dims, dtype, vector FROM vectors "
                        "WHERE identity_sha256 = ? AND text_sha256 = ?",
                        (key, text_hash),
                    ).fetchone()
                    stored = self._decode(text_hash, stored_dims, dtype, blob)
                    if stored.shape != row.shape or not (
                        np.max(np.abs(stored - row), initial=0.0) <= self.conflict_atol
                    ):
                        raise VectorCacheConflictError(
                            f"{str(self.path)!r} already holds a different vector for text "
                            f"{text_hash} under identity {key} (dims {stored_dims} vs {dims}, "
                            f"max |diff| {_max_diff(stored, row)} > conflict_atol="
                            f"{self.conflict_atol}); the backend is not the model the identity "
                            "names, or is not deterministic"
                        )
                self._connection.execute("COMMIT")
            except BaseException:
                self._connection.execute("ROLLBACK")
                raise
        self.inserted += new
        return len(new)

    def claim(
        self, identity: dict, text_hashes: Sequence[str], limit: int, owner: str
    ) -> list[str]:
        """Claim up to ``limit`` of ``text_hashes`` (in order) for ``owner``; return them.

        One ``BEGIN IMMEDIATE`` transaction: a text already stored, or claimed by another
        owner whose process is alive and whose claim is younger than
        :data:`CLAIM_STALE_SECONDS`, is skipped; the rest (up to ``limit``) are claimed.
        """
        key = self.register_identity(identity)
        host = socket.gethostname()
        now = time.time()
        taken: list[str] = []
        with self._guarded("claiming texts to embed"):
            self._connection.execute("BEGIN IMMEDIATE")
            try:
                for start in range(0, len(text_hashes), _SELECT_BATCH):
                    batch = list(text_hashes[start : start + _SELECT_BATCH])
                    marks = ",".join("?" * len(batch))
                    stored = {
                        row[0]
                        for row in self._connection.execute(
                            "SELECT text_sha256 FROM vectors WHERE identity_sha256 = ? "
                            f"AND text_sha256 IN ({marks})",
                            (key, *batch),
                        )
                    }
                    claims = {
                        row[0]: row[1:]
                        for row in self._connection.execute(
                            "SELECT text_sha256, owner, pid, host, claimed_at FROM claims "
                            f"WHERE identity_sha256 = ? AND text_sha256 IN ({marks})",
                            (key, *batch),
                        )
                    }
                    for text_hash in batch:
                        if text_hash in stored:
                            continue
                        held = claims.get(text_hash)
                        if held is not None and held[0] != owner and _claim_live(held, host, now):
                            continue
                        taken.append(text_hash)
                        if len(taken) >= limit:
                            break
                    if len(taken) >= limit:
                        break
                self._connection.executemany(
                    "INSERT OR REPLACE INTO claims (identity_sha256, text_sha256, owner, pid, "
                    "host, claimed_at) VALUES (?, ?, ?, ?, ?, ?)",
                    [(key, h, owner, os.getpid(), host, now) for h in taken],
                )
                self._connection.execute("COMMIT")
            except BaseException:
                self._connection.execute("ROLLBACK")
                raise
        return taken

    def release(self, identity: dict, text_hashes: Sequence[str], owner: str) -> None:
        """Drop ``owner``'s claims on ``text_hashes`` (after a failed embedding)."""
        key = identity_sha256(identity)
        with self._guarded("releasing claims"):
            self._connection.executemany(
                "DELETE FROM claims WHERE identity_sha256 = ? AND text_sha256 = ? AND owner = ?",
                [(key, h, owner) for h in text_hashes],
            )

    def count(self, identity: dict | None = None) -> int:
        """Number of stored vectors (of one identity, or all)."""
        with self._guarded("counting vectors"):
            if identity is None:
                return self._connection.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]
            return self._connection.execute(
                "SELECT COUNT(*) FROM vectors WHERE identity_sha256 = ?",
                (identity_sha256(identity),),
            ).fetchone()[0]


def inspect_cache(path: str | Path, identity: dict) -> list[str]:
    """Problems that make ``path`` unusable as this identity's vector cache (read-only).

    Nothing is created or written: a missing file is no problem (the run creates it).
    Refused: a file SQLite cannot open or read, another schema or version, an
    ``identities`` row for this identity's key holding other JSON (vectors of another
    model filed under this identity), and vectors under this key whose dims, dtype or
    byte length are not the identity's ``dimension`` and float32. Each problem names the
    file, the table or field, and what to do.
    """
    path = Path(path)
    if not path.exists():
        return []
    where = f"vector cache {str(path)!r}"
    if not path.is_file():
        return [f"{where} is not a file; move it away (the run creates a fresh cache)"]
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as error:
        return [f"{where} cannot be opened ({error}); move it away and let the run rebuild it"]
    try:
        return _inspect(connection, where, identity)
    except sqlite3.DatabaseError as error:
        return [
            (
                f"{where} is not a usable SQLite vector cache ({error}); it may be corrupt or "
                "not an SQLite file. Move it away and let the run rebuild the cache"
            )
        ]
    finally:
        connection.close()


def _inspect(connection: sqlite3.Connection, where: str, identity: dict) -> list[str]:
    tables = {
        row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
    }
    if not tables:
        return []  # an empty database file: the run lays the schema out
    expected = {"meta", "identities", "vectors"}
    if not expected <= tables:
        return [
            (
                f"{where} is an SQLite file of another schema (tables {sorted(tables)}), not a "
                f"{SCHEMA_NAME}; move it away or point cache.path at another file"
            )
        ]
    meta = dict(connection.execute("SELECT key, value FROM meta").fetchall())
    if meta.get("schema") != SCHEMA_NAME or meta.get("version") != SCHEMA_VERSION:
        return [
            (
                f"{where}: table meta says schema {meta.get('schema')!r} version "
                f"{meta.get('version')!r}; this code reads {SCHEMA_NAME!r} version "
                f"{SCHEMA_VERSION!r}. Move it away (the run creates a fresh cache)"
            )
        ]
    key = identity_sha256(identity)
    problems = []
    row = connection.execute(
        "SELECT identity_json FROM identities WHERE identity_sha256 = ?", (key,)
    ).fetchone()
    if row is not None and row[0] != canonical_identity_json(identity):
        problems.append(
            f"{where}: table identities files key {key[:12]} (the plan's embedding identity) "
            f"under another identity {row[0][:200]!r}; its vectors are another model's. Move "
            "the cache away"
        )
    shapes = connection.execute(
        "SELECT dims, dtype, length(vector), COUNT(*) FROM vectors WHERE identity_sha256 = ? "
        "GROUP BY dims, dtype, length(vector)",
        (key,),
    ).fetchall()
    dimension = int(identity.get("dimension", -1))
    want = (dimension, _DTYPE, dimension * _STORED.itemsize)
    for dims, dtype, length, count in shapes:
        if (dims, dtype, length) != want:
            problems.append(
                f"{where}: table vectors holds {count} vector(s) under the plan's identity "
                f"{key[:12]} with dims {dims}, dtype {dtype!r}, {length} bytes; the identity "
                f"pins dimension {want[0]} float32. The cache is from another model or corrupt: "
                "move it away"
            )
    return problems


def read_vectors(path: str | Path, identity: dict, text_hashes: Sequence[str]) -> dict:
    """Stored float32 vectors of ``text_hashes`` under ``identity``, read-only (misses absent).

    For checks that must not create or change the cache (the gate); call
    :func:`inspect_cache` first, this raises :class:`VectorCacheError` on a bad file.
    """
    path = Path(path)
    if not path.is_file():
        return {}
    key = identity_sha256(identity)
    unique = list(dict.fromkeys(text_hashes))
    found: dict[str, np.ndarray] = {}
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            for start in range(0, len(unique), _SELECT_BATCH):
                batch = unique[start : start + _SELECT_BATCH]
                marks = ",".join("?" * len(batch))
                rows = connection.execute(
                    "SELECT text_sha256, dims, dtype, vector FROM vectors "
                    f"WHERE identity_sha256 = ? AND text_sha256 IN ({marks})",
                    (key, *batch),
                ).fetchall()
                for text_hash, dims, dtype, blob in rows:
                    if dtype != _DTYPE or len(blob) != dims * _STORED.itemsize:
                        raise VectorCacheError(
                            f"{str(path)!r}: vector for text {text_hash} has dtype {dtype!r}, "
                            f"dims {dims} and {len(blob)} bytes; the file is corrupt, move it away"
                        )
                    found[text_hash] = np.frombuffer(blob, dtype=_STORED).astype(np.float32)
        finally:
            connection.close()
    except sqlite3.Error as error:
        raise VectorCacheError(
            f"vector cache {str(path)!r} failed while reading vectors: {error}; move it away"
        ) from error
    return found


def _claim_live(held: tuple, host: str, now: float) -> bool:
    """Whether a claim row (owner, pid, host, claimed_at) still holds its texts."""
    _owner, pid, claim_host, claimed_at = held
    if now - float(claimed_at) > CLAIM_STALE_SECONDS:
        return False
    if claim_host != host:
        return True  # another machine's process: trust its claim until it is stale
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def _max_diff(a: np.ndarray, b: np.ndarray) -> str:
    if a.shape != b.shape:
        return "n/a"
    return f"{float(np.max(np.abs(a - b), initial=0.0)):.3g}"


def _is_lock_error(error: BaseException | None) -> bool:
    return isinstance(error, sqlite3.OperationalError) and (
        "locked" in str(error) or "busy" in str(error)
    )


class _DatabaseErrors:
    """Turn sqlite3.DatabaseError inside a block into VectorCacheError naming the file."""

    def __init__(self, path: Path, action: str) -> None:
        self.path = path
        self.action = action

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: object
    ) -> bool:
        if kind is not None and issubclass(kind, sqlite3.DatabaseError):
            if _is_lock_error(error):
                raise VectorCacheError(
                    f"vector cache {str(self.path)!r} stayed locked by another process while "
                    f"{self.action}: {error}; raise busy_timeout_seconds"
                ) from error
            raise VectorCacheError(
                f"vector cache {str(self.path)!r} failed while {self.action}: {error}; "
                "the file may be corrupt, move it away and rebuild"
            ) from error
        return False


@dataclass(frozen=True)
class CachedEmbeddings:
    """Vectors for a list of texts and how they were obtained.

    ``vectors`` is float32 ``[n, d]`` as stored in the cache; ``misses`` counts the
    distinct texts this call embedded, ``hits`` the other distinct texts (read from the
    cache); ``backend_calls`` counts ``embed`` calls.
    """

    vectors: np.ndarray
    hits: int
    misses: int
    backend_calls: int


def embed_with_cache_report(
    backend: EmbeddingBackend, cache: VectorCache, texts: Sequence[str], *, batch_size: int
) -> CachedEmbeddings:
    """Embed only the texts missing from the cache, each by one process; return all vectors.

    Distinct texts are looked up by SHA-256; misses are taken in order of length
    (ascending, or descending in processes with an odd pid, so two workers filling one
    cache start from opposite ends; equal lengths in order of first appearance). Each
    batch of up to ``batch_size`` misses is first claimed in the cache
    (:meth:`VectorCache.claim`): a text stored or claimed by another live process is not
    embedded here, its vector is waited for. The result is read back from the cache, so
    concurrent writers agree on every vector. ``misses`` counts the texts this call
    embedded, ``hits`` the rest (stored before, or by another process meanwhile).
    Progress (texts embedded, rate) goes to :func:`prereg.e04.progress.note`.
    """
    items = checked_texts(texts)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise VectorCacheError(f"batch_size={batch_size!r} must be an int >= 1")
    identity = backend.identity()
    hashes = [text_sha256(text) for text in items]
    first_text = dict(zip(hashes, items))
    unique = list(first_text)
    stored = cache.get_many(identity, unique)
    missing = [h for h in unique if h not in stored]
    # By length, from opposite ends in two workers: they meet in the middle and rarely wait.
    missing.sort(key=lambda h: len(first_text[h]), reverse=os.getpid() % 2 == 1)  # stable
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
    throttle = progress.Throttle()
    calls = embedded = 0
    pending = list(missing)
    claim = getattr(cache, "claim", None)  # a read-only stand-in (the replay's) has none
    while pending:
        batch = claim(identity, pending, batch_size, owner) if claim else pending[:batch_size]
        if not batch:  # every pending text is stored or claimed by another live process
            arrived = cache.get_many(identity, pending)
            pending = [h for h in pending if h not in arrived]
            if pending:
                time.sleep(_CLAIM_POLL_SECONDS)
            continue
        try:
            vectors = backend.embed([first_text[h] for h in batch])
            if vectors.shape[0] != len(batch):
                raise EmbeddingOutputError(
                    f"backend returned {vectors.shape[0]} vectors for {len(batch)} texts"
                )
            cache.put_many(identity, batch, vectors)
        except BaseException:
            if claim:
                cache.release(identity, batch, owner)
            raise
        calls += 1
        embedded += len(batch)
        done = set(batch)
        pending = [h for h in pending if h not in done]
        left = len(pending)
        throttle.maybe(
            lambda done=embedded, left=left: (
                f"embedding: {done} of {len(missing)} "
                f"missing texts embedded here ({done / max(throttle.elapsed(), 1e-9):.1f} texts/s), "
                f"{len(missing) - done - left} by another worker, {left} to go"
            )
        )
    if missing:
        stored.update(cache.get_many(identity, missing))
        if progress.active() and embedded:
            progress.note(
                f"embedding: {embedded} texts embedded in {throttle.elapsed():.1f} s "
                f"({embedded / max(throttle.elapsed(), 1e-9):.1f} texts/s, {calls} batches); "
                f"{len(missing) - embedded} by another worker, {len(unique) - len(missing)} "
                "already cached"
            )
    dims = {vector.shape[0] for vector in stored.values()}
    if len(dims) > 1:
        raise VectorCacheError(
            f"{str(cache.path)!r} holds vectors of dims {sorted(dims)} for one identity; corrupt"
        )
    width = dims.pop() if dims else int(identity.get("dimension", 0))
    result = np.zeros((len(items), width), dtype=np.float32)
    for i, text_hash in enumerate(hashes):
        result[i] = stored[text_hash]
    return CachedEmbeddings(
        vectors=result, hits=len(unique) - embedded, misses=embedded, backend_calls=calls
    )


def embed_with_cache(
    backend: EmbeddingBackend, cache: VectorCache, texts: Sequence[str], *, batch_size: int
) -> np.ndarray:
    """Float32 ``[n, d]`` vectors of ``texts``; see :func:`embed_with_cache_report`."""
    return embed_with_cache_report(backend, cache, texts, batch_size=batch_size).vectors
