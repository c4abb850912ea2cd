"""Fixtures for the LM Studio double checks: a double on a free loopback port and a real
``lmstudio.Client`` connected to it, both stopped after the test. The constants and helpers
the checks share are in :mod:`support.e04_doubles`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from prereg.e04.embeddings import lmstudio_client
from prereg.e04.lmstudio_double import LMStudioDouble
from support.e04_doubles import DIMENSION


@pytest.fixture
def double(tmp_path: Path) -> Iterator[LMStudioDouble]:
    with LMStudioDouble(dimension=DIMENSION, models_dir=tmp_path / "lmstudio-models") as server:
        yield server


@pytest.fixture
def client(double: LMStudioDouble) -> Iterator[Any]:
    with lmstudio_client(double.api_host) as connected:
        yield connected
