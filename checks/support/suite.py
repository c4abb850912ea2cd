"""checks/conftest.py as a module of its own: the suite's rules (which extras a check module
needs, the units of work and their recorded seconds) for the checks and tools that read
them. Imported by path under its own name, since ``import conftest`` finds whichever of the
suite's conftest.py files pytest imported last."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


def checks_conftest() -> ModuleType:
    """A fresh module of checks/conftest.py (its hooks are not registered anywhere)."""
    spec = importlib.util.spec_from_file_location("checks_conftest", CONFTEST)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
