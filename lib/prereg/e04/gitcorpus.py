"""A retrieval corpus read from git objects at one revision.

Everything here reads the object database only (``git ls-tree``, ``git cat-file``,
``git rev-parse``) through ``git -C <repo>``; the work tree and the index are never
read or written, so a corpus at any revision can be built while the checkout sits
elsewhere (E04: "The repository checkout and build are not modified").
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import MutableMapping
from pathlib import Path

__all__ = [
    "GitCorpusError",
    "check_repository",
    "file_exists_at",
    "first_parent",
    "read_blob_at",
    "read_tree",
    "resolve_commit",
]


class GitCorpusError(ValueError):
    """A repository, revision or path cannot be read as asked."""


def _git_environment() -> dict[str, str]:
    """The caller's environment with user/system git configuration switched off.

    A user's ``core.*`` or ``diff.*`` settings must not change what a corpus
    reads, so the global and system configuration files are ignored, and so are
    replace refs (``git replace``).
    """
    env = dict(os.environ)
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["GIT_CONFIG_GLOBAL"] = os.devnull
    env["GIT_OPTIONAL_LOCKS"] = "0"  # never refresh the index as a side effect
    # refs/replace/* would show other content under an object's id: read the commit's own
    env["GIT_NO_REPLACE_OBJECTS"] = "1"
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    env.pop("GIT_INDEX_FILE", None)
    return env


def _run_git(
    repo: Path, *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        input=stdin,
        capture_output=True,
        check=False,
        env=_git_environment(),
    )


def check_repository(repo: str | os.PathLike[str]) -> Path:
    """``Path(repo)`` after checking it is the top of a git work tree or a bare repository.

    Raises
    ------
    GitCorpusError
        If ``repo`` is not a directory, not a repository, or a subdirectory of one.
    """
    path = Path(repo)
    if not path.is_dir():
        raise GitCorpusError(
            f"repo={str(repo)!r} is not a directory; pass the path of a git repository"
        )
    done = _run_git(path, "rev-parse", "--is-bare-repository", "--absolute-git-dir")
    if done.returncode != 0:
        raise GitCorpusError(
            f"repo={str(repo)!r} is not a git repository "
            f"({done.stderr.decode(errors='replace').strip()}); "
            "pass the top directory of a git clone"
        )
    is_bare, git_dir = done.stdout.decode().splitlines()[:2]
    if is_bare == "true":
        top = Path(git_dir)
    else:
        shown = _run_git(path, "rev-parse", "--show-toplevel")
        top = Path(shown.stdout.decode().strip())
    if top.resolve() != path.resolve():
        raise GitCorpusError(
            f"repo={str(repo)!r} is inside the git repository {str(top)!r} but is not "
            "its top directory; pass the repository's top directory"
        )
    return path


def resolve_commit(repo: str | os.PathLike[str], rev: str) -> str:
    """The full object name of the commit that ``rev`` names in ``repo``.

    Raises
    ------
    GitCorpusError
        If ``repo`` is not a repository or ``rev`` names no commit there.
    """
    path = check_repository(repo)
    if not isinstance(rev, str) or not rev or rev.startswith("-") or "\n" in rev:
        raise GitCorpusError(
            f"rev={rev!r} is not a usable revision for repo={str(repo)!r}; "
            "pass a commit id, branch or tag name"
        )
    done = _run_git(path, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if done.returncode != 0:
        raise GitCorpusError(
            f"revision {rev!r} names no commit in repo={str(repo)!r}; "
            "fetch it or correct the revision"
        )
    return done.stdout.decode().strip()


def first_parent(repo: str | os.PathLike[str], commit: str) -> str:
    """The full object name of the first parent of ``commit``.

    Raises
    ------
    GitCorpusError
        If the commit is unknown or is a root commit (has no parent).
    """
    sha = resolve_commit(repo, commit)
    done = _run_git(Path(repo), "rev-list", "--parents", "-n", "1", sha)
    fields = done.stdout.decode().split()
    if done.returncode != 0 or not fields:
        raise GitCorpusError(f"cannot list parents of {commit!r} in repo={str(repo)!r}")
    if len(fields) < 2:
        raise GitCorpusError(
            f"commit {commit!r} ({sha}) in repo={str(repo)!r} has no parent; "
            "a base commit needs a first parent to build the S001 corpus"
        )
    return fields[1]


def _tree_entries(path: Path, sha: str) -> list[tuple[str, str, str, str]]:
    """``(mode, type, object, path)`` for every entry of the commit's tree, recursively."""
    done = _run_git(path, "ls-tree", "-r", "-z", "--full-tree", sha)
    if done.returncode != 0:
        raise GitCorpusError(
            f"git ls-tree failed for {sha} in repo={str(path)!r}: "
            f"{done.stderr.decode(errors='replace').strip()}"
        )
    entries = []
    for record in done.stdout.split(b"\0"):
        if not record:
            continue
        meta, _, raw_path = record.partition(b"\t")
        mode, kind, obj = meta.decode().split(" ")
        try:
            name = raw_path.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GitCorpusError(
                f"path {raw_path!r} at {sha} in repo={str(path)!r} is not UTF-8; "
                "rename it or exclude it from the corpus"
            ) from exc
        entries.append((mode, kind, obj, name))
    return entries


