"""Audit replay of an E04 run: nothing is trusted, nothing is read from the vector cache.

For every item of the run: its cell belongs to the plan's grid (items are paired with
cells by the item key their recorded coordinates give, never by test or folder name) and
its recorded seed is the plan's derivation; every measure and paired outcome is recomputed from the
saved rankings; the distractors are regenerated from the seed and compared (path,
SHA-256, source); every ranking is rebuilt from the repository (BM25) and the vectors
bound to the run (dense; ``summary/e04_vectors.npy``, :mod:`prereg.e04.runvectors`)
and compared with the saved one, together with the SHA-256 of the vectors used. A
vector missing from the bound file is a finding, never embedded. The bound keys must
be exactly the texts the run searched, and, when the pinned backend is available, a
sample of them is re-embedded and must agree within ``cache.conflict_atol``. Then the
S001 and baseline copies must be identical per ``shared_key`` and the summary must be
recomputed byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from prereg.api import RunView, canonical_json, derivation, numpy_generator, read_json, sha256_file
from prereg.e04 import analysis
from prereg.e04.backends import CacheOnlyBackend, MissingVectorError, build_backend
from prereg.e04.cells import (
    BASELINE,
    S001,
    S002,
    CorpusStore,
    Workspace,
    compute_cell,
    gold_functions_at_label,
)
from prereg.e04.inputs import bound_inputs, lmstudio_client_factory, load_inputs
from prereg.e04.metrics import function_key, token_count
from prereg.e04.plan import E04Settings
from prereg.e04.runvectors import (
    VECTORS_FILE,
    RunVectors,
    deciding_keys,
    key_set_findings,
    note,
    reembed_findings,
    reembed_sample,
)
from prereg.e04.summary import (
    SUMMARY,
    SUMMARY_TEXT,
    compute_summary,
    expected_cells,
    run_texts_of_view,
)

# Fields compared after a rebuild: everything reproducible a record holds.
_REBUILT_FIELDS = ("ranking", "index", "measures", "paired", "distractors", "generated_sha256")


def _recompute_findings(
    name: str,
    record: dict,
    baseline: dict,
    gold_files: Sequence[str],
    gold_tokens: Sequence[tuple[tuple, int]],
    settings: E04Settings,
    limit: int,
) -> list[str]:
    findings = []
    fresh = analysis.measures_from_ranking(
        record["ranking"], gold_files, gold_tokens, settings, limit
    )
    if fresh != record["measures"]:
        differ = sorted(
            k
            for k in set(fresh) | set(record["measures"])
            if fresh.get(k) != record["measures"].get(k)
        )
        findings.append(f"{name}: measures {differ} differ from those recomputed from its ranking")
    if "paired" in record:
        paired = analysis.paired_from_rankings(
            baseline["ranking"], record["ranking"], gold_files, settings, limit
        )
        if paired != record["paired"]:
            findings.append(f"{name}: paired outcomes differ from those recomputed from rankings")
    return findings


@contextmanager
def plan_threads(threads: int) -> Iterator[None]:
    """BLAS/OpenMP (threadpoolctl) and FAISS limited to the plan's threads per worker.

    FAISS inner products differ in the last float32 bits between thread counts, so a
    ranking is rebuilt exactly only with the threads it was built with.
    """
    # faiss: the e04 extra, optional
    import faiss

    # threadpoolctl: importing it sets KMP_DUPLICATE_LIB_OK in os.environ, which a research
    # session's environment must not hold (the execution check refuses it), so only here
    from threadpoolctl import threadpool_limits

    previous = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(threads)
    limits = threadpool_limits(threads)
    try:
        yield
    finally:
        limits.restore_original_limits()
        faiss.omp_set_num_threads(previous)


def _vector_findings(
    view: RunView, settings: E04Settings, loaded, corpora: CorpusStore, bound: RunVectors
) -> list[str]:
    """Bound keys = texts searched; a sample re-embedded by the pinned backend agrees."""
    texts = run_texts_of_view(view, settings, loaded, corpora)
    findings = key_set_findings(bound, texts)
    if findings:
        return findings
    try:
        backend = build_backend(
            dict(settings.embedding), lmstudio_client=lmstudio_client_factory(settings)
        )
    except Exception as err:  # noqa: BLE001 - any failure means: not available here
        note(
            f"vectors not re-embedded: the pinned backend {settings.embedding['backend']!r} is "
            f"not available here ({err}); rankings were rebuilt from the bound vectors only"
        )
        return []
    manifest = view.layout.manifest
    seed_text = sha256_file(manifest) if manifest.is_file() else view.run_dir.name
    gold = {t.task_id: t.gold_files for t in loaded.task_file.tasks}
    sample = reembed_sample(texts, deciding_keys(texts, gold, settings), seed_text)
    return reembed_findings(backend, bound, texts, sample, settings.conflict_atol)


def replay_run(view: RunView) -> list[str]:
    """Every finding of the E04 replay (see the module docstring); empty when clean."""
    with plan_threads(view.plan.stage(view.stage)["threads_per_worker"]):
        return _replay(view)


def _replay(view: RunView) -> list[str]:
    settings: E04Settings = view.settings
    namespace = view.plan.stage(view.stage)["seed_namespace"]
    loaded = load_inputs(settings, bound_inputs(view))
    task_ids = [t.task_id for t in loaded.task_file.tasks]
    pairs, findings = view.match(expected_cells(settings, task_ids))
    backend = bound = None
    if settings.dense:
        backend = CacheOnlyBackend(dict(settings.embedding["identity"]))
        bound, more = RunVectors.load(view.summary_dir, settings.embedding["identity"])
        findings += more
    workspace = Workspace(corpora=CorpusStore(loaded.repository), backend=backend, cache=bound)
    gold_cache: dict[str, list] = {}
    for _key, item, cell in pairs:
        name = item["output_dir"]  # where its files are (items/<name>/), for the findings
        seed_text = derivation(namespace, cell.task_id, settings.distractor_seed_label)
        if item.get("seeds") != [seed_text]:
            findings.append(f"{name}: recorded seeds {item.get('seeds')} are not [{seed_text!r}]")
            continue
        task = loaded.task_file.task(cell.task_id)
        spec = settings.harnesses[cell.harness]
        if task.task_id not in gold_cache:
            gold_cache[task.task_id] = [
                (function_key(g), token_count(g.text, settings.token_pattern))
                for g in gold_functions_at_label(task, workspace.corpora)
            ]
        gold_tokens = gold_cache[task.task_id]
        folder = view.item_dir(item)
        records = {n: read_json(folder / n, what=f"{n} of {name}") for n in (BASELINE, S001, S002)}
        base = records[BASELINE]
        for file_name, record in records.items():
            findings += _recompute_findings(
                f"{name}/{file_name}",
                record,
                base,
                task.gold_files,
                gold_tokens,
                settings,
                spec.candidate_limit,
            )
        s002 = records[S002]
        if (s002["dose"], s002["seed_coordinate"]) != (cell.dose, cell.seed_coordinate):
            findings.append(f"{name}/{S002}: dose {s002['dose']} is not the plan's {cell.dose}")
        if s002["synthetic"] != loaded.synthetic:
            findings.append(
                f"{name}: 'synthetic' is {s002['synthetic']}, inputs say {loaded.synthetic}"
            )
        if spec.kind != "bm25" and bound is None:
            continue  # no bound vectors to rebuild from: one finding above says so
        try:
            rebuilt = compute_cell(
                cell,
                task,
                settings,
                workspace,
                numpy_generator(namespace, cell.task_id, settings.distractor_seed_label),
                loaded.reformulations.texts,
                synthetic=loaded.synthetic,
                seed_derivation=seed_text,
            )
        except MissingVectorError as err:
            findings.append(f"{name}: cannot rebuild the dense rankings: {err}")
            continue
        for file_name, record in records.items():
            fresh = rebuilt.records[file_name]
            for field in _REBUILT_FIELDS:
                if fresh.get(field) != record.get(field):
                    what = {
                        "distractors": "regenerated distractors (path, SHA-256 or source)",
                        "generated_sha256": "regenerated distractor hashes",
                        "index": (
                            f"index statistics or vector hashes (summary/{VECTORS_FILE} changed?)"
                        ),
                    }.get(field, field)
                    findings.append(f"{name}/{file_name}: rebuilt {what} differ from the saved")
    if bound is not None:
        findings += _vector_findings(view, settings, loaded, workspace.corpora, bound)
    if findings:
        return findings
    summary, problems = compute_summary(view)
    findings += problems
    if canonical_json(summary) != (view.summary_dir / SUMMARY).read_text(encoding="utf-8"):
        findings.append(f"summary/{SUMMARY} differs from the summary recomputed from the items")
    text = analysis.summary_text(summary, settings)
    if text != (Path(view.summary_dir) / SUMMARY_TEXT).read_text(encoding="utf-8"):
        findings.append(f"summary/{SUMMARY_TEXT} differs from the recomputed summary")
    return findings
