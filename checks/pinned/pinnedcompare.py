"""Compare two runs of one stage file by file: what is byte-identical, what differs and by how much.

Used by checks/pinned/ to compare the calibration stage under the protocol's pinned stack
with the same stage under this project's stack. Importable without pytest.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from prereg.records.runs import RunFolder


@dataclass
class FileDiff:
    path: str
    kind: str  # "identical", "numeric", "different", "missing"
    numbers: int = 0  # numbers compared (JSON)
    differing: int = 0  # numbers that are not equal
    max_abs: float = 0.0
    max_rel: float = 0.0
    other: list[str] = field(default_factory=list)  # non-numeric differences (JSON paths)


def _walk(a: object, b: object, path: str, out: FileDiff) -> None:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        if a != b or type(a) is not type(b):
            out.other.append(f"{path}: {a!r} != {b!r}")
        return
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        out.numbers += 1
        if a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)):
            return
        if isinstance(a, int) and isinstance(b, int):
            out.other.append(f"{path}: integer {a} != {b}")
            return
        out.differing += 1
        diff = abs(a - b)
        out.max_abs = max(out.max_abs, diff)
        scale = max(abs(a), abs(b))
        out.max_rel = max(out.max_rel, diff / scale if scale else math.inf)
        return
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            out.other.append(f"{path}: keys {sorted(set(a) ^ set(b))} in only one")
        for key in sorted(set(a) & set(b)):
            _walk(a[key], b[key], f"{path}.{key}", out)
        return
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.other.append(f"{path}: length {len(a)} != {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            _walk(x, y, f"{path}[{i}]", out)
        return
    if a != b:
        out.other.append(f"{path}: {a!r} != {b!r}")


def compare_file(a: Path, b: Path, rel: str) -> FileDiff:
    if not b.exists():
        return FileDiff(rel, "missing")
    if a.read_bytes() == b.read_bytes():
        return FileDiff(rel, "identical")
    if rel.endswith(".json"):
        out = FileDiff(rel, "numeric")
        _walk(json.loads(a.read_text()), json.loads(b.read_text()), "$", out)
        if out.other:
            out.kind = "different"
        return out
    return FileDiff(rel, "different")


def result_files(run: Path) -> list[str]:
    """Every file of the run that holds a result (:meth:`RunFolder.result_files`: not a run
    record, not a CPU timing)."""
    return list(RunFolder(run).result_files())


def compare_runs(a: Path, b: Path) -> list[FileDiff]:
    """Each result file of run ``a`` against the same path in run ``b`` (and any extra in ``b``)."""
    files = result_files(a)
    found = [compare_file(a / rel, b / rel, rel) for rel in files]
    found += [FileDiff(rel, "missing") for rel in result_files(b) if rel not in set(files)]
    return found
