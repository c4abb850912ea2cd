"""Stand-ins for testing code that uses E04 harnesses and embedding backends without a model
or a running LM Studio (the E04 checks use them).

``HashingBackend`` is a deterministic, torch-free embedding backend: a bag of hashed tokens
(it records its calls). ``FakeLMStudio`` behaves like ``lmstudio.Client`` for the calls the
LM Studio backend makes: its sessions return real SDK handles (``lmstudio.EmbeddingModel`` /
``lmstudio.LLM``) whose ``get_info`` and ``embed`` come back through the session methods the
SDK uses (``get_model_info``, ``_embed``), with real ``EmbeddingModelInstanceInfo`` /
``LlmInstanceInfo`` records. Methods that could load a model raise :class:`LoadingForbidden`.

For the LM Studio double (:mod:`prereg.e04.lmstudio_double`, a real server speaking the
SDK's protocol): the model keys and sizes the double checks load (:data:`KEY` ...),
:func:`pinned_backend` (the project's backend with the pins a plan for :data:`KEY` on a
double would hold) and :func:`stop_double` (stop a double started from its command line).
"""

from __future__ import annotations

import hashlib
import signal
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from prereg.e04.backends import TokenHashBackend
from prereg.e04.embeddings import LMStudioBackend
from prereg.e04.lmstudio_double import LMStudioDouble, default_weights_bytes


class HashingBackend(TokenHashBackend):
    """The token-hash embedding (:class:`prereg.e04.backends.TokenHashBackend`) under a test
    identity of its own, recording each call's texts in :attr:`calls`."""

    def __init__(self, dimension: int = 32, name: str = "hashing") -> None:
        super().__init__(dimension, chunker_version="test")
        self.name = name
        self.calls: list[list[str]] = []

    def identity(self) -> dict[str, Any]:
        return {
            **super().identity(),
            "backend": self.name,
            "model": "hashing",
            "max_sequence_length": 0,
        }

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return super().embed(texts)


class LoadingForbidden(AssertionError):
    """The backend called an SDK method that may load a model."""


class _FakeSession:
    def __init__(self, client: FakeLMStudio, namespace: str) -> None:
        self._client = client
        self._namespace = namespace

    def list_loaded(self) -> list[Any]:
        import lmstudio

        self._client.list_calls += 1
        handle_type = lmstudio.LLM if self._namespace == "llm" else lmstudio.EmbeddingModel
        return [
            handle_type(identifier, self)
            for identifier, (namespace, _key) in self._client.loaded.items()
            if namespace == self._namespace
        ]

    def get_model_info(self, identifier: str) -> Any:
        import lmstudio

        namespace, key = self._client.loaded[identifier]
        common = {
            "model_key": key,
            "format": "gguf",
            "display_name": key,
            "path": f"publisher/{key}/{key}.gguf",
            "size_bytes": 1000,
            "identifier": identifier,
            "instance_reference": f"ref-{identifier}",
            "max_context_length": 8192,
            "context_length": self._client.context_length,
        }
        if namespace == "llm":
            return lmstudio.LlmInstanceInfo(**common, vision=False, trained_for_tool_use=False)
        return lmstudio.EmbeddingModelInstanceInfo(**common)

    def _embed(self, identifier: str, texts: Any) -> list[list[float]]:
        self._client.embed_calls += 1
        if self._client.during_embed is not None:
            self._client.during_embed(self._client)
        vectors = HashingBackend(self._client.dimension).embed(list(texts)) * 3.0
        return vectors.astype(float).tolist()

    def model(self, *args: Any, **kwargs: Any) -> Any:
        raise LoadingForbidden(f"{self._namespace}.model{args} may load a model")

    def load_new_instance(self, *args: Any, **kwargs: Any) -> Any:
        raise LoadingForbidden(f"{self._namespace}.load_new_instance{args} loads a model")


class FakeLMStudio:
    """``loaded`` maps instance identifier -> (namespace, model key)."""

    def __init__(
        self,
        loaded: dict[str, tuple[str, str]],
        *,
        dimension: int = 16,
        context_length: int = 512,
        during_embed: Callable[[FakeLMStudio], None] | None = None,
    ) -> None:
        self.loaded = dict(loaded)
        self.dimension = dimension
        self.context_length = context_length
        self.during_embed = during_embed
        self.list_calls = 0
        self.embed_calls = 0
        self.llm = _FakeSession(self, "llm")
        self.embedding = _FakeSession(self, "embedding")

    def list_loaded_models(self, namespace: str | None = None) -> list[Any]:
        return [*self.llm.list_loaded(), *self.embedding.list_loaded()]


# -- the LM Studio double ------------------------------------------------------------------

KEY = "text-embedding-nomic-embed-text-v1.5"
OTHER_KEY = "text-embedding-bge-small-en-v1.5"
LLM_KEY = "qwen/qwen3-8b"
DIMENSION = 24
CONTEXT_LENGTH = 512
#: How long a stopped double (SIGTERM, then SIGKILL) may take to exit.
STOP_SECONDS = 30
#: What the double writes as KEY's weights file: the plan's pin in these checks.
KEY_SHA256 = hashlib.sha256(default_weights_bytes(KEY)).hexdigest()


def pinned_backend(client: Any, double: LMStudioDouble, **overrides: Any) -> LMStudioBackend:
    """The project's backend with the pins a plan for KEY on this double would hold."""
    arguments: dict[str, Any] = {
        "weights_sha256": KEY_SHA256,
        "max_sequence_length": CONTEXT_LENGTH,
        "dimension": DIMENSION,
        "chunker_version": "go-function-text-1",
        "models_dir": double.models_dir,
    }
    arguments.update(overrides)
    return LMStudioBackend(client, KEY, **arguments)


def stop_double(process: subprocess.Popen) -> None:
    """Stop a double started from its CLI: SIGTERM, SIGKILL if it lingers; close its pipes."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_SECONDS)
    process.stdout.close()
    process.stderr.close()
