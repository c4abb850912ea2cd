"""``pip install prereg`` gives any project ``--research-stage`` through a ``pytest11``
entry point, and that entry is the only pytest plugin that package metadata inside a
checkout may declare (``lib/prereg.egg-info`` of ``pip install -e .``).

The entry point's name equals its module's name (``prereg.plugin``), so a conftest.py's
``pytest_plugins = ("prereg.plugin",)`` and the autoloaded entry are one plugin: pytest skips
a name already registered, with autoload on or off.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from prereg.evidence import execution
from prereg.testing import ScratchProject
from support.distributions import checkout_with_metadata

pytestmark = pytest.mark.software

REPO = Path(__file__).resolve().parents[2]


def test_pyproject_declares_exactly_the_allowed_entry_point():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    name, value = execution.PYTEST_PLUGIN_ENTRY_POINT
    assert project["entry-points"]["pytest11"] == {name: value}
    assert name == value, "the entry point's name is its module's name (see pyproject.toml)"


def _checkout_with_prereg_metadata(root: Path, entry_points: str) -> execution.Checkout:
    """A committed checkout holding lib/prereg/plugin.py, and an ignored egg-info beside it."""
    checkout_with_metadata(root, "prereg.egg-info", entry_points, name="prereg")
    return execution.Checkout.read(root, strict=True)


def test_the_editable_install_metadata_of_prereg_itself_passes(tmp_path):
    name, value = execution.PYTEST_PLUGIN_ENTRY_POINT
    points = f"[console_scripts]\nprereg = prereg.cli:main\n\n[pytest11]\n{name} = {value}\n"
    checkout = _checkout_with_prereg_metadata(tmp_path / "scratch", points)
    assert execution._ignored_problems(checkout, []) == []


@pytest.mark.parametrize(
    "declared",
    [
        "prereg.plugin = prereg.testing",  # the allowed name, redirected to other code
        "prereg.plugin = prereg.plugin:evil",  # an attribute of the module, not the module
        "prereg_plugin = prereg.plugin",  # another name: pytest would register it twice
        "other = prereg.cli",
    ],
)
def test_every_other_pytest11_entry_in_checkout_metadata_is_refused(tmp_path, declared):
    checkout = _checkout_with_prereg_metadata(tmp_path / "scratch", f"[pytest11]\n{declared}\n")
    found = execution._ignored_problems(checkout, [])
    assert len(found) == 1, found
    assert "lib/prereg.egg-info" in found[0] and "pytest plugin" in found[0], found


def _project(root: Path, conftest: bool) -> ScratchProject:
    root.mkdir()
    (root / "pytest.ini").write_text("[pytest]\naddopts = -p no:randomly -p no:cacheprovider\n")
    if conftest:
        (root / "conftest.py").write_text('pytest_plugins = ("prereg.plugin",)\n')
    (root / "test_one.py").write_text("def test_one():\n    pass\n")
    return ScratchProject(root)


@pytest.mark.parametrize(
    ("conftest", "autoload"),
    [(False, True), (True, True), (True, False)],
    ids=["entry-point-only", "entry-point-and-conftest", "conftest-without-autoload"],
)
def test_the_plugin_loads_once_by_entry_point_or_conftest(tmp_path, conftest, autoload):
    project = _project(tmp_path / "project", conftest)
    env = {} if autoload else {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    helped = project.run(sys.executable, "-m", "pytest", "--help", env=env)
    assert helped.returncode == 0, helped.stdout + helped.stderr
    assert "--research-stage" in helped.stdout
    done = project.run(sys.executable, "-m", "pytest", "-q", env=env)
    text = done.stdout + done.stderr
    assert done.returncode == 0 and "1 passed" in text, text
    assert "already registered" not in text, text
