"""The pytest runtime's objects declare their state in ``__init__``: an attribute first set
in a hook is read by another hook only if that hook never runs first, and a reader falls
back on ``getattr(self, name, default)``. Each attribute a runtime class stores outside
``__init__`` must be one an ``__init__`` of the runtime sets (the controller's sets its
xdist and terminal mixins' state too)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.software

RUNTIME = Path(__file__).resolve().parents[2] / "lib" / "prereg" / "runtime"


def _stored(function: ast.AST) -> dict[str, int]:
    return {
        node.attr: node.lineno
        for node in ast.walk(function)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    }


def test_runtime_classes_set_every_attribute_in_init_and_read_none_by_getattr_default():
    declared: set[str] = set()
    later: list[tuple[str, str]] = []
    defaults: list[str] = []
    for path in sorted(RUNTIME.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for function in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
                stored = _stored(function)
                if function.name == "__init__":
                    declared |= set(stored)
                else:
                    later += [(f"{path.name}:{line}", name) for name, line in stored.items()]
        defaults += [
            f"{path.name}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == "self"
        ]
    undeclared = sorted(f"{where} self.{name}" for where, name in later if name not in declared)
    assert undeclared == [], f"set outside every __init__ of the runtime: {undeclared}"
    assert defaults == [], f"getattr/hasattr on self: {defaults}"
