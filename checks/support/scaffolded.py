"""What code that ``prereg init`` writes imports from prereg."""

from __future__ import annotations

import ast


def prereg_imports(source: str) -> set[str]:
    """What Python source imports from prereg: ``prereg.x`` per module, ``prereg.x.name`` per
    name of a ``from prereg.x import name`` (so ``from prereg import api`` is ``prereg.api``)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "prereg"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "prereg":
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found
