"""E04 task files: load, validate, write, and check against a repository.

Schema (JSON, UTF-8)::

    {
      "format": "prereg-e04-tasks/1",          # optional; if present, exactly this
      "synthetic": false,                      # optional bool, default false
      "description": "15 held-out GitLab Runner tasks",   # optional str
      "repository": "gitlab-org/gitlab-runner",           # optional str (informational)
      "tasks": [                               # required, non-empty list
        {
          "task_id": "T01",                    # non-empty str, unique
          "query": "Shell executor ignores ...",          # non-empty str
          "base_commit": "<40 or 64 hex digits>",         # full lowercase commit id
          "gold_files": ["executors/shell/shell.go"],    # non-empty list of distinct paths
          "gold_functions": [                  # list (may be empty) of distinct records
            {"file": "executors/shell/shell.go",          # must be one of gold_files
             "name": "Run", "receiver": "executor",      # receiver: str or null
             "start_line": 40, "end_line": 71}            # 1-based inclusive, at base_commit
          ]
        }
      ]
    }

Unknown keys are refused at every level (a typo must not silently drop a
label). Paths are repository-relative POSIX paths without ``.`` / ``..``
segments. Every error names the task id and the field.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from prereg.e04.gitcorpus import (
    GitCorpusError,
    check_repository,
    first_parent,
    read_blob_at,
    resolve_commit,
)
from prereg.e04.goparse import parse_go_functions
from prereg.e04.types import GoFunction, GoldFunction, Task

__all__ = [
    "TASK_FILE_FORMAT",
    "TaskFile",
    "TaskFileError",
    "TaskValidationError",
    "dump_task_file",
    "load_task_file",
    "locate_gold_functions",
    "parse_task_document",
    "validate_against_repository",
]

TASK_FILE_FORMAT = "prereg-e04-tasks/1"
_TOP_FIELDS = {"format": str, "synthetic": bool, "description": str, "repository": str}
_TASK_FIELDS = ("task_id", "query", "base_commit", "gold_files", "gold_functions")
_GOLD_FIELDS = ("file", "name", "receiver", "start_line", "end_line")
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


class TaskFileError(ValueError):
    """A task file breaks the schema; the message names the task and the field."""


class TaskValidationError(ValueError):
    """Tasks disagree with the repository; ``problems`` lists every one found."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__(f"{len(self.problems)} task problem(s):\n" + "\n".join(self.problems))


@dataclass(frozen=True)
class TaskFile:
    """A validated task file: the tasks plus the top-level metadata."""

    tasks: tuple[Task, ...]
    synthetic: bool
    description: str | None
    repository: str | None

    def task(self, task_id: str) -> Task:
        """The task with id ``task_id`` (KeyError naming the known ids otherwise)."""
        for task in self.tasks:
            if task.task_id == task_id:
                return task
        raise KeyError(f"no task {task_id!r}; known: {[t.task_id for t in self.tasks]}")


def _fail(where: str, field: str, message: str) -> TaskFileError:
    return TaskFileError(f"{where}: field {field!r}: {message}")


