"""A stage's ``parameters`` parsed into a frozen dataclass, every error naming its field path.

:func:`settings_parser` turns a dataclass into a :attr:`prereg.kinds.stages.StageKind.settings`
function. A field's annotation says what the plan must hold there: ``int`` (never a bool),
``float`` (an int or float, finite; stored as float), ``str``, ``bool``, a nested dataclass
(a JSON object with exactly its fields; a field with a default may be left out),
``tuple[X, ...]`` or ``tuple[X, Y]`` (a JSON array), ``Optional[X]`` (``null`` allowed) and
``Literal[...]``. :func:`bounded` adds a range to a number field. A ``ValueError`` raised by
a class's ``__post_init__`` (checks across fields) is re-raised naming that object's path.

Subclasses of :class:`StageSettings` also get the stage's name and its ``seed_namespace``
from the plan's stage entry (typed by the subclass's annotation: redeclare
``seed_namespace: Optional[str]`` for a stage that draws nothing).

``X | None`` under ``from __future__ import annotations`` is read on Python 3.9 too (where
``typing.get_type_hints`` cannot evaluate it, the annotation is split at ``|`` here).

The same parser reads prereg's records (:mod:`prereg.records.formats`), which need four
things more: ``dict[str, X]`` (a JSON object of any keys, each value an ``X``); a field that
may be absent, as distinct from null (:func:`absent`: its value is :data:`ABSENT`, falsy);
a JSON name that is no Python name (:func:`named`: ``_type``, ``predicateType``); and an
open record (:func:`rest`: a field that keeps every other key, as read). :func:`to_json` is
the inverse of :func:`parse_as`.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any, Callable, TypeVar, Union

T = TypeVar("T")

_BOUNDS = "prereg.bounds"
_JSON_NAME = "prereg.json_name"
_REST = "prereg.rest"
# ``Optional[X]`` and, from Python 3.10, ``X | None`` (a types.UnionType).
_UNIONS = (Union, getattr(types, "UnionType", Union))


class SettingsError(ValueError):
    """A stage's plan entry does not parse; ``path`` is the field (``stages.s.parameters.x``)."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path
        self.problem = problem


@dataclasses.dataclass(frozen=True)
class StageSettings:
    """Base of a settings class that also carries the stage's name and seed namespace."""

    stage: str
    seed_namespace: str


_STAGE_FIELDS = tuple(f.name for f in dataclasses.fields(StageSettings))


class _Absent:
    """The value of a field its JSON object does not hold (:func:`absent`)."""

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


def absent(**field_options: Any) -> Any:
    """A field the JSON object may leave out (its value then :data:`ABSENT`, which
    :func:`to_json` leaves out again); null is a value and needs ``Optional``."""
    return dataclasses.field(default=ABSENT, **field_options)


def named(json_name: str, **field_options: Any) -> Any:
    """A field whose JSON name is ``json_name`` (``_type``, ``predicateType``)."""
    metadata = {**field_options.pop("metadata", {}), _JSON_NAME: json_name}
    return dataclasses.field(metadata=metadata, **field_options)


def rest() -> Any:
    """The field of an open record that keeps every key its other fields do not name."""
    return dataclasses.field(default_factory=dict, metadata={_REST: True}, compare=False)


def _json_name(f: dataclasses.Field) -> str:
    return f.metadata.get(_JSON_NAME, f.name)


def bounded(
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    below: float | None = None,
    default: Any = dataclasses.MISSING,
) -> Any:
    """A dataclass field whose number must be ``>= minimum``, ``<= maximum``, ``> above``
    and ``< below`` (each optional): ``confidence: float = bounded(above=0, below=1)``."""
    bounds = {"minimum": minimum, "maximum": maximum, "above": above, "below": below}
    bounds = {name: value for name, value in bounds.items() if value is not None}
    return dataclasses.field(default=default, metadata={_BOUNDS: bounds})


_CHECKS = {  # bound -> (holds, words, interval bracket)
    "minimum": (lambda value, bound: value >= bound, ">=", "["),
    "above": (lambda value, bound: value > bound, ">", "("),
    "maximum": (lambda value, bound: value <= bound, "<=", "]"),
    "below": (lambda value, bound: value < bound, "<", ")"),
}


