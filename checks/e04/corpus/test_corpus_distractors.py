import pytest

pytestmark = pytest.mark.software

import hashlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prereg.e04.distractors import (
    DistractorError,
    distractor_vocabulary,
    distractors_for_dose,
    generate_distractors,
)
from prereg.e04.goparse import parse_go_functions, syntax_errors
from prereg.e04.tasks import load_task_file
from prereg.e04.types import GoldFunction, Task

PREFIX = "__harness_distractors__/"  # the E04 plan's reserved prefix, as test data
MAX_DOSE = 10  # the E04 plan's maximal S002 dose, as test data
TASK = Task(
    task_id="gitlab#123",
    query="Docker executor ignores the pull_policy when the image cache is disabled",
    base_commit="a" * 40,
    gold_files=("executors/docker/pull.go",),
    gold_functions=(
        GoldFunction("executors/docker/pull.go", "resolvePullPolicy", "executor", 3, 9),
    ),
)


def files_for(task, dose, seed=1, corpus=("executors/docker/pull.go",)):
    return distractors_for_dose(
        task,
        dose=dose,
        max_dose=MAX_DOSE,
        prefix=PREFIX,
        rng=np.random.default_rng(seed),
        corpus_paths=corpus,
    )


def test_doses_nest_and_repeat_exactly():
    one, five, ten = (files_for(TASK, d) for d in (1, 5, 10))
    assert len(one) == 1 and len(five) == 5 and len(ten) == 10
    assert five[:1] == one and ten[:5] == five
    assert files_for(TASK, 10) == ten  # same seed -> identical bytes
    assert files_for(TASK, 10, seed=2) != ten
    assert len({f.path for f in ten}) == 10


def test_files_are_valid_go_under_the_prefix_with_task_vocabulary():
    for index, file in enumerate(files_for(TASK, 10), start=1):
        data = file.source.encode()
        assert file.path.startswith(PREFIX + "gitlab_123/d") and file.path.endswith(".go")
        assert f"/d{index:02d}_" in file.path
        assert file.sha256 == hashlib.sha256(data).hexdigest()
        assert syntax_errors(data) == []
        assert file.source.splitlines()[1].startswith("package ")
        assert len(parse_go_functions(file.path, data)) >= 3
        lowered = file.source.lower()
        assert sum(w in lowered for w in ("docker", "pull", "policy", "image", "cache")) >= 2


def test_vocabulary():
    vocab = distractor_vocabulary(TASK)
    assert vocab.query_words[:3] == ("docker", "executor", "ignores")
    assert "the" not in vocab.query_words and "pull" in vocab.query_words
    assert vocab.identifiers == ("resolvePullPolicy", "executor")
    assert vocab.identifier_parts[:3] == ("resolve", "pull", "policy")


@pytest.mark.parametrize(
    ("prefix", "corpus", "message"),
    [
        ("__harness_distractors__", (), "must be a relative directory ending in '/'"),
        ("/abs/", (), "must be a relative directory"),
        ("a/../b/", (), "'..' segment"),
        (PREFIX, ("__harness_distractors__/x.go",), "collides with the corpus path"),
        (PREFIX, ("__harness_distractors__",), "collides with the corpus path"),
    ],
)
def test_bad_or_colliding_prefix_is_refused(prefix, corpus, message):
    with pytest.raises(DistractorError, match=message):
        generate_distractors(
            TASK, count=1, prefix=prefix, rng=np.random.default_rng(0), corpus_paths=corpus
        )


def test_bad_dose_and_empty_vocabulary():
    with pytest.raises(DistractorError, match="dose=11"):
        files_for(TASK, 11)
    silent = Task("t", "?? !! ..", "a" * 40, ("x.go",), ())
    with pytest.raises(DistractorError, match="no usable vocabulary"):
        generate_distractors(
            silent, count=1, prefix=PREFIX, rng=np.random.default_rng(0), corpus_paths=()
        )


identifier = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(
    query=st.text(min_size=1, max_size=80),
    name=identifier,
    receiver=st.none() | identifier,
    seed=st.integers(0, 2**32),
)
def test_any_task_gives_valid_go_or_a_clear_refusal(query, name, receiver, seed):
    task = Task(
        "t",
        query,
        "a" * 40,
        ("pkg/file_name.go",),
        (GoldFunction("pkg/file_name.go", name, receiver, 1, 2),),
    )
    files = generate_distractors(
        task,
        count=3,
        prefix=PREFIX,
        rng=np.random.default_rng(seed),
        corpus_paths=("pkg/file_name.go",),
    )
    for file in files:
        assert syntax_errors(file.source.encode()) == [], file.source
        assert file.path.startswith(PREFIX)


def test_synthetic_tasks_all_get_valid_distractors(synthetic):
    for task in load_task_file(synthetic.tasks_file).tasks:
        for file in files_for(task, 10, corpus=task.gold_files):
            assert syntax_errors(file.source.encode()) == []
