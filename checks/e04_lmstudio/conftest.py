"""Fixtures for the LM Studio double checks: a double on a free loopback port and a real
``lmstudio.Client`` connected to it, both stopped after the test. Puts this folder on
sys.path so the checks can import lmstudio_double_support."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from lmstudio_double_support import DIMENSION

from prereg.e04.embeddings import lmstudio_client
from prereg.e04.lmstudio_double import LMStudioDouble


@pytest.fixture
def double(tmp_path: Path) -> Iterator[LMStudioDouble]:
    with LMStudioDouble(dimension=DIMENSION, models_dir=tmp_path / "lmstudio-models") as server:
        yield server


@pytest.fixture
def client(double: LMStudioDouble) -> Iterator[Any]:
    with lmstudio_client(double.api_host) as connected:
        yield connected
