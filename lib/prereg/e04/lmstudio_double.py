"""A loopback LM Studio API double that speaks the ``lmstudio`` SDK's own websocket protocol.

Start it, point an ``lmstudio.Client`` (or a plan's ``embedding.lmstudio.api_host``) at
it, and the project's :class:`prereg.e04.embeddings.LMStudioBackend` runs exactly as it
would against the LM Studio app, without the app::

    .venv/bin/python -m prereg.e04.lmstudio_double --port 0 \\
        --model text-embedding-nomic-embed-text-v1.5 --models-dir /tmp/lms-models

It prints one JSON line when it listens (``api_host``, ``models_dir`` and, per loaded
model, its key, identifier, context length, path and the SHA-256 of its weights file),
then serves until SIGINT or SIGTERM. Put ``api_host``, ``models_dir`` and the printed
``weights_sha256`` into the plan's ``embedding`` section to try a plan pinned to LM Studio.

Options
-------
``--port PORT``            TCP port on 127.0.0.1 (0: any free port; the ready line names it).
``--model KEY``            An embedding model loaded at start (repeatable).
``--llm KEY``              An LLM loaded at start (repeatable), to try the residency guard.
``--context-length N``     Context length of every loaded instance (default 2048).
``--dimension N``          Embedding dimension (default 768).
``--models-dir DIR``       LM Studio's models folder: each model's weights file is created
                           there (deterministic bytes) unless it exists, and its SHA-256 is
                           what the server's model path resolves to.

What it speaks (shapes from the installed ``lmstudio`` package, not guessed)
----------------------------------------------------------------------------
* ``GET /lmstudio-greeting`` answers ``{"lmstudio": true}`` (the SDK's host probe,
  ``ClientBase._check_probe_response``).
* Websockets at ``/llm``, ``/embedding`` and ``/system`` (``ws://{api_host}/{namespace}``,
  ``_SyncSession.connect``). The first message is the SDK's authentication packet
  (``ClientBase._format_auth_message``: ``authVersion``, ``clientIdentifier``,
  ``clientPasskey``), answered ``{"success": true}`` (``AsyncWebsocketHandler._authenticate``).
* ``rpcCall`` -> ``rpcResult`` / ``rpcError`` and ``channelCreate`` -> ``channelError``
  (``RemoteCallHandler``, ``ChannelHandler`` in ``lmstudio.json_api``). Every parameter
  is parsed with the SDK's own parameter struct (for example
  ``EmbeddingRpcEmbedStringParameter``); every model record is built with its struct
  (``EmbeddingModelInstanceInfo``, ``LlmInstanceInfo``, ``EmbeddingModelInfo``,
  ``LlmInfo``), errors with ``SerializedLMSExtendedError``.
* RPC endpoints: ``listLoaded``, ``getModelInfo``, ``embedString``, ``tokenize``,
  ``countTokens`` and ``unloadModel`` in ``llm`` and ``embedding``;
  ``listDownloadedModels`` in ``system``. The loading channels (``loadModel``,
  ``getOrLoad``) are recorded and refused with a ``channelError``: the double never loads
  a model on a client's behalf.

Embeddings are deterministic: a signed bag of SHA-256-hashed tokens
(:func:`prereg.e04.tokenize.tokenize`) of the text, salted with the model key, plus a
constant component, in ``dimension`` buckets; not normalised (the backend normalises).

Driving it
----------
In process (the software checks): :class:`LMStudioDouble` is a context manager;
:meth:`LMStudioDouble.load`, :meth:`LMStudioDouble.unload` and
:meth:`LMStudioDouble.on_next` (run an action when the next call of an endpoint arrives,
before it is answered) change the loaded models between or during a client's calls;
:meth:`LMStudioDouble.calls` is every RPC and channel received.

Over HTTP (the CLI): ``GET /lmstudio-double/state``, ``GET /lmstudio-double/calls``,
``POST /lmstudio-double/load`` with ``{"key": ..., "kind": "embedding"|"llm",
"identifier": ..., "context_length": ...}`` and ``POST /lmstudio-double/unload`` with
``{"identifier": ...}`` or ``{"all": true}``.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import signal
import socket
import socketserver
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import h11
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError as WSProtocolError
from wsproto.utilities import RemoteProtocolError as WSRemoteProtocolError

from prereg.e04.tokenize import tokenize

HOST = "127.0.0.1"
GREETING_PATH = "/lmstudio-greeting"
CONTROL_PREFIX = "/lmstudio-double/"
MODEL_NAMESPACES = ("llm", "embedding")
NAMESPACES = (*MODEL_NAMESPACES, "system")
DEFAULT_CONTEXT_LENGTH = 2048
DEFAULT_DIMENSION = 768
#: Endpoints that change which models are resident; a residency-guarded client calls none.
RESIDENCY_ENDPOINTS = frozenset(
    {"loadModel", "getOrLoad", "unloadModel", "downloadModel", "preloadDraftModel"}
)
_POLL_SECONDS = 0.2
_RECEIVE_BYTES = 1 << 16


class DoubleError(ValueError):
    """A model, path or request the double cannot serve; the message says which and why."""


@dataclass(frozen=True)
class ReceivedCall:
    """One message a client sent on a model or system websocket."""

    namespace: str
    kind: str  # "rpc", "channel" or "channelSend"
    endpoint: str
    parameter: Any

    def as_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "kind": self.kind,
            "endpoint": self.endpoint,
            "parameter": self.parameter,
        }


@dataclass(frozen=True)
class Instance:
    """A loaded model instance: model key, kind, identifier, reference, lengths, path."""

    key: str
    kind: str
    identifier: str
    instance_reference: str
    context_length: int
    max_context_length: int
    path: str


def default_model_path(key: str) -> str:
    """Relative weights path LM Studio-style (``publisher/name-GGUF/name.gguf``) for a key."""
    parts = [p for p in key.split("/") if p]
    name = parts[-1] if parts else key
    publisher = parts[0] if len(parts) > 1 else "lmstudio-double"
    return f"{publisher}/{name}-GGUF/{name}.gguf"


def default_weights_bytes(key: str) -> bytes:
    """The deterministic bytes the double writes as ``key``'s weights file."""
    return f"prereg LM Studio double weights for {key}\n".encode()


