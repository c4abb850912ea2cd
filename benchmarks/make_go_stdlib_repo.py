"""Build a realistic E04 benchmark corpus from the Go standard library sources.

Usage::

    python benchmarks/make_go_stdlib_repo.py DEST [--install] [--seed N] [--tasks N]

Reads the Debian ``golang-src`` tree (``/usr/share/go*/src``; with ``--install``
the script runs ``apt-get install -y golang-src`` when it is absent, and never
otherwise), keeps the library's ``.go`` files without ``_test.go`` files,
``testdata/``, ``cmd/`` and ``vendor/`` (about 2,000 files for Go 1.19), and
writes under DEST (which must be new or empty):

- ``repository/``: a git repository built with ``git fast-import`` (fixed
  names and dates). Commit 0 holds the corpus with ``--tasks`` documented
  exported functions removed (with their doc comments); commit ``i`` restores
  function ``i``. Task ``i``'s base commit is commit ``i``, its first parent
  lacks the gold function (so S001 differs), and its gold is that file and
  function.
- ``tasks.json``: the task file (``prereg.e04.tasks`` schema), ``"synthetic": true``
  (the tasks are generated, not held-out GitLab Runner issues); the query is
  the function's doc comment without its leading name.
- ``reformulations.json``: the E02 artifact format with *synthetic*
  reformulations (a templated rewording; no language model).

Then prints the three paths and the corpus size.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from prereg.base.seeds import derivation, numpy_generator
from prereg.e04.goparse import parse_go_functions, syntax_errors
from prereg.e04.tasks import TaskFile, dump_task_file, validate_against_repository
from prereg.e04.types import GoldFunction, Task

SEED_NAMESPACE = "e04-go-stdlib-benchmark"
AUTHOR = "Go Stdlib Benchmark <benchmark@prereg.invalid>"
FIRST_COMMIT_EPOCH = 1_700_000_000
# The E02 code revision named by the E04 protocol (written into the artifact only).
DEFAULT_CODE_REVISION = "1a7066f6c7682793b6f04445c776a93cc4fac895"
MIN_DOC_WORDS = 8


def go_source_root(install: bool) -> Path:
    """The newest ``/usr/share/go*/src`` or ``/usr/lib/go*/src`` holding the library."""

    def candidates() -> list[Path]:
        found = glob.glob("/usr/share/go*/src") + glob.glob("/usr/lib/go*/src")
        return sorted((Path(p) for p in found if Path(p, "net", "http").is_dir()), reverse=True)

    roots = candidates()
    if not roots and install:
        subprocess.run(["apt-get", "install", "-y", "golang-src"], check=True)
        roots = candidates()
    if not roots:
        sys.exit(
            "no Go sources under /usr/share/go*/src; rerun with --install "
            "(runs apt-get install -y golang-src)"
        )
    return roots[0]


def library_files(root: Path) -> dict[str, bytes]:
    """Library ``.go`` files by repository path, without tests, testdata, cmd and vendor."""
    files = {}
    for path in sorted(root.rglob("*.go")):
        rel = path.relative_to(root).as_posix()
        parts = rel.split("/")
        if (
            rel.endswith("_test.go")
            or "testdata" in parts
            or parts[0] == "cmd"
            or "vendor" in parts
        ):
            continue
        if path.is_symlink() or not path.is_file():
            continue
        files[rel] = path.read_bytes()
    return files


def doc_comment(lines: list[str], start_line: int) -> tuple[int, str]:
    """``(first line of the doc comment, its text)`` for a declaration at ``start_line``."""
    first = start_line
    text: list[str] = []
    while first > 1 and lines[first - 2].startswith("//"):
        first -= 1
        line = lines[first - 1]
        if not line.startswith("//go:"):
            text.insert(0, line[2:].strip())
    return first, " ".join(t for t in text if t)


def candidates(files: dict[str, bytes]) -> list[tuple[str, GoldFunction, str, int]]:
    """Documented exported functions whose removal leaves valid Go: (path, gold, doc, doc line)."""
    found = []
    for path, data in files.items():
        try:
            lines = data.decode("utf-8").split("\n")
        except UnicodeDecodeError:
            continue
        for fn in parse_go_functions(path, data):
            if not fn.name[:1].isupper():
                continue
            first, doc = doc_comment(lines, fn.start_line)
            if len(doc.split()) < MIN_DOC_WORDS or "Deprecated" in doc:
                continue
            gold = GoldFunction(path, fn.name, fn.receiver, fn.start_line, fn.end_line)
            found.append((path, gold, doc, first))
    return found


def remove_lines(data: bytes, first: int, last: int) -> bytes:
    lines = data.decode("utf-8").split("\n")
    del lines[first - 1 : last]
    if (
        first - 2 >= 0
        and first - 1 < len(lines)
        and lines[first - 2] == ""
        and lines[first - 1] == ""
    ):
        del lines[first - 1]  # keep one blank line between the neighbours
    return "\n".join(lines).encode("utf-8")


def query_from_doc(name: str, doc: str) -> str:
    words = doc.split()
    if words and words[0] == name:
        words = words[1:]
    text = " ".join(words[:60])
    return text[:1].upper() + text[1:]


def fast_import(repo: Path, commits: list[tuple[str, dict[str, bytes]]]) -> list[str]:
    env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=env)
    chunks: list[bytes] = []
    for index, (message, changes) in enumerate(commits):
        when = FIRST_COMMIT_EPOCH + 3600 * index
        msg = message.encode() + b"\n"
        chunks += [
            b"commit refs/heads/main\n",
            f"mark :{index + 1}\n".encode(),
            f"author {AUTHOR} {when} +0000\n".encode(),
            f"committer {AUTHOR} {when} +0000\n".encode(),
            f"data {len(msg)}\n".encode(),
            msg,
        ]
        if index:
            chunks.append(f"from :{index}\n".encode())
        for path in sorted(changes):
            chunks += [
                f"M 100644 inline {path}\n".encode(),
                f"data {len(changes[path])}\n".encode(),
                changes[path],
                b"\n",
            ]
        chunks.append(b"\n")
    chunks.append(b"done\n")
    subprocess.run(
        ["git", "-C", str(repo), "fast-import", "--quiet", "--done"],
        input=b"".join(chunks),
        check=True,
        env=env,
    )
    subprocess.run(["git", "-C", str(repo), "reset", "-q", "--hard", "main"], check=True, env=env)
    out = subprocess.run(
        ["git", "-C", str(repo), "rev-list", "--reverse", "main"],
        capture_output=True,
        check=True,
        env=env,
    )
    return out.stdout.decode().split()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dest", type=Path)
    parser.add_argument(
        "--install",
        action="store_true",
        help="run apt-get install -y golang-src if the sources are absent",
    )
    parser.add_argument("--seed", default="0", help="seed coordinate for choosing the tasks")
    parser.add_argument("--tasks", type=int, default=15, help="number of tasks (E04: 15)")
    parser.add_argument("--code-revision", default=DEFAULT_CODE_REVISION)
    args = parser.parse_args(argv)
    if args.dest.exists() and any(args.dest.iterdir()):
        sys.exit(f"DEST={str(args.dest)!r} must be new or empty")
    if shutil.which("git") is None:
        sys.exit("git is not on PATH")
    started = time.perf_counter()
    root = go_source_root(args.install)
    files = library_files(root)
    rng = numpy_generator(SEED_NAMESPACE, args.seed)
    pool = candidates(files)
    chosen: list[tuple[str, GoldFunction, str, int]] = []
    used_files: set[str] = set()
    for index in rng.permutation(len(pool)):
        path, gold, doc, first = pool[int(index)]
        if path in used_files:
            continue
        removed = remove_lines(files[path], first, gold.end_line)
        if syntax_errors(removed):
            continue
        chosen.append((path, gold, doc, first))
        used_files.add(path)
        if len(chosen) == args.tasks:
            break
    if len(chosen) < args.tasks:
        sys.exit(f"only {len(chosen)} usable functions for --tasks={args.tasks}")
    initial = dict(files)
    for path, gold, _, first in chosen:
        initial[path] = remove_lines(files[path], first, gold.end_line)
    commits = [
        (f"Import Go {root.parent.name} library sources without {args.tasks} functions", initial)
    ]
    task_rows = []
    for number, (path, gold, doc, _) in enumerate(chosen, start=1):
        task_id = f"GOSTD{number:02d}"
        commits.append((f"{task_id}: restore {gold.name} in {path}", {path: files[path]}))
        task_rows.append((task_id, query_from_doc(gold.name, doc), gold))
    args.dest.mkdir(parents=True, exist_ok=True)
    repo = args.dest / "repository"
    ids = fast_import(repo, commits)
    tasks = tuple(
        Task(task_id, query, ids[number], (gold.file,), (gold,))
        for number, (task_id, query, gold) in enumerate(task_rows, start=1)
    )
    task_file = TaskFile(
        tasks=tasks,
        synthetic=True,
        repository=f"Go standard library ({root})",
        description=(
            f"Benchmark tasks generated from Go library doc comments "
            f"(seed {derivation(SEED_NAMESPACE, args.seed)}); not GitLab Runner data."
        ),
    )
    validate_against_repository(task_file, repo)
    tasks_path = args.dest / "tasks.json"
    tasks_path.write_text(dump_task_file(task_file), encoding="utf-8")
    artifact = {
        "code_revision": args.code_revision,
        "synthetic": True,
        "reformulations": {
            task_id: f"Find the Go standard library function that {re.sub(r'[.]$', '', q)[:1].lower()}"
            f"{re.sub(r'[.]$', '', q)[1:]}"
            for task_id, q, _ in task_rows
        },
    }
    reformulations_path = args.dest / "reformulations.json"
    reformulations_path.write_text(
        json.dumps(artifact, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    print(f"repository:     {repo}")
    print(f"tasks:          {tasks_path}")
    print(f"reformulations: {reformulations_path}")
    print(
        f"go files: {len(files)} from {root}; commits: {len(ids)}; "
        f"built in {time.perf_counter() - started:.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
