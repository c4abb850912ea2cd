"""The wheel checks share one wheel built from HEAD (one build per session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.wheelhouse import build_head_wheel, user_env


@pytest.fixture(scope="session")
def head_wheel(tmp_path_factory) -> Path:
    """prereg's wheel from the checkout's committed files, built from a shell in which no
    environment is active; read only."""
    base = tmp_path_factory.mktemp("head-wheel")
    return build_head_wheel(base, user_env(base / "none"))
