"""The audit cross-checks every record of a run, and never crashes.

Each check tampers with an honest toy run as a hurried researcher or a careless machine
would (edit, delete, re-hash) and asks ``prereg audit`` in a real subprocess: exit 1 and
a finding naming the file and field. Honest runs (serial, ``-n 2``, failed) audit clean;
a run that cannot be checked against git exits 3.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prereg.base.hashing import sha256_file, write_json
from prereg.records import COMPLETE_FIELDS, MANIFEST_FIELDS, ledger
from prereg.testing import ScratchProject, outer_environment
from support.toy import (
    ToyRepo,
    assert_finding,
    clone,
    honest_repo,
    make_toy_repo,
    recorded_in_git,
    stage_spec,
)

pytestmark = [pytest.mark.software, pytest.mark.attack]

RUN = "toy-20261130-001"
PARALLEL = "toy-20261130-002"
FIRST = "experiments/test_toy.py::test_cell[cell0]"


@pytest.fixture(scope="module")
def honest(tmp_path_factory) -> ToyRepo:
    """A complete serial run and a complete ``-n 2`` run of the toy stage."""
    root = tmp_path_factory.mktemp("honest") / "toy"
    return honest_repo(root, stage_spec("toy"), (RUN, ()), (PARALLEL, ("-n", "2")))


@pytest.fixture(scope="module")
def failed(tmp_path_factory) -> ToyRepo:
    """An incomplete run: one cell raises."""
    root = tmp_path_factory.mktemp("failed") / "toy"
    spec = stage_spec("toy", parameters={"cells": 4, "misbehave": {"cell": 1, "how": "raise"}})
    return honest_repo(root, spec, (RUN, ()))


def read(run: Path, name: str = "manifest.json") -> dict:
    return json.loads((run / name).read_text())


def rehash(run: Path, manifest: dict) -> dict:
    """Make the manifest's hashes agree with the files again, as a careful forger would."""
    for entry in manifest["run_files"]:
        path = run / entry["path"]
        if path.is_file():
            entry.update(sha256=sha256_file(path), bytes=path.stat().st_size)
    for item in manifest["items"]:
        for entry in item.get("outputs", []):
            path = run / "items" / item["output_dir"] / entry["path"]
            entry.update(sha256=sha256_file(path), bytes=path.stat().st_size)
    return manifest


def audit(toy: ToyRepo, run_id: str = RUN, *extra: str) -> subprocess.CompletedProcess:
    done = toy.audit(run_id, *extra)
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    return done


# -- honest runs --------------------------------------------------------------------------------


@pytest.mark.parametrize("run_id", [RUN, PARALLEL])
def test_honest_serial_and_parallel_runs_audit_clean_and_do_not_claim_a_replay(honest, run_id):
    done = audit(honest, run_id)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "clean (run status: complete" in done.stdout
    assert "replay included" not in done.stdout and "replayed" not in done.stdout
    assert "stage kind 'plain' has none" in done.stdout
    # The manifest records the installed extensions the controller loaded: none here.
    assert honest.manifest(run_id)["environment"]["extensions"] == {}
    assert "  extensions: none installed were loaded (built-in code only)" in done.stdout


def test_an_honest_failed_run_audits_clean_as_incomplete_and_is_not_replayed(failed):
    done = audit(failed)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "clean (run status: incomplete; not replayed: the run is not complete)" in done.stdout


def test_a_replay_is_claimed_only_when_one_ran(honest, monkeypatch):
    from prereg.decisions import replay
    from prereg.decisions.audit import audit_run

    ran = []

    def replayed(root, commit, run):
        ran.append((run["stage"], commit))
        return replay.Replay(True, "replayed (a stand-in)")

    monkeypatch.setattr(replay, "replay_run", replayed)
    result = audit_run(honest.root, honest.run_dir(RUN))
    assert result.verdict == "clean" and result.replayed
    assert ran == [("toy", honest.manifest(RUN)["source_commit"])]
    skipped = audit_run(honest.root, honest.run_dir(RUN), replay=False)
    assert skipped.verdict == "clean" and not skipped.replayed and len(ran) == 1


def test_a_replay_that_cannot_start_is_a_blocker_not_a_crash(honest, monkeypatch):
    from prereg.decisions import replay
    from prereg.decisions.audit import audit_run

    def crash(root, commit, run):
        raise KeyError("summary_value")

    monkeypatch.setattr(replay, "replay_run", crash)
    result = audit_run(honest.root, honest.run_dir(RUN))
    assert result.verdict == "could not audit" and not result.replayed
    assert "the replay could not start: KeyError: 'summary_value'" in result.blockers[0]


