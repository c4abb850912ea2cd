"""The tree is lint-clean and formatted (ruff, configured in pyproject.toml): a check, so CI's
one test command enforces it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.software

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("lib", "checks", "experiments", "benchmarks", "examples")


def _ruff() -> str:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (bash install.sh installs it with the dev extra)")
    return found


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff_finds_nothing(command):
    done = subprocess.run(
        [_ruff(), *command, *FOLDERS], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
