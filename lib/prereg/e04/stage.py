"""E04 stage ``e04`` (kind ``e04.robustness``): the 135-cell retrieval robustness grid.

Inputs bound by the approval: ``repository`` (a git repository, by HEAD commit),
``tasks`` (the task file, :mod:`prereg.e04.tasks`) and ``reformulations`` (the E02
artifact, :mod:`prereg.e04.reformulations`); loading and checking them is
:mod:`prereg.e04.inputs`. One item per composite cell (task x harness x seed coordinate);
each records its coordinates (its item key is the cell id, :func:`prereg.e04.plan.item_key`)
and writes ``baseline.json``, ``s001.json``, ``s002.json`` (:mod:`prereg.e04.cells`) and
``cell.timing.json`` (what the cell cost in its process: seconds, texts embedded there,
cache hits, and the SHA-256 of each text whose vector it computed and stored,
``embedded_text_sha256``; a reused index or shared record costs only its lookup; the only
non-reproducible file). Progress goes to the run's progress log. The summary
(:mod:`prereg.e04.summary`) de-duplicates S001 by ``shared_key`` and binds the vectors the
dense harnesses searched to the run (``summary/e04_vectors.npy`` and ``e04_vectors.json``,
:mod:`prereg.e04.runvectors`). Replay (:mod:`prereg.e04.replay`) recomputes every measure
from the saved rankings, regenerates the distractors, rebuilds every ranking from the
bound vectors (BM25 from the repository) without reading the vector cache, re-embeds a
sample when the pinned backend is available, and recomputes the summary. The gate refuses
a vector cache that is not the pinned model's. The report section is
:func:`prereg.e04.report.render_e04`.

This module is the top of the E04 modules: it assembles :data:`KIND` from them, and none
of them imports it (plan <- inputs <- summary <- replay <- stage).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from prereg.api import InputsRefused, ItemContext, Plan, StageKind, derivation, write_json
from prereg.e04 import progress
from prereg.e04.backends import build_backend
from prereg.e04.cache import VectorCacheError, inspect_cache, read_vectors, text_sha256
from prereg.e04.cells import (
    EMBEDDED_TEXTS,
    TIMING,
    CellOutputs,
    CorpusStore,
    Workspace,
    compute_cell,
)
from prereg.e04.embeddings import LMStudioResidencyError, LMStudioUnavailableError
from prereg.e04.gitcorpus import read_blob_at
from prereg.e04.harness import query_for
from prereg.e04.inputs import (
    INPUTS,
    InputProblems,
    LoadedInputs,
    input_problems,
    lmstudio_client_factory,
    load_inputs,
    open_cache,
)
from prereg.e04.plan import Cell, E04Settings, grid, item_key, settings_of
from prereg.e04.replay import replay_run
from prereg.e04.report import render_e04
from prereg.e04.summary import SUMMARY, SUMMARY_TEXT, summarise
from prereg.e04.tasks import load_task_file, locate_gold_functions

__all__ = [  # what the experiment module, the checks and the benchmarks use from here
    "INPUTS",
    "KIND",
    "SUMMARY",
    "SUMMARY_TEXT",
    "InputProblems",
    "LoadedInputs",
    "cells_for_run",
    "check_inputs",
    "gate_check",
    "input_problems",
    "load_inputs",
    "open_cache",
    "run_item",
    "settings_of",
    "workspace_for",
]


# -- inputs -------------------------------------------------------------------------------


def check_inputs(plan: Plan, stage: str, inputs: dict[str, Path]) -> None:
    """``prereg approve``: every problem of :func:`input_problems`, refused in one message."""
    problems = input_problems(plan, stage, inputs)
    if problems:
        raise InputsRefused(f"E04 inputs refused: {InputProblems(problems)}", problems)


def cells_for_run(plan: dict, stage: str, inputs: dict[str, Path]) -> list[Cell]:
    """The parametrization of the experiment module: the preregistered grid."""
    settings = settings_of(plan, stage)
    task_file = load_task_file(inputs["tasks"])
    return grid(settings, [t.task_id for t in task_file.tasks])


# -- items --------------------------------------------------------------------------------

_WORKSPACES: dict[tuple, tuple[Workspace, LoadedInputs]] = {}


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
            # faiss: the e04 extra, optional
            import faiss

            # FAISS scores depend on its thread count in the last bits: use the plan's.
            faiss.omp_set_num_threads(plan["stages"][stage]["threads_per_worker"])
            backend = build_backend(
                dict(settings.embedding), lmstudio_client=lmstudio_client_factory(settings)
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
    # The item's key (KIND.item_key: the cell id) comes from these, never from the test name.
    context.coords(
        task=cell.task_id,
        harness=cell.harness,
        seed_coordinate=cell.seed_coordinate,
        dose=cell.dose,
    )
    progress.note(f"cell {cell.item_id}: started")
    # A rehearsal's vectors stay in its own folder: a later run never reads them.
    shared = context.rehearsal or root
    workspace, loaded = workspace_for(shared, context.plan, context.stage, inputs)
    rng = context.numpy_generator(cell.task_id, settings.distractor_seed_label)
    inserted = workspace.cache.inserted if workspace.cache is not None else []
    stored_before = len(inserted)
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
    outputs.timing[EMBEDDED_TEXTS] = sorted(inserted[stored_before:])
    write_outputs(context.outputs, outputs)
    progress.note(f"cell {cell.item_id}: done in {time.perf_counter() - start:.1f} s")
    context.check_budget()


def write_outputs(folder: Path, outputs: CellOutputs) -> None:
    for name, record in outputs.records.items():
        write_json(Path(folder) / name, record)
    write_json(Path(folder) / TIMING, outputs.timing)


# -- gate ---------------------------------------------------------------------------------


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
    settings = settings_of(plan.data, stage)
    if not settings.dense:
        return []
    try:
        backend = build_backend(
            settings.embedding, lmstudio_client=lmstudio_client_factory(settings)
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
    texts: dict[str, tuple[str, str]] = {}
    dense = [s for s in settings.harnesses.values() if s.kind != "bm25"]
    for task in loaded.task_file.tasks:
        for spec in dense:
            query = query_for(spec, task, loaded.reformulations.texts)
            texts[text_sha256(query)] = (
                query,
                f"query of task {task.task_id} ({spec.query_source})",
            )
        sources = {f: read_blob_at(loaded.repository, task.base_commit, f) for f in task.gold_files}
        for gold in locate_gold_functions(task, sources):
            texts[text_sha256(gold.text)] = (
                gold.text,
                f"gold function {gold.name} of {gold.path} (task {task.task_id})",
            )
    return texts


def probe_cache(path: Path, settings: E04Settings, backend, bound_inputs: dict) -> list[str]:
    """The cache's vectors of :func:`probe_texts` against the pinned backend's (gate)."""
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
    settings=settings_of,
    item_key=item_key,
    check_inputs=check_inputs,
    gate_check=gate_check,
    summarise=summarise,
    replay=replay_run,
    render=render_e04,
    doc=__doc__ or "",
)
