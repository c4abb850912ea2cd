import pytest
from planlaws import reference_law_registry

pytestmark = pytest.mark.software

import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np

from prereg.base.seeds import derivation, numpy_generator
from prereg.rp002a.datasets import (
    DATASET_FORMAT,
    SPLITS,
    DatasetError,
    EpisodeSplit,
    UnitDatasets,
    dataset_bytes,
    dataset_content_sha256,
    generate_unit_datasets,
    load_unit_datasets,
    save_unit_datasets,
)
from prereg.rp002a.laws import HiddenMarkovLaw, LawError

COUNTS = {"train": 64, "validation": 16, "assessment": 32}  # small stand-ins for 4096/1024/2048
T = 129


def make_unit(law_name: str = "E1", replicate: int = 0) -> UnitDatasets:
    law = reference_law_registry().get_law(law_name)
    rngs = {s: numpy_generator("test-worlds-data", law_name, replicate, s) for s in SPLITS}
    return generate_unit_datasets(
        law,
        n_timepoints=T,
        train_episodes=COUNTS["train"],
        validation_episodes=COUNTS["validation"],
        assessment_episodes=COUNTS["assessment"],
        train_rng=rngs["train"],
        validation_rng=rngs["validation"],
        assessment_rng=rngs["assessment"],
    )


def test_splits_have_the_requested_shapes() -> None:
    unit = make_unit()
    for name in SPLITS:
        split = unit.split(name)
        assert split.observations.shape == (COUNTS[name], T)
        assert split.observations.dtype == split.targets.dtype == np.uint8
        assert not split.observations.flags.writeable
    # Independent generators: splits are different draws.
    assert not np.array_equal(unit.train.observations[:16], unit.validation.observations)


def test_regeneration_reproduces_the_file_byte_for_byte(tmp_path: Path) -> None:
    provenance = {"seed": derivation("test-worlds-data", "E1", 0, "train")}
    first = save_unit_datasets(make_unit(), tmp_path / "a.zip", provenance)
    second = save_unit_datasets(make_unit(), tmp_path / "b.zip", provenance)
    assert (tmp_path / "a.zip").read_bytes() == (tmp_path / "b.zip").read_bytes()
    assert first == second == hashlib.sha256((tmp_path / "a.zip").read_bytes()).hexdigest()
    other = save_unit_datasets(make_unit(replicate=1), tmp_path / "c.zip", provenance)
    assert other != first


def test_round_trip_is_lossless(tmp_path: Path) -> None:
    unit = make_unit("E2")
    save_unit_datasets(unit, tmp_path / "unit.zip", {"note": "x"})
    loaded, metadata = load_unit_datasets(tmp_path / "unit.zip")
    assert loaded.same_values(unit)
    assert loaded.law == unit.law
    assert metadata["format"] == DATASET_FORMAT
    assert metadata["episodes"] == COUNTS and metadata["n_timepoints"] == T
    assert metadata["provenance"] == {"note": "x"}
    assert metadata["content_sha256"] == dataset_content_sha256(unit)
    # numpy.load reads the arrays too (npz-compatible layout).
    with np.load(tmp_path / "unit.zip") as npz:
        np.testing.assert_array_equal(npz["assessment_targets"], unit.assessment.targets)


def test_archive_entries_are_fixed_and_compressed(tmp_path: Path) -> None:
    payload = dataset_bytes(make_unit())
    path = tmp_path / "unit.zip"
    path.write_bytes(payload)
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
    assert [i.filename for i in infos] == ["metadata.json"] + [
        f"{s}_{p}.npy" for s in SPLITS for p in ("observations", "targets")
    ]
    assert all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in infos)
    assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in infos)
    raw = sum(i.file_size for i in infos)
    assert len(payload) < raw  # compression actually happens


def test_content_hash_sees_every_value() -> None:
    unit = make_unit()
    targets = unit.assessment.targets.copy()
    targets[-1, -1] = (targets[-1, -1] + 1) % 4
    changed = UnitDatasets(
        unit.law,
        T,
        unit.train,
        unit.validation,
        EpisodeSplit(unit.assessment.observations, targets),
    )
    assert dataset_content_sha256(changed) != dataset_content_sha256(unit)
    assert not changed.same_values(unit)


def test_tampered_archive_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "unit.zip"
    save_unit_datasets(make_unit(), path)
    with zipfile.ZipFile(path) as archive:
        entries = {i.filename: archive.read(i) for i in archive.infolist()}
    metadata = json.loads(entries["metadata.json"])
    metadata["content_sha256"] = "0" * 64
    entries["metadata.json"] = json.dumps(metadata).encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    with pytest.raises(DatasetError, match="content_sha256"):
        load_unit_datasets(path)
    (tmp_path / "junk.zip").write_bytes(b"not a zip")
    with pytest.raises(DatasetError, match="not a complete dataset archive"):
        load_unit_datasets(tmp_path / "junk.zip")


def test_a_user_family_needs_its_registry(tmp_path: Path) -> None:
    unit = make_unit()
    custom = HiddenMarkovLaw("mine", 4, 0.9, 0.5, 0.1, family="my-family")
    save_unit_datasets(
        UnitDatasets(custom, T, unit.train, unit.validation, unit.assessment), tmp_path / "u.zip"
    )
    with pytest.raises(LawError, match="my-family"):
        load_unit_datasets(tmp_path / "u.zip")


def test_argument_errors() -> None:
    law = reference_law_registry().get_law("E1")
    rng = np.random.default_rng(0)
    with pytest.raises(DatasetError, match="three distinct"):
        generate_unit_datasets(
            law,
            n_timepoints=5,
            train_episodes=2,
            validation_episodes=2,
            assessment_episodes=2,
            train_rng=rng,
            validation_rng=rng,
            assessment_rng=np.random.default_rng(1),
        )
    with pytest.raises(DatasetError, match="uint8"):
        EpisodeSplit(np.zeros((2, 3), dtype=np.int64), np.zeros((2, 3), dtype=np.uint8))
    with pytest.raises(DatasetError, match="shape"):
        EpisodeSplit(np.zeros((2, 3), dtype=np.uint8), np.zeros((2, 4), dtype=np.uint8))
    with pytest.raises(DatasetError, match="split='test'"):
        make_unit().split("test")
