"""Records are parsed in prereg.records only: every other module of prereg's core reads a
record through :mod:`prereg.records.formats` (typed) or :mod:`prereg.records.documents` (the
strict JSON door), so that no reader keeps a repeated key, NaN or a second document another
reader refuses. A ``json.loads`` or ``json.load`` outside records/ reads data that is no
record, and says so here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.software

PACKAGE = Path(__file__).resolve().parents[2] / "lib" / "prereg"
# The protocols read their own inputs and caches; the door itself parses.
OUTSIDE = ("records", "rp002a", "e04")
DOOR = "base/hashing.py"
# Module -> why its JSON is no record (each call of the module counts).
NOT_RECORDS = {
    "runtime/controller.py": "an item's user property as the item's process sent it (a "
    "non-finite coordinate is the item's error to record, not the reader's)",
    "runtime/listing.py": "the clean listing's node ids, written by its own interpreter",
    "runtime/rehearsal.py": "the launcher's reasons in an environment variable",
    "runtime/remote.py": "messages over an execnet channel",
    "decisions/approval.py": "a plan file (plans are read by prereg.kinds.plans) and a "
    "run id in a file the approval only counts",
    "decisions/replay.py": "the replay's answer from its own process",
    "decisions/replay_boot.py": "the replay's question from its parent",
    "evidence/execution.py": "pip's direct_url.json of an installed distribution",
    "commands/scaffold.py": "a plan file the scaffold writes",
    "testing.py": "a manifest in a check's helper (checks read what they assert on)",
}


def json_reads(source: str) -> int:
    """The calls of ``json.loads`` and ``json.load`` in ``source``."""
    return sum(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("loads", "load")
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "json"
        for node in ast.walk(ast.parse(source))
    )


def core_modules() -> dict[str, Path]:
    return {
        path.relative_to(PACKAGE).as_posix(): path
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] not in OUTSIDE
        and path.relative_to(PACKAGE).as_posix() != DOOR
    }


def test_no_module_outside_records_parses_a_record():
    reading = {rel for rel, path in core_modules().items() if json_reads(path.read_text())}
    assert reading <= set(NOT_RECORDS), (
        f"{sorted(reading - set(NOT_RECORDS))} parse JSON themselves: read a record with "
        "prereg.records.formats.load (or documents.loads), or say here why the data is no record"
    )
    assert set(NOT_RECORDS) <= reading, f"no longer parsing JSON: {set(NOT_RECORDS) - reading}"


def test_a_json_read_is_found_and_a_dump_is_not():
    source = "import json\nx = json.loads(b)\ny = json.load(f)\nz = json.dumps(x)\nloads(b)\n"
    assert json_reads(source) == 2