def _cat_blobs(path: Path, objects: list[str]) -> list[bytes]:
    """Contents of ``objects`` (blob ids) from one ``git cat-file --batch`` process."""
    if not objects:
        return []
    done = _run_git(path, "cat-file", "--batch", stdin="\n".join(objects).encode() + b"\n")
    if done.returncode != 0:
        raise GitCorpusError(
            f"git cat-file --batch failed in repo={str(path)!r}: "
            f"{done.stderr.decode(errors='replace').strip()}"
        )
    out = done.stdout
    blobs = []
    position = 0
    for obj in objects:
        header_end = out.index(b"\n", position)
        header = out[position:header_end].decode().split(" ")
        if len(header) != 3 or header[1] != "blob":
            raise GitCorpusError(f"object {obj} in repo={str(path)!r} is not a blob: {header}")
        size = int(header[2])
        start = header_end + 1
        blobs.append(out[start : start + size])
        position = start + size + 1  # content is followed by one LF
    return blobs


def read_tree(
    repo: str | os.PathLike[str],
    commit: str,
    suffix: str | None = ".go",
    blobs: MutableMapping[str, bytes] | None = None,
) -> dict[str, bytes]:
    """Every regular file of ``commit`` whose path ends with ``suffix``, by path.

    Parameters
    ----------
    repo : path
        Top directory of a git repository (work tree or bare).
    commit : str
        Any revision naming a commit.
    suffix : str or None
        Keep paths ending with this string; ``None`` or ``""`` keeps every file.
    blobs : mutable mapping of str to bytes, optional
        Contents by git object id, read and filled: a blob already in it is not read
        again, and every commit read with one mapping shares the bytes objects of the
        files they have in common (an object id names its content).

    Returns
    -------
    dict of str to bytes
        Repository-relative POSIX paths, in git's (bytewise) order, to blob
        contents. Symbolic links (mode 120000) and submodules are not files and
        are left out.

    Notes
    -----
    One ``git ls-tree -r -z`` lists the tree and one ``git cat-file --batch``
    process returns all blobs not in ``blobs``, so ~2,000 files take one round trip each.
    """
    path = check_repository(repo)
    sha = resolve_commit(path, commit)
    if suffix is not None and not isinstance(suffix, str):
        raise GitCorpusError(f"suffix={suffix!r} must be a string or None")
    wanted = [
        (obj, name)
        for mode, kind, obj, name in _tree_entries(path, sha)
        if kind == "blob" and mode in ("100644", "100755") and name.endswith(suffix or "")
    ]
    known = {} if blobs is None else blobs
    missing = list(dict.fromkeys(obj for obj, _ in wanted if obj not in known))
    known.update(zip(missing, _cat_blobs(path, missing)))
    return {name: known[obj] for obj, name in wanted}


def _blob_id(path: Path, sha: str, file: str) -> str | None:
    if not isinstance(file, str) or not file or file.startswith("/") or "\n" in file:
        raise GitCorpusError(
            f"path={file!r} is not a repository-relative path; pass e.g. 'cmd/main.go'"
        )
    done = _run_git(path, "ls-tree", "-z", "--full-tree", sha, "--", file)
    for record in done.stdout.split(b"\0"):
        meta, _, raw_path = record.partition(b"\t")
        if raw_path.decode("utf-8", errors="replace") != file:
            continue
        mode, kind, obj = meta.decode().split(" ")
        if kind == "blob" and mode in ("100644", "100755"):
            return obj
    return None


def file_exists_at(repo: str | os.PathLike[str], commit: str, path: str) -> bool:
    """Whether ``path`` is a regular file in the tree of ``commit``."""
    repo_path = check_repository(repo)
    return _blob_id(repo_path, resolve_commit(repo_path, commit), path) is not None


def read_blob_at(repo: str | os.PathLike[str], commit: str, path: str) -> bytes:
    """The content of the regular file ``path`` at ``commit``.

    Raises
    ------
    GitCorpusError
        If the file is absent at that commit.
    """
    repo_path = check_repository(repo)
    sha = resolve_commit(repo_path, commit)
    obj = _blob_id(repo_path, sha, path)
    if obj is None:
        raise GitCorpusError(
            f"path={path!r} is not a file at commit {commit!r} ({sha}) in repo={str(repo)!r}"
        )
    return _cat_blobs(repo_path, [obj])[0]
