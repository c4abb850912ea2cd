"""Every import inside a function or class of lib/prereg says why it is not at module level.

An import belongs at module level, where the import graph (and import-linter's layer
contract, see .importlinter) shows it. One inside a function is for an optional extra
(torch, faiss, lmstudio, ...), a heavy module kept off a light path (matplotlib off
``import prereg.api``, the commands' modules off ``prereg --help``), or an order the code
needs (the hermetic boot imports pytest only once sys.path is fixed); its reason is a comment
on its line or on the line just above. An import right below an explained one (no line
between) shares its reason. ``# type: ignore`` and ``# noqa`` comments are no reasons.
"""

from __future__ import annotations

import ast
import io
import keyword
import tokenize
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.software

PACKAGE = Path(__file__).resolve().parents[2] / "lib" / "prereg"
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
NOT_REASONS = ("type:", "noqa", "pragma:")


def _reason_rows(source: str) -> set[int]:
    """The rows holding a comment that can be a reason."""
    rows = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            text = token.string.lstrip("#").strip()
            if text and not text.startswith(NOT_REASONS):
                rows.add(token.start[0])
    return rows


def _nested_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []

    def walk(node: ast.AST, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if nested and isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            walk(child, nested or isinstance(child, SCOPES))

    walk(tree, False)
    return sorted(found, key=lambda n: n.lineno)


def unexplained_imports(source: str, name: str) -> list[str]:
    """One finding per import inside a function or class of ``source`` (the file ``name``)
    that has no reason comment on its lines or just above, nor an explained import just above."""
    lines = source.splitlines()
    reasons = _reason_rows(source)
    explained_ends: set[int] = set()
    findings = []
    for node in _nested_imports(ast.parse(source)):
        own = any(row in reasons for row in range(node.lineno, node.end_lineno + 1))
        above = node.lineno - 1
        comment_above = above in reasons and lines[above - 1].lstrip().startswith("#")
        if own or comment_above or above in explained_ends:
            explained_ends.add(node.end_lineno)
            continue
        statement = lines[node.lineno - 1].strip()
        findings.append(
            f"{name}:{node.lineno}: `{statement}` is inside a function or class with no reason: "
            "move it to the top of the module, or say why it stays there in a comment on its "
            "line or just above (e.g. `# torch: the training extra, optional`)"
        )
    return findings


def test_every_function_level_import_of_prereg_has_its_reason():
    findings = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE.parents[1]).as_posix()
        findings += unexplained_imports(path.read_text(encoding="utf-8"), name)
    assert not findings, "\n".join(findings)


def test_an_import_without_a_reason_is_found_where_it_is():
    source = (
        "import json\n"
        "\n"
        "def f():\n"
        "    import torch  # type: ignore[import-not-found]\n"
        "    from prereg.kinds.stages import (\n"
        "        load_kind,\n"
        "    )\n"
        "\n"
        "class C:\n"
        "    import queue\n"
        "\n"
        "g = lambda: __import__('os')\n"
    )
    findings = unexplained_imports(source, "lib/prereg/x.py")
    assert [f.split(":")[1] for f in findings] == ["4", "5", "10"]
    assert findings[0].startswith("lib/prereg/x.py:4: `import torch  # type: ignore")
    assert "move it to the top of the module" in findings[0]


def test_a_reason_on_the_line_above_or_the_line_itself_or_the_block_explains_it():
    source = (
        "def f():\n"
        "    # torch: the training extra, optional\n"
        "    import torch\n"
        "    from torch import nn\n"
        "\n"
        "    import faiss  # faiss: the e04 extra, optional\n"
        "    from prereg.kinds.stages import (  # a layer above\n"
        "        load_kind,\n"
        "    )\n"
        "    x = 1\n"
        "    import queue\n"
    )
    findings = unexplained_imports(source, "m.py")
    assert [f.split(":")[1] for f in findings] == ["11"]


def test_a_comment_in_a_string_or_after_a_blank_line_is_no_reason():
    source = (
        "def f():\n"
        "    s = '# not a comment'\n"
        "    import torch\n"
        "    # a reason, but a line away\n"
        "\n"
        "    import faiss\n"
    )
    assert [f.split(":")[1] for f in unexplained_imports(source, "m.py")] == ["3", "6"]


@given(
    # Dotted names whose every part can be imported: a keyword ("as", "if") is no name.
    module=st.from_regex(r"[a-z][a-z0-9_]{0,8}(\.[a-z][a-z0-9_]{0,8}){0,2}", fullmatch=True).filter(
        lambda name: not any(keyword.iskeyword(part) for part in name.split("."))
    ),
    place=st.sampled_from(["none", "same", "above", "module"]),
    depth=st.integers(min_value=1, max_value=3),
)
def test_an_import_is_found_exactly_when_nested_and_unexplained(module, place, depth):
    lines = []
    for level in range(depth):
        lines.append("    " * level + f"def f{level}():")
    indent = "    " * depth
    if place == "module":
        lines = [f"import {module}"] + lines + [indent + "pass"]
    else:
        if place == "above":
            lines.append(indent + f"# {module}: optional")
        lines.append(indent + f"import {module}" + ("  # heavy" if place == "same" else ""))
    findings = unexplained_imports("\n".join(lines) + "\n", "m.py")
    assert bool(findings) == (place == "none")
