"""Frozen plans: load, validate, hash.

A plan is a JSON file. Its generic part (validated here) names the plan, pins the
environment and declares the stages; each stage names its *kind* (see
:mod:`prereg.kinds.stages`), which validates the stage's ``parameters`` and the plan's shared
``parameters``. The plan's hash is the SHA-256 of the file's bytes: the approval binds
exactly the bytes that were reviewed.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prereg.base import seeds
from prereg.base.hashing import read_json, sha256_file
from prereg.base.schema import (
    ANY,
    MapOf,
    Nullable,
    OneOf,
    Optional,
    PositiveFloat,
    PositiveInt,
    SchemaError,
    validate,
)
from prereg.kinds.stages import load_kind

BASELINE = Path("plans") / "BASELINE.json"
"""The immutable historical files (earlier configurations and outcomes) and their SHA-256,
relative to the project's root: a run is refused while one differs."""

ENVIRONMENT_PINS = {
    "python": str,
    "numpy": str,
    "torch": str,
    "scipy": str,
    "platform": str,
    "cpu_threads": PositiveInt,
}

SIGNING = ("required", "optional")

STAGE_SCHEMA = {
    "kind": str,  # a registered stage kind (entry point group prereg.stage_kinds)
    "module": str,  # the experiment module, relative to the repository root
    "description": Optional(str),
    "budget_seconds": PositiveFloat,  # wall-time budget of the whole stage: finite, > 0
    "budget_enforced": bool,  # True: items past the budget fail, the stage is incomplete
    "requires": [str],  # stages whose complete, clean run this one consumes
    "seed_namespace": Nullable(str),  # null for stages that draw no random numbers
    "single_attempt": bool,  # True: one approval ever for this stage (no retry)
    "threads_per_worker": PositiveInt,  # torch / BLAS / OpenMP threads per test process, >= 1
    "inputs": [str],  # names of inputs the approval must bind (prereg approve --input)
    "parameters": ANY,  # validated by the stage kind
    # a rehearsal's parameters by default (smaller counts): each replaces the parameter
    # of its name; the run always takes "parameters"
    "rehearsal_parameters": Optional(MapOf(ANY)),
    # "required": the approval commit must be signed by a key of .prereg/approvers
    # (prereg.proof); absent: required for a single-attempt stage, optional otherwise
    "signing": Optional(OneOf(SIGNING)),
}

PLAN_SCHEMA = {
    "plan_id": str,
    "protocol": str,
    "description": Optional(str),
    "environment_pins": ENVIRONMENT_PINS,
    "parameters": Optional(ANY),  # shared by several stages; validated by their kinds
    "stages": MapOf(STAGE_SCHEMA),
}


def signing_required(spec: dict) -> bool:
    """Whether the stage's approval commit must be signed by an approver: the plan's
    ``signing``, else required for a single-attempt stage."""
    return (
        spec.get("signing", "required" if spec.get("single_attempt") else "optional") == "required"
    )


@dataclass(frozen=True)
class Plan:
    path: Path
    sha256: str
    data: dict

    @property
    def plan_id(self) -> str:
        return self.data["plan_id"]

    @property
    def stages(self) -> dict[str, dict]:
        return self.data["stages"]

    def stage(self, name: str) -> dict:
        try:
            return self.stages[name]
        except KeyError:
            raise KeyError(
                f"{self.path} has no stage {name!r}; its stages: {sorted(self.stages)}"
            ) from None

    def shared(self) -> dict:
        return self.data.get("parameters", {})


def load_plan(path: Path) -> Plan:
    """Read a plan and validate its generic part; errors name the file and the field's path.

    Refused at load: a key repeated in one object, NaN or Infinity anywhere
    (:func:`prereg.base.hashing.read_json`), an unknown field, a budget that is not a finite
    number > 0 and a thread count below 1 (:data:`STAGE_SCHEMA`). Each stage's kind then
    checks its parameters' ranges (:func:`validate_stage`).
    """
    __tracebackhide__ = True  # a test that loads a bad plan shows the error, not this code
    path = Path(path)
    data: Any = read_json(path, what="plan")
    validate(data, PLAN_SCHEMA, source=str(path))
    for name, spec in data["stages"].items():
        namespace = spec["seed_namespace"]
        if namespace is not None:
            try:
                seeds.derivation(namespace)
            except seeds.SeedCoordinateError as err:
                raise SchemaError(
                    f"{path}: stages.{name}.seed_namespace {namespace!r} cannot start a seed "
                    f"derivation ({err}); every item seeded from it would fail: choose a "
                    "namespace without '/', e.g. the plan id and stage joined by '-'"
                ) from None
            if namespace.endswith(seeds.REHEARSAL_SUFFIX):
                raise SchemaError(
                    f"{path}: stages.{name}.seed_namespace {namespace!r} ends with "
                    f"{seeds.REHEARSAL_SUFFIX!r}, which a rehearsal appends to its plan's "
                    "namespace: a rehearsal under a plan naming "
                    f"{namespace[: -len(seeds.REHEARSAL_SUFFIX)]!r} would draw this stage's "
                    "seeds; choose a namespace without it"
                )
    return Plan(path=path, sha256=sha256_file(path), data=data)


def validate_stage(plan: Plan, stage: str) -> None:
    """The stage's kind validates its parameters (an unknown kind is an error too), and
    those of its rehearsal scale (:func:`rehearsal_data`) when the plan declares one."""
    kind = load_kind(plan.stage(stage)["kind"])
    kind.check(plan, stage)
    scaled = rehearsal_data(plan.data, stage)
    if scaled is not None:
        try:
            kind.check(Plan(path=plan.path, sha256=plan.sha256, data=scaled), stage)
        except ValueError as err:
            raise ValueError(
                f"{plan.path}: stages.{stage}.rehearsal_parameters give a rehearsal parameters "
                f"the stage's kind refuses: {err}"
            ) from None


def rehearsal_data(data: dict, stage: str) -> dict | None:
    """The plan's data as a rehearsal of ``stage`` takes it by default: the stage's
    ``parameters`` with its ``rehearsal_parameters`` in place (None: it declares none)."""
    overrides = data["stages"][stage].get("rehearsal_parameters")
    if overrides is None:
        return None
    if not isinstance(data["stages"][stage]["parameters"], dict):
        raise SchemaError(
            f"stages.{stage}.rehearsal_parameters replaces parameters by name: the stage's "
            "parameters must be a JSON object"
        )
    scaled = copy.deepcopy(data)
    scaled["stages"][stage]["parameters"].update(copy.deepcopy(overrides))
    return scaled


def baseline_problems(root: Path) -> list[str]:
    """Each immutable file of ``plans/BASELINE.json`` that is missing or hashes otherwise."""
    path = Path(root) / BASELINE
    if not path.exists():
        return [f"{BASELINE} does not exist; it lists the immutable historical files"]
    listed = read_json(path, what="baseline")
    validate(listed, {"description": str, "files": MapOf(str)}, source=str(path))
    problems = []
    for rel, expected in sorted(listed["files"].items()):
        target = Path(root) / rel
        if not target.exists():
            problems.append(f"{rel} is listed in {BASELINE} but missing")
        elif sha256_file(target) != expected:
            problems.append(
                f"{rel} hashes {sha256_file(target)[:12]}, {BASELINE} says {expected[:12]}"
            )
    return problems