def double_embedding(key: str, text: str, dimension: int) -> list[float]:
    """Deterministic raw vector of ``text`` under model ``key`` (see the module docstring)."""
    out = [0.0] * dimension
    constant = hashlib.sha256(f"{key}\0".encode()).digest()
    out[int.from_bytes(constant[:4], "big") % dimension] += 0.5  # never a zero vector
    for token in tokenize(text):
        digest = hashlib.sha256(f"{key}\0{token}".encode()).digest()
        out[int.from_bytes(digest[:4], "big") % dimension] += 1.0 if digest[4] & 1 else -1.0
    return out


def _checked_relative_path(path: str) -> str:
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts or "\\" in path:
        raise DoubleError(f"model path {path!r} must be relative, without '..' or backslashes")
    return str(pure)


class LMStudioDouble:
    """The server: loaded models, recorded calls, a thread per connection on 127.0.0.1.

    Parameters
    ----------
    port : int
        TCP port (0: any free port; read :attr:`api_host` after :meth:`start`).
    dimension : int
        Embedding dimension of every embedding model.
    models_dir : str or Path, optional
        LM Studio's models folder; each model's weights file is created under it at its
        path (unless present) and hashed for :meth:`weights_sha256`.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        dimension: int = DEFAULT_DIMENSION,
        models_dir: str | Path | None = None,
    ) -> None:
        for name, value, low in (("port", port, 0), ("dimension", dimension, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise DoubleError(f"{name}={value!r} must be an int >= {low}")
        self.port = port
        self.dimension = dimension
        self.models_dir = None if models_dir is None else Path(models_dir)
        self._lock = threading.RLock()
        self._loaded: list[Instance] = []
        self._known: dict[str, tuple[str, int, str]] = {}  # key -> (kind, max context, path)
        self._calls: list[ReceivedCall] = []
        self._hooks: list[tuple[str, Callable[[LMStudioDouble], None]]] = []
        self._references = itertools.count(1)
        self._stopping = threading.Event()
        self._server: socketserver.ThreadingTCPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> LMStudioDouble:
        """Bind 127.0.0.1:``port`` and serve in a background thread."""
        double = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                double._serve_connection(self.request)

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = False
            block_on_close = True

        self._stopping.clear()
        self._server = Server((HOST, self.port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": _POLL_SECONDS},
            name=f"lmstudio-double:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; open connections end within a poll interval."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()  # joins the connection threads, which poll _stopping
        if self._thread is not None:
            self._thread.join(timeout=10 * _POLL_SECONDS)

    def __enter__(self) -> LMStudioDouble:  # noqa: PYI034 - typing.Self needs Python 3.11
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def api_host(self) -> str:
        """``127.0.0.1:PORT``, what ``lmstudio.Client(api_host)`` takes."""
        return f"{HOST}:{self.port}"

    # ------------------------------------------------------------------ models
    def load(
        self,
        key: str,
        *,
        kind: str = "embedding",
        identifier: str | None = None,
        context_length: int = DEFAULT_CONTEXT_LENGTH,
        path: str | None = None,
    ) -> Instance:
        """Load an instance of ``key`` (as the app's ``lms load`` would); return it.

        The identifier defaults to the key (``key:2``, ``key:3``... if taken); every
        load gets a new ``instanceReference``. A key keeps the path it was first given.
        """
        if kind not in MODEL_NAMESPACES:
            raise DoubleError(f"kind={kind!r} must be one of {MODEL_NAMESPACES}")
        if not isinstance(key, str) or not key.strip():
            raise DoubleError(f"model key {key!r} must be a non-empty str")
        if isinstance(context_length, bool) or not isinstance(context_length, int):
            raise DoubleError(f"context_length={context_length!r} must be an int >= 1")
        if context_length < 1:
            raise DoubleError(f"context_length={context_length!r} must be an int >= 1")
        with self._lock:
            known_kind, max_context, known_path = self._known.get(
                key, (kind, context_length, _checked_relative_path(path or default_model_path(key)))
            )
            if known_kind != kind:
                raise DoubleError(f"model {key!r} is a {known_kind} model, not {kind}")
            if path is not None and _checked_relative_path(path) != known_path:
                raise DoubleError(f"model {key!r} already has path {known_path!r}")
            max_context = max(max_context, context_length)
            self._known[key] = (kind, max_context, known_path)
            self._ensure_weights(key, known_path)
            taken = {instance.identifier for instance in self._loaded}
            if identifier is None:
                identifier = next(
                    name
                    for name in itertools.chain([key], (f"{key}:{n}" for n in itertools.count(2)))
                    if name not in taken
                )
            elif identifier in taken:
                raise DoubleError(f"identifier {identifier!r} is already loaded")
            instance = Instance(
                key=key,
                kind=kind,
                identifier=identifier,
                instance_reference=f"lmstudio-double-instance-{next(self._references)}",
                context_length=context_length,
                max_context_length=max_context,
                path=known_path,
            )
            self._loaded.append(instance)
            return instance

    def unload(self, identifier: str) -> Instance:
        """Unload the instance with this identifier (``DoubleError`` if none)."""
        with self._lock:
            for instance in self._loaded:
                if instance.identifier == identifier:
                    self._loaded.remove(instance)
                    return instance
        raise DoubleError(f"no loaded instance has identifier {identifier!r}")

    def unload_all(self) -> None:
        """Unload every instance."""
        with self._lock:
            self._loaded.clear()

    def loaded(self) -> list[Instance]:
        """The loaded instances, in load order."""
        with self._lock:
            return list(self._loaded)

    def weights_path(self, key: str) -> Path | None:
        """``models_dir / path`` of a known model, or None without a models folder."""
        with self._lock:
            if key not in self._known:
                raise DoubleError(f"model {key!r} was never loaded")
            path = self._known[key][2]
        return None if self.models_dir is None else self.models_dir / path

    def weights_sha256(self, key: str) -> str:
        """SHA-256 of ``key``'s weights file (or of its default bytes without a folder)."""
        file = self.weights_path(key)
        data = default_weights_bytes(key) if file is None else file.read_bytes()
        return hashlib.sha256(data).hexdigest()

    def _ensure_weights(self, key: str, path: str) -> None:
        if self.models_dir is None:
            return
        file = self.models_dir / path
        if not file.exists():
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_bytes(default_weights_bytes(key))

    # ------------------------------------------------------------------ observation
    def calls(self) -> list[ReceivedCall]:
        """Every RPC, channel creation and channel message received, in order."""
        with self._lock:
            return list(self._calls)

    def residency_calls(self) -> list[ReceivedCall]:
        """Received calls of :data:`RESIDENCY_ENDPOINTS` (load, get-or-load, unload...)."""
        return [call for call in self.calls() if call.endpoint in RESIDENCY_ENDPOINTS]

    def on_next(self, endpoint: str, action: Callable[[LMStudioDouble], None]) -> None:
        """Run ``action(self)`` once, when the next call of ``endpoint`` arrives, before
        it is answered (for example a swap between the two halves of a client's call)."""
        with self._lock:
            self._hooks.append((endpoint, action))

    def state(self) -> dict[str, Any]:
        """JSON-able state: address, folder, dimension and each loaded instance's record."""
        return {
            "api_host": self.api_host,
            "models_dir": None if self.models_dir is None else str(self.models_dir),
            "dimension": self.dimension,
            "loaded": [
                {**self._instance_info(i), "weights_sha256": self.weights_sha256(i.key)}
                for i in self.loaded()
            ],
        }

    # ------------------------------------------------------------------ protocol records
    def _size_bytes(self, key: str) -> int:
        file = self.weights_path(key)
        return (
            len(default_weights_bytes(key))
            if file is None or not file.exists()
            else (file.stat().st_size)
        )

    def _instance_info(self, instance: Instance) -> dict[str, Any]:
        # lmstudio: the e04 extra, optional
        from lmstudio._sdk_models import EmbeddingModelInstanceInfo, LlmInstanceInfo

        common = {
            "model_key": instance.key,
            "format": "gguf",
            "display_name": instance.key,
            "path": instance.path,
            "size_bytes": self._size_bytes(instance.key),
            "identifier": instance.identifier,
            "instance_reference": instance.instance_reference,
            "max_context_length": instance.max_context_length,
            "context_length": instance.context_length,
        }
        if instance.kind == "llm":
            return LlmInstanceInfo(**common, vision=False, trained_for_tool_use=False).to_dict()
        return EmbeddingModelInstanceInfo(**common).to_dict()

    def _downloaded_info(self) -> list[dict[str, Any]]:
        # lmstudio: the e04 extra, optional
        from lmstudio._sdk_models import EmbeddingModelInfo, LlmInfo

        with self._lock:
            known = dict(self._known)
        records = []
        for key, (kind, max_context, path) in known.items():
            common = {
                "model_key": key,
                "format": "gguf",
                "display_name": key,
                "path": path,
                "size_bytes": self._size_bytes(key),
                "max_context_length": max_context,
            }
            if kind == "llm":
                info: Any = LlmInfo(**common, vision=False, trained_for_tool_use=False)
            else:
                info = EmbeddingModelInfo(**common)
            records.append(info.to_dict())
        return records

    def _resolve(self, namespace: str, specifier: Any) -> Instance:
        # lmstudio: the e04 extra, optional
        from lmstudio._sdk_models import ModelSpecifierInstanceReference

        with self._lock:
            candidates = [i for i in self._loaded if i.kind == namespace]
        if isinstance(specifier, ModelSpecifierInstanceReference):
            found = [i for i in candidates if i.instance_reference == specifier.instance_reference]
        else:
            query = specifier.query
            found = [
                i
                for i in candidates
                if (query.identifier is None or i.identifier == query.identifier)
                and (query.path is None or i.path == query.path)
                and (query.domain is None or query.domain == namespace)
                and not query.vision
            ]
        if not found:
            raise _RpcError(
                "No model found that fits the query",
                f"no loaded {namespace} instance matches {specifier.to_dict()}",
            )
        return found[0]

    def _rpc(self, namespace: str, endpoint: str, parameter: Any) -> Any:
        """The result of one RPC (None for a void one); ``_RpcError`` for an rpcError."""
        if namespace == "system" and endpoint == "listDownloadedModels":
            return self._downloaded_info()
        if namespace in MODEL_NAMESPACES and endpoint == "listLoaded":
            return [self._instance_info(i) for i in self.loaded() if i.kind == namespace]
        struct = _parameter_struct(namespace, endpoint)
        if struct is None:
            raise _RpcError(
                f"Unsupported endpoint {namespace}.{endpoint}",
                "the prereg LM Studio double serves only what a residency-guarded embedding "
                "client needs (see prereg.e04.lmstudio_double)",
            )
        try:
            p = struct._from_any_api_dict(parameter)
        except Exception as error:  # msgspec.ValidationError, TypeError
            raise _RpcError(
                f"Invalid parameter for {namespace}.{endpoint}",
                f"{struct.__name__} rejected {parameter!r:.300}: {error}",
            ) from error
        if endpoint == "getModelInfo":
            try:
                return self._instance_info(self._resolve(namespace, p.specifier))
            except _RpcError:
                if p.throw_if_not_found:
                    raise
                return None
        if endpoint == "embedString":
            instance = self._resolve(namespace, p.model_specifier)
            return {"embedding": double_embedding(instance.key, p.input_string, self.dimension)}
        if endpoint == "unloadModel":
            try:
                self.unload(p.identifier)
            except DoubleError as error:
                raise _RpcError("Model not found", str(error)) from error
            return None
        self._resolve(namespace, p.specifier)  # tokenize, countTokens
        tokens = tokenize(p.input_string)
        if endpoint == "countTokens":
            return {"tokenCount": len(tokens)}
        return {
            "tokens": [
                int.from_bytes(hashlib.sha256(t.encode()).digest()[:3], "big") for t in tokens
            ]
        }

    def _answer(self, namespace: str, message: Any) -> list[dict[str, Any]]:
        """Replies to one authenticated client message (recorded first)."""
        # lmstudio: the e04 extra, optional
        from lmstudio._sdk_models import SerializedLMSExtendedError

        def error(title: str, cause: str) -> dict[str, Any]:
            return SerializedLMSExtendedError(title=title, cause=cause).to_dict()

        if message is _NOT_JSON:
            return [{"type": "communicationWarning", "warning": "the message is not JSON"}]
        if not isinstance(message, dict):
            return [{"type": "communicationWarning", "warning": f"not an object: {message!r:.200}"}]
        kind = message.get("type")
        if kind == "rpcCall":
            endpoint, call_id = str(message.get("endpoint")), message.get("callId")
            self._record(ReceivedCall(namespace, "rpc", endpoint, message.get("parameter")))
            try:
                result = self._rpc(namespace, endpoint, message.get("parameter"))
            except _RpcError as failure:
                return [{"type": "rpcError", "callId": call_id, "error": error(*failure.args)}]
            reply: dict[str, Any] = {"type": "rpcResult", "callId": call_id}
            if result is not None:
                reply["result"] = result
            return [reply]
        if kind == "channelCreate":
            endpoint, channel_id = str(message.get("endpoint")), message.get("channelId")
            creation = message.get("creationParameter")
            self._record(ReceivedCall(namespace, "channel", endpoint, creation))
            if endpoint in RESIDENCY_ENDPOINTS:
                detail = error(
                    f"The LM Studio double never loads models ({namespace}.{endpoint})",
                    "load models when starting the double (--model, --llm) or through its "
                    "control API; a residency-guarded client must not ask for a load",
                )
            else:
                detail = error(f"Unsupported channel {namespace}.{endpoint}", "not served")
            return [{"type": "channelError", "channelId": channel_id, "error": detail}]
        if kind == "channelSend":
            inner = message.get("message")
            inner_type = inner.get("type") if isinstance(inner, dict) else None
            self._record(ReceivedCall(namespace, "channelSend", str(inner_type), inner))
            return []
        return [{"type": "communicationWarning", "warning": f"unknown message type {kind!r}"}]

    def _record(self, call: ReceivedCall) -> None:
        with self._lock:
            self._calls.append(call)
            hooks = [h for h in self._hooks if h[0] == call.endpoint][:1]
            for hook in hooks:
                self._hooks.remove(hook)
        for _endpoint, action in hooks:
            action(self)

    # ------------------------------------------------------------------ control API
    def _control(self, method: str, target: str, body: bytes) -> tuple[int, Any]:
        if target == GREETING_PATH:
            return 200, {"lmstudio": True}
        if not target.startswith(CONTROL_PREFIX):
            return 404, {"error": f"no such path {target!r}"}
        action = target[len(CONTROL_PREFIX) :]
        try:
            data = json.loads(body.decode() or "{}") if method == "POST" else {}
            if not isinstance(data, dict):
                raise DoubleError(f"the body must be a JSON object, got {data!r:.100}")
            if method == "GET" and action == "state":
                return 200, self.state()
            if method == "GET" and action == "calls":
                return 200, [call.as_dict() for call in self.calls()]
            if method == "POST" and action == "load":
                unknown = set(data) - {"key", "kind", "identifier", "context_length", "path"}
                if unknown:
                    raise DoubleError(f"unknown load fields {sorted(unknown)}")
                instance = self.load(
                    data.get("key"),  # type: ignore[arg-type]
                    kind=data.get("kind", "embedding"),
                    identifier=data.get("identifier"),
                    context_length=data.get("context_length", DEFAULT_CONTEXT_LENGTH),
                    path=data.get("path"),
                )
                return 200, self._instance_info(instance)
            if method == "POST" and action == "unload":
                if data.get("all") is True:
                    self.unload_all()
                    return 200, {"loaded": []}
                instance = self.unload(str(data.get("identifier")))
                return 200, self._instance_info(instance)
        except (DoubleError, ValueError) as error:
            return 400, {"error": str(error)}
        return 404, {"error": f"no such control request {method} {target!r}"}

    # ------------------------------------------------------------------ transport
    def _receive(self, sock: socket.socket) -> bytes | None:
        """Bytes from the socket (b"" when the peer closed), None when stopping or broken."""
        while not self._stopping.is_set():
            try:
                return sock.recv(_RECEIVE_BYTES)
            except socket.timeout:  # TimeoutError from Python 3.10 on
                continue
            except OSError:
                return None
        return None

    def _serve_connection(self, sock: socket.socket) -> None:
        try:
            self._serve_http(sock)
        except (OSError, h11.ProtocolError, WSProtocolError, WSRemoteProtocolError):
            return  # the peer went away or spoke nonsense; nothing to answer

    def _serve_http(self, sock: socket.socket) -> None:
        sock.settimeout(_POLL_SECONDS)
        connection = h11.Connection(h11.SERVER)
        request: h11.Request | None = None
        body = b""
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                data = self._receive(sock)
                if not data:
                    return
                connection.receive_data(data)
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage) or event is h11.PAUSED:
                break
            else:
                return
        if request is None:
            return
        headers = {name.lower(): value for name, value in request.headers}
        target = request.target.decode("ascii", "replace")
        if headers.get(b"upgrade", b"").lower() == b"websocket":
            trailing = connection.trailing_data[0]
            self._serve_websocket(sock, request, target, trailing)
            return
        status, payload = self._control(request.method.decode(), target, body)
        content = json.dumps(payload).encode()
        out = connection.send(
            h11.Response(
                status_code=status,
                headers=[
                    ("content-type", "application/json"),
                    ("content-length", str(len(content))),
                    ("connection", "close"),
                ],
            )
        )
        out += connection.send(h11.Data(data=content)) + connection.send(h11.EndOfMessage())
        try:
            sock.sendall(out)
        except OSError:
            return

    def _serve_websocket(
        self, sock: socket.socket, request: h11.Request, target: str, trailing: bytes
    ) -> None:
        ws = WSConnection(ConnectionType.SERVER)
        ws.initiate_upgrade_connection(request.headers, request.target)
        namespace = target.strip("/")
        for event in ws.events():
            if isinstance(event, Request):
                if namespace not in NAMESPACES:
                    sock.sendall(ws.send(RejectConnection(status_code=404)))
                    return
                sock.sendall(ws.send(AcceptConnection()))
        if trailing:
            ws.receive_data(trailing)
        messages = self._messages(sock, ws)
        first = next(messages, None)
        if first is None:
            return
        failure = _authentication_failure(first)
        reply = {"success": True} if failure is None else {"success": False, "error": failure}
        sock.sendall(ws.send(TextMessage(json.dumps(reply))))
        if failure is not None:
            sock.sendall(ws.send(CloseConnection(code=1008, reason=failure)))
            return
        for message in messages:
            for answer in self._answer(namespace, message):
                sock.sendall(ws.send(TextMessage(json.dumps(answer))))

    def _messages(self, sock: socket.socket, ws: WSConnection) -> Iterator[Any]:
        """Each JSON text message of the websocket, decoded; pings answered; ends on close.

        A text that is not JSON yields a ``_NotJson`` marker, which :meth:`_answer`
        answers with a ``communicationWarning``.
        """
        text: list[str] = []
        while True:
            for event in ws.events():
                if isinstance(event, TextMessage):
                    text.append(event.data)
                    if event.message_finished:
                        raw, text = "".join(text), []
                        try:
                            yield json.loads(raw)
                        except ValueError:
                            yield _NOT_JSON
                elif isinstance(event, Ping):
                    sock.sendall(ws.send(event.response()))
                elif isinstance(event, CloseConnection):
                    sock.sendall(ws.send(event.response()))
                    return
            data = self._receive(sock)
            if not data:
                return
            ws.receive_data(data)


