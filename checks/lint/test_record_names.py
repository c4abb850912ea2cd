"""Every file name under runs/ is spelled once, in prereg.records: a writer and its reader
cannot disagree on one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import prereg
from prereg import records

pytestmark = pytest.mark.software

PACKAGE = Path(prereg.__file__).parent
# The names with a suffix: as a whole string constant they can only mean the record's file
# ("items" or "summary" alone are also manifest fields, so they are not looked for).
FILE_NAMES = {
    value
    for name, value in vars(records).items()
    if name.isupper() and isinstance(value, str) and "." in value and "/" not in value
}


def spelled(source: str) -> list[tuple[int, str]]:
    """(line, name) of every string constant of ``source`` that is a record's file name or a
    path ending in one (an f-string's literal part included); prose, with spaces, is not."""
    return [
        (node.lineno, name)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and " " not in node.value
        for name in FILE_NAMES
        if node.value == name or node.value.endswith(f"/{name}")
    ]


def test_the_file_names_looked_for_are_the_run_folders():
    assert {"manifest.json", "start.json", "items.jsonl", "junit.xml", "rehearsal.json"} <= (
        FILE_NAMES
    )


def test_no_module_but_records_spells_a_record_file_name():
    found = {
        f"{path.relative_to(PACKAGE)}:{line}": name
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "records" / "__init__.py"
        for line, name in spelled(path.read_text())
    }
    assert not found, f"use the name from prereg.records: {found}"


def test_a_spelled_name_is_found_and_a_mention_in_prose_is_not():
    source = (
        'PATH = "manifest.json"\n"""Reads ``manifest.json``."""\nx = f"{d}/start.json"\n'
        'ERROR = "could not write runs/<run-id>/junit.xml"\n'
    )
    assert sorted(spelled(source)) == [(1, "manifest.json"), (3, "start.json")]
