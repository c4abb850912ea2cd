"""The inputs an E04 run binds and the resources it opens.

Inputs (bound by the approval, ``--input NAME=PATH``): ``repository`` (a git repository),
``tasks`` (:mod:`prereg.e04.tasks`) and ``reformulations`` (:mod:`prereg.e04.reformulations`).
Resources: the plan's vector cache and the LM Studio connection. Used by the items, the
summary, the replay and the gate (:mod:`prereg.e04.stage`), below all of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prereg.api import Plan
from prereg.e04.cache import VectorCache
from prereg.e04.embeddings import lmstudio_client
from prereg.e04.plan import E04Settings, settings_of
from prereg.e04.reformulations import (
    Reformulations,
    load_reformulations,
    reformulation_problems,
)
from prereg.e04.tasks import (
    TaskFile,
    TaskValidationError,
    load_task_file,
    task_document_problems,
    validate_against_repository,
)

INPUTS = ("repository", "tasks", "reformulations")


@dataclass(frozen=True)
class LoadedInputs:
    repository: Path
    task_file: TaskFile
    reformulations: Reformulations

    @property
    def synthetic(self) -> bool:
        return self.task_file.synthetic or self.reformulations.synthetic


def load_inputs(settings: E04Settings, inputs: dict[str, Path]) -> LoadedInputs:
    """Load the task file and the reformulations; raise ValueError naming task and field."""
    missing = [name for name in INPUTS if name not in inputs]
    if missing:
        raise ValueError(f"E04 needs inputs {list(INPUTS)}; missing {missing} (--input NAME=PATH)")
    task_file = load_task_file(inputs["tasks"])
    if task_file.synthetic and not settings.allow_synthetic:
        raise ValueError(
            f"input tasks: {inputs['tasks']} is a synthetic task file (field 'synthetic': true); "
            "this plan (allow_synthetic false) runs the preregistered tasks only"
        )
    ids = [t.task_id for t in task_file.tasks]
    if len(ids) != settings.task_count:
        raise ValueError(
            f"input tasks: {inputs['tasks']} holds {len(ids)} tasks ({ids}); the plan's "
            f"tasks.count is {settings.task_count}"
        )
    reformulations = load_reformulations(
        inputs["reformulations"],
        expected_code_revision=settings.code_revision,
        task_ids=ids,
        allow_synthetic=settings.allow_synthetic,
    )
    return LoadedInputs(Path(inputs["repository"]), task_file, reformulations)


def input_problems(plan: Plan, stage: str, inputs: dict[str, Path]) -> list[str]:
    """Every problem of the bound inputs in one pass, each naming the input, file and field.

    Input names; the task file (JSON, every schema problem, ``synthetic`` against the
    plan's ``allow_synthetic``, the task count against ``tasks.count``); the reformulation
    artifact (every problem, completeness against the task ids when the task file could
    be read); the tasks against the repository's git objects (every task and field).
    Used by ``prereg validate-inputs`` and ``prereg approve``.
    """
    settings = settings_of(plan.data, stage)
    problems = [
        f"input {name}: missing (pass --input {name}=PATH)" for name in INPUTS if name not in inputs
    ]
    problems += [
        f"input {name}: unknown; E04 binds {list(INPUTS)}" for name in inputs if name not in INPUTS
    ]

    def document(name: str) -> tuple[object, bool]:
        path = Path(inputs[name])
        try:
            return json.loads(path.read_bytes().decode("utf-8")), True
        except OSError as err:
            problems.append(f"input {name}: cannot read {str(path)!r}: {err.strerror or err}")
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            problems.append(f"input {name}: {str(path)!r} is not UTF-8 JSON: {err}")
        return None, False

    task_file = None
    task_ids = None
    if "tasks" in inputs:
        data, ok = document("tasks")
        if ok:
            found = task_document_problems(data, source=f"input tasks: {inputs['tasks']}")
            problems += found
            if not found:
                task_file = load_task_file(inputs["tasks"])
                task_ids = [t.task_id for t in task_file.tasks]
                if task_file.synthetic and not settings.allow_synthetic:
                    problems.append(
                        f"input tasks: {inputs['tasks']} is a synthetic task file (field "
                        "'synthetic': true); this plan (allow_synthetic false) runs the "
                        "preregistered tasks only"
                    )
                if len(task_ids) != settings.task_count:
                    problems.append(
                        f"input tasks: {inputs['tasks']} holds {len(task_ids)} tasks "
                        f"({task_ids}); the plan's tasks.count is {settings.task_count}"
                    )
    if "reformulations" in inputs:
        data, ok = document("reformulations")
        if ok:
            problems += reformulation_problems(
                data,
                expected_code_revision=settings.code_revision,
                task_ids=task_ids,
                allow_synthetic=settings.allow_synthetic,
                source=f"input reformulations: {inputs['reformulations']}",
            )
    if task_file is not None and "repository" in inputs:
        try:
            validate_against_repository(task_file, inputs["repository"])
        except TaskValidationError as err:
            problems += [f"input tasks against input repository: {p}" for p in err.problems]
        except ValueError as err:  # GitCorpusError: not a git repository
            problems.append(f"input repository: {err}")
    return problems


class InputProblems(ValueError):
    """The inputs break one or more rules; ``problems`` lists every one."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = tuple(problems)
        super().__init__(
            f"{len(self.problems)} problem(s) with the E04 inputs:\n"
            + "\n".join(f"  - {p}" for p in self.problems)
        )


def bound_inputs(view) -> dict[str, Path]:
    """Input name -> path of the inputs a run's approval bound (``view``: a RunView)."""
    return {name: Path(bound["path"]) for name, bound in view.approval["inputs"].items()}


def open_cache(root: Path, settings: E04Settings) -> VectorCache:
    """The plan's vector cache (``cache.path`` under ``root``), its folder made if missing."""
    path = Path(root) / settings.cache_path
    path.parent.mkdir(parents=True, exist_ok=True)
    return VectorCache(
        path,
        conflict_atol=settings.conflict_atol,
        busy_timeout_seconds=settings.busy_timeout_seconds,
    )


def lmstudio_client_factory(settings: E04Settings) -> Callable[[], Any]:
    """Connects to the plan's LM Studio on first call (the backend calls it when it needs to)."""

    def connect() -> Any:
        options = settings.embedding.get("lmstudio") or {}
        context = lmstudio_client(options.get("api_host"))
        return context.__enter__()  # held for the life of the process

    return connect
