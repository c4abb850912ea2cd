"""The complete-stage summary of an E04 run, written on the controller once every item passed.

``summary/e04_summary.json`` and ``SUMMARY.md`` (:mod:`prereg.e04.analysis`: S001 and the
baseline de-duplicated by ``shared_key``), and, when a harness is dense, the vectors the
run searched (``summary/e04_vectors.npy`` and ``e04_vectors.json``,
:mod:`prereg.e04.runvectors`) with which of them the run computed and which it read
(``e04_vectors_origin.timing.json``). Items are paired with the plan's cells by their item key
(the cell id their recorded coordinates give, :func:`prereg.e04.plan.item_key`), never by
test name or folder name. The replay (:mod:`prereg.e04.replay`) recomputes the same.
"""

from __future__ import annotations

from prereg.api import RunView, read_json, write_json
from prereg.e04 import analysis
from prereg.e04.cells import BASELINE, EMBEDDED_TEXTS, S001, S002, TIMING, CorpusStore
from prereg.e04.inputs import LoadedInputs, bound_inputs, load_inputs, open_cache
from prereg.e04.plan import Cell, E04Settings, grid
from prereg.e04.runvectors import RunTexts, bind_run_vectors, run_texts, write_vector_origin
from prereg.e04.tasks import load_task_file

SUMMARY = "e04_summary.json"
SUMMARY_TEXT = "SUMMARY.md"
RECORDS = (BASELINE, S001, S002)


def expected_cells(settings: E04Settings, task_ids: list[str]) -> dict[str, Cell]:
    """Item key -> cell of the plan's grid (the keys :meth:`RunView.match` pairs items by)."""
    return {c.item_id: c for c in grid(settings, task_ids)}


def _collect(
    view: RunView, settings: E04Settings, task_ids: list[str]
) -> tuple[dict, dict, list[dict], list[str]]:
    """(baseline by key, S001 by key, S002 records, problems) from the items' files."""
    pairs, problems = view.match(expected_cells(settings, task_ids))
    shared_base, shared_s001, s002 = [], [], []
    for _key, item, _cell in sorted(pairs, key=lambda pair: pair[0]):
        folder = view.item_dir(item)
        for name, bucket in ((BASELINE, shared_base), (S001, shared_s001)):
            data = (folder / name).read_bytes()
            record = read_json(folder / name, what=f"{name} of {item['nodeid']}")
            bucket.append((item["output_dir"], record["shared_key"], data, record))
        s002.append(read_json(folder / S002, what=f"{S002} of {item['nodeid']}"))
    baseline, more = analysis.dedupe_shared(shared_base)
    s001, most = analysis.dedupe_shared(shared_s001)
    return baseline, s001, s002, problems + more + most


def compute_summary(view: RunView) -> tuple[dict, list[str]]:
    """The summary of a run's items, and the problems (items that are no cell of the plan,
    S001 or baseline copies that differ)."""
    settings: E04Settings = view.settings
    task_file = load_task_file(bound_inputs(view)["tasks"])
    task_ids = [t.task_id for t in task_file.tasks]
    baseline, s001, s002, problems = _collect(view, settings, task_ids)
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
    return summary, problems


def summarise(view: RunView) -> None:
    """``StageKind.summarise``: write the summary files (and bind the vectors searched)."""
    settings: E04Settings = view.settings
    summary, problems = compute_summary(view)
    if problems:
        raise ValueError("the items do not summarise: " + "; ".join(problems))
    write_json(view.summary_dir / SUMMARY, summary)
    (view.summary_dir / SUMMARY_TEXT).write_text(
        analysis.summary_text(summary, settings), encoding="utf-8"
    )
    if settings.dense:
        bind_vectors(view, settings)


def run_texts_of_view(
    view: RunView, settings: E04Settings, loaded: LoadedInputs, corpora: CorpusStore
) -> RunTexts:
    """The dense texts and conditions of a run's items (:mod:`prereg.e04.runvectors`)."""
    task_ids = [t.task_id for t in loaded.task_file.tasks]
    pairs, _ = view.match(expected_cells(settings, task_ids))
    cells = {key: cell for key, _item, cell in pairs}
    records = {
        key: {
            name: read_json(view.item_dir(item) / name, what=f"{name} of {item['nodeid']}")
            for name in RECORDS
        }
        for key, item, _cell in pairs
    }
    return run_texts(
        cells, records, settings, loaded.task_file, loaded.reformulations.texts, corpora
    )


def bind_vectors(view: RunView, settings: E04Settings) -> None:
    """Copy the vectors the run searched into summary/ (hashed by the manifest)."""
    loaded = load_inputs(settings, bound_inputs(view))
    texts = run_texts_of_view(view, settings, loaded, CorpusStore(loaded.repository))
    cache = open_cache(view.shared_root, settings)
    try:
        bind_run_vectors(view.summary_dir, settings, texts, cache)
    finally:
        cache.close()
    computed = {
        text
        for item in view.items
        for text in read_json(
            view.item_dir(item) / TIMING, what=f"{TIMING} of {item['nodeid']}"
        ).get(EMBEDDED_TEXTS, ())
    }
    write_vector_origin(view.summary_dir, sorted(texts.texts), computed)
