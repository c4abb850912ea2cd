import pytest

pytestmark = pytest.mark.software

import json

import numpy as np

from prereg.e04.gitcorpus import first_parent, read_tree
from prereg.e04.goparse import parse_go_functions, syntax_errors
from prereg.e04.synthetic import SyntheticRepositoryError, make_synthetic_repository
from prereg.e04.tasks import load_task_file, validate_against_repository

CODE_REVISION = "1a7066f6c7682793b6f04445c776a93cc4fac895"  # E04 protocol, as test data


def commit_ids(repo, run_git):
    return run_git(repo, "rev-list", "main").split()


def test_two_builds_are_byte_identical(tmp_path, synthetic, run_git):
    again = make_synthetic_repository(
        tmp_path / "again",
        rng=np.random.default_rng(20261009),
        tasks=15,
        code_revision=CODE_REVISION,
    )
    assert commit_ids(again.repository, run_git) == commit_ids(synthetic.repository, run_git)
    assert again.head_commit == synthetic.head_commit
    assert again.tasks_file.read_bytes() == synthetic.tasks_file.read_bytes()
    assert again.reformulations_file.read_bytes() == synthetic.reformulations_file.read_bytes()
    other = make_synthetic_repository(
        tmp_path / "other", rng=np.random.default_rng(1), tasks=15, code_revision=CODE_REVISION
    )
    assert other.head_commit != synthetic.head_commit


def test_tasks_are_valid_and_labelled_synthetic(synthetic, run_git):
    task_file = load_task_file(synthetic.tasks_file)
    assert task_file.synthetic is True and "synthetic" in task_file.description.lower()
    assert len(task_file.tasks) == 15
    validate_against_repository(task_file, synthetic.repository)
    assert len(commit_ids(synthetic.repository, run_git)) == 16
    assert run_git(synthetic.repository, "status", "--porcelain") == ""


def test_repository_shape(synthetic):
    files = read_tree(synthetic.repository, "main")
    assert 40 <= len(files) <= 80
    packages = {path.rsplit("/", 1)[0] for path in files}
    assert len(packages) >= 5
    functions = [f for path, data in files.items() for f in parse_go_functions(path, data)]
    assert len(functions) >= 150 and sum(f.receiver is not None for f in functions) >= 50
    assert all(syntax_errors(data) == [] for data in files.values())


def test_s001_differs_from_base_for_every_task(synthetic):
    for task in load_task_file(synthetic.tasks_file).tasks:
        parent = first_parent(synthetic.repository, task.base_commit)
        before = read_tree(synthetic.repository, parent)
        after = read_tree(synthetic.repository, task.base_commit)
        changed = {p for p in after if before.get(p) != after[p]}
        assert changed == set(task.gold_files), task.task_id
        for gold in task.gold_functions:
            old = {
                (f.name, f.receiver): f.text
                for f in parse_go_functions(gold.file, before.get(gold.file, b""))
            }
            new = {
                (f.name, f.receiver): f.text
                for f in parse_go_functions(gold.file, after[gold.file])
            }
            assert old.get((gold.name, gold.receiver)) != new[(gold.name, gold.receiver)]


def test_reformulation_artifact(synthetic):
    artifact = json.loads(synthetic.reformulations_file.read_text())
    assert set(artifact) == {"code_revision", "synthetic", "reformulations"}
    assert artifact["code_revision"] == CODE_REVISION and artifact["synthetic"] is True
    ids = [t.task_id for t in load_task_file(synthetic.tasks_file).tasks]
    assert sorted(artifact["reformulations"]) == sorted(ids)
    assert all(isinstance(v, str) and v for v in artifact["reformulations"].values())


def test_arguments_are_checked(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(SyntheticRepositoryError, match="empty or new directory"):
        make_synthetic_repository(
            tmp_path / "full", rng=np.random.default_rng(0), tasks=1, code_revision=CODE_REVISION
        )
    with pytest.raises(SyntheticRepositoryError, match="tasks=0"):
        make_synthetic_repository(
            tmp_path / "new", rng=np.random.default_rng(0), tasks=0, code_revision=CODE_REVISION
        )
    with pytest.raises(SyntheticRepositoryError, match="rng"):
        make_synthetic_repository(tmp_path / "new2", rng=0, tasks=1, code_revision=CODE_REVISION)