# -- manifest edits -----------------------------------------------------------------------------


def _edit_manifest(toy: ToyRepo, change) -> Path:
    run = toy.run_dir(RUN)
    manifest = read(run)
    change(manifest)
    write_json(run / "manifest.json", manifest)
    return run


@pytest.mark.parametrize(
    "field, change, fragments",
    [
        (
            "deviations",
            lambda m: m.update(deviations=[]),
            ["manifest.json: field deviations is [], but approval.json field deviations"],
        ),
        (
            "seed_namespace",
            lambda m: m.update(seed_namespace="toy-2.0"),
            ['manifest.json: field seed_namespace is "toy-2.0", but approval.json field'],
        ),
        (
            "source_anchor",
            lambda m: m.update(source_anchor="0" * 40),
            ["manifest.json: field source_anchor is", "but approval.json field source_anchor"],
        ),
        (
            "baseline_sha256",
            lambda m: m.update(baseline_sha256="0" * 64),
            ["manifest.json: field baseline_sha256 is", "approval.json field baseline.sha256"],
        ),
        (
            "inputs",
            lambda m: m.update(inputs={"extra": {"path": "/x", "kind": "file"}}),
            ["manifest.json: field inputs is", "approval.json field inputs is {}"],
        ),
        (
            "requires",
            lambda m: m.update(requires={"other": {"run_id": "other-20261130-001"}}),
            ["manifest.json: field requires is"],
        ),
        (
            "plan.sha256",
            lambda m: m["plan"].update(sha256="0" * 64),
            ["manifest.json: field plan.sha256 is", "start.json field plan_sha256"],
        ),
        (
            "started_at",
            lambda m: m.update(started_at="2026-11-30T00:00:00.000+00:00"),
            ["manifest.json: field started_at is", "but start.json field started_at"],
        ),
        (
            "source_commit",
            lambda m: m.update(source_commit=m["source_anchor"]),
            ["manifest.json: field source_commit is", "but start.json field source_commit"],
        ),
        (
            "status",
            lambda m: m.update(status="incomplete"),
            ["manifest.json: field status is incomplete but incomplete_reasons is empty"],
        ),
        (
            "expected_items",
            lambda m: m.update(expected_items=5),
            ["manifest.json: field status is complete but expected_items is 5"],
        ),
        (
            "items (incomplete)",
            lambda m: m.update(
                items=m["items"][:2], status="incomplete", incomplete_reasons=["interrupted"]
            ),
            ["manifest.json: field items holds 2 item(s), fewer than expected_items (4)"],
        ),
        (
            "items",
            lambda m: m["items"].pop(),
            ["items.jsonl line", "is not in manifest.json field items"],
        ),
        (
            "execution_at_end (dropped)",
            lambda m: m["environment"].pop("execution_at_end"),
            ["environment.execution_at_end is missing or not a list of strings"],
        ),
        (
            "execution_at_end (a problem)",
            lambda m: m["environment"].update(execution_at_end=["loaded code x from /x ..."]),
            ["manifest.json: environment.execution_at_end: loaded code x from /x ..."],
        ),
    ],
)
def test_each_manifest_field_edit_is_a_finding_naming_the_field(
    honest, tmp_path, field, change, fragments
):
    toy = clone(honest, tmp_path)
    _edit_manifest(toy, change)
    assert_finding(
        audit(toy),
        *fragments,
        "manifest.json differs from its record in git (refs/prereg/runs/toy-20261130-001/manifest)",
    )


def test_an_item_outcome_changed_disagrees_with_items_jsonl_and_junit(honest, tmp_path):
    toy = clone(honest, tmp_path)

    def skip_first(manifest):
        manifest["items"][0]["outcome"] = "skipped"

    _edit_manifest(toy, skip_first)
    assert_finding(
        audit(toy),
        f'items.jsonl line 1 ({FIRST}): field outcome is "passed", but manifest.json field '
        'items[0].outcome is "skipped"',
        "junit.xml: testcase experiments.test_toy.test_cell[cell0] passed, but manifest.json "
        f"gives item {FIRST} outcome skipped",
        "manifest.json: field status is complete but 1 item(s) did not pass",
    )


