"""A stage in forty lines: the worked example and a two-stage study that ``prereg init``
writes each need at most 40 lines for prereg per stage, counted by
``benchmarks/count_stage_lines.py`` (code lines of the kind and experiments modules, less
the science), whose counting is checked here too."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.software

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "count_stage_lines.py"


def _counter():
    spec = importlib.util.spec_from_file_location("count_stage_lines", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


counter = _counter()

SNIPPET = '''"""Module docstring,
on two lines."""

import json  # a comment


def science(x):
    """Left out by name."""
    return x + 1


@staticmethod
def harness(
    y,
):
    """Its docstring is not code."""
    # nor is a comment
    return json.dumps(y)
'''


def test_code_lines_leave_out_docstrings_comments_blank_lines_and_the_named_science():
    assert counter.code_lines(SNIPPET) == 8  # the import, science's two, harness's five
    assert counter.code_lines(SNIPPET, frozenset({"science"})) == 6
    assert counter.code_lines(SNIPPET, frozenset({"science", "harness"})) == 1


@given(
    st.lists(st.sampled_from(["", "# note", "    # indented note", '"""a string"""']), max_size=6),
    st.integers(min_value=1, max_value=8),
)
def test_blank_lines_comments_and_docstrings_never_count(padding, statements):
    body = "\n".join(f"x{i} = {i}" for i in range(statements))
    source = '"""Doc."""\n' + "\n".join(line for line in padding if line != '"""a string"""')
    assert counter.code_lines(source + "\n" + body + "\n") == statements


def test_the_worked_example_and_a_scaffolded_two_stage_study_need_at_most_40_lines_a_stage():
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    totals = [line.split() for line in done.stdout.splitlines() if "stage total" in line]
    assert [fields[0] for fields in totals] == ["paired", "train", "decision"], done.stdout
    assert all(int(fields[3]) <= counter.GOAL for fields in totals), done.stdout
