"""The one door through which the bytes of a record become JSON data, for every reader of
records (:mod:`prereg.records.formats` reads the data as the record's class): UTF-8 without a
byte order mark, one JSON document, no key twice in an object, no NaN or Infinity, nothing
nested more than 100 levels (:func:`prereg.base.hashing.parse_json`). Anything else is
:class:`NotJson`, whose message says the document "is not JSON as prereg reads it"; the plain
commands of docs/how-to/verify-a-run.sh refuse the same documents (their ``doc`` function),
and checks/support/corpus.py holds a case of each variant.
"""

from __future__ import annotations

from typing import Any

from prereg.base.hashing import parse_json

NOT_JSON = "is not JSON as prereg reads it"


class NotJson(ValueError):
    """A document that is not JSON as prereg reads it; the message names it and why."""


def loads(data: bytes, where: str) -> Any:
    """The value of the JSON document ``data`` (named ``where`` in an error), or NotJson."""
    if data.startswith(b"\xef\xbb\xbf"):
        raise NotJson(f"{where} {NOT_JSON}: it starts with a byte order mark")
    try:
        return parse_json(data, what="", source="")
    except UnicodeDecodeError as err:
        raise NotJson(f"{where} {NOT_JSON}: it is not UTF-8 ({err.reason})") from None
    except ValueError as err:
        detail = str(err).strip()  # "is refused (line 3): ..." or "is not valid JSON: ..."
        for said in ("is refused", "is not valid JSON"):
            detail = detail.removeprefix(said)
        raise NotJson(f"{where} {NOT_JSON}{detail}") from None


def loads_object(data: bytes, where: str) -> dict:
    """:func:`loads` of a document that must be a JSON object."""
    value = loads(data, where)
    if not isinstance(value, dict):
        raise NotJson(f"{where} is not a JSON object")
    return value