def test_a_failed_run_relabelled_complete_is_a_finding(failed, tmp_path):
    toy = clone(failed, tmp_path)
    run = toy.run_dir(RUN)
    manifest = read(run)
    bad = next(i for i in manifest["items"] if i["outcome"] == "failed")
    bad["outcome"], bad["phases"]["call"] = "passed", "passed"
    bad.pop("tracebacks")
    manifest.update(status="complete", incomplete_reasons=[])
    write_json(run / "manifest.json", manifest)
    assert_finding(
        audit(toy),
        f'items.jsonl line 2 ({bad["nodeid"]}): field outcome is "failed"',
        f"items.jsonl line 2 ({bad['nodeid']}): field phases",
        "junit.xml: testcase experiments.test_toy.test_cell[cell1] failed, but manifest.json",
    )


@pytest.mark.parametrize("name", ["items.jsonl", "junit.xml", "start.json"])
def test_a_deleted_run_file_is_a_finding_even_when_the_manifest_forgets_it(honest, tmp_path, name):
    toy = clone(honest, tmp_path)
    run = toy.run_dir(RUN)
    (run / name).unlink()
    _edit_manifest(
        toy, lambda m: m.update(run_files=[e for e in m["run_files"] if e["path"] != name])
    )
    fragments = [f"manifest.json: field run_files does not list {name}", f"missing file: {name}"]
    if name == "start.json":
        fragments.append("start.json is missing, but git records it")
    assert_finding(audit(toy), *fragments)


def test_a_junit_outcome_edited_and_rehashed_is_a_finding(honest, tmp_path):
    toy = clone(honest, tmp_path)
    run = toy.run_dir(RUN)
    junit = run / "junit.xml"
    junit.write_text(
        junit.read_text()
        .replace('name="test_cell[cell0]" time="', 'name="test_cell[cell0]" file="x" time="')
        .replace("/></testsuite>", "><failure message='x'/></testcase></testsuite>")
    )
    _edit_manifest(toy, lambda m: rehash(run, m))
    done = audit(toy)
    assert_finding(done, "junit.xml: testcase experiments.test_toy.test_cell", "failed, but")


def test_an_item_log_line_edited_and_rehashed_is_a_finding(honest, tmp_path):
    toy = clone(honest, tmp_path)
    run = toy.run_dir(RUN)
    log = run / "items.jsonl"
    lines = log.read_text().splitlines()
    entry = json.loads(lines[0])
    entry["outputs"][0]["sha256"] = "0" * 64
    lines[0] = json.dumps(entry, sort_keys=True)
    log.write_text("\n".join(lines) + "\n")
    _edit_manifest(toy, lambda m: rehash(run, m))
    assert_finding(
        audit(toy), f"items.jsonl line 1 ({FIRST}): field outputs is", "items[0].outputs is"
    )


def test_an_item_log_line_with_a_repeated_key_is_a_finding(honest, tmp_path):
    toy = clone(honest, tmp_path)
    run = toy.run_dir(RUN)
    log = run / "items.jsonl"
    lines = log.read_text().splitlines()
    lines[0] = lines[0].replace('{"', '{"outcome": "failed", "', 1)
    log.write_text("\n".join(lines) + "\n")
    _edit_manifest(toy, lambda m: rehash(run, m))
    assert_finding(audit(toy), "items.jsonl line 1: not valid JSON", "'outcome' appears twice")


def test_a_torn_item_log_is_a_finding(honest, tmp_path):
    toy = clone(honest, tmp_path)
    run = toy.run_dir(RUN)
    log = run / "items.jsonl"
    log.write_bytes(log.read_bytes()[:-40])
    _edit_manifest(toy, lambda m: rehash(run, m))
    assert_finding(
        audit(toy),
        "items.jsonl: the last line has no line end",
        "items.jsonl line 4: not valid JSON",
        "finished, but items.jsonl has no line for it",
    )


def test_an_item_log_line_hidden_behind_a_forged_log_error_is_a_finding(honest, tmp_path):
    # The audit accepts a finished item without an items.jsonl line when the manifest says the
    # controller could not append it (log_error: a full disk). Forging that note to hide a
    # deleted line changes the manifest, whose bytes git holds.
    toy = clone(honest, tmp_path)
    run = toy.run_dir(RUN)
    log = run / "items.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    hidden = json.loads(lines[0])["nodeid"]
    log.write_text("".join(lines[1:]))

    def forge(manifest: dict) -> None:
        item = next(i for i in manifest["items"] if i["nodeid"] == hidden)
        item["log_error"] = "items.jsonl: could not append the record (No space left on device)"
        rehash(run, manifest)

    _edit_manifest(toy, forge)
    done = audit(toy)
    assert_finding(done, "manifest.json differs from its record in git")
    assert "has no line for it" not in done.stdout


