"""The edges of the records.

A run folder holds regular files and folders only: a symbolic link, a named pipe or any
other entry is an audit finding naming it, and hashing a folder at the end of a run
neither follows a link out of the folder nor blocks on a pipe (the manifest names the
entry, the run is incomplete). JSON nested too deeply is a clear error naming the file in
every command that reads it, never a RecursionError. Run ids are ASCII, the whole string.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prereg.base import hashing
from prereg.base.hashing import (
    MAX_JSON_DEPTH,
    NOT_UTF8,
    NotARegularFile,
    file_entries,
    list_folder,
    parse_json,
    read_json,
    sha256_file,
)
from prereg.decisions.approval import write_refusal
from prereg.decisions.manifest import build_manifest, hash_item_folders, irregular_reason
from prereg.records.runs import RunIdError, RunLayout, check_run_id, require_run_id, valid_run_id
from prereg.testing import outer_environment
from support.toy import (
    EXPERIMENT,
    ToyRepo,
    assert_finding,
    clone,
    honest_repo,
    make_toy_repo,
    stage_spec,
)

pytestmark = [pytest.mark.software, pytest.mark.attack]

RUN = "toy-20261130-001"

# A guard against a hang (a FIFO read would block forever), not a timing assertion.
HANG_GUARD_SECONDS = 300
ITEM = "items/test_cell[cell0]"
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> ToyRepo:
    """One complete, clean serial run of the toy stage."""
    root = tmp_path_factory.mktemp("plain") / "toy"
    return honest_repo(root, stage_spec("toy"), (RUN, ()))


def bounded(toy: ToyRepo, *args: str) -> subprocess.CompletedProcess:
    """A prereg command in ``toy``; one that blocks (on a FIFO) fails instead of hanging."""
    env = outer_environment()
    done = subprocess.run(
        [sys.executable, "-m", "prereg.cli", *args],
        cwd=toy.root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=HANG_GUARD_SECONDS,
    )
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    return done


def findings(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stdout.splitlines() if line.startswith("  - ")]


# -- (a) entries that are not regular files --------------------------------------------------------


def _plant(run: Path, where: str, outside: Path) -> dict[str, str]:
    """A link to a file outside, a link to a file inside, a link to a folder outside and a
    FIFO in ``where`` below ``run``; returns each path (relative to ``run``) and its kind."""
    folder = run / where
    folder.mkdir(parents=True, exist_ok=True)
    (outside / "secret.txt").write_text("outside the run folder")
    inside = run / "start.json"
    os.symlink(outside / "secret.txt", folder / "to-outside")
    os.symlink(os.path.relpath(inside, folder), folder / "to-inside")
    os.symlink(outside, folder / "to-outside-folder")
    os.mkfifo(folder / "pipe")
    prefix = "" if where == "." else f"{where}/"
    return {
        f"{prefix}to-outside": f"a symbolic link to '{outside / 'secret.txt'}'",
        f"{prefix}to-inside": f"a symbolic link to '{os.path.relpath(inside, folder)}'",
        f"{prefix}to-outside-folder": f"a symbolic link to '{outside}'",
        f"{prefix}pipe": "a named pipe (FIFO)",
    }


@pytest.mark.parametrize("where", [".", ITEM, "items/test_cell[cell0]/deeper", "summary"])
def test_links_and_fifos_in_a_run_folder_are_findings_naming_each(plain, tmp_path, where):
    toy = clone(plain, tmp_path)
    (tmp_path / "outside").mkdir()
    planted = _plant(toy.run_dir(RUN), where, tmp_path / "outside")
    done = bounded(toy, "audit", f"runs/{RUN}")
    assert done.returncode == 1, done.stdout + done.stderr
    for rel, kind in planted.items():
        assert any(f"not read: {rel} is {kind}" in f for f in findings(done)), (
            rel,
            done.stdout,
        )
    assert not any("extra file" in f for f in findings(done)), done.stdout


def test_a_listed_output_replaced_by_a_link_to_identical_bytes_is_a_finding(plain, tmp_path):
    toy = clone(plain, tmp_path)
    result = toy.run_dir(RUN) / ITEM / "result.json"
    copy = tmp_path / "result-copy.json"
    copy.write_bytes(result.read_bytes())
    result.unlink()
    os.symlink(copy, result)
    assert sha256_file(result) == sha256_file(copy)  # a follower would hash it unchanged
    assert_finding(
        bounded(toy, "audit", f"runs/{RUN}"),
        f"not read: {ITEM}/result.json is a symbolic link to '{copy}'",
    )


def test_an_item_folder_that_is_a_link_is_a_finding_and_its_files_are_missing(plain, tmp_path):
    toy = clone(plain, tmp_path)
    folder = toy.run_dir(RUN) / ITEM
    moved = tmp_path / "moved"
    folder.rename(moved)
    os.symlink(moved, folder)
    assert_finding(
        bounded(toy, "audit", f"runs/{RUN}"),
        f"not read: {ITEM} is a symbolic link to '{moved}'",
        f"missing file: {ITEM}/result.json",
    )


def test_a_fifo_in_place_of_the_manifest_blocks_no_command(plain, tmp_path):
    toy = clone(plain, tmp_path)
    manifest = toy.run_dir(RUN) / "manifest.json"
    manifest.unlink()
    os.mkfifo(manifest)
    assert_finding(
        bounded(toy, "audit", f"runs/{RUN}"),
        "not read: manifest.json is a named pipe (FIFO)",
    )
    for args in (("runs", "--no-audit"), ("runs",)):
        runs = bounded(toy, *args)
        assert runs.returncode == 0 and RUN in runs.stdout, runs.stdout
    with pytest.raises(ValueError, match=r"manifest .*manifest\.json is refused: .*named pipe"):
        read_json(manifest, what="manifest")
    with pytest.raises(NotARegularFile, match="named pipe"):
        sha256_file(manifest)


ODD_ITEM = """

