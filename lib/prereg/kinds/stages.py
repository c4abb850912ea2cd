"""Stage kinds: the one home of what a stage is beyond its items.

A stage's plan entry names a kind. A kind parses the stage's parameters once into frozen,
typed settings (:attr:`StageKind.settings`), which items, summary, replay and report
receive; derives each item's key from the coordinates the item recorded
(:attr:`StageKind.item_key`), so replay and summaries never name a test function; may
check the inputs an approval binds; writes the complete-stage summary on the controller
once every item passed; replays the stage for the auditor; and renders its report section.

The project's own kinds are listed in :data:`BUILT_IN_KINDS`, tracked code and the one
home of that mapping: :func:`load_kind` resolves them there first, so no package metadata
(an ignored ``lib/prereg.egg-info`` included) can point them at other code. A user's own
package adds other kinds under the entry-point group ``prereg.stage_kinds``
(:mod:`prereg.kinds.registry` says which installed packages qualify). :func:`register_kind` adds
one in-process (tests).
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from prereg.base import seeds
from prereg.base.hashing import read_json
from prereg.base.schema import SchemaError
from prereg.evidence import execution
from prereg.kinds import registry
from prereg.records.runs import RunFolder, consumed_folder

ENTRY_POINT_GROUP = registry.STAGE_KINDS
# A plan's kind ``module:attribute`` names a kind in the project's own code.
PROJECT_KIND_SEPARATOR = ":"


def coordinate_key(coords: Mapping[str, Any]) -> str:
    """The default item key: the recorded coordinates as canonical JSON (names sorted).

    An item records its coordinates with ``research.coords(...)``; two items of one stage
    must differ in them. JSON keeps the key unambiguous whatever the values hold (a value
    with ``,`` or ``=`` in it cannot pass for two coordinates). A kind whose cells carry an
    id of their own (``T01-H000-s0``) gives :attr:`StageKind.item_key` instead.
    """
    return json.dumps(dict(coords), sort_keys=True, separators=(",", ":"), allow_nan=False)


def _no_check(plan: object, stage: str) -> None:
    return None


@dataclass(frozen=True)
class Grid:
    """A stage's items as one coordinate over the values its settings give: a kind declares
    its grid in one line, and its cells, item keys and seeds follow.

    ``Grid("replicate", lambda settings: range(settings.replicates))`` is one item per
    replicate: item keys ``replicate0``, ``replicate1``, ..., each seeded from
    ``("replicate", r)`` after the stage's ``seed_namespace``. A string value is its own
    key (``Grid("cell", lambda settings: ["decision"], seeded=False)``: one item,
    ``decision``, that draws no random number). Values are ints or strings; two values that
    would share a key are refused (by :meth:`cells`, so ``prereg approve`` names them).

    Give it to :class:`StageKind` as ``grid=`` (its ``cells``, ``seed_coords`` and
    ``item_key``), to :func:`prereg.plugin.parametrize_items` in the experiments module,
    and call :meth:`start` first in each item."""

    coordinate: str
    values: Callable[[Any], Any]  # settings -> an iterable of ints or strings
    seeded: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.coordinate, str) or not self.coordinate.isidentifier():
            raise TypeError(f"a grid's coordinate is a Python name, not {self.coordinate!r}")

    def key(self, value: int | str) -> str:
        """The item key of ``value``: the coordinate and an int, or a string as it is. No
        two values share a key: a string that reads as the coordinate and an int is
        refused."""
        if type(value) is int:
            return f"{self.coordinate}{value}"
        if type(value) is not str:
            raise ValueError(
                f"a value of grid coordinate {self.coordinate!r} is an int or a string, "
                f"not {value!r}"
            )
        if not value or re.fullmatch(re.escape(self.coordinate) + r"-?[0-9]+", value):
            raise ValueError(
                f"grid coordinate {self.coordinate!r}: the string value {value!r} would read "
                f"as an int value's key; name the cell otherwise"
            )
        return value

    def cells(self, settings: Any) -> dict[str, int | str]:
        """The item grid, item key -> value, in the order ``values`` gives."""
        values = self.values(settings)
        if isinstance(values, (set, frozenset)):  # ordered by string hashes, per process
            raise TypeError(
                f"grid coordinate {self.coordinate!r}: its values are a set, whose order "
                "differs between processes (so would each worker's items): return a list, "
                "a tuple or a range"
            )
        grid: dict[str, int | str] = {}
        for value in values:
            key = self.key(value)
            if key in grid:
                raise ValueError(
                    f"grid coordinate {self.coordinate!r}: values {grid[key]!r} and {value!r} "
                    f"share the item key {key!r}; give each item a value of its own"
                )
            grid[key] = value
        return grid

    def seed_coords(self, value: int | str) -> tuple[object, ...]:
        """What the item of ``value`` seeds from, after the stage's seed namespace."""
        return (self.coordinate, value)

    def item_key(self, coords: Mapping[str, Any]) -> str:
        """The key of an item from the coordinates it recorded: exactly this grid's one
        coordinate, an int or a string (``True``, ``1.0`` name no cell)."""
        if set(coords) != {self.coordinate}:
            raise ValueError(
                f"an item of this grid records one coordinate {self.coordinate!r}, "
                f"not {dict(coords)!r}"
            )
        return self.key(coords[self.coordinate])

    def start(self, research: Any, value: int | str) -> Any:
        """What an item does first: record its coordinate (so even a failed item names its
        cell) and return its own numpy generator, seeded from its derivation and recorded
        (None for a grid that is not ``seeded``)."""
        research.coords(**{self.coordinate: value})
        if not self.seeded:
            return None
        return research.numpy_generator(*self.seed_coords(value))


