"""What most stage kinds repeat: result files, replay comparison, summary, report, torch seeds.

Everything here is public through :mod:`prereg.api`.

- :func:`save_json` writes canonical JSON (sorted keys, two-space indent, finite numbers
  only: a NaN or infinity is refused naming its key path); :func:`save_npz` writes a
  ``.npz`` whose bytes depend on the arrays alone (fixed zip dates); :func:`load_json` and
  :func:`load_npz` read them back.
- :func:`compare` lists where recorded values differ from recomputed ones (exact, or within
  a relative tolerance), naming item, file and field; :func:`replay_outputs` reads an
  item's files and compares them; :func:`seed_findings` checks an item's recorded seeds.
- :func:`collect_items` and :func:`summarise_items` (a ``StageKind.summarise``) gather each
  item's named files into one summary file; :func:`render_summary` (a ``StageKind.render``)
  shows a summary as an HTML table; :func:`headline_from` (a ``StageKind.headline``) fills
  one line for the index of runs from it.
- :func:`torch_seeded` seeds torch's global generator from an item's derivation inside a
  fork of it (see its docstring for the thread settings a replay needs).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Callable

import numpy as np

from prereg.base import arrays, seeds
from prereg.base.hashing import read_json, write_json
from prereg.kinds.context import ItemContext
from prereg.kinds.report import html
from prereg.kinds.stages import RunView

JSON_SCALARS = (str, int, float, bool, type(None))


def _step(path: str, key: object) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else str(key))


def json_value(value: Any, path: str = "", *, file: str = "") -> Any:
    """``value`` as plain JSON data: numpy arrays and scalars as lists and numbers, tuples as
    lists, dataclasses as objects. A NaN or infinity or a non-string key raises
    ``ValueError``, a value JSON cannot hold ``TypeError``, naming its path (``file: field
    'a.b[2]'``)."""
    where = f"{file + ': ' if file else ''}field {path!r}" if path else (file or "the value")
    if isinstance(value, np.ndarray):
        return json_value(value.tolist(), path, file=file)
    if isinstance(value, np.generic):
        return json_value(value.item(), path, file=file)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            raise ValueError(f"{where}: key {bad[0]!r} is not a string; JSON keys are strings")
        return {k: json_value(v, _step(path, k), file=file) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v, _step(path, i), file=file) for i, v in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(
            f"{where} is {value!r}: JSON holds finite numbers only; record a missing value as "
            "null or fix the computation that produced it"
        )
    if not isinstance(value, JSON_SCALARS):
        raise TypeError(
            f"{where} is of type {type(value).__name__}, which JSON cannot hold: convert it "
            "(str, int, float, bool, None, list, dict, numpy array)"
        )
    return value


def save_json(path: Path | str, obj: Any) -> Path:
    """Write ``obj`` as canonical JSON (sorted keys, two-space indent, trailing newline),
    atomically, creating the folder; the same value always gives the same bytes."""
    path = Path(path)
    write_json(path, json_value(obj, file=path.name))
    return path


def load_json(path: Path | str) -> Any:
    """A JSON file, read strictly (duplicate keys, NaN and Infinity refused, naming the file)."""
    return read_json(Path(path), what="JSON file")


def save_npz(path: Path | str, **named_arrays: Any) -> Path:
    """Write ``name.npy`` entries (sorted by name, no pickle) with fixed zip dates and
    permissions: the same arrays always give the same bytes, and ``numpy.load`` reads it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays.save_npz(path, {name: np.asarray(a) for name, a in named_arrays.items()})
    return path


def load_npz(path: Path | str) -> dict[str, np.ndarray]:
    """Every array of a ``.npz`` by name (no pickle)."""
    return arrays.load_npz(Path(path))


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        return list(value)
    return value


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _same(recorded: Any, recomputed: Any, rtol: float) -> bool:
    if _number(recorded) and _number(recomputed):
        if math.isnan(recorded) or math.isnan(recomputed):
            return math.isnan(recorded) and math.isnan(recomputed)
        if rtol:
            return math.isclose(recorded, recomputed, rel_tol=rtol, abs_tol=0.0)
        return recorded == recomputed
    return type(recorded) is type(recomputed) and recorded == recomputed


