"""A unit's datasets: train / validation / assessment splits, stored losslessly.

File format (``.npz``-compatible, byte-deterministic)
------------------------------------------------------
A ZIP archive, entries in this order, each ``ZIP_DEFLATED`` at level 6 with the
fixed timestamp 1980-01-01 00:00:00, ``create_system=3`` and permissions 0o644:

``metadata.json``
    Canonical JSON (sorted keys, ``(",", ":")`` separators, UTF-8): ``format``
    (:data:`DATASET_FORMAT`), ``law`` (the law spec), ``n_timepoints``,
    ``episodes`` per split, ``content_sha256`` (see :func:`dataset_content_sha256`)
    and the caller's ``provenance`` mapping (e.g. seed derivation strings).
``{split}_observations.npy``, ``{split}_targets.npy``
    For split in ``train, validation, assessment``: ``uint8 [episodes, T]``
    arrays in NumPy's ``.npy`` format 1.0 (C order, no pickle).

``numpy.savez_compressed`` is not used because its zip entries carry the current
time. ``numpy.load`` can still read the arrays. Byte equality across machines
also requires the same zlib; :func:`dataset_content_sha256` is the
zlib-independent fingerprint of the values.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prereg.api import arrays as npz

from .laws import (
    HiddenMarkovLaw,
    LawRegistry,
    generate_episodes,
    law_registry,
    law_to_spec,
)

DATASET_FORMAT = "prereg-rp002a-datasets-1"
SPLITS: tuple[str, ...] = ("train", "validation", "assessment")


class DatasetError(ValueError):
    """A dataset argument or file is invalid."""


@dataclass(frozen=True, eq=False)
class EpisodeSplit:
    """One split: ``observations`` and ``targets``, ``uint8 [episodes, T]``."""

    observations: np.ndarray
    targets: np.ndarray

    def __post_init__(self) -> None:
        for label in ("observations", "targets"):
            array = getattr(self, label)
            if not isinstance(array, np.ndarray) or array.dtype != np.uint8 or array.ndim != 2:
                raise DatasetError(
                    f"{label} must be a 2-d uint8 numpy array, got "
                    f"{getattr(array, 'dtype', type(array))} {getattr(array, 'shape', '')}"
                )
        if self.observations.shape != self.targets.shape:
            raise DatasetError(
                f"observations shape {self.observations.shape} != targets shape "
                f"{self.targets.shape}"
            )
        for label in ("observations", "targets"):
            array = np.ascontiguousarray(getattr(self, label))
            array.setflags(write=False)
            object.__setattr__(self, label, array)

    @property
    def episodes(self) -> int:
        """Number of episodes."""
        return int(self.observations.shape[0])


@dataclass(frozen=True, eq=False)
class UnitDatasets:
    """The three splits of one replicate unit, generated from one law."""

    law: HiddenMarkovLaw
    n_timepoints: int
    train: EpisodeSplit
    validation: EpisodeSplit
    assessment: EpisodeSplit

    def split(self, name: str) -> EpisodeSplit:
        """The split called ``name`` (one of :data:`SPLITS`)."""
        if name not in SPLITS:
            raise DatasetError(f"split={name!r} is not one of {SPLITS}")
        return getattr(self, name)

    def same_values(self, other: UnitDatasets) -> bool:
        """True iff law, T and every array are equal."""
        return (
            self.law == other.law
            and self.n_timepoints == other.n_timepoints
            and all(
                np.array_equal(self.split(s).observations, other.split(s).observations)
                and np.array_equal(self.split(s).targets, other.split(s).targets)
                for s in SPLITS
            )
        )


def generate_unit_datasets(
    law: HiddenMarkovLaw,
    *,
    n_timepoints: int,
    train_episodes: int,
    validation_episodes: int,
    assessment_episodes: int,
    train_rng: np.random.Generator,
    validation_rng: np.random.Generator,
    assessment_rng: np.random.Generator,
) -> UnitDatasets:
    """Generate a unit's three splits, each from its own generator.

    Parameters
    ----------
    law : HiddenMarkovLaw
    n_timepoints : int
        ``T`` (129 in the plan).
    train_episodes, validation_episodes, assessment_episodes : int
        4096, 1024, 2048 in the plan.
    train_rng, validation_rng, assessment_rng : numpy.random.Generator
        One independent generator per split (``prereg.base.seeds.numpy_generator``);
        passing the same object twice is refused.

    Returns
    -------
    UnitDatasets
        Splits drawn by :func:`prereg.rp002a.laws.generate_episodes`.
    """
    rngs = (train_rng, validation_rng, assessment_rng)
    if len({id(r) for r in rngs}) != 3:
        raise DatasetError(
            "train_rng, validation_rng and assessment_rng must be three distinct "
            "generators (derive one per split from the seed namespace)"
        )
    counts = (train_episodes, validation_episodes, assessment_episodes)
    splits = [
        EpisodeSplit(*generate_episodes(law, count, n_timepoints, rng))
        for count, rng in zip(counts, rngs)
    ]
    return UnitDatasets(law, int(n_timepoints), *splits)


def dataset_content_sha256(datasets: UnitDatasets) -> str:
    """SHA-256 of the canonical uncompressed content (independent of zlib).

    Notes
    -----
    Hashes, in order: the canonical JSON of ``{"law": spec, "n_timepoints": T}``
    and, per split in :data:`SPLITS`, the split name, the shape as two unsigned
    64-bit big-endian integers, then the C-order bytes of observations and targets.
    """
    digest = hashlib.sha256()
    digest.update(
        _canonical_json({"law": law_to_spec(datasets.law), "n_timepoints": datasets.n_timepoints})
    )
    for name in SPLITS:
        split = datasets.split(name)
        digest.update(name.encode("utf-8"))
        for size in split.observations.shape:
            digest.update(int(size).to_bytes(8, "big"))
        digest.update(split.observations.tobytes(order="C"))
        digest.update(split.targets.tobytes(order="C"))
    return digest.hexdigest()


def _canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def dataset_bytes(datasets: UnitDatasets, provenance: Mapping[str, Any] | None = None) -> bytes:
    """The archive described in the module docstring, as bytes."""
    metadata = {
        "format": DATASET_FORMAT,
        "law": law_to_spec(datasets.law),
        "n_timepoints": datasets.n_timepoints,
        "episodes": {name: datasets.split(name).episodes for name in SPLITS},
        "content_sha256": dataset_content_sha256(datasets),
        "provenance": dict(provenance or {}),
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        npz.write_entry(archive, "metadata.json", _canonical_json(metadata))
        for name in SPLITS:
            split = datasets.split(name)
            npz.write_entry(archive, f"{name}_observations.npy", npz.npy_bytes(split.observations))
            npz.write_entry(archive, f"{name}_targets.npy", npz.npy_bytes(split.targets))
    return buffer.getvalue()


def save_unit_datasets(
    datasets: UnitDatasets,
    path: str | Path,
    provenance: Mapping[str, Any] | None = None,
) -> str:
    """Write :func:`dataset_bytes` to ``path``; returns the file's SHA-256 hex digest."""
    payload = dataset_bytes(datasets, provenance)
    Path(path).write_bytes(payload)
    return hashlib.sha256(payload).hexdigest()


