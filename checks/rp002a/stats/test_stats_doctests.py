"""The Examples sections of the statistics core run as doctests."""

from __future__ import annotations

import doctest
import importlib

import pytest

pytestmark = pytest.mark.software


@pytest.mark.parametrize("module", ["intervals", "decisions", "binomial"])
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(f"prereg.rp002a.stats.{module}"))
    assert result.attempted > 0
    assert result.failed == 0