_NOT_JSON = object()


def _parameter_struct(namespace: str, endpoint: str) -> Any:
    """The SDK's parameter struct of a served model-namespace RPC, or None."""
    # lmstudio: the e04 extra, optional
    import lmstudio._sdk_models as models

    names = {
        "getModelInfo": "RpcGetModelInfoParameter",
        "tokenize": "RpcTokenizeParameter",
        "countTokens": "RpcCountTokensParameter",
        "unloadModel": "RpcUnloadModelParameter",
    }
    if namespace == "embedding":
        names["embedString"] = "RpcEmbedStringParameter"
    if namespace not in MODEL_NAMESPACES or endpoint not in names:
        return None
    prefix = "Embedding" if namespace == "embedding" else "Llm"
    return getattr(models, prefix + names[endpoint])


class _RpcError(Exception):
    """An rpcError reply: (title, cause)."""


def _authentication_failure(message: Any) -> str | None:
    """None if ``message`` is the SDK's authentication packet, else why not."""
    if not isinstance(message, dict) or message.get("authVersion") != 1:
        return "expected the authentication packet with authVersion 1 first"
    for field in ("clientIdentifier", "clientPasskey"):
        if not isinstance(message.get(field), str) or not message[field]:
            return f"authentication packet lacks {field}"
    return None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m prereg.e04.lmstudio_double",
        description=(
            "A loopback LM Studio API double (the lmstudio SDK's websocket protocol) with "
            "deterministic embeddings, to try a plan pinned to LM Studio without the app. "
            "Prints one JSON line when listening (api_host, models_dir, and per loaded model "
            "its key, identifier, context length, path and weights_sha256), then serves "
            "until SIGINT/SIGTERM."
        ),
        epilog=(
            "Control API on the same port: GET /lmstudio-double/state, GET "
            "/lmstudio-double/calls, POST /lmstudio-double/load "
            '{"key": K, "kind": "embedding"|"llm", "identifier": I, "context_length": N}, '
            'POST /lmstudio-double/unload {"identifier": I} or {"all": true}. '
            "A plan pinned to it: embedding.backend 'lmstudio', identity.model KEY, "
            "identity.weights_sha256 and max_sequence_length from the ready line, "
            "lmstudio {api_host, models_dir}."
        ),
    )
    parser.add_argument("--port", type=int, required=True, help="port on 127.0.0.1 (0: any)")
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="KEY",
        help="embedding model to load (repeatable)",
    )
    parser.add_argument(
        "--llm", action="append", default=[], metavar="KEY", help="LLM to load (repeatable)"
    )
    parser.add_argument(
        "--context-length",
        type=int,
        metavar="N",
        default=DEFAULT_CONTEXT_LENGTH,
        help=f"context length of each loaded instance (default {DEFAULT_CONTEXT_LENGTH})",
    )
    parser.add_argument(
        "--dimension",
        type=int,
        metavar="N",
        default=DEFAULT_DIMENSION,
        help=f"embedding dimension (default {DEFAULT_DIMENSION})",
    )
    parser.add_argument(
        "--models-dir",
        type=Path,
        metavar="DIR",
        default=None,
        help="LM Studio models folder: weights files are created here and hashed",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the double until SIGINT or SIGTERM; 2 on a bad option."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        double = LMStudioDouble(
            port=args.port, dimension=args.dimension, models_dir=args.models_dir
        )
        for key in args.model:
            double.load(key, context_length=args.context_length)
        for key in args.llm:
            double.load(key, kind="llm", context_length=args.context_length)
        double.start()
    except (DoubleError, OSError) as error:
        parser.error(str(error))
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        print(json.dumps({"lmstudio_double": "listening", **double.state()}), flush=True)
        while not stop.wait(_POLL_SECONDS):
            pass
    finally:
        double.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
