"""The code a research run executes: every loaded module and plugin accounted for.

(Being built: see issue 10, item 3.)
"""

from __future__ import annotations

from pathlib import Path


def problems(root: Path, plugins: list[tuple[str, object]]) -> list[str]:
    """Each way this process's code escapes the approved checkout and recorded packages."""
    return []


def record(root: Path, plugins: list[tuple[str, object]]) -> dict:
    """What the manifest records of the execution environment."""
    return {}