@dataclass(frozen=True)
class StageKind:
    """What a stage is beyond its items (see the module docstring and docs/API.md).

    ``settings(plan_data, stage)`` parses the stage's parameters once into frozen, typed
    settings and raises ``ValueError`` naming the field on bad input; ``validate`` is kept
    for checks that need the whole :class:`prereg.kinds.plans.Plan`. ``cells(settings)`` is the
    item grid, ``{item key: cell}``, and ``seed_coords(cell)`` the coordinates its item
    seeds from (after the stage's ``seed_namespace``): with them :meth:`check` refuses a
    grid no run could complete before a run id is spent. ``item_key(coords)`` names an
    item by the coordinates it recorded. ``render(SectionContext) -> str`` is the HTML
    section of the kind's report (complete runs only); ``headline(RunView) -> str | None``
    one line of a complete run's result (its decision, say) for the index of runs.
    """

    name: str
    validate: Callable[[object, str], None] = _no_check
    check_inputs: Callable[[object, str, dict[str, Path]], None] | None = None
    # Checked by the gate and by prereg approve: (root, plan, stage, approval record data) ->
    # problems; e.g. the confirmatory stage refuses when the frozen config forbids confirmation.
    gate_check: Callable[[Path, object, str, dict], list[str]] | None = None
    summarise: Callable[[RunView], None] | None = None
    replay: Callable[[RunView], list[str]] | None = None
    settings: Callable[[dict, str], object] | None = None
    cells: Callable[[Any], Mapping[str, Any]] | None = None
    seed_coords: Callable[[Any], tuple] | None = None
    item_key: Callable[[Mapping[str, Any]], str] = coordinate_key
    render: Callable[[Any], str] | None = None
    headline: Callable[[Any], str | None] | None = None
    doc: str = field(default="")
    # A one-coordinate grid (:class:`Grid`): gives ``cells``, ``seed_coords`` (when seeded)
    # and ``item_key``, which are then not given.
    grid: Grid | None = None

    def __post_init__(self) -> None:
        if self.grid is None:
            return
        given = [
            name
            for name, value in (
                ("cells", self.cells),
                ("seed_coords", self.seed_coords),
                ("item_key", None if self.item_key is coordinate_key else self.item_key),
            )
            if value is not None
        ]
        if given:
            raise TypeError(
                f"stage kind {self.name!r}: its grid gives {', '.join(given)}; "
                "give either grid or those, not both"
            )
        object.__setattr__(self, "cells", self.grid.cells)
        object.__setattr__(self, "item_key", self.grid.item_key)
        if self.grid.seeded:
            object.__setattr__(self, "seed_coords", self.grid.seed_coords)

    def check(self, plan: object, stage: str) -> None:
        """Validate the stage's plan entry: the typed settings parse, ``validate``, then the
        item grid (:func:`grid_problems`). ``prereg approve``, the gate, a rehearsal and the
        software check ``prereg init`` writes all call this."""
        settings = None
        if self.settings is not None:
            try:
                settings = self.settings(plan.data, stage)
            except ValueError as error:
                if str(plan.path) in str(error):
                    raise
                raise SchemaError(f"{plan.path}: {error}") from error
        self.validate(plan, stage)
        if self.cells is not None:
            namespace = plan.stage(stage).get("seed_namespace")
            problems = grid_problems(self, settings, namespace)
            if problems:
                raise SchemaError(
                    f"{plan.path}: stages.{stage}: the item grid of kind {self.name!r} cannot "
                    f"be run: {'; '.join(problems)}"
                )


