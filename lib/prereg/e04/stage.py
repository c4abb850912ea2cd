"""E04 stage ``e04`` (kind ``e04.robustness``): the 135-cell retrieval robustness grid.

Inputs bound by the approval: ``repository`` (a git repository, by HEAD commit),
``tasks`` (the task file, :mod:`prereg.e04.tasks`) and ``reformulations`` (the E02
artifact, :mod:`prereg.e04.reformulations`). One item per composite cell (task x
harness x seed coordinate); each writes ``baseline.json``, ``s001.json``, ``s002.json``
(:mod:`prereg.e04.cells`) and ``cell.timing.json`` (what the cell cost in its process:
seconds, texts embedded there, cache hits; a reused index or shared record costs only its
lookup; the only non-reproducible file). Progress goes to the run's progress log. The summary de-duplicates S001 by ``shared_key``
(:mod:`prereg.e04.analysis`) and binds the vectors the dense harnesses searched to the
run (``summary/e04_vectors.npy`` and ``e04_vectors.json``, :mod:`prereg.e04.runvectors`).
Replay recomputes every measure from the saved rankings, regenerates the distractors,
rebuilds every ranking from the bound vectors (BM25 from the repository) without reading
the vector cache, re-embeds a sample when the pinned backend is available, and
recomputes the summary. The gate refuses a vector cache that is not the pinned model's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prereg.context import ItemContext
from prereg.e04 import analysis, progress
from prereg.e04.backends import build_backend
from prereg.e04.cache import VectorCache
from prereg.e04.cells import (
    BASELINE,
    S001,
    S002,
    TIMING,
    CellOutputs,
    CorpusStore,
    Workspace,
    compute_cell,
)
from prereg.e04.plan import Cell, E04Settings, grid, settings_from_parameters
from prereg.e04.reformulations import Reformulations, load_reformulations
from prereg.e04.tasks import TaskFile, load_task_file, validate_against_repository
from prereg.hashing import read_json, write_json
from prereg.plans import Plan
from prereg.seeds import derivation
from prereg.stages import RunView, StageKind

INPUTS = ("repository", "tasks", "reformulations")
SUMMARY = "e04_summary.json"
SUMMARY_TEXT = "SUMMARY.md"
ITEM_PREFIX = "test_cell"


def settings_of(plan: dict, stage: str) -> E04Settings:
    return settings_from_parameters(
        plan["stages"][stage]["parameters"],
        source=f"plan {plan['plan_id']}: stages.{stage}.parameters",
    )


def validate_plan(plan: Plan, stage: str) -> None:
    """Schema and consistency of the stage parameters (errors name the field)."""
    settings_from_parameters(
        plan.stage(stage)["parameters"], source=f"{plan.path}: stages.{stage}.parameters"
    )


# -- inputs -------------------------------------------------------------------------------


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
    import json

    from prereg.e04.reformulations import reformulation_problems
    from prereg.e04.tasks import TaskValidationError, task_document_problems

    settings = settings_from_parameters(
        plan.stage(stage)["parameters"], source=f"{plan.path}: stages.{stage}.parameters"
    )
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


def check_inputs(plan: Plan, stage: str, inputs: dict[str, Path]) -> None:
    """``prereg approve``: every problem of :func:`input_problems`, refused in one message."""
    from prereg.approval import ApprovalError

    problems = input_problems(plan, stage, inputs)
    if problems:
        error = ApprovalError(f"E04 inputs refused: {InputProblems(problems)}")
        error.problems = tuple(problems)
        raise error


def cells_for_run(plan: dict, stage: str, inputs: dict[str, Path]) -> list[Cell]:
    """The parametrization of the experiment module: the preregistered grid."""
    settings = settings_of(plan, stage)
    task_file = load_task_file(inputs["tasks"])
    return grid(settings, [t.task_id for t in task_file.tasks])


# -- items --------------------------------------------------------------------------------

_WORKSPACES: dict[tuple, tuple[Workspace, LoadedInputs]] = {}


def open_cache(root: Path, settings: E04Settings) -> VectorCache:
    path = Path(root) / settings.cache_path
    path.parent.mkdir(parents=True, exist_ok=True)
    return VectorCache(
        path,
        conflict_atol=settings.conflict_atol,
        busy_timeout_seconds=settings.busy_timeout_seconds,
    )


def _lmstudio_client_factory(settings: E04Settings) -> Callable[[], Any]:
    def connect() -> Any:
        from prereg.e04.embeddings import lmstudio_client

        options = settings.embedding.get("lmstudio") or {}
        context = lmstudio_client(options.get("api_host"))
        return context.__enter__()  # held for the life of the process

    return connect


def workspace_for(
    root: Path, plan: dict, stage: str, inputs: dict[str, Path]
) -> tuple[Workspace, LoadedInputs]:
    """This process's workspace (memo): corpora, indexes, shared records, backend, cache."""
    key = (str(root), plan["plan_id"], stage, tuple(sorted((k, str(v)) for k, v in inputs.items())))
    if key not in _WORKSPACES:
        settings = settings_of(plan, stage)
        loaded = load_inputs(settings, inputs)
        progress.note(
            f"inputs: {len(loaded.task_file.tasks)} tasks, repository {loaded.repository}; "
            "this worker loads corpora and builds indexes on first use"
        )
        backend = cache = None
        if settings.dense:
            import faiss

            # FAISS scores depend on its thread count in the last bits: use the plan's.
            faiss.omp_set_num_threads(plan["stages"][stage]["threads_per_worker"])
            backend = build_backend(
                dict(settings.embedding), lmstudio_client=_lmstudio_client_factory(settings)
            )
            cache = open_cache(root, settings)
        workspace = Workspace(corpora=CorpusStore(loaded.repository), backend=backend, cache=cache)
        _WORKSPACES[key] = (workspace, loaded)
    return _WORKSPACES[key]


