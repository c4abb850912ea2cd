"""Byte-deterministic archives of numpy arrays.

``numpy.savez_compressed`` stamps the current time into each zip entry, so saving the
same arrays twice gives different bytes. Here every entry has a fixed 1980-01-01 date,
Unix permissions 0644 and DEFLATE at a fixed level, and arrays are ``.npy`` version 1.0
without pickle: the same arrays always give the same file (for the same zlib), and
``numpy.load`` reads it.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

ZIP_DATE_TIME = (1980, 1, 1, 0, 0, 0)
COMPRESS_LEVEL = 6


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(
        buffer, np.ascontiguousarray(array), version=(1, 0), allow_pickle=False
    )
    return buffer.getvalue()


def write_entry(archive: zipfile.ZipFile, name: str, payload: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=ZIP_DATE_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.create_system = 3
    info.external_attr = 0o100644 << 16
    archive.writestr(
        info, payload, compress_type=zipfile.ZIP_DEFLATED, compresslevel=COMPRESS_LEVEL
    )


def npz_bytes(arrays: Mapping[str, np.ndarray], metadata: Mapping[str, Any] | None = None) -> bytes:
    """A deterministic ``.npz``: optional ``metadata.json`` first, then arrays in sorted name
    order."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        if metadata is not None:
            text = json.dumps(metadata, sort_keys=True, separators=(",", ":"), allow_nan=False)
            write_entry(archive, "metadata.json", text.encode())
        for name in sorted(arrays):
            write_entry(archive, f"{name}.npy", npy_bytes(np.asarray(arrays[name])))
    return buffer.getvalue()


def save_npz(
    path: Path, arrays: Mapping[str, np.ndarray], metadata: Mapping[str, Any] | None = None
) -> None:
    Path(path).write_bytes(npz_bytes(arrays, metadata))


def load_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of an archive written by :func:`save_npz` (metadata left out)."""
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}
