"""Plain records shared by the E04 modules."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GoFunction:
    """A Go function or method with its 1-based inclusive line span.

    ``receiver`` is the receiver's type name without pointer or type parameters
    (``"Runner"`` for ``func (r *Runner[T]) Run()``), or ``None`` for a function.
    """

    path: str
    name: str
    receiver: str | None
    start_line: int
    end_line: int
    text: str


@dataclass(frozen=True)
class GoldFunction:
    """A gold function of a task, located at the task's base commit."""

    file: str
    name: str
    receiver: str | None
    start_line: int
    end_line: int


@dataclass(frozen=True)
class Task:
    """One held-out retrieval task."""

    task_id: str
    query: str
    base_commit: str
    gold_files: tuple[str, ...]
    gold_functions: tuple[GoldFunction, ...]
