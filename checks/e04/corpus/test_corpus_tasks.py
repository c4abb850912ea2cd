import pytest

pytestmark = pytest.mark.software

import copy
import json

from prereg.e04.gitcorpus import GitCorpusError
from prereg.e04.tasks import (
    TaskFileError,
    TaskValidationError,
    dump_task_file,
    load_task_file,
    locate_gold_functions,
    parse_task_document,
    validate_against_repository,
)

GO_V1 = "package run\n\nfunc Start() {}\n"
GO_V2 = (
    "package run\n\n// Start starts.\nfunc Start() {\n\tprintln(1)\n}\n\nfunc (r *Job) Stop() {}\n"
)


def document(base="a" * 40):
    return {
        "synthetic": True,
        "description": "test",
        "tasks": [
            {
                "task_id": "T1",
                "query": "start the job",
                "base_commit": base,
                "gold_files": ["run/run.go"],
                "gold_functions": [
                    {
                        "file": "run/run.go",
                        "name": "Start",
                        "receiver": None,
                        "start_line": 4,
                        "end_line": 6,
                    },
                    {
                        "file": "run/run.go",
                        "name": "Stop",
                        "receiver": "Job",
                        "start_line": 8,
                        "end_line": 8,
                    },
                ],
            }
        ],
    }


def mutate(path, value):
    def apply(doc):
        target = doc
        for key in path[:-1]:
            target = target[key]
        if value is KeyError:
            del target[path[-1]]
        else:
            target[path[-1]] = value

    return apply


T = ("tasks", 0)
G = ("tasks", 0, "gold_functions", 0)
CASES = [
    (mutate(T + ("query",), KeyError), "field 'query': missing field"),
    (mutate(T + ("extra",), 1), "field 'extra': unknown field"),
    (mutate(T + ("query",), 3), "field 'query': must be a non-empty string"),
    (mutate(T + ("base_commit",), "HEAD"), "field 'base_commit'"),
    (mutate(T + ("gold_files",), []), "field 'gold_files': is empty"),
    (mutate(T + ("gold_files",), "run/run.go"), "field 'gold_files': must be a list"),
    (mutate(T + ("gold_files",), ["run/run.go", "run/run.go"]), "field 'gold_files'"),
    (mutate(T + ("gold_files",), ["../x.go"]), "field 'gold_files[0]'"),
    (mutate(G + ("file",), "other.go"), "field 'gold_functions[0].file'"),
    (
        mutate(G + ("start_line",), 9),
        "field 'gold_functions[0].start_line': start_line=9 > end_line=6",
    ),
    (mutate(G + ("end_line",), "6"), "field 'gold_functions[0].end_line'"),
    (mutate(G + ("start_line",), True), "field 'gold_functions[0].start_line'"),
    (mutate(G + ("receiver",), ""), "field 'gold_functions[0].receiver'"),
    (mutate(G + ("name",), KeyError), "field 'gold_functions[0].name': missing field"),
    (mutate(G + ("colour",), "red"), "field 'gold_functions[0].colour': unknown field"),
]


@pytest.mark.parametrize(("change", "message"), CASES, ids=[m for _, m in CASES])
def test_schema_errors_name_task_and_field(change, message):
    doc = document()
    change(doc)
    with pytest.raises(TaskFileError) as info:
        parse_task_document(doc)
    assert "task 'T1'" in str(info.value)
    assert message in str(info.value)


def test_duplicate_task_id_and_top_level_errors():
    doc = document()
    doc["tasks"].append(copy.deepcopy(doc["tasks"][0]))
    with pytest.raises(TaskFileError, match="task 'T1': field 'task_id': duplicate id"):
        parse_task_document(doc)
    with pytest.raises(TaskFileError, match="unknown top-level field 'task'"):
        parse_task_document({**document(), "task": []})
    with pytest.raises(TaskFileError, match="'synthetic' must be bool"):
        parse_task_document({**document(), "synthetic": "yes"})
    with pytest.raises(TaskFileError, match="'tasks' must be a non-empty list"):
        parse_task_document({"tasks": []})
    bad_id = document()
    bad_id["tasks"][0]["task_id"] = 7
    with pytest.raises(TaskFileError, match=r"tasks\[0\]: field 'task_id'"):
        parse_task_document(bad_id)


def test_dump_and_load_round_trip(tmp_path):
    parsed = parse_task_document(document())
    path = tmp_path / "tasks.json"
    path.write_text(dump_task_file(parsed))
    assert load_task_file(path) == parsed
    assert json.loads(path.read_text())["format"] == "prereg-e04-tasks/1"
    with pytest.raises(TaskFileError, match="does not exist"):
        load_task_file(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(TaskFileError, match="not valid JSON"):
        load_task_file(tmp_path / "bad.json")


@pytest.fixture
def history(make_repo):
    return make_repo([{"run/run.go": GO_V1}, {"run/run.go": GO_V2, "README.md": "x"}])


def test_valid_tasks_pass_and_gold_functions_are_located(history):
    repo, (_, base) = history
    tasks = parse_task_document(document(base))
    validate_against_repository(tasks, repo)
    located = locate_gold_functions(tasks.tasks[0], {"run/run.go": GO_V2.encode()})
    assert [(f.name, f.receiver, f.start_line) for f in located] == [
        ("Start", None, 4),
        ("Stop", "Job", 8),
    ]


def problems_for(repo, doc):
    with pytest.raises(TaskValidationError) as info:
        validate_against_repository(parse_task_document(doc).tasks, repo)
    return info.value.problems


def test_repository_errors_name_task_and_field(history):
    repo, (root, base) = history
    unknown = problems_for(repo, document("b" * 40))
    assert len(unknown) == 1 and "task 'T1': field 'base_commit'" in unknown[0]
    no_parent = document(root)
    no_parent["tasks"][0]["gold_functions"] = []
    [problem] = problems_for(repo, no_parent)
    assert "task 'T1': field 'base_commit'" in problem and "no parent" in problem
    absent = document(base)
    absent["tasks"][0]["gold_files"].append("run/gone.go")
    [problem] = problems_for(repo, absent)
    assert "task 'T1': field 'gold_files[1]'" in problem and "run/gone.go" in problem
    moved = document(base)
    moved["tasks"][0]["gold_functions"][0]["start_line"] = 3
    [problem] = problems_for(repo, moved)
    assert (
        "task 'T1': field 'gold_functions[0]'" in problem
        and "found it at lines [(4, 6)]" in problem
    )
    renamed = document(base)
    renamed["tasks"][0]["gold_functions"][1]["receiver"] = "Runner"
    [problem] = problems_for(repo, renamed)
    assert "field 'gold_functions[1]'" in problem and "no function of that name" in problem


def test_not_a_repository(tmp_path):
    with pytest.raises(GitCorpusError, match="not a git repository"):
        validate_against_repository(parse_task_document(document()).tasks, tmp_path)
