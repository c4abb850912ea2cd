"""The layout of checks/ that checks/README.md describes holds.

Every check module sets a module-level ``pytestmark`` holding ``pytest.mark.software``: CI runs
``pytest -m software``, so a module without it is never run at all. Every folder of checks
is a row of the README's table, so a successor knows where a new check goes.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.software

CHECKS = Path(__file__).resolve().parents[1]
README = CHECKS / "README.md"


def module_marks(source: str) -> set[str] | None:
    """The ``pytest.mark.NAME`` names of a module-level ``pytestmark`` (a mark or a list or
    tuple of marks); None when the module assigns no ``pytestmark``."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            values = (
                node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            )
            marks = set()
            for value in values:
                target = value.func if isinstance(value, ast.Call) else value
                if isinstance(target, ast.Attribute):
                    marks.add(target.attr)
            return marks
    return None


def unmarked_modules(root: Path) -> list[str]:
    """Check modules under ``root`` whose first module-level ``pytestmark`` lacks ``software``."""
    return sorted(
        path.relative_to(root).as_posix()
        for path in root.rglob("test_*.py")
        if "software" not in (module_marks(path.read_text(encoding="utf-8")) or set())
    )


def table_folders(readme: str) -> set[str]:
    """The folders the first column of the README's table names (``gate/``, ``rp002a/``)."""
    return set(re.findall(r"^\| `([\w./-]+)/`", readme, flags=re.MULTILINE))


def check_folders(root: Path) -> set[str]:
    """The top-level folders of ``root`` that hold Python files."""
    return {p.name for p in root.iterdir() if p.is_dir() and any(p.rglob("*.py"))}


def test_every_check_module_is_marked_software():
    assert unmarked_modules(CHECKS) == []


def test_the_readme_table_names_every_folder_of_checks_and_no_other():
    named, present = table_folders(README.read_text(encoding="utf-8")), check_folders(CHECKS)
    assert named - present == set(), "named in checks/README.md but not a folder"
    assert present - named == set(), "a folder of checks/ missing from checks/README.md's table"


@pytest.mark.parametrize(
    ("source", "marks"),
    [
        ("import pytest\npytestmark = pytest.mark.software\n", {"software"}),
        ("pytestmark = [pytest.mark.software, pytest.mark.attack]\n", {"software", "attack"}),
        (
            "pytestmark = (pytest.mark.slow, pytest.mark.research_stage('toy'))\n",
            {"slow", "research_stage"},
        ),
        ("import pytest\n\ndef test_x():\n    pytestmark = pytest.mark.software\n", None),
        ("x = 1\n", None),
    ],
)
def test_module_marks_reads_the_module_level_assignment_only(source, marks):
    assert module_marks(source) == marks


def test_the_layout_checks_find_an_unmarked_module_and_an_unnamed_folder(tmp_path):
    (tmp_path / "named").mkdir()
    (tmp_path / "named" / "test_a.py").write_text("pytestmark = pytest.mark.software\n")
    (tmp_path / "named" / "test_b.py").write_text("def test_b():\n    pass\n")
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "helper.py").write_text("")
    (tmp_path / "empty").mkdir()
    assert unmarked_modules(tmp_path) == ["named/test_b.py"]
    readme = "| folder | what |\n|---|---|\n| `named/` | x |\n| `gone/` | y |\n"
    assert table_folders(readme) == {"named", "gone"}
    assert check_folders(tmp_path) == {"named", "extra"}
