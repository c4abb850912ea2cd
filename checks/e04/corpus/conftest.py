"""Fixtures of the E04 corpus checks: throwaway git repositories and the synthetic fixture."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest

from prereg.e04.synthetic import SyntheticFixture, make_synthetic_repository

# The E02 code revision named by the E04 protocol; a plan value, repeated here as test data.
CODE_REVISION = "1a7066f6c7682793b6f04445c776a93cc4fac895"


def git(repo: Path, *args: str) -> str:
    env = dict(
        os.environ,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.invalid",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.invalid",
        GIT_AUTHOR_DATE="2024-01-01T00:00:00Z",
        GIT_COMMITTER_DATE="2024-01-01T00:00:00Z",
    )
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True, env=env)
    return done.stdout.decode().strip()


MakeRepo = Callable[[Sequence[Mapping[str, str | None]]], tuple[Path, list[str]]]


@pytest.fixture
def make_repo(tmp_path: Path) -> MakeRepo:
    """Build a repository from a list of commits, each ``{path: content or None (delete)}``."""

    def build(commits: Sequence[Mapping[str, str | None]]) -> tuple[Path, list[str]]:
        repo = tmp_path / f"repo{len(list(tmp_path.iterdir()))}"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        ids = []
        for number, changes in enumerate(commits):
            for path, content in changes.items():
                file = repo / path
                if content is None:
                    file.unlink()
                else:
                    file.parent.mkdir(parents=True, exist_ok=True)
                    file.write_text(content)
            git(repo, "add", "-A")
            git(repo, "commit", "-q", "--allow-empty", "-m", f"commit {number}")
            ids.append(git(repo, "rev-parse", "HEAD"))
        return repo, ids

    return build


@pytest.fixture(scope="session")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> SyntheticFixture:
    """One synthetic repository (15 tasks) shared by the read-only checks."""
    return make_synthetic_repository(
        tmp_path_factory.mktemp("synthetic") / "fixture",
        rng=np.random.default_rng(20261009),
        tasks=15,
        code_revision=CODE_REVISION,
    )


@pytest.fixture
def run_git() -> Callable[..., str]:
    """``run_git(repo, *args)``: run git with fixed identity and dates; stdout stripped."""
    return git
