"""Importing a module of prereg leaves the process environment as it was.

A research session refuses a run whose environment holds a variable its allow-list does not
pass (``execution``: "the session's environment held ..."), and the session imports the
stage's modules before it records its environment. A module-level import of a package that
sets a variable at import (threadpoolctl and scikit-learn set ``KMP_DUPLICATE_LIB_OK``)
would then refuse every run of that stage. Each module is imported in a fresh interpreter,
with every extra this venv has."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.software

LIB = Path(__file__).resolve().parents[2] / "lib"
# Modules whose import runs something (the hermetic session's boot script runs pytest).
NOT_IMPORTED = {"prereg.runtime.hermetic_boot"}

# Imports each module named on the command line in turn, in one interpreter: a variable that
# appears or changes is charged to the first module whose import (with what it imports) did it.
PROBE = """
import importlib, json, os, sys
found, missing = {}, {}
for name in sys.argv[1:]:
    before = dict(os.environ)
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as error:
        missing[name] = str(error)
        continue
    after = dict(os.environ)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    if changed:
        found[name] = changed
print(json.dumps({"changed": found, "missing": missing}))
"""


def _modules() -> list[str]:
    found = []
    for path in sorted((LIB / "prereg").rglob("*.py")):
        parts = list(path.relative_to(LIB).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if name not in NOT_IMPORTED:
            found.append(name)
    return found


def _probe(*modules: str, env: dict | None = None) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *modules],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert done.returncode == 0, f"importing the modules failed: {done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_probe_charges_a_variable_to_the_module_that_set_it(tmp_path):
    (tmp_path / "quiet.py").write_text("X = 1\n")
    (tmp_path / "sets_a_variable.py").write_text("import os\nos.environ['PREREG_PROBE_X'] = '1'\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    found = _probe("quiet", "sets_a_variable", "quiet", env=env)
    assert found == {"changed": {"sets_a_variable": ["PREREG_PROBE_X"]}, "missing": {}}


def test_importing_any_module_of_prereg_changes_no_environment_variable():
    found = _probe(*_modules())
    assert found["changed"] == {}, f"these imports changed os.environ: {found['changed']}"
    # every extra is installed where the suite runs all of it (install.sh); a module that
    # cannot be imported is named, not skipped silently
    assert found["missing"] == {}, found["missing"]