def _bound_problem(value: float, bounds: Mapping[str, float]) -> str | None:
    """What is wrong with ``value`` under ``bounds`` (None when it lies within them)."""
    if all(_CHECKS[name][0](value, bound) for name, bound in bounds.items()):
        return None
    low = [name for name in ("minimum", "above") if name in bounds]
    high = [name for name in ("maximum", "below") if name in bounds]
    if low and high:
        lo, hi = low[0], high[0]
        rule = f"lie in {_CHECKS[lo][2]}{bounds[lo]:g}, {bounds[hi]:g}{_CHECKS[hi][2]}"
    else:
        rule = " and ".join(f"be {_CHECKS[n][1]} {bounds[n]:g}" for n in (*low, *high))
    return f"must {rule}, got {value!r}"


def _split_union(text: str) -> list[str]:
    """``"int | None"`` -> ``["int", "None"]``, splitting only outside brackets."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char in "[(":
            depth += 1
        elif char in "])":
            depth -= 1
        if char == "|" and depth == 0:
            parts.append(text[start:index].strip())
            start = index + 1
    return [*parts, text[start:].strip()]


def _evaluate(text: str, namespace: dict) -> Any:
    parts = _split_union(text)
    if len(parts) == 1:
        return eval(text, namespace)  # the class's own annotation text
    return Union[tuple(_evaluate(part, namespace) for part in parts)]


def _hints(cls: type) -> dict[str, Any]:
    """The resolved annotations of a dataclass's fields (``X | Y`` read on Python 3.9 too)."""
    try:
        return typing.get_type_hints(cls)
    except TypeError:
        hints: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            namespace = {**vars(typing), **vars(sys.modules[klass.__module__]), **dict(vars(klass))}
            for name, annotation in vars(klass).get("__annotations__", {}).items():
                hints[name] = (
                    _evaluate(annotation, namespace) if isinstance(annotation, str) else annotation
                )
        return hints


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    return "null" if value is None else repr(value)


