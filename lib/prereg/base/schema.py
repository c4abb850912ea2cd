"""A small structural validator for plan and record files.

A schema is one of: a Python type (``str``, ``int``, ``float``, ``bool``), a dict of
field name -> schema (every field required, no unknown field allowed; wrap a field's
schema in :class:`Optional` to allow it to be absent), a one-element list (a list whose
items match), :class:`MapOf` (any keys), :class:`OneOf` (a literal value from a set),
a :class:`Range` (a number of a type within bounds: :data:`PositiveInt`,
:data:`PositiveFloat`, :data:`Probability` ...), or :data:`ANY`. A ``float`` is always
finite (NaN and infinities are refused wherever a schema says ``float``). Errors name the
file and the dotted path of the offending field, and say what is allowed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


class SchemaError(ValueError):
    """A file does not have the structure its schema requires."""


@dataclass(frozen=True)
class Optional:
    schema: Any


@dataclass(frozen=True)
class MapOf:
    schema: Any


@dataclass(frozen=True)
class OneOf:
    values: tuple


@dataclass(frozen=True)
class Nullable:
    schema: Any


@dataclass(frozen=True)
class Range:
    """A number of ``type`` (``int`` or ``float``) within optional bounds; floats are finite.

    ``Range(int, min=1)`` is a positive count; ``Range(float, min=0, max=1,
    min_exclusive=True, max_exclusive=True)`` a probability strictly inside (0, 1).
    """

    type: type
    min: float | None = None
    max: float | None = None
    min_exclusive: bool = False
    max_exclusive: bool = False

    def __post_init__(self) -> None:
        if self.type not in (int, float):
            raise TypeError(f"Range type must be int or float, got {self.type!r}")

    def describe(self) -> str:
        """What the range allows, in words: "an integer >= 1", "a finite number in (0, 1)"."""
        kind = "an integer" if self.type is int else "a finite number"
        low = None if self.min is None else ("(" if self.min_exclusive else "[", self.min)
        high = None if self.max is None else (")" if self.max_exclusive else "]", self.max)
        if low and high:
            return f"{kind} in {low[0]}{low[1]:g}, {high[1]:g}{high[0]}"
        if low:
            return f"{kind} {'>' if self.min_exclusive else '>='} {low[1]:g}"
        if high:
            return f"{kind} {'<' if self.max_exclusive else '<='} {high[1]:g}"
        return kind

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is of the type (bool is no number) and within the bounds."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.type is int and not isinstance(value, int):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        above_min = (
            self.min is None or value > self.min or (value == self.min and not self.min_exclusive)
        )
        below_max = (
            self.max is None or value < self.max or (value == self.max and not self.max_exclusive)
        )
        return above_min and below_max


PositiveInt = Range(int, min=1)  # counts, sizes, epochs, replicates, trials, batches, threads
NonNegativeInt = Range(int, min=0)
PositiveFloat = Range(float, min=0, min_exclusive=True)  # budgets, tolerances, margins
NonNegativeFloat = Range(float, min=0)
Finite = Range(float)
Probability = Range(float, min=0, max=1, min_exclusive=True, max_exclusive=True)  # alphas
UnitInterval = Range(float, min=0, max=1)  # fractions and quantiles, ends included

ANY = object()

_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def validate(value: Any, schema: Any, *, source: str, path: str = "") -> None:
    """Raise :class:`SchemaError` naming ``source`` and the field path if ``value`` does not fit."""
    where = f"{source}: field {path or '(top level)'}"
    if schema is ANY:
        return
    if isinstance(schema, Nullable):
        if value is not None:
            validate(value, schema.schema, source=source, path=path)
        return
    if isinstance(schema, OneOf):
        if value not in schema.values:
            raise SchemaError(f"{where} is {value!r}; allowed values: {list(schema.values)!r}")
        return
    if isinstance(schema, Range):
        if not schema.contains(value):
            raise SchemaError(f"{where} must be {schema.describe()}, got {value!r}")
        return
    if isinstance(schema, type):
        ok = isinstance(value, schema) and not (schema is not bool and isinstance(value, bool))
        if schema is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if ok and not math.isfinite(value):
                raise SchemaError(f"{where} must be a finite number, got {value!r}")
        if not ok:
            raise SchemaError(
                f"{where} must be {_TYPE_NAMES.get(schema, schema.__name__)}, got {value!r}"
            )
        return
    if isinstance(schema, list):
        if not isinstance(value, list):
            raise SchemaError(f"{where} must be a list, got {type(value).__name__}")
        for i, item in enumerate(value):
            validate(item, schema[0], source=source, path=f"{path}[{i}]")
        return
    if isinstance(schema, MapOf):
        if not isinstance(value, dict):
            raise SchemaError(f"{where} must be an object, got {type(value).__name__}")
        for key, item in value.items():
            validate(item, schema.schema, source=source, path=_join(path, key))
        return
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            raise SchemaError(f"{where} must be an object, got {type(value).__name__}")
        unknown = sorted(set(value) - set(schema))
        if unknown:
            raise SchemaError(
                f"{source}: unknown field {_join(path, unknown[0])}; "
                f"known fields here: {sorted(schema)}"
            )
        for key, sub in schema.items():
            if key not in value:
                if isinstance(sub, Optional):
                    continue
                raise SchemaError(f"{source}: missing field {_join(path, key)}")
            inner = sub.schema if isinstance(sub, Optional) else sub
            validate(value[key], inner, source=source, path=_join(path, key))
        return
    raise TypeError(f"unsupported schema element {schema!r}")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