def run_item(context: ItemContext, cell: Cell, *, root: Path, inputs: dict[str, Path]) -> None:
    """One composite cell under the research fixture: compute and write its records.

    Progress (inputs and corpora loaded, embedding batches with counts and rate, index
    builds, queries) goes to the run's progress log through ``context.progress``.
    """
    with progress.reporting_to(context.progress):
        _run_item(context, cell, root=root, inputs=inputs)


def _run_item(context: ItemContext, cell: Cell, *, root: Path, inputs: dict[str, Path]) -> None:
    settings = settings_of(context.plan, context.stage)
    start = time.perf_counter()
    progress.note(f"cell {cell.item_id}: started")
    workspace, loaded = workspace_for(root, context.plan, context.stage, inputs)
    context.coords(
        task=cell.task_id,
        harness=cell.harness,
        seed_coordinate=cell.seed_coordinate,
        dose=cell.dose,
    )
    rng = context.numpy_generator(cell.task_id, settings.distractor_seed_label)
    outputs = compute_cell(
        cell,
        loaded.task_file.task(cell.task_id),
        settings,
        workspace,
        rng,
        loaded.reformulations.texts,
        synthetic=loaded.synthetic,
        seed_derivation=derivation(
            context.seed_namespace, cell.task_id, settings.distractor_seed_label
        ),
    )
    write_outputs(context.outputs, outputs)
    progress.note(f"cell {cell.item_id}: done in {time.perf_counter() - start:.1f} s")
    context.check_budget()


def write_outputs(folder: Path, outputs: CellOutputs) -> None:
    for name, record in outputs.records.items():
        write_json(Path(folder) / name, record)
    write_json(Path(folder) / TIMING, outputs.timing)


# -- summary ------------------------------------------------------------------------------


def _item_cells(view: RunView, settings: E04Settings, task_ids: list[str]) -> dict[str, Cell]:
    return {f"{ITEM_PREFIX}[{c.item_id}]": c for c in grid(settings, task_ids)}


def _inputs_of_view(view: RunView) -> dict[str, Path]:
    return {name: Path(bound["path"]) for name, bound in view.approval["inputs"].items()}


