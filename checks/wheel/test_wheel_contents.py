"""The wheel holds no test-only code.

The checks' helpers (scratch projects, toy stages, socket hosts, fake distributions, LM
Studio stand-ins) live in ``checks/support/``, which is never packaged. Of the testing code,
the wheel keeps only what users are told to call: ``prereg.testing.ScratchProject`` and
``prereg.testing.terminal_signals`` (docs/API.md, docs/how-to/background-runs.md).
"""

from __future__ import annotations

import ast
import zipfile
from pathlib import PurePosixPath

import pytest

from support.checkout import CHECKOUT

pytestmark = pytest.mark.software

# Module or package names of test scaffolding: none of them belongs in the wheel ...
TEST_ONLY_NAMES = {"scratch", "testing", "conftest", "support"}
# ... except the module users test their own stages with, holding only these names.
USER_TESTING = "prereg/testing.py"
USER_TESTING_NAMES = {"ScratchProject", "outer_environment", "terminal_signals"}


def scaffold_files(files: list[str]) -> list[str]:
    """The ``.py`` files of ``files`` (paths inside a wheel or under ``lib/``) that are test
    scaffolding: a module or package named as in TEST_ONLY_NAMES or ``test_*``, other than
    USER_TESTING."""
    found = []
    for name in files:
        path = PurePosixPath(name)
        if path.suffix != ".py" or name == USER_TESTING:
            continue
        parts = [*path.parent.parts, path.stem]
        if any(part in TEST_ONLY_NAMES or part.startswith("test_") for part in parts):
            found.append(name)
    return found


def public_names(source: str) -> set[str]:
    """The public names a module's source defines at top level (functions, classes,
    assignments)."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return {name for name in names if not name.startswith("_")}


def problems(files: dict[str, str]) -> list[str]:
    """What test-only code ``files`` (path -> text of each ``.py`` file to be installed)
    hold, each naming the file and what to do."""
    found = [
        f"{name} is test-only code in the wheel: move it under checks/support/"
        for name in scaffold_files(sorted(files))
    ]
    extra = public_names(files.get(USER_TESTING, "")) - USER_TESTING_NAMES
    if extra:
        found.append(
            f"{USER_TESTING} defines {sorted(extra)} besides {sorted(USER_TESTING_NAMES)}: "
            "move the checks' helpers under checks/support/ (or document a name users call "
            "and add it to USER_TESTING_NAMES)"
        )
    return found


def test_scaffolding_anywhere_in_the_package_is_found():
    files = {
        "prereg/__init__.py": "",
        USER_TESTING: "class ScratchProject: ...\ndef terminal_signals(): ...\n",
        "prereg/e04/scratch.py": "",
        "prereg/rp002a/testing.py": "",
        "prereg/support/toy.py": "",
        "prereg/rp002a/stats/test_bounds.py": "",
        "prereg/e04/testing/__init__.py": "",
        "prereg/conftest.py": "",
        "prereg/e04/lmstudio_double.py": "",
        "prereg/commands/scaffold.py": "",
    }
    assert scaffold_files(sorted(files)) == [
        "prereg/conftest.py",
        "prereg/e04/scratch.py",
        "prereg/e04/testing/__init__.py",
        "prereg/rp002a/stats/test_bounds.py",
        "prereg/rp002a/testing.py",
        "prereg/support/toy.py",
    ]
    helpers = "class ToyRepo: ...\ndef make_toy_repo(): ...\nPINS = {}\n_private = 1\n"
    (found,) = problems({USER_TESTING: files[USER_TESTING] + helpers})
    assert found.startswith(f"{USER_TESTING} defines ['PINS', 'ToyRepo', 'make_toy_repo']")


def test_the_package_source_holds_no_test_only_code():
    lib = CHECKOUT / "lib"
    files = {
        p.relative_to(lib).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted((lib / "prereg").rglob("*.py"))
    }
    assert USER_TESTING in files
    found = problems(files)
    assert not found, "\n".join(found)


@pytest.mark.slow  # reads the wheel of HEAD (built once for checks/wheel)
def test_the_wheel_built_from_head_holds_no_test_only_code(head_wheel):
    wheel = head_wheel
    with zipfile.ZipFile(wheel) as archive_file:
        files = {
            name: archive_file.read(name).decode("utf-8")
            for name in archive_file.namelist()
            if name.endswith(".py")
        }
    assert USER_TESTING in files, sorted(files)
    found = problems(files)
    assert not found, f"{wheel.name}:\n" + "\n".join(found)