def _parse(annotation: Any, value: Any, path: str) -> Any:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any:
        return value
    if origin in _UNIONS:
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        problems = []
        for option in options:
            try:
                return _parse(option, value, path)
            except SettingsError as error:
                if error.path != path:
                    raise  # the value is the option's kind; a field inside it is wrong
                problems.append(error.problem)
        raise SettingsError(path, " or ".join(problems))
    if origin is typing.Literal:
        if any(value == a and type(value) is type(a) for a in args):
            return value
        raise SettingsError(path, f"expected one of {list(args)}, got {_kind(value)}")
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise SettingsError(path, f"expected an object, got {_kind(value)}")
        return {key: _parse(args[1], v, f"{path}.{key}") for key, v in value.items()}
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise SettingsError(path, f"expected an array, got {_kind(value)}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_parse(args[0], v, f"{path}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise SettingsError(path, f"expected an array of {len(args)}, got {len(value)} values")
        return tuple(_parse(a, v, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return _parse_dataclass(annotation, value, path)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise SettingsError(path, f"expected true or false, got {_kind(value)}")
    if annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise SettingsError(path, f"expected an integer, got {_kind(value)}")
    if annotation is float:
        if _number(value) and math.isfinite(value):
            return float(value)
        raise SettingsError(path, f"expected a finite number, got {_kind(value)}")
    if annotation is str:
        if isinstance(value, str):
            return value
        raise SettingsError(path, f"expected a string, got {_kind(value)}")
    raise TypeError(
        f"settings field {path} is annotated {annotation!r}, which prereg.api.settings_parser "
        "does not read: use int, float, str, bool, a dataclass, tuple[X, ...], Optional[X] "
        "or Literal[...]"
    )


def _field_path(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _parse_dataclass(cls: type, value: Any, path: str, given: Mapping[str, Any] = {}) -> Any:
    if not isinstance(value, Mapping):
        raise SettingsError(path, f"expected an object, got {_kind(value)}")
    hints = _hints(cls)
    every = [f for f in dataclasses.fields(cls) if f.init and f.name not in given]
    kept = next((f for f in every if f.metadata.get(_REST)), None)
    fields = [f for f in every if f is not kept]
    names = {_json_name(f) for f in fields}
    unknown = sorted(set(value) - names)
    if unknown and kept is None:
        raise SettingsError(path, f"unknown field(s) {unknown}; the fields are {sorted(names)}")
    missing = sorted(
        _json_name(f)
        for f in fields
        if _json_name(f) not in value
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    )
    if missing:
        raise SettingsError(path, f"missing field(s) {missing}")
    parsed = dict(given)
    if kept is not None:
        parsed[kept.name] = {key: value[key] for key in value if key not in names}
    for f in fields:
        if _json_name(f) not in value:
            continue
        where = _field_path(path, _json_name(f))
        parsed[f.name] = _parse(hints[f.name], value[_json_name(f)], where)
        bounds = f.metadata.get(_BOUNDS)
        if bounds and parsed[f.name] is not None:
            problem = _bound_problem(parsed[f.name], bounds)
            if problem:
                raise SettingsError(where, problem)
    try:
        return cls(**parsed)
    except SettingsError:
        raise
    except ValueError as error:
        raise SettingsError(path, str(error)) from None


def parse_as(cls: type[T], value: Any, path: str = "parameters") -> T:
    """``value`` (JSON data) as an instance of the dataclass ``cls``; a :class:`SettingsError`
    names the first wrong field by its path below ``path``."""
    return _parse_dataclass(cls, value, path)


def settings_parser(cls: type[T]) -> Callable[[dict, str], T]:
    """A :attr:`prereg.kinds.stages.StageKind.settings` function: ``parse(plan_data, stage)`` reads
    ``stages.<stage>.parameters`` into ``cls`` (plus the stage's name and ``seed_namespace``
    when ``cls`` is a :class:`StageSettings`)."""
    if not (dataclasses.is_dataclass(cls) and isinstance(cls, type)):
        raise TypeError(f"settings_parser takes a dataclass, not {cls!r}")

    def parse(plan_data: dict, stage: str) -> T:
        try:
            entry = plan_data["stages"][stage]
        except (KeyError, TypeError):
            raise SettingsError(f"stages.{stage}", "the plan has no such stage") from None
        where = f"stages.{stage}"
        given: dict[str, Any] = {}
        if issubclass(cls, StageSettings):
            hints = _hints(cls)
            given["stage"] = stage
            given["seed_namespace"] = _parse(
                hints["seed_namespace"], entry.get("seed_namespace"), f"{where}.seed_namespace"
            )
        return _parse_dataclass(cls, entry.get("parameters"), f"{where}.parameters", given)

    parse.__name__ = parse.__qualname__ = f"parse_{cls.__name__}"
    parse.__doc__ = f"The typed settings ({cls.__name__}) of a stage's plan entry."
    return parse


def field_tree(cls: type) -> dict[str, Any]:
    """The fields ``parameters`` hold for the dataclass ``cls``: ``{name: None}`` for a value,
    ``{name: {...}}`` for a nested dataclass (the :class:`StageSettings` fields left out)."""
    hints = _hints(cls)
    tree: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if not f.init or (issubclass(cls, StageSettings) and f.name in _STAGE_FIELDS):
            continue
        kind = hints[f.name]
        nested = dataclasses.is_dataclass(kind) and isinstance(kind, type)
        tree[f.name] = field_tree(kind) if nested else None
    return tree


def parameters_of(settings: Any) -> dict:
    """The JSON ``parameters`` that parse back into ``settings`` (tuples as lists; the
    :class:`StageSettings` fields left out): ``parse_as(type(s), parameters_of(s)) == s``."""

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {
                f.name: plain(getattr(value, f.name))
                for f in dataclasses.fields(value)
                if f.init and not (isinstance(value, StageSettings) and f.name in _STAGE_FIELDS)
            }
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        return value

    return plain(settings)


def to_json(value: Any) -> Any:
    """The JSON data ``value`` (a dataclass :func:`parse_as` made, or data) stands for:
    ``parse_as(type(v), to_json(v)) == v``. Fields in their declared order under their JSON
    names, an :data:`ABSENT` field left out, an open record's other keys after them."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.metadata.get(_REST):
                data.update({key: to_json(v) for key, v in item.items()})
            elif item is not ABSENT:
                data[_json_name(f)] = to_json(item)
        return data
    if isinstance(value, (tuple, list)):
        return [to_json(v) for v in value]
    if isinstance(value, Mapping):
        return {key: to_json(v) for key, v in value.items()}
    return value


__all__ = [
    "ABSENT",
    "SettingsError",
    "StageSettings",
    "absent",
    "bounded",
    "field_tree",
    "named",
    "parameters_of",
    "parse_as",
    "rest",
    "settings_parser",
    "to_json",
]
