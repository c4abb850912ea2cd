"""Constants and helpers shared by the LM Studio double checks (not a test module)."""

from __future__ import annotations

import hashlib
import signal
import subprocess
from typing import Any

from prereg.e04.embeddings import LMStudioBackend
from prereg.e04.lmstudio_double import LMStudioDouble, default_weights_bytes

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