def _walk(recorded: Any, recomputed: Any, path: str, rtol: float) -> Iterator[tuple[str, str]]:
    """(field path, what differs) for each difference, depth first, keys sorted."""
    recorded, recomputed = _plain(recorded), _plain(recomputed)
    if isinstance(recorded, Mapping) and isinstance(recomputed, Mapping):
        for key in sorted(set(recorded) | set(recomputed), key=str):
            where = _step(path, key)
            if key not in recomputed:
                yield where, "recorded, but the replay computes no such field"
            elif key not in recorded:
                yield where, f"not recorded; the replay computes {recomputed[key]!r}"
            else:
                yield from _walk(recorded[key], recomputed[key], where, rtol)
    elif isinstance(recorded, list) and isinstance(recomputed, list):
        if len(recorded) != len(recomputed):
            yield path, f"recorded {len(recorded)} values, recomputed {len(recomputed)}"
        else:
            for index, (r, c) in enumerate(zip(recorded, recomputed)):
                yield from _walk(r, c, _step(path, index), rtol)
    elif not _same(recorded, recomputed, rtol):
        tolerance = f" (relative tolerance {rtol:g})" if rtol and _number(recomputed) else ""
        yield path, f"recorded {recorded!r}, recomputed {recomputed!r}{tolerance}"


def compare(
    label: str, file: str, recorded: Any, recomputed: Any, *, rtol: float = 0.0, limit: int = 10
) -> list[str]:
    """Findings where ``recorded`` (what the run wrote to ``file``) differs from
    ``recomputed``, one per field up to ``limit`` (then one counting the rest):
    ``item replicate1 out.json.loss: recorded 0.5, recomputed 0.5001 (relative tolerance
    1e-09)``. Numbers are equal within ``rtol`` (0: exactly); numpy arrays compare as lists,
    NaN equals NaN; ``[]`` when they agree."""
    findings = []
    for count, (path, what) in enumerate(_walk(recorded, recomputed, "", rtol)):
        if count == limit:
            rest = sum(1 for _ in _walk(recorded, recomputed, "", rtol)) - limit
            findings.append(f"{label} {file}: {rest} more difference(s) not listed")
            break
        findings.append(f"{label} {file}{'.' + path if path else ''}: {what}")
    return findings


def seed_findings(label: str, item: Mapping, namespace: str, *coords: object) -> list[str]:
    """A finding when the item's recorded seeds are not exactly the derivation of
    ``(namespace, *coords)`` (the replay then regenerates nothing for it)."""
    wanted = [seeds.derivation(namespace, *coords)]
    if item.get("seeds") == wanted:
        return []
    return [
        (
            f"{label}: recorded seeds {item.get('seeds')!r}, the plan's derivation is "
            f"{wanted!r}; the item drew from other seeds than the plan states"
        )
    ]


def _read_output(path: Path) -> Any:
    return load_npz(path) if path.suffix == ".npz" else load_json(path)


def replay_outputs(
    view: Any, label: str, item: Mapping, recomputed: Mapping[str, Any], *, rtol: float = 0.0
) -> list[str]:
    """Compare each of the item's files (``.npz`` or JSON) with its recomputed value
    (``{file name: value}``); a file that cannot be read is a finding naming it."""
    findings = []
    for name, value in recomputed.items():
        try:
            recorded = _read_output(view.item_dir(item) / name)
        except (OSError, ValueError) as error:
            findings.append(f"{label} {name}: cannot be read ({error})")
            continue
        findings += compare(label, name, recorded, value, rtol=rtol)
    return findings