def grid_problems(kind: StageKind, settings: object, namespace: str | None) -> list[str]:
    """What makes the grid ``kind.cells(settings)`` unrunnable: no cell, or (with
    ``kind.seed_coords``) a cell whose seed derivation under ``namespace`` cannot be written,
    so its item would fail when it draws. Each problem names the cell and what to change."""
    try:
        grid = kind.cells(settings)
    except Exception as error:  # noqa: BLE001 -- the kind's own code: named, not a traceback
        return [f"cells(settings) raised {type(error).__name__}: {error}; fix the kind's cells"]
    if not isinstance(grid, Mapping):
        return [f"cells(settings) returned {type(grid).__name__}, not a mapping item key -> cell"]
    if not grid:
        return [
            "it has no cell, so a run would collect no item: check the parameters it is built from"
        ]
    if kind.seed_coords is None:
        return []
    if namespace is None:
        return [
            "the kind seeds its items (seed_coords) but the stage has no seed_namespace: set one"
        ]
    problems = []
    for key, cell in grid.items():
        try:
            coords = tuple(kind.seed_coords(cell))
        except Exception as error:  # noqa: BLE001 -- as for cells
            problems.append(
                f"seed_coords of cell {key!r} raised {type(error).__name__}: {error}; it must "
                "return the tuple of coordinates the cell's item seeds from"
            )
            continue
        try:
            seeds.derivation(namespace, *coords)
        except seeds.SeedCoordinateError as error:
            problems.append(
                f"cell {key!r} seeds from {coords!r}, which has no derivation ({error})"
            )
    return problems


@dataclass(frozen=True)
class RunView:
    """A run directory as the summary and replay functions see it."""

    root: Path  # repository root
    run_dir: Path
    plan: object  # prereg.kinds.plans.Plan
    stage: str
    items: tuple[dict, ...]  # per-item manifest records, in node-id order
    kind: StageKind | None = None  # default: the kind the plan names for the stage
    # A rehearsal (runs/rehearsals/<name>/): a kind writes nothing a later run reads (a
    # frozen file in the checkout, a shared cache) outside ``run_dir``.
    rehearsal: bool = False

    @functools.cached_property
    def stage_kind(self) -> StageKind:
        if self.kind is not None:
            return self.kind
        return load_kind(self.plan.stage(self.stage)["kind"])

    @property
    def layout(self) -> RunFolder:
        return RunFolder(self.run_dir)

    @property
    def parameters(self) -> dict:
        return self.plan.stage(self.stage)["parameters"]

    @functools.cached_property
    def settings(self) -> object:
        """The kind's typed settings of this stage (parsed once)."""
        if self.stage_kind.settings is None:
            raise TypeError(f"stage kind {self.stage_kind.name!r} defines no settings")
        return self.stage_kind.settings(self.plan.data, self.stage)

    @property
    def approval(self) -> dict:
        """The approval record this run started under (its copy in the run folder)."""
        return read_json(self.layout.approval_copy, what="approval copy")

    def required_run(self, stage: str) -> Path:
        """The folder of the run of ``stage`` this run consumed (beside this run's folder;
        a rehearsal's in the checkout's runs/)."""
        run_id = self.approval["requires"][stage]["run_id"]
        return (
            consumed_folder(self.root, run_id) if self.rehearsal else self.run_dir.parent / run_id
        )

    @property
    def shared_root(self) -> Path:
        """Where state shared between runs lives (a cache): the checkout, or in a rehearsal
        the rehearsal's own folder."""
        return self.run_dir if self.rehearsal else self.root

    @property
    def summary_dir(self) -> Path:
        return self.layout.summary_dir

    def item_dir(self, item: dict) -> Path:
        return self.layout.item_dir(item["output_dir"])

    def load_item_json(self, item: dict, name: str) -> dict:
        return read_json(self.item_dir(item) / name, what=f"output of {item['nodeid']}")

    def item_key(self, item: dict) -> str:
        """The key of a manifest item record, from the coordinates it recorded."""
        return self.stage_kind.item_key(item.get("coords") or {})

    def match(self, expected: Mapping[str, Any]) -> tuple[list[tuple[str, dict, Any]], list[str]]:
        """Pair the run's items with the plan's cells by item key (never by test name).

        ``expected`` maps each key the plan calls for to its cell. Returns
        ``[(key, item record, cell)]`` in the run's item order, and the findings: an item
        whose coordinates are no cell of the plan, two items of one cell, a cell with no item.
        """
        pairs, findings, seen = [], [], set()
        for item in self.items:
            try:
                key = self.item_key(item)
            except (KeyError, TypeError, ValueError) as error:
                findings.append(
                    f"item {item.get('nodeid')!r}: its coordinates {item.get('coords')!r} "
                    f"name no cell ({error})"
                )
                continue
            if key not in expected:
                findings.append(
                    f"item {item.get('nodeid')!r} (coordinates {key!r}) is not a cell of "
                    "the plan's grid"
                )
            elif key in seen:
                findings.append(f"cell {key!r} has two items in the manifest")
            else:
                seen.add(key)
                pairs.append((key, item, expected[key]))
        findings += [
            f"cell {key!r} of the plan has no item in the manifest"
            for key in expected
            if key not in seen
        ]
        return pairs, findings


