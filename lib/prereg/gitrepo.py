"""The few git questions the gate and the audit ask, answered by the git command line."""

from __future__ import annotations

import subprocess
from pathlib import Path


class GitError(RuntimeError):
    """git could not answer (not a repository, unknown commit, git missing)."""


def git(root: Path, *args: str, check: bool = True) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        raise GitError("git is not installed; install it (apt-get install git)") from None
    if check and done.returncode != 0:
        raise GitError(f"git {' '.join(args)} failed in {root}: {done.stderr.strip()}")
    return done.stdout


def toplevel(path: Path) -> Path:
    return Path(git(path, "rev-parse", "--show-toplevel").strip())


def head_commit(root: Path) -> str:
    return git(root, "rev-parse", "HEAD").strip()


def dirty_paths(root: Path) -> list[str]:
    """Tracked changes and untracked files that git does not ignore."""
    out = git(root, "status", "--porcelain", "--untracked-files=all")
    return [line[3:] for line in out.splitlines() if line.strip()]


def changed_between(root: Path, old: str, new: str) -> list[str]:
    return [p for p in git(root, "diff", "--name-only", old, new).splitlines() if p]


def is_ancestor(root: Path, old: str, new: str) -> bool:
    done = subprocess.run(
        ["git", "-C", str(root), "merge-base", "--is-ancestor", old, new],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def commit_exists(root: Path, commit: str) -> bool:
    return (
        subprocess.run(
            ["git", "-C", str(root), "cat-file", "-e", f"{commit}^{{commit}}"],
            capture_output=True,
            check=False,
        ).returncode
        == 0
    )


def show_bytes(root: Path, commit: str, path: str) -> bytes:
    done = subprocess.run(
        ["git", "-C", str(root), "show", f"{commit}:{path}"], capture_output=True, check=False
    )
    if done.returncode != 0:
        raise GitError(f"{path} does not exist at commit {commit[:12]} in {root}")
    return done.stdout
