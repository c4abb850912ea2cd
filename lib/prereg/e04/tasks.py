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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from prereg.api import is_object_id
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


class _Problems:
    """Every schema problem of one document, in document order (nothing stops at the first)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, where: str, field: str, message: str) -> None:
        self.lines.append(f"{where}: field {field!r}: {message}")


def _path_ok(value: object, where: str, field: str, out: _Problems) -> bool:
    if not isinstance(value, str) or not value:
        out.add(where, field, f"must be a non-empty path string, got {value!r}")
        return False
    parts = value.split("/")
    if value.startswith("/") or "\\" in value or any(p in ("", ".", "..") for p in parts):
        out.add(where, field, f"{value!r} is not a repository-relative POSIX path like 'pkg/a.go'")
        return False
    return True


def _keys_ok(
    record: object, allowed: Sequence[str], where: str, field: str, out: _Problems
) -> bool:
    """Whether ``record`` is an object; every unknown and every missing key is a problem."""
    if not isinstance(record, dict):
        out.add(where, field or "(task)", f"must be a JSON object, got {type(record).__name__}")
        return False
    for key in sorted(set(record) - set(allowed), key=str):
        out.add(
            where,
            f"{field}.{key}" if field else key,
            f"unknown field; allowed fields are {list(allowed)}",
        )
    for key in allowed:
        if key not in record:
            out.add(where, f"{field}.{key}" if field else key, "missing field")
    return True


def _line_ok(value: object, where: str, field: str, out: _Problems) -> bool:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        out.add(where, field, f"must be a positive integer line number, got {value!r}")
        return False
    return True


def _check_gold_function(record: object, where: str, index: int, out: _Problems) -> None:
    field = f"gold_functions[{index}]"
    if not _keys_ok(record, _GOLD_FIELDS, where, field, out):
        return
    if "name" in record and (not isinstance(record["name"], str) or not record["name"]):
        out.add(where, f"{field}.name", f"must be a non-empty string, got {record['name']!r}")
    receiver = record.get("receiver")
    if receiver is not None and (not isinstance(receiver, str) or not receiver):
        out.add(where, f"{field}.receiver", f"must be a type name or null, got {receiver!r}")
    lines = [
        _line_ok(record[k], where, f"{field}.{k}", out) if k in record else False
        for k in ("start_line", "end_line")
    ]
    if all(lines) and record["start_line"] > record["end_line"]:
        out.add(
            where,
            f"{field}.start_line",
            f"start_line={record['start_line']} > end_line={record['end_line']}",
        )
    if "file" in record:
        _path_ok(record["file"], where, f"{field}.file", out)


def _gold_key(record: dict) -> tuple:
    return tuple(record.get(k) for k in _GOLD_FIELDS)


def _check_task(record: object, index: int, out: _Problems) -> None:
    task_id = record.get("task_id") if isinstance(record, dict) else None
    where = f"task {task_id!r}" if isinstance(task_id, str) and task_id else f"tasks[{index}]"
    if not _keys_ok(record, _TASK_FIELDS, where, "", out):
        return
    if "task_id" in record and (not isinstance(task_id, str) or not task_id.strip()):
        out.add(where, "task_id", f"must be a non-empty string, got {task_id!r}")
    query = record.get("query")
    if "query" in record and (not isinstance(query, str) or not query.strip()):
        out.add(where, "query", f"must be a non-empty string, got {query!r}")
    base = record.get("base_commit")
    if "base_commit" in record and not is_object_id(base):
        out.add(
            where,
            "base_commit",
            f"must be a full lowercase commit id (40 or 64 hex digits), got {base!r}",
        )
    files = record.get("gold_files")
    gold_files: list[str] = []
    if "gold_files" in record:
        if not isinstance(files, list):
            out.add(where, "gold_files", f"must be a list of paths, got {type(files).__name__}")
        elif not files:
            out.add(where, "gold_files", "is empty; a task needs at least one gold file")
        else:
            for i, f in enumerate(files):
                if _path_ok(f, where, f"gold_files[{i}]", out):
                    if f in gold_files:
                        out.add(where, "gold_files", f"lists {f!r} twice")
                    gold_files.append(f)
    functions = record.get("gold_functions")
    if "gold_functions" not in record:
        return
    if not isinstance(functions, list):
        out.add(
            where, "gold_functions", f"must be a list of objects, got {type(functions).__name__}"
        )
        return
    seen: list[tuple] = []
    for i, gold in enumerate(functions):
        _check_gold_function(gold, where, i, out)
        if not isinstance(gold, dict):
            continue
        file = gold.get("file")
        if isinstance(files, list) and isinstance(file, str) and file not in files:
            out.add(
                where,
                f"gold_functions[{i}].file",
                f"{file!r} is not one of the gold_files {list(gold_files)}",
            )
        if _gold_key(gold) in seen:
            out.add(where, f"gold_functions[{i}]", "duplicates an earlier gold function")
        seen.append(_gold_key(gold))


def task_document_problems(document: object, source: str = "<task file>") -> list[str]:
    """Every way a decoded task-file document breaks the schema, one sentence each.

    Each names the file (``source``), the task (by id, or ``tasks[i]`` without one) and
    the field. Empty: :func:`parse_task_document` accepts the document.
    """
    if not isinstance(document, dict):
        return [f"{source}: the top level must be a JSON object"]
    problems: list[str] = []
    allowed = ("tasks", *_TOP_FIELDS)
    for key in sorted(set(document) - set(allowed), key=str):
        problems.append(f"{source}: unknown top-level field {key!r}; allowed: {list(allowed)}")
    for key, kind in _TOP_FIELDS.items():
        if key in document and not isinstance(document[key], kind):
            problems.append(
                f"{source}: top-level field {key!r} must be {kind.__name__}, got {document[key]!r}"
            )
    if isinstance(document.get("format"), str) and document["format"] != TASK_FILE_FORMAT:
        problems.append(
            f"{source}: top-level field 'format' is {document['format']!r}; this reader "
            f"understands {TASK_FILE_FORMAT!r} (or leave the field out)"
        )
    records = document.get("tasks")
    if not isinstance(records, list) or not records:
        problems.append(f"{source}: field 'tasks' must be a non-empty list of task objects")
        return problems
    out = _Problems()
    seen: set[str] = set()
    for i, record in enumerate(records):
        _check_task(record, i, out)
        task_id = record.get("task_id") if isinstance(record, dict) else None
        if isinstance(task_id, str) and task_id.strip():
            if task_id in seen:
                out.add(f"task {task_id!r}", "task_id", "duplicate id")
            seen.add(task_id)
    return problems + [
        f"{source}: {line}" if source != "<task file>" else line for line in out.lines
    ]


def parse_task_document(document: object, source: str = "<task file>") -> TaskFile:
    """Validate a decoded task-file JSON document (schema in the module docstring).

    Raises :class:`TaskFileError` naming every problem (:func:`task_document_problems`).
    """
    problems = task_document_problems(document, source)
    if problems:
        error = TaskFileError(
            problems[0]
            if len(problems) == 1
            else f"{len(problems)} problems:\n" + "\n".join(problems)
        )
        error.problems = tuple(problems)
        raise error
    tasks = tuple(
        Task(
            task_id=r["task_id"],
            query=r["query"],
            base_commit=r["base_commit"],
            gold_files=tuple(r["gold_files"]),
            gold_functions=tuple(
                GoldFunction(
                    file=g["file"],
                    name=g["name"],
                    receiver=g["receiver"],
                    start_line=g["start_line"],
                    end_line=g["end_line"],
                )
                for g in r["gold_functions"]
            ),
        )
        for r in document["tasks"]
    )
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
