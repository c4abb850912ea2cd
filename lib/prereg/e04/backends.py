"""Embedding backends as the E04 plan names them, plus two torch-free helpers.

The plan's ``embedding`` section names a backend and its full identity (the dict
:meth:`EmbeddingBackend.identity` returns, which keys the vector cache):

* ``"minilm"``: :class:`prereg.e04.embeddings.MiniLMBackend`, the embedded default.
* ``"lmstudio"``: :class:`prereg.e04.embeddings.LMStudioBackend` on a client the
  caller connects (:func:`prereg.e04.embeddings.lmstudio_client`); torch is never
  imported on this path.
* ``"token-hash"``: :class:`TokenHashBackend`, a deterministic bag of hashed
  identifier tokens for software checks. It is not a language model; a plan may
  name it only with ``allow_synthetic`` true.

:class:`CacheOnlyBackend` answers only from the vector cache (audit replay): it has
the plan's identity and refuses to embed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from prereg.e04.embeddings import (
    EmbeddingBackend,
    LMStudioBackend,
    MiniLMBackend,
    l2_normalised,
)
from prereg.e04.tokenize import tokenize

BACKENDS = ("minilm", "lmstudio", "token-hash")
TOKEN_HASH_MODEL = "prereg-token-hash-1"
TOKEN_HASH_MAX_SEQUENCE_LENGTH = 2**31 - 1
"""The token-hash stand-in truncates nothing; its identity states the largest int32 (a
plan's identity pins a positive max_sequence_length)."""


class BackendMismatchError(ValueError):
    """The backend in use does not have the identity the plan pins."""


class MissingVectorError(LookupError):
    """Audit replay needed a vector that the cache does not hold."""


class TokenHashBackend:
    """Bag of SHA-256-hashed identifier tokens in ``dimension`` buckets, L2-normalised.

    Row ``i`` is ``e_0 / 2 + sum over tokens t of texts[i] of e_{h(t) mod d}``
    normalised, with ``h(t)`` the first four bytes of SHA-256(t) big-endian and the
    tokens of :func:`prereg.e04.tokenize.tokenize`. Deterministic to the bit; no model.
    """

    def __init__(self, dimension: int, chunker_version: str) -> None:
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 2:
            raise ValueError(f"dimension={dimension!r} must be an int >= 2")
        self.dimension = dimension
        self.chunker_version = chunker_version

    def identity(self) -> dict[str, Any]:
        return {
            "backend": "token-hash",
            "model": TOKEN_HASH_MODEL,
            "weights_sha256": "0" * 64,
            "max_sequence_length": TOKEN_HASH_MAX_SEQUENCE_LENGTH,
            "dimension": self.dimension,
            "normalisation": "l2",
            "dtype": "float32",
            "chunker_version": self.chunker_version,
        }

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension))
        for row, text in enumerate(texts):
            out[row, 0] = 0.5
            for token in tokenize(text):
                bucket = int.from_bytes(hashlib.sha256(token.encode()).digest()[:4], "big")
                out[row, bucket % self.dimension] += 1.0
        return l2_normalised(out, expected_dimension=self.dimension, source="TokenHashBackend")


class CacheOnlyBackend:
    """A backend with a pinned identity that never embeds (every vector must be cached)."""

    def __init__(self, identity: dict[str, Any]) -> None:
        self._identity = dict(identity)

    def identity(self) -> dict[str, Any]:
        return dict(self._identity)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        raise MissingVectorError(
            f"{len(texts)} text(s) have no vector in the cache under model "
            f"{self._identity.get('model')!r} (first: {texts[0][:60]!r}); the audit does not embed"
        )


def build_backend(
    embedding: dict[str, Any], *, lmstudio_client: Callable[[], Any] | None = None
) -> EmbeddingBackend:
    """The backend the plan's ``embedding`` section names, checked against its identity.

    Parameters
    ----------
    embedding : dict
        The plan section: ``backend``, ``identity``, ``encode_batch_size``, ``lmstudio``.
    lmstudio_client : callable, optional
        Returns a connected ``lmstudio.Client`` (or a stand-in); needed for ``"lmstudio"``.

    Raises
    ------
    BackendMismatchError
        If the backend's identity differs from the plan's ``identity`` (other weights,
        lengths or chunker version than the preregistered ones).
    """
    name = embedding["backend"]
    identity = embedding["identity"]
    if name == "minilm":
        backend: EmbeddingBackend = MiniLMBackend(
            identity["chunker_version"], batch_size=embedding["encode_batch_size"]
        )
    elif name == "lmstudio":
        if lmstudio_client is None:
            raise ValueError("embedding backend 'lmstudio' needs lmstudio_client, got None")
        options = embedding.get("lmstudio") or {}
        backend = LMStudioBackend(
            lmstudio_client(),
            identity["model"],
            weights_sha256=identity["weights_sha256"],
            max_sequence_length=identity["max_sequence_length"],
            dimension=identity["dimension"],
            chunker_version=identity["chunker_version"],
            models_dir=options.get("models_dir"),
        )
    elif name == "token-hash":
        backend = TokenHashBackend(identity["dimension"], identity["chunker_version"])
    else:
        raise ValueError(f"embedding.backend={name!r} must be one of {BACKENDS}")
    check_identity(backend, identity)
    return backend


def check_identity(backend: EmbeddingBackend, identity: dict[str, Any]) -> None:
    """Raise :class:`BackendMismatchError` naming each field where the identities differ."""
    actual = backend.identity()
    fields = sorted(set(actual) | set(identity))
    differ = [f for f in fields if actual.get(f) != identity.get(f)]
    if differ:
        detail = "; ".join(f"{f}: plan {identity.get(f)!r}, here {actual.get(f)!r}" for f in differ)
        raise BackendMismatchError(
            f"the embedding backend is not the one the plan pins ({detail}); install the pinned "
            "model or correct the plan before approval"
        )