PLAIN = StageKind(name="plain", doc="items only: no summary, audit by hashes alone")

# The project's own kinds: name -> "module:attribute" (tracked code, imported on first use).
BUILT_IN_KINDS: dict[str, str] = {
    "rp002a.calibration": "prereg.rp002a.calibration_stage:KIND",
    "rp002a.target-variance": "prereg.rp002a.variance_stage:KIND",
    "rp002a.confirmatory-config": "prereg.rp002a.config_stage:KIND",
    "rp002a.confirmatory": "prereg.rp002a.confirmatory_stage:KIND",
    "e04.robustness": "prereg.e04.stage:KIND",
}


class UnknownStageKind(LookupError):
    pass


class InputsRefused(ValueError):
    """A stage kind's ``check_inputs`` refuses the inputs bound to a run: ``problems`` holds
    every one, each naming the input, what is wrong and what to do. ``prereg approve``,
    ``prereg validate-inputs`` and a rehearsal list them."""

    def __init__(self, message: str, problems: Sequence[str]) -> None:
        super().__init__(message)
        self.problems = tuple(str(p) for p in problems)  # each is printed as a line


def register_kind(kind: StageKind) -> None:
    """Add ``kind`` in this process, under its name (a built-in name is refused)."""
    if kind.name == PLAIN.name:
        raise ValueError(f"stage kind {kind.name!r} is built in; register another name")
    KIND_POINT.register(kind.name, kind)


def _is_kind(name: str, kind: object) -> bool:
    return isinstance(kind, StageKind) and kind.name == name


# Stage kinds by name: the built-in ones, then those installed packages declare.
KIND_POINT = registry.ExtensionPoint(ENTRY_POINT_GROUP, BUILT_IN_KINDS, _is_kind, "stage kind")


# The folders this process's project code lives in (its checkout, or a run's snapshot):
# when any is known, a project kind is taken only from a file under one of them.
_PROJECT_ROOTS: list[str] = []


def confine_project_kinds(root: Path) -> None:
    """Take project kinds (``module:attribute``) in this process only from files under
    ``root``: an editable install of another checkout, or any folder put on ``sys.path``,
    then holds no kind a plan can name (its code is no file the approved commit holds)."""
    folder = os.path.realpath(root)
    if folder not in _PROJECT_ROOTS:
        _PROJECT_ROOTS.append(folder)


def is_project_kind(name: str) -> bool:
    """A kind named ``module:attribute``: a :class:`StageKind` in the project's own code."""
    return PROJECT_KIND_SEPARATOR in name


