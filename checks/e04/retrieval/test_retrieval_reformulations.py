import pytest

pytestmark = pytest.mark.software

import hashlib
import json
from pathlib import Path

from prereg.e04.reformulations import (
    ReformulationArtifactError,
    load_reformulations,
    reformulations_from_json,
)

E02 = "1a7066f6c7682793b6f04445c776a93cc4fac895"
TASKS = ["T01", "T02"]


def artifact(**changes) -> dict:
    document = {
        "code_revision": E02,
        "synthetic": False,
        "reformulations": {"T01": "where are jobs restarted", "T02": "cache key", "T99": "x"},
    }
    document.update(changes)
    return document


def load(document: dict, allow_synthetic: bool = False):
    return reformulations_from_json(
        document, expected_code_revision=E02, task_ids=TASKS, allow_synthetic=allow_synthetic
    )


def test_a_valid_artifact_loads_from_file(tmp_path: Path) -> None:
    path = tmp_path / "e02.json"
    data = json.dumps(artifact()).encode()
    path.write_bytes(data)
    result = load_reformulations(
        path, expected_code_revision=E02, task_ids=TASKS, allow_synthetic=False
    )
    assert dict(result.texts) == {"T01": "where are jobs restarted", "T02": "cache key"}
    assert result.for_task("T02") == "cache key"
    assert result.sha256 == hashlib.sha256(data).hexdigest()
    with pytest.raises(ReformulationArtifactError, match="'T99'"):
        result.for_task("T99")  # not requested by the plan, so not carried


def test_another_code_revision_is_refused() -> None:
    with pytest.raises(ReformulationArtifactError, match=f"revision 'f{'0' * 39}'.*{E02}"):
        load(artifact(code_revision="f" + "0" * 39))


def test_a_missing_reformulation_is_refused() -> None:
    with pytest.raises(ReformulationArtifactError, match=f"revision {E02}.*task 'T02'"):
        load(artifact(reformulations={"T01": "q"}))


def test_an_empty_reformulation_is_refused() -> None:
    with pytest.raises(ReformulationArtifactError, match="task 'T02'.*got '  '"):
        load(artifact(reformulations={"T01": "q", "T02": "  "}))


def test_synthetic_artifacts_only_where_allowed() -> None:
    with pytest.raises(ReformulationArtifactError, match="synthetic"):
        load(artifact(synthetic=True))
    assert load(artifact(synthetic=True), allow_synthetic=True).synthetic is True


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "top level must be an object"),
        ({"code_revision": E02, "synthetic": False}, "expected exactly"),
        (artifact(synthetic="no"), "synthetic='no'"),
        (artifact(reformulations=["q"]), "reformulations must be an object"),
    ],
)
def test_malformed_artifacts_are_refused(document, message) -> None:
    with pytest.raises(ReformulationArtifactError, match=message):
        load(document)


def test_unreadable_or_non_json_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ReformulationArtifactError, match="cannot read"):
        load_reformulations(
            tmp_path / "absent.json",
            expected_code_revision=E02,
            task_ids=TASKS,
            allow_synthetic=False,
        )
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ReformulationArtifactError, match="bad.json.*not UTF-8 JSON"):
        load_reformulations(bad, expected_code_revision=E02, task_ids=TASKS, allow_synthetic=False)


def test_the_expected_revision_must_be_a_full_sha() -> None:
    with pytest.raises(ReformulationArtifactError, match="40 lowercase hex"):
        reformulations_from_json(
            artifact(), expected_code_revision="1a7066f", task_ids=TASKS, allow_synthetic=False
        )
