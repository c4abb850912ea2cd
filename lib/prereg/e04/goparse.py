"""Go functions and syntax checks with tree-sitter-go.

Uses the ``tree-sitter`` (0.26) and ``tree-sitter-go`` (0.25) packages: a
``tree_sitter.Parser`` over ``tree_sitter.Language(tree_sitter_go.language())``.
Only top-level ``function_declaration`` and ``method_declaration`` nodes are
functions (Go has no nested declarations; function literals are expressions).
"""

from __future__ import annotations

import functools
import shutil
import subprocess

import tree_sitter
import tree_sitter_go

from prereg.e04.types import GoFunction

__all__ = [
    "GoParseError",
    "gofmt_check",
    "parse_go_functions",
    "syntax_errors",
]

_DECLARATIONS = ("function_declaration", "method_declaration")

#: Go's reserved words (The Go Programming Language Specification, "Keywords").
GO_KEYWORDS = frozenset(
    [
        "break",
        "case",
        "chan",
        "const",
        "continue",
        "default",
        "defer",
        "else",
        "fallthrough",
        "for",
        "func",
        "go",
        "goto",
        "if",
        "import",
        "interface",
        "map",
        "package",
        "range",
        "return",
        "select",
        "struct",
        "switch",
        "type",
        "var",
    ]
)


class GoParseError(TypeError):
    """The source handed to the parser is not bytes."""


@functools.cache
def _go_language() -> tree_sitter.Language:
    return tree_sitter.Language(tree_sitter_go.language())


def _parse(source: bytes, argument: str = "source") -> tree_sitter.Tree:
    if not isinstance(source, (bytes, bytearray)):
        raise GoParseError(
            f"{argument} must be bytes, got {type(source).__name__}; "
            "encode text with .encode('utf-8')"
        )
    # A parser per call: tree_sitter.Parser is not safe to share between threads.
    return tree_sitter.Parser(_go_language()).parse(bytes(source))


def _end_line(node: tree_sitter.Node) -> int:
    """1-based inclusive last line of ``node`` (a node ending at column 0 ends the line before)."""
    row, column = node.end_point
    if column == 0 and row > node.start_point[0]:
        return row
    return row + 1


def _receiver_type_name(receiver: tree_sitter.Node) -> str | None:
    """``Runner`` for receivers ``(r Runner)``, ``(r *Runner)``, ``(r *Runner[T])``,
    ``(*(Runner))``."""
    declarations = [c for c in receiver.named_children if c.type == "parameter_declaration"]
    if not declarations:
        return None
    node = declarations[0].child_by_field_name("type")
    while node is not None:
        if node.type == "type_identifier":
            return node.text.decode("utf-8", errors="replace")
        if node.type == "generic_type":
            node = node.child_by_field_name("type")
        elif node.type == "qualified_type":
            node = node.child_by_field_name("name")
        elif node.type in ("pointer_type", "parenthesized_type"):
            named = node.named_children
            node = named[0] if named else None
        else:
            return None
    return None


def parse_go_functions(path: str, source: bytes) -> tuple[GoFunction, ...]:
    """Every top-level function and method of a Go file, in source order.

    Parameters
    ----------
    path : str
        Repository-relative path, copied into each record.
    source : bytes
        The file's bytes (UTF-8; invalid bytes are replaced in ``text``).

    Returns
    -------
    tuple of GoFunction
        ``name`` is the declared name; ``receiver`` the receiver's type name
        without ``*``, parentheses, package qualifier or type parameters
        (``None`` for plain functions); ``start_line``/``end_line`` are the
        1-based inclusive lines of the declaration node (``func`` keyword to
        closing brace; a preceding doc comment is not included); ``text`` is
        the declaration's source. A declaration without a name (only possible
        in a file with syntax errors) is skipped.
    """
    if not isinstance(path, str) or not path:
        raise GoParseError(f"path={path!r} must be a non-empty string")
    tree = _parse(source)
    data = bytes(source)
    functions = []
    for node in tree.root_node.named_children:
        if node.type not in _DECLARATIONS:
            continue
        name_node = node.child_by_field_name("name")
        if name_node is None or name_node.is_missing:
            continue
        receiver = None
        if node.type == "method_declaration":
            receiver_node = node.child_by_field_name("receiver")
            receiver = _receiver_type_name(receiver_node) if receiver_node else None
        functions.append(
            GoFunction(
                path=path,
                name=name_node.text.decode("utf-8", errors="replace"),
                receiver=receiver,
                start_line=node.start_point[0] + 1,
                end_line=_end_line(node),
                text=data[node.start_byte : node.end_byte].decode("utf-8", errors="replace"),
            )
        )
    return tuple(functions)


def syntax_errors(source: bytes) -> list[tuple[int, int]]:
    """Positions of tree-sitter ``ERROR`` and ``MISSING`` nodes, in document order.

    Returns
    -------
    list of (int, int)
        ``(line, column)``, both 1-based, the column counted in bytes. Empty
        for a file tree-sitter-go parses without error.
    """
    tree = _parse(source)
    if not tree.root_node.has_error:
        return []
    found: list[tuple[int, int]] = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            found.append((node.start_point[0] + 1, node.start_point[1] + 1))
        if node.has_error:
            stack.extend(reversed(node.children))
    return sorted(found)


def gofmt_check(source: bytes, gofmt: str | None = None) -> bool | None:
    """Whether ``gofmt -e`` accepts ``source``; ``None`` when no gofmt binary is found.

    Parameters
    ----------
    source : bytes
        Go source.
    gofmt : str, optional
        Path or name of the binary; by default ``gofmt`` looked up on ``PATH``.

    Returns
    -------
    bool or None
        ``True`` if gofmt parsed the file (exit status 0), ``False`` if it
        reported an error, ``None`` if the binary is absent. Formatting
        differences do not count: only syntax is checked.
    """
    if not isinstance(source, (bytes, bytearray)):
        raise GoParseError(f"source must be bytes, got {type(source).__name__}")
    binary = shutil.which(gofmt or "gofmt")
    if binary is None:
        return None
    done = subprocess.run([binary, "-e"], input=bytes(source), capture_output=True, check=False)
    return done.returncode == 0