def test_an_edited_start_record_is_a_finding_against_git_and_the_manifest(honest, tmp_path):
    toy = clone(honest, tmp_path)
    run = toy.run_dir(RUN)
    start = read(run, "start.json")
    start["started_at"] = "2026-01-01T00:00:00.000+00:00"
    write_json(run / "start.json", start)
    _edit_manifest(toy, lambda m: rehash(run, m))
    assert_finding(
        audit(toy),
        "start.json differs from its record in git (refs/prereg/runs/toy-20261130-001/start)",
        "manifest.json: field started_at is",
    )


def test_a_deleted_manifest_is_a_finding_and_git_still_records_it(honest, tmp_path):
    toy = clone(honest, tmp_path)
    (toy.run_dir(RUN) / "manifest.json").unlink()
    assert_finding(
        audit(toy),
        "manifest.json is missing",
        "manifest.json is missing, but git records it (refs/prereg/runs/toy-20261130-001/manifest)",
    )


def test_a_renamed_run_folder_is_a_finding(honest, tmp_path):
    toy = clone(honest, tmp_path)
    toy.run_dir(RUN).rename(toy.run_dir("toy-20261130-009"))
    assert_finding(
        audit(toy, "toy-20261130-009"),
        "manifest.json: field run_id is 'toy-20261130-001', but the run folder is named "
        "'toy-20261130-009'",
    )


# -- malformed records: findings, never a traceback -----------------------------------------------


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("{ not json", "manifest.json: cannot be read as JSON"),
        ("[1, 2]", "manifest.json: holds a JSON list, not an object"),
        ('{"status": NaN}', "manifest.json: cannot be read as JSON"),
        ("\xff\xfe", "manifest.json: cannot be read as JSON"),
    ],
)
def test_a_manifest_that_is_not_json_is_a_finding_not_a_traceback(honest, tmp_path, text, fragment):
    toy = clone(honest, tmp_path)
    (toy.run_dir(RUN) / "manifest.json").write_bytes(text.encode("latin-1"))
    done = audit(toy)
    assert_finding(done, fragment, "manifest.json differs from its record in git")
    assert done.stderr == ""


@pytest.mark.parametrize(
    "change, fragment",
    [
        (lambda m: m.pop("deviations"), "manifest.json: missing field deviations"),
        (lambda m: m.update(items="all passed"), "manifest.json: field items must be a list"),
        (lambda m: m.update(status="done"), "manifest.json: field status is 'done'"),
        (lambda m: m["items"][0].pop("phases"), "manifest.json: missing field items[0].phases"),
        (lambda m: m.update(run_files=[{"path": 3}]), "manifest.json: field run_files[0]"),
        (lambda m: m.update(expected_items="4"), "manifest.json: field expected_items"),
        (
            lambda m: m["environment"].update(extensions=[]),
            "manifest.json: field environment.extensions must be an object",
        ),
        (
            lambda m: m["environment"].update(
                extensions={"prereg.stage_kinds": {"mine": {"distribution": "mine 1.0"}}}
            ),
            "manifest.json: missing field environment.extensions.prereg.stage_kinds.mine.entry_point",
        ),
        (
            lambda m: m["environment"].update(extensions={"console_scripts": {}}),
            "environment.extensions names 'console_scripts', not an extension-point group",
        ),
    ],
)
def test_a_missing_or_mistyped_field_is_a_finding_naming_it(honest, tmp_path, change, fragment):
    toy = clone(honest, tmp_path)
    _edit_manifest(toy, change)
    assert_finding(audit(toy), fragment)


@pytest.mark.parametrize("name", ["start.json", "approval.json"])
def test_a_record_that_is_not_json_is_a_finding(honest, tmp_path, name):
    toy = clone(honest, tmp_path)
    run = toy.run_dir(RUN)
    (run / name).write_text("}")
    _edit_manifest(toy, lambda m: rehash(run, m))
    assert_finding(audit(toy), f"{name}: cannot be read as JSON")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


MANIFEST_KEYS = sorted({**MANIFEST_FIELDS, **COMPLETE_FIELDS})


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(key=st.sampled_from(MANIFEST_KEYS), value=json_values)
def test_property_any_value_in_any_manifest_field_gives_findings_never_an_exception(
    honest, key, value
):
    from prereg.decisions.audit import audit_run

    run = honest.run_dir(RUN)
    manifest_path = run / "manifest.json"
    original = manifest_path.read_bytes()
    manifest = json.loads(original)
    if manifest.get(key) == value:
        return
    manifest[key] = value
    try:
        write_json(manifest_path, manifest)
        result = audit_run(honest.root, run, replay=False)
    finally:
        manifest_path.write_bytes(original)
    assert result.verdict == "findings"
    assert any("manifest.json" in f for f in result.findings)


