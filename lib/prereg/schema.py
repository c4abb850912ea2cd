"""A small structural validator for plan and record files.

A schema is one of: a Python type (``str``, ``int``, ``float``, ``bool``), a dict of
field name -> schema (every field required, no unknown field allowed; wrap a field's
schema in :class:`Optional` to allow it to be absent), a one-element list (a list whose
items match), :class:`MapOf` (any keys), :class:`OneOf` (a literal value from a set),
or :data:`ANY`. Errors name the file and the dotted path of the offending field.
"""

from __future__ import annotations

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
    if isinstance(schema, type):
        ok = isinstance(value, schema) and not (schema is not bool and isinstance(value, bool))
        if schema is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
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
