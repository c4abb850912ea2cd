"""prereg's folder in the user's cache: ``$XDG_CACHE_HOME/prereg``, else ``~/.cache/prereg``.

What is kept there is keyed by content (the GRU kernel's builds by their sources' hash,
bytecode comparisons by both files' hashes), so a stale entry is never found, only missed.
A hermetic session is given the user's cache folder by its path
(:data:`prereg.evidence.hermetic.CACHE_HOME`), so its caches stay warm across runs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def folder(*parts: str, environ: Mapping[str, str] | None = None) -> Path:
    """The folder ``parts`` of prereg's user cache (not created)."""
    environ = os.environ if environ is None else environ
    cache = environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(cache, "prereg", *parts)
