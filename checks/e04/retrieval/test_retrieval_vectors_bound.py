"""For E04, the vectors a run searched are bound to it.

Attacks performed for real on a scratch E04 project (token-hash backend, two tasks):
a poisoned vector cache (refused at approval and at the gate when the probed vectors
disagree with the pinned backend, else detected by the audit's re-embedding), a cache
that is not SQLite, of another schema or filing another model's vectors under the
pinned identity (refused before spending), tampering with the bound vectors after the
run (detected), and a cache deleted or changed after an honest run (verdict unchanged).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prereg.e04.backends import TokenHashBackend
from prereg.e04.cache import VectorCache, inspect_cache
from prereg.e04.cells import CorpusStore
from prereg.e04.embeddings import canonical_identity_json, identity_sha256
from prereg.e04.reformulations import load_reformulations
from prereg.e04.replay import replay_run
from prereg.e04.runvectors import VECTOR_KEYS_FILE, VECTORS_FILE, RunVectors
from prereg.e04.tasks import load_task_file
from prereg.kinds.plans import load_plan
from prereg.kinds.stages import RunView
from prereg.records import ledger
from support.e04_project import CODE_REVISION, E04Project, check_plan, make_project

pytestmark = [pytest.mark.software, pytest.mark.attack]

HONEST, SECOND, THIRD = "e04-20260101-001", "e04-20260101-002", "e04-20260101-003"


def _key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.fixture
def project(tmp_path, e04_fixture) -> E04Project:
    return make_project(tmp_path / "p", e04_fixture, check_plan())


def _honest_run(project: E04Project, run_id: str = HONEST) -> None:
    project.approve(run_id)
    done = project.pytest("--research-stage=e04", "--run-id", run_id)
    assert done.returncode == 0, done.stdout + done.stderr
    assert project.manifest(run_id)["status"] == "complete"


def _texts(project: E04Project, task_id: str = "SYN01") -> dict:
    """Query, gold function texts and one ordinary chunk of a task at its base commit."""
    tasks = load_task_file(project.fixture.tasks_file)
    task = tasks.task(task_id)
    reformulations = load_reformulations(
        project.fixture.reformulations_file,
        expected_code_revision=CODE_REVISION,
        task_ids=[t.task_id for t in tasks.tasks],
        allow_synthetic=True,
    )
    corpora = CorpusStore(project.fixture.repository)
    functions = corpora.functions(corpora.files(task.base_commit))
    gold = [f for f in functions if f.path in task.gold_files]
    others = [f for f in functions if f.path not in task.gold_files]
    return {
        "query": task.query,
        "reformulation": reformulations.texts[task_id],
        "gold": [f.text for f in gold],
        "other": sorted(others, key=lambda f: (f.path, f.start_line))[len(others) // 2],
    }


def _assert_refused_at_gate(
    project: E04Project, run_id: str, *needles: str, options: tuple[str, ...] = ()
) -> None:
    """Refused by the inputs condition before spending (the stage kind's own check runs
    while the session's workers start, and is judged before the spend)."""
    done = project.pytest("--research-stage=e04", "--run-id", run_id, *options)
    out = done.stdout + done.stderr
    assert done.returncode == 4, out
    assert "[inputs]" in out and all(n in out for n in needles), out
    assert not (project.run_dir(run_id) / "start.json").exists()
    assert not ledger.is_spent(project.root, run_id)
    (record,) = [r for r in project.refusals() if r["run_id"] == run_id]
    assert [r["condition"] for r in record["refusals"]] == ["inputs"]


def _view(project: E04Project, run_dir: Path) -> RunView:
    return RunView(
        root=project.root,
        run_dir=run_dir,
        plan=load_plan(project.root / "plans" / "E04_PLAN.json"),
        stage="e04",
        items=tuple(json.loads((run_dir / "manifest.json").read_text())["items"]),
    )


# -- poisoning --------------------------------------------------------------------------------


def test_a_cache_poisoned_in_its_probed_vectors_is_refused_at_approval_and_at_the_gate(project):
    _honest_run(project)
    project.approve(SECOND)  # approved while the cache was honest
    texts = _texts(project)
    other = project.stored_vector(_key(texts["other"].text))  # another valid unit vector
    poisoned = {_key(t): other for t in [texts["query"], *texts["gold"]]}
    assert project.overwrite_vectors(poisoned) == len(poisoned)
    _assert_refused_at_gate(
        project, SECOND, "probed vectors", "cache/e04-vectors.sqlite", options=("-n", "2")
    )
    refused = project.approve(THIRD, check=False)
    assert refused.returncode != 0
    assert "probed vectors" in refused.stdout + refused.stderr
    assert "task SYN01" in refused.stdout + refused.stderr


def test_a_poisoned_vector_the_gate_does_not_probe_is_found_by_the_audit(project):
    _honest_run(project)
    texts = _texts(project)
    # An ordinary function of a non-gold file gets the query's own vector: valid (unit
    # norm, right dims) and it now wins the dense search of H008 for SYN01.
    query_vector = project.stored_vector(_key(texts["query"]))
    assert project.overwrite_vectors({_key(texts["other"].text): query_vector}) == 1
    project.approve(SECOND)
    done = project.pytest("--research-stage=e04", "--run-id", SECOND)
    assert done.returncode == 0, done.stdout + done.stderr
    assert project.manifest(SECOND)["status"] == "complete"
    cell = "items/test_cell[SYN01-H008-s0]/baseline.json"
    honest = json.loads((project.run_dir(HONEST) / cell).read_text())["ranking"]["files"]
    used = json.loads((project.run_dir(SECOND) / cell).read_text())["ranking"]["files"]
    assert honest != used  # the poisoning changed the rankings
    audit = project.audit(SECOND)
    out = audit.stdout + audit.stderr
    assert audit.returncode != 0, out
    assert f"summary/{VECTORS_FILE}" in out and "re-embedded vectors differ" in out, out
    assert texts["other"].path in out and "conflict_atol" in out, out
    assert project.audit(HONEST).returncode == 0  # the honest run is untouched


# -- caches that are not this model's --------------------------------------------------------


def _not_sqlite(project: E04Project) -> None:
    project.cache.write_bytes(b"this is not an SQLite database\n" * 64)


def _other_schema(project: E04Project) -> None:
    with sqlite3.connect(project.cache) as db:
        db.execute("CREATE TABLE embeddings (k TEXT, v BLOB)")


def _other_identity(project: E04Project) -> None:
    # Another model's vectors (other dimension) filed under the plan identity's key.
    pinned = project.identity()
    other = TokenHashBackend(16, pinned["chunker_version"])
    with VectorCache(project.cache, conflict_atol=0.0, busy_timeout_seconds=5.0) as cache:
        cache.put_many(other.identity(), [_key("func A() {}")], other.embed(["func A() {}"]))
    with sqlite3.connect(project.cache) as db:
        db.execute(
            "UPDATE identities SET identity_sha256 = ?", (identity_sha256(pinned),)
        )  # fmt: skip
        db.execute("UPDATE vectors SET identity_sha256 = ?", (identity_sha256(pinned),))


@pytest.mark.parametrize(
    ("make_cache", "needle"),
    [
        (_not_sqlite, "not a usable SQLite vector cache"),
        (_other_schema, "another schema"),
        (_other_identity, "under another identity"),
    ],
    ids=["not-sqlite", "other-schema", "other-identity"],
)
def test_a_cache_that_is_not_the_pinned_models_is_refused_before_spending(
    project, make_cache, needle
):
    project.approve(HONEST)  # no cache yet: nothing to refuse
    project.cache.parent.mkdir(parents=True, exist_ok=True)
    make_cache(project)
    _assert_refused_at_gate(project, HONEST, needle, "cache/e04-vectors.sqlite")
    refused = project.approve(SECOND, check=False)
    assert refused.returncode != 0 and needle in refused.stdout + refused.stderr


def test_the_cache_inspection_names_the_table_and_passes_a_missing_or_honest_cache(tmp_path):
    backend = TokenHashBackend(8, "go-function-text-1")
    identity = backend.identity()
    path = tmp_path / "cache.sqlite"
    assert inspect_cache(path, identity) == []  # missing: the run creates it
    with VectorCache(path, conflict_atol=0.0, busy_timeout_seconds=5.0) as cache:
        cache.put_many(identity, [_key("x")], backend.embed(["x"]))
    assert inspect_cache(path, identity) == []
    wider = TokenHashBackend(16, "go-function-text-1")
    with sqlite3.connect(path) as db:
        db.execute(
            "INSERT INTO vectors VALUES (?, ?, 16, 'float32', ?)",
            (identity_sha256(identity), _key("y"), wider.embed(["y"]).tobytes()),
        )
    (problem,) = inspect_cache(path, identity)
    assert "table vectors" in problem and "dims 16" in problem and "dimension 8" in problem
    assert canonical_identity_json(identity)  # the identity the refusal is about
    assert not Path(f"{path}-journal").exists()


# -- the bound vectors --------------------------------------------------------------------------


def test_tampering_with_the_bound_vectors_after_the_run_is_detected(project):
    _honest_run(project)
    run_dir = project.run_dir(HONEST)
    vectors = run_dir / "summary" / VECTORS_FILE
    matrix = np.load(vectors)
    swapped = matrix.copy()
    swapped[[0, 1]] = matrix[[1, 0]]  # two valid vectors trade places
    np.save(vectors, swapped)
    audit = project.audit(HONEST)
    assert audit.returncode != 0
    assert f"summary/{VECTORS_FILE}" in audit.stdout + audit.stderr
    # As if the manifest and the keys file had been re-hashed too: the rebuilt rankings'
    # vector hashes and the re-embedding still disagree, naming the file and field.
    keys = run_dir / "summary" / VECTOR_KEYS_FILE
    record = json.loads(keys.read_text())
    record["vectors_sha256"] = hashlib.sha256(vectors.read_bytes()).hexdigest()
    keys.write_text(json.dumps(record))
    findings = replay_run(_view(project, run_dir))
    assert any(f"summary/{VECTORS_FILE} changed?" in f for f in findings), findings
    # The keys file must hash the vectors it describes.
    record["vectors_sha256"] = "0" * 64
    keys.write_text(json.dumps(record))
    findings = replay_run(_view(project, run_dir))
    assert any("field vectors_sha256" in f for f in findings), findings


def test_deleting_or_changing_the_cache_after_an_honest_run_leaves_its_audit_clean(project):
    _honest_run(project)
    texts = _texts(project)
    query_vector = project.stored_vector(_key(texts["query"]))
    project.overwrite_vectors({_key(texts["other"].text): query_vector})
    audit = project.audit(HONEST)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    project.cache.unlink()
    audit = project.audit(HONEST)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert not project.cache.exists()  # the audit neither needs nor creates the cache


_KEYS_RECORD = st.fixed_dictionaries(
    {},
    optional={
        "identity": st.one_of(st.none(), st.just({"backend": "token-hash"})),
        "text_sha256": st.one_of(
            st.lists(st.text(alphabet="0123456789abcdef", min_size=63, max_size=65), max_size=3),
            st.integers(),
            st.none(),
        ),
        "vectors_sha256": st.one_of(st.text(max_size=64), st.none()),
        "count": st.integers(),
    },
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    record=st.one_of(_KEYS_RECORD, st.lists(st.integers(), max_size=2), st.text(max_size=5)),
    raw=st.one_of(st.none(), st.binary(max_size=64)),
)
def test_the_bound_vector_files_never_crash_the_replay_loader(tmp_path, record, raw):
    identity = TokenHashBackend(4, "go-function-text-1").identity()
    folder = tmp_path / "summary"
    folder.mkdir(exist_ok=True)
    if raw is None:
        (folder / VECTOR_KEYS_FILE).write_text(json.dumps(record))
    else:
        (folder / VECTOR_KEYS_FILE).write_bytes(raw)
    np.save(folder / VECTORS_FILE, np.eye(2, 4, dtype="<f4"))
    bound, problems = RunVectors.load(folder, identity)
    assert bound is None and problems
    assert all("summary/" in p for p in problems)


def test_an_honest_bound_file_loads(tmp_path):
    identity = TokenHashBackend(4, "go-function-text-1").identity()
    folder = tmp_path / "summary"
    folder.mkdir()
    np.save(folder / VECTORS_FILE, np.eye(2, 4, dtype="<f4"))
    keys = sorted([_key("a"), _key("b")])
    record = {
        "identity": identity,
        "text_sha256": keys,
        "vectors_sha256": hashlib.sha256((folder / VECTORS_FILE).read_bytes()).hexdigest(),
    }
    (folder / VECTOR_KEYS_FILE).write_text(json.dumps(record))
    bound, problems = RunVectors.load(folder, identity)
    assert problems == [] and bound is not None
    assert set(bound.get_many(identity, [keys[1], _key("c")])) == {keys[1]}
    assert bound.get_many(TokenHashBackend(8, "x").identity(), keys) == {}
    shutil.rmtree(folder)