def _files(folder: Path) -> dict[str, Path]:
    if not folder.is_dir():
        return {}
    return {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*")) if p.is_file()}


def compare_folders(label: str, recorded: Path, replayed: Path, *, rtol: float = 0.0) -> list[str]:
    """Findings where the files under ``recorded`` differ from those under ``replayed``:
    a file only in one of them, JSON and ``.npz`` files by :func:`compare`, others by bytes."""
    ours, theirs = _files(Path(recorded)), _files(Path(replayed))
    findings = [
        f"{label} {n}: recorded, but the replay writes no such file"
        for n in ours
        if n not in theirs
    ]
    findings += [
        f"{label} {n}: written by the replay, not recorded" for n in theirs if n not in ours
    ]
    for name in (n for n in ours if n in theirs):
        if name.endswith((".json", ".npz")):
            try:
                found = _read_output(ours[name])
            except (OSError, ValueError) as error:
                findings.append(f"{label} {name}: cannot be read ({error})")
                continue
            findings += compare(label, name, found, _read_output(theirs[name]), rtol=rtol)
        elif ours[name].read_bytes() != theirs[name].read_bytes():
            findings.append(f"{label} {name}: its bytes differ from the replay's")
    return findings


def _rerun_view(view: Any, folder: Path) -> Any:
    """``view`` with its items and summary in ``folder``; its approval and required runs
    stay the run's."""

    @dataclasses.dataclass(frozen=True)
    class RerunView(RunView):
        original: Any = None

        @property
        def approval(self) -> dict:
            return self.original.approval

        def required_run(self, stage: str) -> Path:
            return self.original.required_run(stage)

    given = {f.name: getattr(view, f.name) for f in dataclasses.fields(RunView)}
    return RerunView(**{**given, "run_dir": folder, "kind": view.stage_kind}, original=view)


def rerun_replay(
    run_item: Callable[[Any, Any], None],
    cells: Callable[[Any], Mapping[str, Any]],
    *,
    rtol: float = 0.0,
) -> Callable[[Any], list[str]]:
    """A ``StageKind.replay`` that reruns the items' own code: for each cell of
    ``cells(settings)`` (``{item key: cell}``), ``run_item(research, cell)`` with a fresh
    :class:`prereg.kinds.context.ItemContext` writing to a scratch folder; then the kind's
    ``summarise`` on the rerun items. Findings: every field, file, recorded coordinate or
    seed derivation that differs from the run's (numbers within ``rtol``), named by item
    key and file, and the cells the run has no item for (:meth:`RunView.match`).

    ``run_item`` is what the experiments module calls; it must write only to
    ``research.outputs``. The rerun context has the plan, settings, seeds and required
    runs of the run; it has no bound ``inputs`` (a kind whose items read inputs compares
    with :func:`replay_outputs` in a replay of its own)."""

    def replay(view: Any) -> list[str]:
        settings = view.settings
        pairs, findings = view.match(cells(settings))
        complete = not findings  # every cell has one item: the summary can be rebuilt
        spec = view.plan.stage(view.stage)
        with tempfile.TemporaryDirectory(prefix="prereg-replay-") as scratch:
            rerun = _rerun_view(view, Path(scratch))
            for key, item, cell in pairs:
                outputs = rerun.item_dir(item)
                outputs.mkdir(parents=True)
                research = ItemContext(
                    stage=view.stage,
                    run_id=view.run_dir.name,
                    plan=view.plan.data,
                    outputs=outputs,
                    seed_namespace=spec.get("seed_namespace"),
                    deadline=None,
                    required_runs={s: view.required_run(s) for s in spec.get("requires") or []},
                    record={"output_dir": item["output_dir"]},
                )
                research.__dict__["settings"] = settings  # the view's kind, parsed once
                label = f"item {key}"
                try:
                    run_item(research, cell)
                except Exception as error:  # noqa: BLE001 - the failure is a finding
                    findings.append(f"{label}: the rerun raised {type(error).__name__}: {error}")
                    complete = False
                    continue
                for field in ("coords", "seeds"):
                    if (item.get(field) or None) != (research.record.get(field) or None):
                        findings.append(
                            f"{label}: recorded {field} {item.get(field)!r}, the rerun's are "
                            f"{research.record.get(field)!r}"
                        )
                findings += compare_folders(label, view.item_dir(item), outputs, rtol=rtol)
            if complete and view.stage_kind.summarise is not None:
                try:
                    view.stage_kind.summarise(rerun)
                except Exception as error:  # noqa: BLE001 - the failure is a finding
                    findings.append(
                        f"summary: the kind's summarise of the rerun items raised {error}"
                    )
                else:
                    findings += compare_folders(
                        "summary", view.summary_dir, rerun.summary_dir, rtol=rtol
                    )
        return findings

    return replay


def collect_items(
    view: Any, *files: str, cells: Callable[[Any], Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """Each item's named JSON file(s) by item key: ``{key: data}`` for one file, ``{key:
    {file: data}}`` for several. With ``cells(settings) -> {key: cell}`` the items must be
    exactly the plan's cells (:meth:`prereg.kinds.stages.RunView.match`); without, every item's
    key must be distinct. A mismatch raises ``ValueError`` listing every problem."""
    if not files:
        raise ValueError("collect_items needs the name of at least one item file")
    if cells is not None:
        pairs, problems = view.match(cells(view.settings))
        keyed = [(key, item) for key, item, _ in pairs]
    else:
        keyed = [(view.item_key(item), item) for item in view.items]
        keys = [key for key, _ in keyed]
        problems = [f"two items have the key {k!r}" for k in sorted(set(keys)) if keys.count(k) > 1]
    if problems:
        raise ValueError("; ".join(problems))

    def read(item: Mapping) -> Any:
        if len(files) == 1:
            return view.load_item_json(item, files[0])
        return {name: view.load_item_json(item, name) for name in files}

    return {key: read(item) for key, item in keyed}


def summarise_items(
    summary_file: str,
    *files: str,
    cells: Callable[[Any], Mapping[str, Any]] | None = None,
    build: Callable[[Any, dict[str, Any]], Any] | None = None,
) -> Callable[[Any], None]:
    """A ``StageKind.summarise``: :func:`collect_items` of ``files``, then ``build(settings,
    collected)`` (default: the collected mapping itself) written by :func:`save_json` as
    ``summary/<summary_file>``."""

    def summarise(view: Any) -> None:
        collected = collect_items(view, *files, cells=cells)
        value = collected if build is None else build(view.settings, collected)
        save_json(view.summary_dir / summary_file, value)

    return summarise


def _flatten(value: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, Mapping):
        return [pair for k in value for pair in _flatten(value[k], _step(path, k))]
    if isinstance(value, list):
        return [(path, ", ".join(html.fmt(v) for v in value))]
    return [(path, value)]


def _records(value: Any) -> bool:
    """A list of objects, or an object of objects: rows of a table."""
    values = list(value.values()) if isinstance(value, Mapping) else value
    return isinstance(values, list) and bool(values) and all(isinstance(v, Mapping) for v in values)


def _rows(records: Any) -> tuple[list[str], list[list[Any]]]:
    """Headers and rows of a list of records, or of ``{key: record}`` (the key first)."""
    keyed = isinstance(records, Mapping)
    values = list(records.values()) if keyed else list(records)
    flat = [dict(_flatten(r)) if isinstance(r, Mapping) else {"value": r} for r in values]
    headers = list(dict.fromkeys(name for row in flat for name in row))
    rows = [[row.get(name) for name in headers] for row in flat]
    if keyed:
        return ["item", *headers], [[key, *row] for key, row in zip(records, rows)]
    return headers, rows


def render_summary(
    title: str, summary_file: str, *, table: str | None = None, section_id: str = ""
) -> Callable[[Any], str]:
    """A ``StageKind.render``: the summary's scalar fields as labelled values and the
    records under the top-level field ``table`` (a list of objects, or an object of objects)
    as a sortable table; ``table=None`` shows a summary of records (an object of objects, as
    :func:`summarise_items` writes by default, or a list of them) as the table, and any
    other summary as what it is (nested fields nested:
    :func:`prereg.kinds.report.html.value_tree`)."""

    def render(context: Any) -> str:
        summary = context.summary_json(summary_file)
        body = []
        if table is None and not _records(summary):
            return html.section(title, html.value_tree(summary), section_id=section_id)
        if table is None:
            headers, rows = _rows(summary)
        else:
            if not isinstance(summary, Mapping) or table not in summary:
                raise ValueError(
                    f"summary file {summary_file} has no top-level field {table!r} to tabulate"
                )
            rest = {k: v for k, v in summary.items() if k != table}
            body.append(html.key_values(_flatten(rest)))
            headers, rows = _rows(summary[table])
        body.append(html.table(headers, rows, caption=f"{summary_file}: {table or 'items'}"))
        return html.section(title, "\n".join(body), section_id=section_id)

    return render


def headline_from(summary_file: str, template: str) -> Callable[[Any], str]:
    """A ``StageKind.headline``: ``template.format_map(summary)`` of the complete run's
    ``summary/<summary_file>`` (a JSON object), e.g. ``"decision: {decision}"``; nested
    fields as ``{interval[low]}``."""

    def headline(context: Any) -> str:
        summary = context.summary_json(summary_file)
        if not isinstance(summary, Mapping):
            raise TypeError(
                f"summary file {summary_file} holds no JSON object to fill {template!r}"
            )
        return template.format_map(summary)

    return headline


@contextlib.contextmanager
def torch_seeded(source: Any, *coords: object) -> Iterator[int]:
    """Inside the block, torch's global generator is seeded from the item's derivation; on
    exit it is restored as it was (``torch.random.fork_rng``, CPU).

    ``source`` is the item's ``research`` (the seed is recorded in its ``seeds``) or, in a
    replay, the stage's seed namespace (a string). ``nn.init`` and a ``DataLoader``
    shuffling without its own generator then draw the same numbers each time.

    A replay reproduces float results bit for bit only with the item's thread settings:
    call ``torch.set_num_threads(threads_per_worker)`` (the plan's; prereg sets it for the
    items), ``torch.use_deterministic_algorithms(True)`` where the model uses
    nondeterministic kernels, and ``num_workers=0`` or a ``worker_init_fn`` seeded from the
    derivation for a ``DataLoader``; otherwise compare with a relative tolerance.
    """
    try:
        # torch: the training extra, optional
        import torch
    except ImportError as error:
        raise ModuleNotFoundError(
            "prereg.api.torch_seeded needs torch, which is not installed here "
            f"({error}); install torch, or draw from prereg.api.numpy_generator instead"
        ) from None
    value = source.seed(*coords) if hasattr(source, "seed") else seeds.seed(source, *coords)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(value)
        yield value


__all__ = [
    "collect_items",
    "compare",
    "compare_folders",
    "headline_from",
    "json_value",
    "load_json",
    "load_npz",
    "render_summary",
    "replay_outputs",
    "rerun_replay",
    "save_json",
    "save_npz",
    "seed_findings",
    "summarise_items",
    "torch_seeded",
]