def _project_kind(name: str) -> StageKind:
    """Import ``module:attribute`` from the project's code (its folders on ``sys.path``:
    the checkout's top and pytest.ini's ``pythonpath``; in a run, the snapshot's), never from
    an installed package, so the approved commit binds it and no install can go stale."""
    module_name, _, attribute = name.partition(PROJECT_KIND_SEPARATOR)
    where = (
        "a project kind is a module of the project's tracked code, found from the checkout's top "
        "or a folder pytest.ini's pythonpath names (e.g. pythonpath = src)"
    )
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise UnknownStageKind(
            f"stage kind {name!r}: {module_name} does not import ({err}); {where}"
        ) from None
    origin = os.path.realpath(getattr(module, "__file__", None) or "")
    if not origin or any(
        origin.startswith(os.path.realpath(d) + os.sep) for d in execution.site_dirs()
    ):
        raise UnknownStageKind(
            f"stage kind {name!r}: {module_name} was imported from {origin or 'no file'}, an "
            f"installed package, not the project's code ({where}): uninstall that package; a "
            "project kind needs no install, and an installed copy would run code the commit "
            "does not hold"
        )
    if _PROJECT_ROOTS and not any(origin.startswith(folder + os.sep) for folder in _PROJECT_ROOTS):
        raise UnknownStageKind(
            f"stage kind {name!r}: {module_name} was imported from {origin}, outside the "
            f"project ({', '.join(_PROJECT_ROOTS)}): {where}; code from another checkout or "
            "folder is no file the approved commit holds"
        )
    kind = getattr(module, attribute, None)
    if not isinstance(kind, StageKind):
        raise UnknownStageKind(
            f"stage kind {name!r}: {module_name}.{attribute} is "
            f"{'missing' if kind is None else type(kind).__name__}, not a prereg.kinds.stages.StageKind"
        )
    return kind


def ini_list(root: Path, key: str) -> list[str]:
    """The values of ``key`` in the ``[pytest]`` section of the project's pytest.ini (a
    list, as pytest reads ``prereg_plans``, ``prereg_research_paths`` and ``pythonpath``
    outside pytest); none when the file or the key is missing."""
    # configparser: only when pytest.ini is read outside pytest (import prereg.api does not
    # load it)
    import configparser

    ini = configparser.ConfigParser()
    ini.read(Path(root) / "pytest.ini")
    return ini.get("pytest", key, fallback="").split()


def stage_module_problem(root: Path, plan_path: Path, stage: str, module: str) -> str | None:
    """Why a research run of ``stage`` would collect no item from its module: the file is
    missing, or lies outside pytest.ini's ``prereg_research_paths`` (a run collects a stage
    only there, and a software run would collect its items)."""
    where = f"{Path(plan_path).as_posix()}: stages.{stage}.module {module!r}"
    if not (Path(root) / module).is_file():
        return f"{where} is no file in the checkout: a run would have no items; write it or fix the path"
    research = ini_list(root, "prereg_research_paths")
    parts = Path(module).parts
    if not any(parts[: len(Path(r).parts)] == Path(r).parts for r in research):
        return (
            f"{where} is not under pytest.ini's prereg_research_paths {research}: a research run "
            "collects a stage only there; move the module there, or add its folder to "
            "prereg_research_paths"
        )
    return None


def use_project_code(root: Path) -> None:
    """Put the project's code folders first on ``sys.path`` for a command run outside pytest
    (``prereg approve``, ``audit``, ``report``), as pytest does for a run: the checkout's top
    and each folder ``pythonpath`` in its pytest.ini names (relative to the top)."""
    folders = [str(Path(root))]
    folders += [str(Path(root, rel)) for rel in ini_list(root, "pythonpath")]
    sys.path[:0] = [f for f in folders if f not in sys.path]
    confine_project_kinds(root)


def load_kind(name: str) -> StageKind:
    if is_project_kind(name):
        return _project_kind(name)  # imported each time: the module system caches it
    if name == PLAIN.name:
        return PLAIN
    try:
        return KIND_POINT.load(name)  # an installed kind: loaded once per process
    except registry.NotInstalled as missing:
        known = sorted({PLAIN.name, *BUILT_IN_KINDS, *KIND_POINT.registered()})
        why = f" ({'; '.join(missing.reasons)})" if missing.reasons else ""
        raise UnknownStageKind(
            f"stage kind {name!r} is not built in nor installed{why}; known kinds: {known} "
            f"(a package installed in site-packages adds one under the entry-point group "
            f"{ENTRY_POINT_GROUP!r})"
        ) from None
    except registry.ExtensionError as broken:
        raise UnknownStageKind(str(broken)) from None


def kind_origin(name: str) -> dict:
    """Where kind ``name`` comes from: built in, registered in-process, or a distribution."""
    if name in BUILT_IN_KINDS:
        return KIND_POINT.origin(name)
    if name == PLAIN.name:
        return {"built_in": f"{__name__}:PLAIN"}
    if is_project_kind(name):
        module = sys.modules.get(name.partition(PROJECT_KIND_SEPARATOR)[0])
        return {"project": name, "file": getattr(module, "__file__", None)}
    return KIND_POINT.origin(name) or {"registered": True}
