"""Every benchmark script imports: a module the checks moved or renamed breaks it here, in
the software run, not months later when someone measures again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.software

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
IMPORT_ALL = """
import importlib.util, sys
for path in sys.argv[1:]:
    spec = importlib.util.spec_from_file_location("bench_" + str(abs(hash(path))), path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
"""


def test_every_benchmark_script_imports():
    scripts = sorted(str(p) for p in BENCHMARKS.glob("*.py"))
    assert len(scripts) >= 5, scripts
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, *scripts],
        cwd=BENCHMARKS.parent, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