def _check_path(value: object, where: str, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(where, field, f"must be a non-empty path string, got {value!r}")
    parts = value.split("/")
    if value.startswith("/") or "\\" in value or any(p in ("", ".", "..") for p in parts):
        raise _fail(
            where, field, f"{value!r} is not a repository-relative POSIX path like 'pkg/a.go'"
        )
    return value


def _check_keys(record: object, allowed: Sequence[str], where: str, field: str) -> dict:
    if not isinstance(record, dict):
        raise _fail(where, field, f"must be a JSON object, got {type(record).__name__}")
    unknown = sorted(set(record) - set(allowed))
    if unknown:
        raise _fail(
            where,
            f"{field}.{unknown[0]}" if field else unknown[0],
            f"unknown field; allowed fields are {list(allowed)}",
        )
    missing = [k for k in allowed if k not in record]
    if missing:
        raise _fail(where, f"{field}.{missing[0]}" if field else missing[0], "missing field")
    return record


def _check_line(value: object, where: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _fail(where, field, f"must be a positive integer line number, got {value!r}")
    return value


def _parse_gold_function(record: object, where: str, index: int) -> GoldFunction:
    field = f"gold_functions[{index}]"
    _check_keys(record, _GOLD_FIELDS, where, field)
    name = record["name"]
    if not isinstance(name, str) or not name:
        raise _fail(where, f"{field}.name", f"must be a non-empty string, got {name!r}")
    receiver = record["receiver"]
    if receiver is not None and (not isinstance(receiver, str) or not receiver):
        raise _fail(where, f"{field}.receiver", f"must be a type name or null, got {receiver!r}")
    start = _check_line(record["start_line"], where, f"{field}.start_line")
    end = _check_line(record["end_line"], where, f"{field}.end_line")
    if start > end:
        raise _fail(where, f"{field}.start_line", f"start_line={start} > end_line={end}")
    return GoldFunction(
        file=_check_path(record["file"], where, f"{field}.file"),
        name=name,
        receiver=receiver,
        start_line=start,
        end_line=end,
    )


def _parse_task(record: object, index: int) -> Task:
    task_id = record.get("task_id") if isinstance(record, dict) else None
    where = f"task {task_id!r}" if isinstance(task_id, str) and task_id else f"tasks[{index}]"
    _check_keys(record, _TASK_FIELDS, where, "")
    if not isinstance(task_id, str) or not task_id.strip():
        raise _fail(where, "task_id", f"must be a non-empty string, got {task_id!r}")
    query = record["query"]
    if not isinstance(query, str) or not query.strip():
        raise _fail(where, "query", f"must be a non-empty string, got {query!r}")
    base = record["base_commit"]
    if not isinstance(base, str) or not _COMMIT.fullmatch(base):
        raise _fail(
            where,
            "base_commit",
            f"must be a full lowercase commit id (40 or 64 hex digits), got {base!r}",
        )
    files = record["gold_files"]
    if not isinstance(files, list):
        raise _fail(where, "gold_files", f"must be a list of paths, got {type(files).__name__}")
    if not files:
        raise _fail(where, "gold_files", "is empty; a task needs at least one gold file")
    gold_files = tuple(_check_path(f, where, f"gold_files[{i}]") for i, f in enumerate(files))
    if len(set(gold_files)) != len(gold_files):
        duplicate = next(f for i, f in enumerate(gold_files) if f in gold_files[:i])
        raise _fail(where, "gold_files", f"lists {duplicate!r} twice")
    functions = record["gold_functions"]
    if not isinstance(functions, list):
        raise _fail(
            where, "gold_functions", f"must be a list of objects, got {type(functions).__name__}"
        )
    gold_functions = tuple(_parse_gold_function(g, where, i) for i, g in enumerate(functions))
    for i, gold in enumerate(gold_functions):
        if gold.file not in gold_files:
            raise _fail(
                where,
                f"gold_functions[{i}].file",
                f"{gold.file!r} is not one of the gold_files {list(gold_files)}",
            )
        if gold in gold_functions[:i]:
            raise _fail(where, f"gold_functions[{i}]", "duplicates an earlier gold function")
    return Task(
        task_id=task_id,
        query=query,
        base_commit=base,
        gold_files=gold_files,
        gold_functions=gold_functions,
    )


def parse_task_document(document: object, source: str = "<task file>") -> TaskFile:
    """Validate a decoded task-file JSON document (schema in the module docstring)."""
    if not isinstance(document, dict):
        raise TaskFileError(f"{source}: the top level must be a JSON object")
    allowed = ("tasks", *_TOP_FIELDS)
    unknown = sorted(set(document) - set(allowed))
    if unknown:
        raise TaskFileError(
            f"{source}: unknown top-level field {unknown[0]!r}; allowed: {list(allowed)}"
        )
    for key, kind in _TOP_FIELDS.items():
        if key in document and not isinstance(document[key], kind):
            raise TaskFileError(
                f"{source}: top-level field {key!r} must be {kind.__name__}, got {document[key]!r}"
            )
    if document.get("format", TASK_FILE_FORMAT) != TASK_FILE_FORMAT:
        raise TaskFileError(
            f"{source}: format={document['format']!r}; this reader understands {TASK_FILE_FORMAT!r}"
        )
    records = document.get("tasks")
    if not isinstance(records, list) or not records:
        raise TaskFileError(f"{source}: field 'tasks' must be a non-empty list of task objects")
    tasks = tuple(_parse_task(record, i) for i, record in enumerate(records))
    seen: set[str] = set()
    for task in tasks:
        if task.task_id in seen:
            raise TaskFileError(f"{source}: task {task.task_id!r}: field 'task_id': duplicate id")
        seen.add(task.task_id)
    return TaskFile(
        tasks=tasks,
        synthetic=document.get("synthetic", False),
        description=document.get("description"),
        repository=document.get("repository"),
    )


def load_task_file(path: str | os.PathLike[str]) -> TaskFile:
    """Read and validate a task file (see the module docstring for the schema)."""
    file = Path(path)
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise TaskFileError(f"task file {str(file)!r} does not exist") from exc
    except json.JSONDecodeError as exc:
        raise TaskFileError(f"{str(file)!r} is not valid JSON: {exc}") from exc
    return parse_task_document(document, source=str(file))


def dump_task_file(task_file: TaskFile) -> str:
    """Canonical JSON text of ``task_file`` (sorted keys, 2-space indent, final newline)."""
    document: dict[str, object] = {"format": TASK_FILE_FORMAT, "synthetic": task_file.synthetic}
    if task_file.description is not None:
        document["description"] = task_file.description
    if task_file.repository is not None:
        document["repository"] = task_file.repository
    document["tasks"] = [
        {
            "task_id": t.task_id,
            "query": t.query,
            "base_commit": t.base_commit,
            "gold_files": list(t.gold_files),
            "gold_functions": [
                {
                    "file": g.file,
                    "name": g.name,
                    "receiver": g.receiver,
                    "start_line": g.start_line,
                    "end_line": g.end_line,
                }
                for g in t.gold_functions
            ],
        }
        for t in task_file.tasks
    ]
    parse_task_document(document)  # never write a file this module would refuse
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def locate_gold_functions(task: Task, sources: Mapping[str, bytes]) -> tuple[GoFunction, ...]:
    """The parsed gold functions of ``task``, matched by file, name, receiver and span.

    ``sources`` maps paths to file bytes at the task's base commit. Raises
    :class:`TaskValidationError` naming the task and field of every gold
    function that is not found with exactly its recorded span.
    """
    problems = []
    found = []
    parsed: dict[str, tuple[GoFunction, ...]] = {}
    for i, gold in enumerate(task.gold_functions):
        field = f"task {task.task_id!r}: field 'gold_functions[{i}]'"
        if gold.file not in sources:
            problems.append(f"{field}: its file {gold.file!r} is absent at {task.base_commit}")
            continue
        if gold.file not in parsed:
            parsed[gold.file] = parse_go_functions(gold.file, sources[gold.file])
        same_name = [
            f for f in parsed[gold.file] if f.name == gold.name and f.receiver == gold.receiver
        ]
        exact = [
            f for f in same_name if f.start_line == gold.start_line and f.end_line == gold.end_line
        ]
        if exact:
            found.append(exact[0])
            continue
        spans = [(f.start_line, f.end_line) for f in same_name]
        receiver = f"({gold.receiver}) " if gold.receiver else ""
        problems.append(
            f"{field}: no function {receiver}{gold.name} at lines "
            f"{gold.start_line}-{gold.end_line} of {gold.file!r} at {task.base_commit}"
            + (f"; found it at lines {spans}" if spans else "; no function of that name")
        )
    if problems:
        raise TaskValidationError(problems)
    return tuple(found)


def validate_against_repository(
    tasks: Sequence[Task] | TaskFile, repo: str | os.PathLike[str]
) -> None:
    """Check every task against the git objects of ``repo``; raise listing all problems.

    Checks, per task: ``base_commit`` names a commit and is that commit's full
    id; it has a first parent (S001 builds its corpus there); every gold file
    is a file at ``base_commit``; every gold function is found by
    :func:`locate_gold_functions` at ``base_commit``.

    Raises
    ------
    TaskValidationError
        With one line per problem, each naming the task and the field.
    prereg.e04.gitcorpus.GitCorpusError
        If ``repo`` is not a git repository.
    """
    task_list = tasks.tasks if isinstance(tasks, TaskFile) else tuple(tasks)
    check_repository(repo)
    problems: list[str] = []
    for task in task_list:
        where = f"task {task.task_id!r}"
        try:
            sha = resolve_commit(repo, task.base_commit)
        except GitCorpusError as exc:
            problems.append(f"{where}: field 'base_commit': {exc}")
            continue
        if sha != task.base_commit:
            problems.append(
                f"{where}: field 'base_commit': {task.base_commit!r} resolves to {sha}; "
                "write the full commit id"
            )
            continue
        try:
            first_parent(repo, sha)
        except GitCorpusError as exc:
            problems.append(f"{where}: field 'base_commit': {exc}")
        sources: dict[str, bytes] = {}
        for i, file in enumerate(task.gold_files):
            try:
                sources[file] = read_blob_at(repo, sha, file)
            except GitCorpusError:
                problems.append(
                    f"{where}: field 'gold_files[{i}]': {file!r} is not a file at base commit {sha}"
                )
        try:
            locate_gold_functions(task, sources)
        except TaskValidationError as exc:
            problems.extend(exc.problems)
    if problems:
        raise TaskValidationError(problems)
