"""SHA-256 of files and canonical JSON, and deterministic JSON writing."""

from __future__ import annotations

import functools
import hashlib
import json
import json.decoder
import json.scanner
import math
import os
import re
from pathlib import Path
from typing import Any, Callable

_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_json(value: Any) -> str:
    """Sorted keys, two-space indent, no NaN, trailing newline: the same value, the same bytes."""
    return json.dumps(value, sort_keys=True, indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def write_json(path: Path, value: Any) -> None:
    """Write canonical JSON atomically (temporary file, then rename): a crash leaves the old file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(canonical_json(value), encoding="utf-8")
    os.replace(tmp, path)


class _JsonRefusal(ValueError):
    """Raised by the parser hooks of :func:`read_json`; re-raised naming the file."""

    def __init__(self, message: str, lines: Callable[[str], list[int]]) -> None:
        super().__init__(message)
        self.lines = lines  # the text -> the lines where the problem is


def _line(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _JsonRefusal(
                f"key {key!r} appears twice in one object (a JSON reader would silently keep "
                "the last one); delete one of them so the file says one thing",
                functools.partial(_duplicate_key_lines, key=key),
            )
        seen[key] = value
    return seen


class _Located(Exception):
    pass


def _duplicate_key_lines(text: str, key: str) -> list[int]:
    """The lines of ``key`` in the first object that repeats it (the refusal path only: this
    re-parses with the pure-Python scanner, which tells where each object starts and ends)."""
    written = re.compile(re.escape(json.dumps(key, ensure_ascii=False)) + r"\s*:")
    done: list[tuple[int, int]] = []  # spans of completed objects not yet inside a parent
    lines: list[int] = []

    def parse_object(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo=None):
        s, after_brace = s_and_end
        pairs, end = json.decoder.JSONObject(s_and_end, strict, scan_once, None, list, memo)
        start = after_brace - 1
        inner = [span for span in done if start <= span[0] and span[1] <= end]
        keys = [k for k, _ in pairs]
        if keys.count(key) > 1:
            for match in written.finditer(s, start, end):
                if not any(a <= match.start() < b for a, b in inner):
                    lines.append(_line(s, match.start()))
            raise _Located
        done[:] = [span for span in done if span not in inner] + [(start, end)]
        return dict(pairs), end

    decoder = json.JSONDecoder(parse_constant=float)
    decoder.parse_object = parse_object
    decoder.scan_once = json.scanner.py_make_scanner(decoder)
    try:
        decoder.decode(text)
    except (_Located, ValueError):
        pass
    return lines


def _refuse_constant(name: str) -> float:
    pattern = re.compile(r"[:,\[]\s*(" + re.escape(name) + r")\b")
    raise _JsonRefusal(
        f"the non-standard constant {name} appears; JSON has no NaN or Infinity: write a "
        "finite number (or null where the schema allows it)",
        lambda text: [_line(text, m.start(1)) for m in pattern.finditer(text)],
    )


def _finite_float(number: str) -> float:
    value = float(number)
    if not math.isfinite(value):
        pattern = re.compile(r"(?<![\w.+-])" + re.escape(number) + r"(?![\w.])")
        raise _JsonRefusal(
            f"the number {number} overflows to {value}; write a finite number",
            lambda text: [_line(text, m.start()) for m in pattern.finditer(text)],
        )
    return value


def read_json(path: Path, *, what: str) -> Any:
    """Read a JSON file; a missing or malformed file is a ValueError naming it and ``what`` it is.

    Stricter than :func:`json.loads` (see :func:`parse_json`): a key repeated within one
    object, the constants ``NaN``, ``Infinity`` and ``-Infinity``, and numbers too large to
    be finite are refused, so every plan, approval, manifest and record read here says
    exactly one finite thing.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} {path} does not exist") from None
    return parse_json(text, what=what, source=str(path))


def parse_json(text: str | bytes, *, what: str, source: str) -> Any:
    """Parse JSON text as strictly as :func:`read_json` reads a file (for example a blob from
    ``git show``); errors are ValueErrors naming ``what``, ``source`` (where the text came
    from), the repeated key or constant, and its lines."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    try:
        return json.loads(
            text,
            object_pairs_hook=_refuse_duplicate_keys,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
        )
    except _JsonRefusal as err:
        lines = sorted(set(err.lines(text)))
        where = f" (line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))})" * bool(lines)
        raise ValueError(f"{what} {source} is refused{where}: {err}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{what} {source} is not valid JSON: {err}") from None


def file_entries(root: Path, *, exclude: frozenset[str] = frozenset()) -> list[dict]:
    """Every regular file below ``root``: relative POSIX path, SHA-256 and size, sorted by path."""
    entries = []
    for path in sorted(p for p in Path(root).rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel in exclude or path.name.startswith(".") and path.name.endswith(".tmp"):
            continue
        entries.append({"path": rel, "sha256": sha256_file(path), "bytes": path.stat().st_size})
    return entries
