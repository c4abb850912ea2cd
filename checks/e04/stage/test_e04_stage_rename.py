import pytest

pytestmark = pytest.mark.software

from prereg.e04.plan import item_key

RUN = "e04-20260101-003"


def test_renaming_the_experiments_test_function_leaves_the_audit_clean(e04_project):
    """Replay and summary pair items with cells by their recorded coordinates, so a
    renamed test function (other node ids, other item folders) still audits clean."""
    module = e04_project.root / "experiments" / "test_e04.py"
    text = module.read_text()
    assert text.count("def test_cell(") == 1
    module.write_text(text.replace("def test_cell(", "def test_grid_cell("))
    e04_project.commit("Rename the E04 item function")
    e04_project.approve(RUN)
    done = e04_project.pytest("--research-stage=e04", "--run-id", RUN)
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = e04_project.manifest(RUN)
    assert manifest["status"] == "complete" and len(manifest["items"]) == 18
    for item in manifest["items"]:
        key = item_key(item["coords"])
        assert item["nodeid"].endswith(f"::test_grid_cell[{key}]")
        assert item["output_dir"] == f"test_grid_cell[{key}]"
    audit = e04_project.audit(RUN)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "clean" in audit.stdout


def test_the_item_key_is_the_cell_id_of_the_recorded_coordinates():
    coords = {"task": "T01", "harness": "H008", "seed_coordinate": 2, "dose": 10}
    assert item_key(coords) == "T01-H008-s2"
    with pytest.raises(KeyError):
        item_key({"task": "T01", "harness": "H008"})
    with pytest.raises(TypeError):
        item_key({**coords, "seed_coordinate": "2"})
