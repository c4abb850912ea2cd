"""The E04 plan's stage parameters: schema, consistency rules, settings and the cell grid.

Every number and name the stage uses is read here from the plan (``plans/E04_PLAN.json``)
into :class:`E04Settings`; nothing below repeats a preregistered value as a literal.
The grid is tasks x harnesses x seed coordinates, in that order (135 cells for 15
tasks, 3 harnesses and the 3 dose coordinates).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prereg.api import (
    NonNegativeFloat,
    NonNegativeInt,
    Nullable,
    OneOf,
    Optional,
    PositiveFloat,
    PositiveInt,
    Range,
    SchemaError,
    validate,
)
from prereg.e04.backends import BACKENDS
from prereg.e04.harness import CHUNK_TEXT_VERSION, LexicalSpec, default_registry

IDENTITY = {
    "backend": str,
    "model": str,
    "weights_sha256": str,
    "max_sequence_length": PositiveInt,
    "dimension": PositiveInt,
    "normalisation": str,
    "dtype": str,
    "chunker_version": str,
}

PARAMETERS = {
    "description": str,
    "allow_synthetic": bool,
    "tasks": {"count": PositiveInt, "description": str},
    "harness_order": [str],
    "harnesses": dict,  # each entry checked by prereg.e04.harness (every field, no other)
    "censored_rank": Range(int, min=2),  # candidate_limit + 1, candidate_limit >= 1
    "doses": [{"seed_coordinate": NonNegativeInt, "files": PositiveInt}],
    "max_dose": PositiveInt,
    "distractors": {"prefix": str, "seed_label": str, "description": str},
    "metrics": {
        "recall_ks": [PositiveInt],
        "ndcg_k": PositiveInt,
        "retention_k": PositiveInt,
        "function_k": PositiveInt,
        "token_budget": NonNegativeInt,
        "token_pattern": str,
        "description": str,
    },
    "embedding": {
        "backend": OneOf(BACKENDS),
        "identity": IDENTITY,
        "encode_batch_size": PositiveInt,
        "lmstudio": Nullable({"api_host": Nullable(str), "models_dir": Nullable(str)}),
        "description": str,
    },
    "cache": {
        "path": str,
        "conflict_atol": NonNegativeFloat,
        "busy_timeout_seconds": PositiveFloat,
        "description": Optional(str),
    },
    "reformulations": {"expected_code_revision": str, "description": str},
    "perturbations": {"S001": str, "S002": str},
}


class E04PlanError(SchemaError):
    """The E04 stage parameters are inconsistent; the message names the field."""


@dataclass(frozen=True)
class Cell:
    """One composite cell: a task, a harness and a seed coordinate (its S002 dose)."""

    task_id: str
    harness: str
    seed_coordinate: int
    dose: int

    @property
    def item_id(self) -> str:
        return cell_id(self.task_id, self.harness, self.seed_coordinate)


def cell_id(task_id: str, harness: str, seed_coordinate: int) -> str:
    """A cell's id (``T01-H000-s0``): its item's parametrize id and its item key."""
    return f"{task_id}-{harness}-s{seed_coordinate}"


@dataclass(frozen=True)
class E04Settings:
    """The stage parameters, parsed (see ``plans/E04_PLAN.json`` for each one's meaning)."""

    allow_synthetic: bool
    task_count: int
    harness_order: tuple[str, ...]
    harnesses: Mapping[str, LexicalSpec]
    censored_rank: int
    doses: tuple[tuple[int, int], ...]  # (seed coordinate, number of distractor files)
    max_dose: int
    distractor_prefix: str
    distractor_seed_label: str
    recall_ks: tuple[int, ...]
    ndcg_k: int
    retention_k: int
    function_k: int
    token_budget: int
    token_pattern: str
    embedding: Mapping[str, Any]
    cache_path: str
    conflict_atol: float
    busy_timeout_seconds: float
    code_revision: str

    def dose(self, seed_coordinate: int) -> int:
        for coordinate, files in self.doses:
            if coordinate == seed_coordinate:
                return files
        raise KeyError(f"seed coordinate {seed_coordinate!r} is not in the plan's dose table")

    @property
    def dense(self) -> bool:
        """Whether any harness embeds (needs the backend and the cache)."""
        return any(spec.kind != "bm25" for spec in self.harnesses.values())


def settings_from_parameters(params: Mapping[str, Any], *, source: str = "E04 plan") -> E04Settings:
    """Validate the stage parameters (schema and consistency) and parse them.

    Raises
    ------
    prereg.base.schema.SchemaError
        Naming ``source`` and the field: unknown or missing fields, wrong types, or a
        broken rule (censored rank != candidate limit + 1, a dose table that does not
        nest, a chunker version that is not the harnesses' chunk text rule...).
    """
    validate(params, PARAMETERS, source=source)
    where = f"{source}: field"
    registry = default_registry()
    try:
        specs = registry.specs_from_plan(params["harnesses"])
    except ValueError as err:
        raise E04PlanError(f"{where} harnesses: {err}") from None
    order = tuple(params["harness_order"])
    if sorted(order) != sorted(specs) or len(set(order)) != len(order):
        raise E04PlanError(
            f"{where} harness_order is {list(order)}; it must list each harness of 'harnesses' "
            f"({sorted(specs)}) once"
        )
    for hid, spec in specs.items():
        if params["censored_rank"] != spec.candidate_limit + 1:
            raise E04PlanError(
                f"{where} censored_rank is {params['censored_rank']}; harness {hid} has "
                f"candidate_limit {spec.candidate_limit}, so it must be "
                f"{spec.candidate_limit + 1} (candidate_limit + 1)"
            )
        chunk = getattr(spec, "chunk_text", None)
        if chunk is not None and chunk != params["embedding"]["identity"]["chunker_version"]:
            raise E04PlanError(
                f"{where} embedding.identity.chunker_version is "
                f"{params['embedding']['identity']['chunker_version']!r}; harness {hid} chunks "
                f"by {chunk!r}: they must agree"
            )
    doses = params["doses"]
    coords = [d["seed_coordinate"] for d in doses]
    files = [d["files"] for d in doses]
    if coords != list(range(len(doses))) or not doses:
        raise E04PlanError(f"{where} doses: seed coordinates {coords} must be 0, 1, ... in order")
    if any(b <= a for a, b in zip(files, files[1:])) or files[0] < 1:
        raise E04PlanError(
            f"{where} doses: files {files} must be positive and increasing (nested doses)"
        )
    if params["max_dose"] != files[-1]:
        raise E04PlanError(
            f"{where} max_dose is {params['max_dose']}; the largest dose is {files[-1]}"
        )
    prefix = params["distractors"]["prefix"]
    if not prefix.endswith("/") or prefix.startswith("/"):
        raise E04PlanError(f"{where} distractors.prefix {prefix!r} must be a relative folder 'x/'")
    metrics = params["metrics"]
    for name in ("ndcg_k", "retention_k", "function_k"):
        if metrics[name] < 1:
            raise E04PlanError(f"{where} metrics.{name} is {metrics[name]}; it must be >= 1")
    if not metrics["recall_ks"] or any(k < 1 for k in metrics["recall_ks"]):
        raise E04PlanError(f"{where} metrics.recall_ks {metrics['recall_ks']} must be ks >= 1")
    if metrics["token_budget"] < 0:
        raise E04PlanError(f"{where} metrics.token_budget must be >= 0")
    embedding = params["embedding"]
    if embedding["identity"]["backend"] != embedding["backend"]:
        raise E04PlanError(
            f"{where} embedding.identity.backend is {embedding['identity']['backend']!r}, "
            f"embedding.backend is {embedding['backend']!r}: they must agree"
        )
    if embedding["backend"] == "token-hash" and not params["allow_synthetic"]:
        raise E04PlanError(
            f"{where} embedding.backend is 'token-hash' (a software-check stand-in, not a "
            "model); a research plan (allow_synthetic false) names 'minilm' or 'lmstudio'"
        )
    if embedding["identity"]["chunker_version"] != CHUNK_TEXT_VERSION:
        raise E04PlanError(
            f"{where} embedding.identity.chunker_version must be {CHUNK_TEXT_VERSION!r}"
        )
    return E04Settings(
        allow_synthetic=params["allow_synthetic"],
        task_count=params["tasks"]["count"],
        harness_order=order,
        harnesses=specs,
        censored_rank=params["censored_rank"],
        doses=tuple((d["seed_coordinate"], d["files"]) for d in doses),
        max_dose=params["max_dose"],
        distractor_prefix=prefix,
        distractor_seed_label=params["distractors"]["seed_label"],
        recall_ks=tuple(metrics["recall_ks"]),
        ndcg_k=metrics["ndcg_k"],
        retention_k=metrics["retention_k"],
        function_k=metrics["function_k"],
        token_budget=metrics["token_budget"],
        token_pattern=metrics["token_pattern"],
        embedding=embedding,
        cache_path=params["cache"]["path"],
        conflict_atol=float(params["cache"]["conflict_atol"]),
        busy_timeout_seconds=float(params["cache"]["busy_timeout_seconds"]),
        code_revision=params["reformulations"]["expected_code_revision"],
    )


def settings_of(plan: Mapping[str, Any], stage: str) -> E04Settings:
    """The typed settings of ``stage`` of a plan document (``StageKind.settings``)."""
    return settings_from_parameters(
        plan["stages"][stage]["parameters"],
        source=f"plan {plan['plan_id']}: stages.{stage}.parameters",
    )


def item_key(coords: Mapping[str, Any]) -> str:
    """An item's key (``StageKind.item_key``): the :attr:`Cell.item_id` of the cell whose
    coordinates the item recorded (task, harness, seed coordinate), never its test name."""
    seed_coordinate = coords["seed_coordinate"]
    if isinstance(seed_coordinate, bool) or not isinstance(seed_coordinate, int):
        raise TypeError(f"seed_coordinate {seed_coordinate!r} is not an int")
    return cell_id(str(coords["task"]), str(coords["harness"]), seed_coordinate)


def grid(settings: E04Settings, task_ids: Sequence[str]) -> list[Cell]:
    """Every composite cell, ordered by task, harness (plan order), seed coordinate."""
    return [
        Cell(task_id=t, harness=h, seed_coordinate=c, dose=files)
        for t in task_ids
        for h in settings.harness_order
        for c, files in settings.doses
    ]