def _collect(view: RunView, settings: E04Settings) -> tuple[dict, dict, list[dict], list[str]]:
    """(baseline by key, S001 by key, S002 records, problems) from the items' files."""
    shared_base, shared_s001, s002 = [], [], []
    for item in sorted(view.items, key=lambda i: i["output_dir"]):
        folder = view.item_dir(item)
        for name, bucket in ((BASELINE, shared_base), (S001, shared_s001)):
            data = (folder / name).read_bytes()
            record = read_json(folder / name, what=f"{name} of {item['nodeid']}")
            bucket.append((item["output_dir"], record["shared_key"], data, record))
        s002.append(read_json(folder / S002, what=f"{S002} of {item['nodeid']}"))
    baseline, problems = analysis.dedupe_shared(shared_base)
    s001, more = analysis.dedupe_shared(shared_s001)
    return baseline, s001, s002, problems + more


def _summary(view: RunView) -> tuple[dict, E04Settings, list[str]]:
    settings = settings_of(view.plan.data, view.stage)
    task_file = load_task_file(_inputs_of_view(view)["tasks"])
    task_ids = [t.task_id for t in task_file.tasks]
    baseline, s001, s002, problems = _collect(view, settings)
    synthetic = any(r["synthetic"] for r in s002)
    summary = analysis.build_summary(
        settings,
        plan_id=view.plan.plan_id,
        synthetic=synthetic,
        task_ids=task_ids,
        baseline=baseline,
        s001=s001,
        s002=s002,
        cells=len(view.items),
    )
    return summary, settings, problems


def summarise(view: RunView) -> None:
    summary, settings, problems = _summary(view)
    if problems:
        raise ValueError("S001/baseline copies are not identical: " + "; ".join(problems))
    write_json(view.summary_dir / SUMMARY, summary)
    (view.summary_dir / SUMMARY_TEXT).write_text(
        analysis.summary_text(summary, settings), encoding="utf-8"
    )
    if settings.dense:
        bind_vectors(view, settings)


def run_texts_of_view(view: RunView, settings: E04Settings, loaded: LoadedInputs, corpora):
    """The dense texts and conditions of a run's items (:mod:`prereg.e04.runvectors`)."""
    from prereg.e04.runvectors import run_texts

    cells = _item_cells(view, settings, [t.task_id for t in loaded.task_file.tasks])
    records = {
        item["output_dir"]: {
            name: read_json(view.item_dir(item) / name, what=f"{name} of {item['nodeid']}")
            for name in (BASELINE, S001, S002)
        }
        for item in view.items
    }
    return run_texts(
        cells, records, settings, loaded.task_file, loaded.reformulations.texts, corpora
    )


def bind_vectors(view: RunView, settings: E04Settings) -> None:
    """Copy the vectors the run searched into summary/ (hashed by the manifest)."""
    from prereg.e04.runvectors import bind_run_vectors

    loaded = load_inputs(settings, _inputs_of_view(view))
    texts = run_texts_of_view(view, settings, loaded, CorpusStore(loaded.repository))
    cache = open_cache(view.root, settings)
    try:
        bind_run_vectors(view.summary_dir, settings, texts, cache)
    finally:
        cache.close()


# -- replay -------------------------------------------------------------------------------


def replay(view: RunView) -> list[str]:
    from prereg.e04.replay import replay_run

    return replay_run(view)