identifiers = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(
    folders=st.lists(identifiers, max_size=2),
    module=identifiers,
    names=st.lists(identifiers, min_size=1, max_size=3),
    params=st.none() | st.text(alphabet="ab01-_.:[]= ", max_size=8),
)
def test_property_junit_names_map_to_node_ids_as_pytest_writes_them(folders, module, names, params):
    from _pytest.junitxml import mangle_test_address

    from prereg.decisions.audit.evidence import _junit_key

    path = "/".join([*folders, f"test_{module}.py"])
    nodeid = "::".join([path, *names]) + ("" if params is None else f"[{params}]")
    mangled = mangle_test_address(nodeid)
    assert _junit_key(nodeid) == (".".join(mangled[:-1]), mangled[-1])


# -- git records ----------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["start", "manifest"])
def test_a_deleted_git_record_is_a_finding(honest, tmp_path, which):
    toy = clone(honest, tmp_path)
    ref = getattr(ledger, f"{which}_ref")(RUN)
    toy.git("update-ref", "-d", ref)
    assert_finding(audit(toy), f"git has no record {ref}")


def test_a_run_folder_copied_to_another_run_id_has_no_git_record(honest, tmp_path):
    """A forged run: an honest folder copied under an unspent run id, records rewritten."""
    toy = clone(honest, tmp_path)
    forged = "toy-20261130-007"
    shutil.copytree(toy.run_dir(RUN), toy.run_dir(forged))
    run = toy.run_dir(forged)
    for name in ("start.json", "approval.json"):
        record = read(run, name)
        record["run_id"] = forged
        write_json(run / name, record)
    manifest = read(run)
    manifest.update(
        run_id=forged,
        approval={
            "path": f"plans/approvals/{forged}.json",
            "sha256": sha256_file(run / "approval.json"),
        },
    )
    write_json(run / "manifest.json", rehash(run, manifest))
    assert_finding(
        audit(toy, forged),
        f"git has no record refs/prereg/runs/{forged}/start",
        f"git has no record refs/prereg/runs/{forged}/manifest",
        f"plans/approvals/{forged}.json is not committed at the run's commit",
    )