OUTSIDE = {outside!r}


def test_odd_outputs(research):
    research.coords(cell=-1)
    out = research.outputs
    (out / "kept.txt").write_text("a regular file")
    os.symlink(os.path.join(OUTSIDE, "secret.txt"), out / "to-outside")
    os.symlink("kept.txt", out / "to-inside")
    os.symlink(OUTSIDE, out / "to-outside-folder")
    os.mkfifo(out / "pipe")
    raw = os.fsencode(str(out))
    with open(os.path.join(raw, b"name-\\xff.txt"), "wb") as file:  # no JSON can hold its name
        file.write(b"bytes")
    os.mkdir(os.path.join(raw, b"folder-\\xfe"))
    with open(os.path.join(raw, b"folder-\\xfe", b"inside.txt"), "wb") as file:
        file.write(b"inside")
    (out / "line\\nbreak\\u2028.txt").write_text("a UTF-8 name a record can hold")
"""


def test_an_item_leaving_links_a_fifo_and_names_not_in_utf8_gives_an_incomplete_manifest_naming_them(
    tmp_path,
):
    # File names that are not UTF-8 once made both the manifest and its fallback unwritable
    # (UnicodeEncodeError): the run ended with no manifest and the audit blamed a killed
    # controller.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("outside the run folder")
    (outside / "inner.txt").write_text("inside a folder outside")
    toy = make_toy_repo(tmp_path / "toy")
    module = toy.root / "experiments" / "test_toy.py"
    module.write_text(EXPERIMENT.format(stage="toy") + ODD_ITEM.format(outside=str(outside)))
    toy.commit("A stage whose item leaves links and a FIFO")
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy", f"--run-id={RUN}")
    manifest = toy.manifest(RUN)
    assert manifest["status"] == "incomplete", done.stdout + done.stderr
    odd = next(i for i in manifest["items"] if i["nodeid"].endswith("test_odd_outputs"))
    assert odd["outcome"] == "passed"
    assert [e["path"] for e in odd["outputs"]] == ["kept.txt", "line\nbreak\u2028.txt"]
    assert {e["path"]: e["kind"] for e in odd["irregular_outputs"]} == {
        "folder-\\xfe": f"a folder {NOT_UTF8}",  # never descended into
        "name-\\xff.txt": f"a regular file {NOT_UTF8}",
        "pipe": "a named pipe (FIFO)",
        "to-inside": "a symbolic link to 'kept.txt'",
        "to-outside": f"a symbolic link to '{outside / 'secret.txt'}'",
        "to-outside-folder": f"a symbolic link to '{outside}'",
    }
    reasons = "\n".join(manifest["incomplete_reasons"])
    for name in ("pipe", "to-inside", "to-outside", "to-outside-folder", "name-\\xff.txt"):
        assert f"items/test_odd_outputs/{name} (" in reasons, reasons
    assert "test_odd_outputs: its output folder holds entries that are not regular" in reasons
    assert all(i["outcome"] == "passed" for i in manifest["items"])
    assert_finding(
        bounded(toy, "audit", f"runs/{RUN}"),
        "not read: items/test_odd_outputs/pipe is a named pipe",
        "not read: items/test_odd_outputs/name-\\xff.txt is a regular file whose name is not",
        "not read: items/test_odd_outputs/folder-\\xfe is a folder whose name is not UTF-8",
    )


def _folder_with_odd_entries(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    item = run / "items" / "a"
    (item / "sub").mkdir(parents=True)
    (item / "kept.txt").write_text("kept")
    (item / "sub" / "deep.txt").write_text("deep")
    (tmp_path / "outside.txt").write_text("outside")
    os.symlink(tmp_path / "outside.txt", item / "link")
    os.symlink(tmp_path, item / "sub" / "dirlink")
    os.mkfifo(item / "pipe")
    os.mkfifo(run / "items" / "b")  # a FIFO in place of an item folder
    return run


def test_hashing_a_folder_lists_links_and_fifos_and_never_opens_them(tmp_path):
    run = _folder_with_odd_entries(tmp_path)
    listing = list_folder(run)
    assert listing.files == ("items/a/kept.txt", "items/a/sub/deep.txt")
    assert [e["path"] for e in listing.irregular] == [
        "items/a/link",
        "items/a/pipe",
        "items/a/sub/dirlink",
        "items/b",
    ]
    assert [e["path"] for e in file_entries(run / "items" / "a")] == ["kept.txt", "sub/deep.txt"]
    items = [
        {"nodeid": "m.py::a", "phases": {"call": "passed"}, "outcome": "passed"},
        {"nodeid": "m.py::b", "phases": {"call": "passed"}, "outcome": "passed"},
    ]
    hashed = hash_item_folders(run, items, lambda nodeid: nodeid.split("::")[1])
    a, b = hashed
    assert [e["path"] for e in a["outputs"]] == ["kept.txt", "sub/deep.txt"]
    assert [e["path"] for e in a["irregular_outputs"]] == ["link", "pipe", "sub/dirlink"]
    assert "sub/dirlink (a symbolic link to" in a["record_error"]
    assert b["irregular_outputs"] == [{"path": ".", "kind": "a named pipe (FIFO)"}]
    assert "its output folder items/b is a named pipe (FIFO), not a folder" in b["record_error"]
    reason = irregular_reason(run)
    assert reason is not None and "4 entries" in reason and "items/a/pipe (a named pipe" in reason


def test_a_link_the_summary_leaves_makes_the_manifest_incomplete(tmp_path):
    run = tmp_path / "run"
    (run / "summary").mkdir(parents=True)
    (run / "summary" / "table.csv").write_text("a,b\n")
    os.symlink("table.csv", run / "summary" / "latest.csv")
    manifest = build_manifest(
        run_dir=run,
        start={"stage": "toy", "run_id": RUN, "source_commit": "c", "plan_sha256": "p"}
        | {"started_at": "t", "approval_sha256": "a"},
        approval={"source_anchor": "c", "baseline": {"sha256": "b"}, "seed_namespace": None}
        | {"deviations": [], "requires": {}, "inputs": {}},
        plan_path="plans/TOY_PLAN.json",
        stage_spec={"budget_seconds": 60, "budget_enforced": False},
        items=[],
        expected=[],
        reasons=[],
        ended_at="t",
        elapsed=1.0,
        env={},
        workers=0,
    )
    assert manifest["status"] == "incomplete"
    assert (
        "summary/latest.csv (a symbolic link to 'table.csv')" in manifest["incomplete_reasons"][0]
    )
    assert manifest["summary_files"] == []
    assert [e["path"] for e in manifest["partial_summary_files"]] == ["table.csv"]


# -- (b) JSON nested too deeply --------------------------------------------------------------------


@pytest.mark.parametrize("text", [DEEP, '{"a": ' * 100_000 + "1" + "}" * 100_000, "[" * 100_000])
def test_deeply_nested_json_is_a_clear_error_naming_the_source(text):
    with pytest.raises(ValueError, match=r"^plan somewhere\.json is refused: it nests too deeply"):
        parse_json(text, what="plan", source="somewhere.json")


@given(st.integers(min_value=1, max_value=3 * MAX_JSON_DEPTH), st.sampled_from(["list", "dict"]))
def test_property_nesting_up_to_the_limit_parses_and_beyond_is_refused(depth, shape):
    opening, closing = ("[", "]") if shape == "list" else ('{"k": ', "}")
    text = opening * depth + "0" + closing * depth
    if depth <= MAX_JSON_DEPTH:
        assert parse_json(text, what="record", source="s") == json.loads(text)
    else:
        with pytest.raises(ValueError, match="nests too deeply"):
            parse_json(text, what="record", source="s")


@pytest.mark.parametrize("text", ["null", "3", '"text"', "[]", "{}", '{"a": [[{}]]}'])
def test_scalars_and_shallow_documents_parse(text):
    assert parse_json(text, what="record", source="s") == json.loads(text)


def test_a_deeply_nested_file_is_refused_naming_it(tmp_path):
    path = tmp_path / "record.json"
    path.write_text(DEEP)
    with pytest.raises(ValueError, match=rf"^record {path} is refused: it nests too deeply"):
        read_json(path, what="record")


def test_a_deeply_nested_manifest_is_a_finding_and_prereg_runs_lists_it(plain, tmp_path):
    toy = clone(plain, tmp_path)
    (toy.run_dir(RUN) / "manifest.json").write_text(DEEP)
    done = bounded(toy, "audit", f"runs/{RUN}")
    # A manifest that is not JSON is a finding (exit 1), as every unreadable manifest is.
    assert_finding(
        done,
        f"manifest.json: cannot be read as JSON (manifest {toy.run_dir(RUN).resolve()}",
        "nests too deeply",
        "manifest.json differs from its record in git",
    )
    runs = bounded(toy, "runs")
    assert runs.returncode == 0 and RUN in runs.stdout and "unreadable" in runs.stdout, runs.stdout
    listed = json.loads(bounded(toy, "runs", "--json").stdout)
    assert [r["run_id"] for r in listed] == [RUN]
    report = bounded(toy, "report", f"runs/{RUN}")
    assert report.returncode in (0, 1), report.stdout + report.stderr


def test_a_deeply_nested_approval_copy_is_a_finding(plain, tmp_path):
    toy = clone(plain, tmp_path)
    run = toy.run_dir(RUN)
    (run / "approval.json").write_text(DEEP)
    assert_finding(
        bounded(toy, "audit", f"runs/{RUN}"), "approval.json: cannot be read as JSON", "too deeply"
    )


def test_a_deeply_nested_plan_or_approval_is_refused_by_approve_and_the_gate(tmp_path):
    toy = make_toy_repo(tmp_path / "toy")
    plan = toy.root / "plans" / "TOY_PLAN.json"
    honest_plan = plan.read_text()
    plan.write_text(DEEP)
    toy.commit("A plan nested too deeply")
    done = toy.prereg("approve", "--stage", "toy", "--run-id", RUN, "--accept-deviations")
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "Traceback" not in output, output
    assert "TOY_PLAN.json" in output and "nests too deeply" in output, output

    plan.write_text(honest_plan)
    toy.commit("The plan again")
    toy.approve("toy", RUN)
    (toy.root / "plans" / "approvals" / f"{RUN}.json").write_text(DEEP)
    toy.commit("An approval nested too deeply")
    ran = toy.pytest("--research-stage=toy", f"--run-id={RUN}")
    output = ran.stdout + ran.stderr
    assert ran.returncode == 4 and "Traceback" not in output and "RecursionError" not in output
    assert f"{RUN}.json" in output and "nests too deeply" in output, output
    assert not toy.run_dir(RUN).exists(), "the run id was spent"


# -- (c) run ids: ASCII, the whole string -------------------------------------------------------

stages = st.from_regex(r"[a-z][a-z0-9-]{0,15}", fullmatch=True)
run_ids = st.builds(
    lambda stage, date, seq: (stage, f"{stage}-{date}-{seq}"),
    stages,
    st.text(alphabet="0123456789", min_size=8, max_size=8),
    st.text(alphabet="0123456789", min_size=3, max_size=3),
)


@given(run_ids)
def test_property_valid_run_ids_are_accepted(pair):
    stage, run_id = pair
    assert valid_run_id(run_id)
    assert require_run_id(run_id) == run_id
    check_run_id(run_id, stage)
    assert RunLayout(Path("/r"), run_id).folder == Path("/r/runs") / run_id


def _refused(run_id: str) -> None:
    assert not valid_run_id(run_id)
    with pytest.raises(RunIdError):
        require_run_id(run_id)
    with pytest.raises(RunIdError):
        RunLayout(Path("/r"), run_id)


@given(
    run_ids,
    st.characters(min_codepoint=128, exclude_categories=["Cs"]),
    st.integers(min_value=0),
)
def test_property_a_run_id_with_a_non_ascii_character_is_refused(pair, char, where):
    _, run_id = pair
    at = where % (len(run_id) + 1)
    _refused(run_id[:at] + char + run_id[at:])
    _refused(run_id[:at] + char + run_id[at + 1 :])


@given(run_ids, st.characters(categories=["Nd"]).filter(lambda c: not c.isascii()))
def test_property_a_unicode_digit_in_the_date_or_number_is_refused(pair, digit):
    stage, run_id = pair
    for at in (len(stage) + 1, len(run_id) - 1):  # first digit of the date, last of the number
        _refused(run_id[:at] + digit + run_id[at + 1 :])


@given(run_ids, st.sampled_from(["\n", "\r\n", " ", "\t", "\x00", "/..", "-1"]))
def test_property_a_run_id_with_a_trailing_newline_or_more_is_refused(pair, tail):
    stage, run_id = pair
    _refused(run_id + tail)
    with pytest.raises(RunIdError):
        check_run_id(run_id + tail, stage)


@pytest.mark.parametrize(
    "stage, run_id",
    [("toy-2026113\u0663-001", None), ("toy", "toy-20261130-001\n"), ("toy\n", None)],
)
def test_a_refusal_record_name_is_ascii_whatever_the_stage_or_run_id(tmp_path, stage, run_id):
    root = tmp_path / "repo"
    root.mkdir()
    for args in (["init", "-q"], ["-c", "user.name=A", "-c", "user.email=a@b.c", "commit", "-q",
                 "--allow-empty", "-m", "empty"]):  # fmt: skip
        subprocess.run(["git", *args], cwd=root, check=True)
    path = write_refusal(root, None, stage, run_id, [])
    assert path.name.isascii() and "\n" not in path.name, path.name
    assert path.name.startswith(("unknown-stage-", "invalid-run-id-")), path.name


def test_prereg_runs_lists_a_run_without_manifest_whose_item_log_nests_too_deeply(plain, tmp_path):
    toy = clone(plain, tmp_path)
    (toy.run_dir(RUN) / "manifest.json").unlink()
    (toy.run_dir(RUN) / "items.jsonl").write_text(DEEP + "\n")
    assert bounded(toy, "runs", "--no-audit").returncode == 0


def test_a_digest_is_taken_again_only_while_the_file_is_unchanged(tmp_path):
    """The attestation's subjects reuse the manifest's digests (hashing.hashed_entry) only
    for a file whose status is the one it had when it was hashed: one rewritten in place
    with its size and modification time restored is read again."""
    out = tmp_path / "out"
    out.mkdir()
    target = out / "result.json"
    target.write_bytes(b'{"value": 1}\n')
    first = hashing.hash_entry(out, "result.json")
    assert hashing.hashed_entry(out, "result.json") == first
    status = target.stat()
    target.write_bytes(b'{"value": 2}\n')
    os.utime(target, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert target.stat().st_size == status.st_size
    again = hashing.hashed_entry(out, "result.json")
    assert again["sha256"] == hashing.sha256_bytes(b'{"value": 2}\n') != first["sha256"]


def test_a_file_never_hashed_here_or_replaced_by_a_link_is_read_as_it_is_now(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "a").write_bytes(b"a")
    assert hashing.hashed_entry(out, "a")["sha256"] == hashing.sha256_bytes(b"a")
    (out / "a").unlink()
    (out / "a").symlink_to(tmp_path)
    with pytest.raises(hashing.NotARegularFile):
        hashing.hashed_entry(out, "a")