def gate_check(root: Path, plan: Plan, stage: str, approval: dict) -> list[str]:
    """Before the run id is spent: the pinned backend is available and the cache is its own.

    LM Studio: connected, and the pinned embedding model the only loaded model (the
    protocol's resource isolation); MiniLM: the shipped weights hash as pinned. Runs at
    ``prereg approve`` and at the gate, so LM Studio must be up for both. The vector cache
    (if it exists) must open as a vector cache, file no other identity under the pinned
    one, hold only vectors of the pinned dimension (:func:`prereg.e04.cache.inspect_cache`),
    and the vectors it holds for the probe texts (every query and gold function of the
    bound tasks) must be what the pinned backend returns, within ``cache.conflict_atol``.
    """
    from prereg.e04.cache import inspect_cache
    from prereg.e04.embeddings import LMStudioResidencyError, LMStudioUnavailableError

    settings = settings_of(plan.data, stage)
    if not settings.dense:
        return []
    try:
        backend = build_backend(
            settings.embedding, lmstudio_client=_lmstudio_client_factory(settings)
        )
    except (LMStudioUnavailableError, LMStudioResidencyError, ValueError, OSError) as err:
        return [
            f"embedding backend {settings.embedding['backend']!r} is not available as pinned: {err}"
        ]
    path = Path(root) / settings.cache_path
    problems = inspect_cache(path, dict(settings.embedding["identity"]))
    if problems:
        return [f"{p} (plan field cache.path: {settings.cache_path})" for p in problems]
    return probe_cache(path, settings, backend, approval.get("inputs") or {})


def probe_texts(settings: E04Settings, loaded: LoadedInputs) -> dict[str, tuple[str, str]]:
    """Text key -> (text, label) of each dense query and each gold function at its label."""
    from prereg.e04.gitcorpus import read_blob_at
    from prereg.e04.harness import query_for
    from prereg.e04.runvectors import text_key
    from prereg.e04.tasks import locate_gold_functions

    texts: dict[str, tuple[str, str]] = {}
    dense = [s for s in settings.harnesses.values() if s.kind != "bm25"]
    for task in loaded.task_file.tasks:
        for spec in dense:
            query = query_for(spec, task, loaded.reformulations.texts)
            texts[text_key(query)] = (query, f"query of task {task.task_id} ({spec.query_source})")
        sources = {f: read_blob_at(loaded.repository, task.base_commit, f) for f in task.gold_files}
        for gold in locate_gold_functions(task, sources):
            texts[text_key(gold.text)] = (
                gold.text,
                f"gold function {gold.name} of {gold.path} (task {task.task_id})",
            )
    return texts


def probe_cache(path: Path, settings: E04Settings, backend, bound_inputs: dict) -> list[str]:
    """The cache's vectors of :func:`probe_texts` against the pinned backend's (gate)."""
    import numpy as np

    from prereg.e04.cache import VectorCacheError, read_vectors

    if not Path(path).is_file() or not bound_inputs:
        return []
    try:
        loaded = load_inputs(settings, {k: Path(v["path"]) for k, v in bound_inputs.items()})
        texts = probe_texts(settings, loaded)
        stored = read_vectors(path, dict(settings.embedding["identity"]), sorted(texts))
    except (ValueError, LookupError, OSError) as err:
        if isinstance(err, VectorCacheError):
            return [str(err)]
        return [f"E04 inputs could not be read to probe the vector cache: {err}"]
    if not stored:
        return []
    keys = sorted(stored)
    fresh = np.asarray(backend.embed([texts[k][0] for k in keys]), dtype=np.float64)
    problems = []
    for key, row in zip(keys, fresh):
        held = stored[key].astype(np.float64)
        diff = float(np.max(np.abs(held - row))) if held.shape == row.shape else float("inf")
        if not diff <= settings.conflict_atol:
            problems.append(f"{texts[key][1]} (text_sha256 {key[:12]}): max |diff| {diff:.3g}")
    if not problems:
        return []
    return [
        (
            f"vector cache {str(path)!r}: {len(problems)} of {len(keys)} probed vectors in table "
            f"vectors are not what the pinned backend {settings.embedding['backend']!r} returns "
            f"(beyond cache.conflict_atol={settings.conflict_atol}: {'; '.join(problems[:5])}); the "
            "cache is from another model or was altered. Move it away (the run rebuilds it)"
        )
    ]


KIND = StageKind(
    name="e04.robustness",
    validate=validate_plan,
    check_inputs=check_inputs,
    gate_check=gate_check,
    summarise=summarise,
    replay=replay,
    doc=__doc__ or "",
)
