from __future__ import annotations

from pathlib import Path

import pytest

from support.toy import ToyRepo, make_toy_repo


@pytest.fixture
def toy(tmp_path: Path) -> ToyRepo:
    """A throw-away git repository holding a toy research stage."""
    return make_toy_repo(tmp_path / "toy")