def load_unit_datasets(
    path: str | Path, registry: LawRegistry | None = None
) -> tuple[UnitDatasets, dict[str, Any]]:
    """Read a file written by :func:`save_unit_datasets`.

    ``registry`` resolves the stored law spec's family (default:
    :func:`~prereg.rp002a.laws.law_registry`).

    Returns
    -------
    datasets, metadata : UnitDatasets, dict
        The arrays (checked against the recorded ``content_sha256``) and the
        parsed ``metadata.json``.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            metadata = json.loads(archive.read("metadata.json"))
            if metadata.get("format") != DATASET_FORMAT:
                raise DatasetError(
                    f"{path}: format {metadata.get('format')!r} is not {DATASET_FORMAT!r}"
                )
            arrays = {}
            for name in SPLITS:
                for part in ("observations", "targets"):
                    with archive.open(f"{name}_{part}.npy") as handle:
                        arrays[name, part] = np.lib.format.read_array(handle, allow_pickle=False)
    except (zipfile.BadZipFile, KeyError) as error:
        raise DatasetError(f"{path} is not a complete dataset archive: {error}") from error
    law = (registry or law_registry()).law_from_spec(metadata["law"])
    splits = [
        EpisodeSplit(arrays[name, "observations"], arrays[name, "targets"]) for name in SPLITS
    ]
    datasets = UnitDatasets(law, int(metadata["n_timepoints"]), *splits)
    for split in splits:
        if split.observations.shape[1] != datasets.n_timepoints:
            raise DatasetError(
                f"{path}: arrays have {split.observations.shape[1]} timepoints, metadata says "
                f"{datasets.n_timepoints}"
            )
    if dataset_content_sha256(datasets) != metadata.get("content_sha256"):
        raise DatasetError(f"{path}: array content does not match its recorded content_sha256")
    return datasets, metadata