def test_a_forged_plain_run_with_rehashed_outputs_is_refused_as_a_dependency(tmp_path):
    stages = {
        "toy": stage_spec("toy"),
        "later": stage_spec("later", requires=["toy"], seed_namespace="later-1.0"),
    }
    toy = make_toy_repo(tmp_path / "toy", stages)
    toy.approve("toy", RUN)
    assert toy.pytest("--research-stage=toy").returncode == 0
    recorded_in_git(toy, RUN)
    run = toy.run_dir(RUN)
    result = run / "items" / "test_cell[cell0]" / "result.json"
    result.write_text('{"x": [0.0, 0.0, 0.0]}')  # a better-looking result
    manifest = rehash(run, read(run))
    log = run / "items.jsonl"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    for line in lines:
        line["outputs"] = next(i for i in manifest["items"] if i["nodeid"] == line["nodeid"])[
            "outputs"
        ]
    log.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    write_json(run / "manifest.json", rehash(run, manifest))
    assert_finding(audit(toy), "manifest.json differs from its record in git")
    done = toy.approve("later", "later-20261130-001", "--use-run", f"toy={RUN}", check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"required toy run {RUN} does not audit clean" in done.stderr
    assert "manifest.json differs from its record in git" in done.stderr


def test_a_required_run_is_checked_against_its_git_record(tmp_path):
    stages = {
        "toy": stage_spec("toy"),
        "later": stage_spec("later", requires=["toy"], seed_namespace="later-1.0"),
    }
    toy = make_toy_repo(tmp_path / "toy", stages)
    toy.approve("toy", RUN)
    assert toy.pytest("--research-stage=toy").returncode == 0
    toy.approve("later", "later-20261130-001")
    done = toy.pytest("--research-stage=later")
    assert done.returncode == 0, done.stdout + done.stderr
    assert audit(toy, "later-20261130-001").returncode == 0
    toy.git("update-ref", "-d", ledger.manifest_ref(RUN))
    assert_finding(
        audit(toy, "later-20261130-001"),
        f"approval.json field requires.toy: git has no record {ledger.manifest_ref(RUN)}",
    )


def test_a_single_attempt_stage_is_checked_against_its_attempt_record(tmp_path):
    toy = make_toy_repo(
        tmp_path / "toy", {"toy": stage_spec("toy", single_attempt=True, signing="optional")}
    )
    toy.approve("toy", RUN)
    assert toy.pytest("--research-stage=toy").returncode == 0
    assert audit(toy).returncode == 0
    ref = ledger.attempt_ref("toy")
    other = json.dumps({"run_id": "toy-20261130-005"}).encode()
    blob = (
        subprocess.run(
            ["git", "-C", str(toy.root), "hash-object", "-w", "--stdin"],
            input=other,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .strip()
    )
    toy.git("update-ref", ref, blob)
    assert_finding(
        audit(toy),
        f"stage toy allows a single attempt and git records it as run toy-20261130-005 ({ref})",
    )
    toy.git("update-ref", "-d", ref)
    assert_finding(audit(toy), f"stage toy allows a single attempt, but git has no record {ref}")


# -- inputs ---------------------------------------------------------------------------------------


def test_a_bound_input_edited_after_the_run_is_a_finding(tmp_path):
    data = tmp_path / "data.txt"
    data.write_text("the approved input\n")
    toy = make_toy_repo(tmp_path / "toy", {"toy": stage_spec("toy", inputs=["data"])})
    toy.approve("toy", RUN, "--input", f"data={data}")
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 0, done.stdout + done.stderr
    recorded_in_git(toy, RUN)
    assert audit(toy).returncode == 0
    data.write_text("an input edited afterwards\n")
    assert_finding(
        audit(toy), "approval.json field inputs.data:", "the approval binds", "changed after"
    )
    data.unlink()
    assert_finding(audit(toy), "approval.json field inputs.data: the bound file")


# -- could not audit ------------------------------------------------------------------------------


def test_a_run_folder_outside_any_git_repository_could_not_be_audited(honest, tmp_path):
    outside = tmp_path / "loose"
    shutil.copytree(honest.run_dir(RUN), outside / RUN)
    done = ScratchProject(outside).prereg("audit", RUN)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "could not audit" in done.stdout and "not a git repository" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    assert sorted(p.name for p in outside.iterdir()) == [RUN], "nothing written beside the run"
    again = ScratchProject(outside).prereg("audit", RUN, "--repo", str(honest.root))
    assert again.returncode == 0, again.stdout + again.stderr


def test_without_git_the_run_could_not_be_audited(honest, tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    env = outer_environment()
    env["PATH"] = str(bare)  # no git on the PATH
    done = subprocess.run(
        [sys.executable, "-m", "prereg.cli", "audit", f"runs/{RUN}"],
        cwd=honest.root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "git is not installed" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_a_repository_without_the_runs_commit_could_not_audit_it(honest, tmp_path):
    other = make_toy_repo(tmp_path / "other")
    shutil.copytree(honest.run_dir(RUN), other.run_dir(RUN))
    done = audit(other)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "is not in the repository" in done.stdout


def test_a_missing_run_folder_could_not_be_audited(honest):
    done = audit(honest, "toy-20261130-099")
    assert done.returncode == 3 and "is not a folder" in done.stdout


def test_a_folder_whose_name_is_no_run_id_is_audited_and_no_verdict_path_is_built(honest, tmp_path):
    toy = clone(honest, tmp_path)
    shutil.copytree(toy.run_dir(RUN), toy.root / "runs" / "Renamed copy")
    done = toy.prereg("audit", "runs/Renamed copy")
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert_finding(done, "but the run folder is named 'Renamed copy'")
    assert not list((toy.root / "runs" / "audits").glob("Renamed*")), "a verdict path was built"


def test_the_installed_extensions_the_controller_loaded_reach_the_manifest_and_the_audit(
    monkeypatch,
):
    from prereg.decisions import manifest
    from prereg.decisions.audit import describe_extensions
    from prereg.kinds import registry

    origin = {
        "distribution": "acme-kinds 1.2",
        "entry_point": "acme_kinds:KIND",
        "file": "/site-packages/acme_kinds.py",
    }
    monkeypatch.setattr(registry, "_origins", {registry.STAGE_KINDS: {"acme.sweep": origin}})
    env = manifest.environment(plugins={}, imported={}, threads={}, execution={})
    assert env["extensions"] == {registry.STAGE_KINDS: {"acme.sweep": origin}}
    shown = "extension prereg.stage_kinds 'acme.sweep': acme_kinds:KIND from acme-kinds 1.2"
    assert describe_extensions(env["extensions"]) == [f"{shown} (/site-packages/acme_kinds.py)"]
    assert describe_extensions({}) == [
        "extensions: none installed were loaded (built-in code only)"
    ]


# -- the checks are functions of the evidence ------------------------------------------------------


def _all_findings(evidence) -> list[str]:
    from prereg.decisions.audit import CHECKS

    return [finding for check in CHECKS for finding in check(evidence)]


def test_the_checks_read_only_the_evidence_gathered_once(honest, tmp_path):
    """Gathered once, the evidence is all the checks see: with the repository and the run
    folder gone afterwards, every check gives the same findings, and none can change it."""
    import dataclasses

    from prereg.decisions.audit import Evidence, audit_run, could_not_audit, gather

    toy = clone(honest, tmp_path)
    _edit_manifest(toy, lambda m: m.update(seed_namespace="toy-2.0"))
    evidence = gather(toy.root, toy.run_dir(RUN))
    assert isinstance(evidence, Evidence) and could_not_audit(evidence) == []
    findings = _all_findings(evidence)
    assert list(audit_run(toy.root, toy.run_dir(RUN), replay=False)) == findings
    assert any('field seed_namespace is "toy-2.0"' in f for f in findings), findings
    assert any("differs from its record in git" in f for f in findings), findings
    shutil.rmtree(toy.root)
    assert _all_findings(evidence) == findings
    with pytest.raises(dataclasses.FrozenInstanceError):
        evidence.manifest = {}  # type: ignore[misc]


def test_a_gathering_step_that_stops_is_a_blocker_naming_it_and_no_finding(honest, monkeypatch):
    from prereg.base import gitrepo
    from prereg.decisions import audit

    def broken(root, commit):
        raise RuntimeError("the object reader broke")

    monkeypatch.setattr(gitrepo, "commit_tree", broken)
    result = audit.audit_run(honest.root, honest.run_dir(RUN), replay=False)
    assert result.verdict == "could not audit" and result.findings == (), result.findings
    (blocker,) = result.blockers
    assert blocker.startswith("gathering the source commit's tree stopped on an unexpected "), (
        blocker
    )
    assert "RuntimeError: the object reader broke (at " in blocker, blocker


def test_a_check_that_stops_is_a_blocker_naming_it(honest, monkeypatch):
    from prereg.decisions import audit

    def check_broken(evidence):
        return evidence.no_such_field

    monkeypatch.setattr(audit, "CHECKS", (*audit.CHECKS, check_broken))
    result = audit.audit_run(honest.root, honest.run_dir(RUN))
    assert result.verdict == "could not audit" and not result.replayed
    (blocker,) = result.blockers
    assert blocker.startswith("check_broken stopped on an unexpected error (please report it): ")
    assert "AttributeError" in blocker and "no_such_field" in blocker, blocker


def test_a_run_file_that_cannot_be_read_is_a_blocker_not_a_missing_file(honest, monkeypatch):
    from prereg.decisions import audit
    from prereg.decisions.audit import evidence

    real = evidence.hash_entry

    def hash_entry(root, rel):
        if rel == "junit.xml":
            raise PermissionError(13, "Permission denied", rel)
        return real(root, rel)

    monkeypatch.setattr(evidence, "hash_entry", hash_entry)
    result = audit.audit_run(honest.root, honest.run_dir(RUN), replay=False)
    assert result.findings == (), result.findings
    (blocker,) = result.blockers
    assert blocker.startswith("junit.xml in the run folder cannot be read ([Errno 13] Permission")
    assert "make it readable (chmod u+r) and audit again" in blocker


# -- remote workers of a hermetic run ----------------------------------------------------------


REMOTE_SPEC = "socket=192.0.2.7:8888"


def _with_workers(evidence, workers: list):
    from dataclasses import replace

    manifest = json.loads(json.dumps(evidence.manifest))
    manifest["environment"]["workers"] = workers
    return replace(evidence, manifest=manifest)


@pytest.fixture(scope="module")
def parallel_evidence(honest):
    """The evidence of the honest ``-n 2`` run, and its source commit and that commit's tree."""
    from prereg.base import gitrepo
    from prereg.decisions.audit import gather

    evidence = gather(honest.root, honest.run_dir(PARALLEL))
    source = evidence.source_commit
    return evidence, source, gitrepo.commit_tree(honest.root, source)


def test_local_workers_of_an_honest_hermetic_run_give_no_worker_finding(parallel_evidence):
    from prereg.decisions.audit import check_workers

    evidence, _, _ = parallel_evidence
    workers = evidence.manifest["environment"]["workers"]
    assert [(w["spec"], w["remote"]) for w in workers] == [("popen", False)] * 2
    assert check_workers(evidence) == []


def test_a_remote_worker_without_a_snapshot_of_its_own_is_a_finding(parallel_evidence):
    from prereg.decisions.audit import check_workers

    evidence, source, _ = parallel_evidence
    local = evidence.manifest["environment"]["workers"][0]
    remote = dict(local, id="gw2", spec=REMOTE_SPEC, remote=True, checkout="/srv/toy")
    (finding,) = check_workers(_with_workers(evidence, [local, remote]))
    assert finding.startswith(
        f"manifest.json: environment.workers[1]: worker gw2 (--tx {REMOTE_SPEC}) records no "
        "snapshot of its own: it ran from its working tree"
    ), finding
    assert source[:12] in finding
    # A popen worker recorded remote (it runs in another folder) is checked as well.
    (finding,) = check_workers(_with_workers(evidence, [dict(local, remote=True)]))
    assert "worker gw0 (--tx popen) records no snapshot of its own" in finding, finding


def test_a_remote_worker_that_ran_another_tree_or_commit_is_a_finding(parallel_evidence):
    from prereg.decisions.audit import check_workers

    evidence, source, tree = parallel_evidence
    remote = {"id": "gw0", "spec": REMOTE_SPEC, "problems": []}
    honest = dict(remote, snapshot={"commit": source, "tree": tree})
    assert check_workers(_with_workers(evidence, [honest])) == []
    other = "f" * 40
    (finding,) = check_workers(
        _with_workers(evidence, [dict(remote, snapshot={"commit": source, "tree": other})])
    )
    assert (
        f"worker gw0 (--tx {REMOTE_SPEC}): ran from tree {other}, not the approved "
        f"commit's tree {tree}"
    ) in finding, finding
    (finding,) = check_workers(
        _with_workers(evidence, [dict(remote, snapshot={"commit": other, "tree": tree})])
    )
    assert f"ran from a snapshot of commit {other}, not the approved commit {source}" in finding


def test_remote_workers_of_a_run_that_records_no_snapshot_are_not_judged_again(parallel_evidence):
    """Without environment.snapshot the run was not hermetic: check_execution names that."""
    from dataclasses import replace

    from prereg.decisions.audit import check_execution, check_workers

    evidence, _, _ = parallel_evidence
    remote = _with_workers(evidence, [{"id": "gw0", "spec": REMOTE_SPEC}])
    manifest = json.loads(json.dumps(remote.manifest))
    del manifest["environment"]["snapshot"]
    bare = replace(remote, manifest=manifest)
    assert check_workers(bare) == []
    assert any("environment.snapshot is missing" in f for f in check_execution(bare))


def test_a_remote_worker_edited_into_a_manifest_is_an_audit_finding(honest, tmp_path):
    toy = clone(honest, tmp_path)
    run = toy.run_dir(PARALLEL)
    manifest = read(run)
    manifest["environment"]["workers"][1].update(spec=REMOTE_SPEC, remote=True)
    write_json(run / "manifest.json", manifest)
    assert_finding(
        audit(toy, PARALLEL),
        f"manifest.json: environment.workers[1]: worker gw1 (--tx {REMOTE_SPEC}) records no "
        "snapshot of its own",
        "manifest.json differs from its record in git",
    )


worker_entries = st.fixed_dictionaries(
    {"id": st.text(max_size=4)},
    optional={
        "spec": st.sampled_from(["popen", "popen//chdir=/x", REMOTE_SPEC, "ssh=h//python=p"])
        | json_values,
        "remote": json_values,
        "snapshot": json_values
        | st.fixed_dictionaries({}, optional={"commit": json_values, "tree": json_values}),
    },
)


@settings(max_examples=150, deadline=None)
@given(workers=st.lists(worker_entries | json_values, max_size=4))
def test_property_a_finding_for_each_remote_worker_not_proven_on_the_approved_tree(
    parallel_evidence, workers
):
    from prereg.decisions.audit import check_workers

    evidence, source, tree = parallel_evidence
    found = check_workers(_with_workers(evidence, workers))
    assert all(isinstance(f, str) and f.startswith("manifest.json: ") for f in found)
    for index, worker in enumerate(workers):
        mine = [f for f in found if f.startswith(f"manifest.json: environment.workers[{index}]")]
        if not isinstance(worker, dict):
            assert len(mine) == 1 and "not a worker record" in mine[0]
            continue
        spec = worker.get("spec")
        local = worker.get("remote") is not True and spec == "popen"
        snapshot = worker.get("snapshot")
        proven = isinstance(snapshot, dict) and (snapshot.get("commit"), snapshot.get("tree")) == (
            source,
            tree,
        )
        assert (mine == []) == (local or proven), (worker, mine)
