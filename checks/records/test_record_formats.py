"""Every record prereg writes fits its format in prereg.records, the module that owns them all,
and the manifest's field reference in docs/reference/run-folder.md names the manifest schema's
top-level fields, no more and no fewer.

One toy run (approved, run, audited, then rehearsed) is made once for the module; each record
its writers left is validated against its schema in prereg.records.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prereg import records
from prereg.base.schema import validate
from prereg.base.typed_settings import parse_as
from prereg.decisions import approval, audit, manifest
from prereg.decisions.gate import Refusal
from prereg.evidence import envlock
from prereg.kinds import registry
from prereg.records import formats, runs, verdicts
from prereg.runtime import items as item_side
from prereg.runtime import rehearsal
from support.toy import ToyRepo, make_toy_repo

pytestmark = pytest.mark.software

RUN = "toy-20261130-001"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "reference" / "run-folder.md"
MANIFEST_SCHEMAS = (
    records.MANIFEST_FIELDS,
    records.COMPLETE_FIELDS,
    records.OPTIONAL_FIELDS,
    records.MINIMAL_FIELDS,
    records.MINIMAL_MARKERS,
)


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> ToyRepo:
    """The toy stage approved and run complete, audited (a stored verdict), refused once
    (a refusal record) and rehearsed (a rehearsal record)."""
    toy = make_toy_repo(tmp_path_factory.mktemp("formats") / "toy")
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy", f"--run-id={RUN}")
    assert done.returncode == 0, done.stdout + done.stderr
    audited = toy.audit(RUN)
    assert runs.RunLayout(toy.root, RUN).verdict.is_file(), audited.stdout + audited.stderr
    record = approval.load_approval(approval.approval_path(toy.root, RUN))
    approval.write_refusal(toy.root, record, "toy", RUN, [Refusal("clean-source", "dirty: x")])
    rehearsed = toy.pytest("--research-stage=toy", "--rehearse")
    assert rehearsed.returncode == 0, rehearsed.stdout + rehearsed.stderr
    return toy


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _fits_open(doc: dict, required: dict, optional: dict, source: str) -> None:
    """Every required field present and fitting, every optional one fitting (other fields
    are allowed: the record is open)."""
    for key, schema in required.items():
        assert key in doc, f"{source}: missing field {key}"
        validate(doc[key], schema, source=source, path=key)
    for key, schema in optional.items():
        if key in doc:
            validate(doc[key], schema, source=source, path=key)


def test_the_approval_record_and_its_copy_fit_the_approval_schema(toy):
    path = toy.root / records.approval_record(RUN)
    assert path == approval.approval_path(toy.root, RUN)
    data = _json(path)
    parse_as(formats.Approval, data, path="")
    assert data["format"] == records.APPROVAL_FORMAT and data["run_id"] == RUN
    assert toy.layout(RUN).approval_copy.read_bytes() == path.read_bytes()


def test_the_start_record_fits_its_fields(toy):
    start = _json(toy.layout(RUN).start)
    _fits_open(start, records.START_FIELDS, {}, "start.json")
    assert start["run_id"] == RUN


def test_the_manifest_fits_the_manifest_schema_and_names_no_other_field(toy):
    data = _json(toy.layout(RUN).manifest)
    assert data["format"] == records.MANIFEST_FORMAT and data["status"] == records.COMPLETE
    required = {**records.MANIFEST_FIELDS, **records.COMPLETE_FIELDS}
    _fits_open(data, required, records.OPTIONAL_FIELDS, "manifest.json")
    assert set(data) <= {*required, *records.OPTIONAL_FIELDS}, sorted(set(data) - set(required))
    assert data["approval"]["path"] == records.approval_record(RUN)
    validate(data["environment"]["environment_lock"], records.LOCK_SCHEMA, source="manifest")
    assert data["items"], data
    for index, item in enumerate(data["items"]):
        where = f"manifest.json items[{index}]"
        _fits_open(item, records.ITEM_FIELDS, records.ITEM_OPTIONAL_FIELDS, where)
        assert item["outcome"] == records.PASSED
    # Each line of items.jsonl is an item record as the item reported it (its outcome is
    # given by the controller in the manifest).
    logged, problems = manifest.read_item_log(toy.run_dir(RUN))
    assert not problems and len(logged) == len(data["items"])
    fields = {k: v for k, v in records.ITEM_FIELDS.items() if k != "outcome"}
    for line in logged:
        _fits_open(line, fields, records.ITEM_OPTIONAL_FIELDS, "items.jsonl")
        assert set(line["phases"]) & set(records.FINISHING_PHASES)


def test_the_refusal_record_fits_the_refusal_schema(toy):
    found = sorted(runs.refusals_dir(toy.root).glob("*.json"))
    assert len(found) == 1, found
    data = _json(found[0])
    validate(data, records.REFUSAL_SCHEMA, source=str(found[0]))
    assert data["approval"] == records.approval_record(RUN)
    assert data["refusals"] == [{"condition": "clean-source", "message": "dirty: x"}]


def test_the_stored_verdict_fits_the_verdict_schema(toy):
    path = toy.layout(RUN).verdict
    data = _json(path)
    validate(data, records.VERDICT_SCHEMA, source=str(path))
    assert data["format"] == records.VERDICT_FORMAT and data["verdict"] == records.CLEAN
    assert verdicts.staleness(toy.root, data, toy.run_dir(RUN)) is None


def test_the_rehearsal_record_and_its_bindings_fit_their_schemas(toy):
    (found,) = runs.all_rehearsals(toy.root)
    layout = runs.RehearsalLayout(toy.root, found["name"])
    data = _json(layout.record)
    validate(data, records.REHEARSAL_SCHEMA, source=str(layout.record))
    assert data["format"] == records.REHEARSAL_FORMAT and data["status"] == records.PASSED
    for index, item in enumerate(data["items"]):
        where = f"rehearsal.json items[{index}]"
        _fits_open(item, records.ITEM_FIELDS, records.ITEM_OPTIONAL_FIELDS, where)
    bindings = _json(layout.approval_copy)
    validate(bindings, records.REHEARSAL_BINDINGS_SCHEMA, source=str(layout.approval_copy))


def test_writers_and_readers_take_their_formats_from_records():
    """The names the writers and readers use are the records module's objects."""
    assert approval.FORMAT is records.APPROVAL_FORMAT
    assert manifest.FORMAT is records.MANIFEST_FORMAT is audit.evidence.FORMAT
    assert verdicts.FORMAT is records.VERDICT_FORMAT
    assert rehearsal.FORMAT is records.REHEARSAL_FORMAT
    assert audit.evidence.MANIFEST_FIELDS is records.MANIFEST_FIELDS
    assert audit.evidence.ITEM_FIELDS is records.ITEM_FIELDS
    assert audit.evidence.START_FIELDS is records.START_FIELDS
    assert audit.EXIT_CODES.keys() == {records.CLEAN, records.FINDINGS, records.COULD_NOT_AUDIT}
    assert approval.APPROVALS == Path(records.APPROVALS_DIR)
    assert runs.COMPLETE is records.COMPLETE and runs.INCOMPLETE is records.INCOMPLETE


def test_the_lock_and_extension_origin_schemas_have_one_home():
    """envlock writes the lock and registry the extension origins that the approval and
    the manifest hold: they use the records module's schemas."""
    assert envlock.LOCK_SCHEMA is records.LOCK_SCHEMA
    assert envlock.PYTHON_FIELDS is records.PYTHON_FIELDS
    assert envlock.DISTRIBUTION is records.DISTRIBUTION
    assert registry.EXTENSION_ORIGIN is records.EXTENSION_ORIGIN


PHASES = st.dictionaries(
    st.sampled_from(["setup", "call", "teardown", "???"]),
    st.sampled_from(["passed", "failed", "skipped"]),
)


@given(PHASES)
def test_every_outcome_the_controller_gives_is_in_the_taxonomy(phases):
    outcome = item_side.outcome(phases)
    assert outcome in records.OUTCOMES and outcome != records.UNKNOWN
    validate(
        {"nodeid": "x", "outcome": outcome, "phases": phases}, records.ITEM_FIELDS, source="item"
    )


RUN_IDS = st.from_regex(rf"\A{records.STAGE_NAME}-[0-9]{{8}}-[0-9]{{3}}\Z").filter(
    lambda s: len(s) <= 40
)


@given(RUN_IDS)
def test_the_approval_record_path_has_one_spelling(run_id):
    rel = records.approval_record(run_id)
    assert PurePosixPath(rel).parts == ("plans", "approvals", f"{run_id}.json")
    assert approval.approval_path(Path("/checkout"), run_id) == Path("/checkout") / rel


# -- the docs ----------------------------------------------------------------------------------


def _backticked(text: str) -> tuple[list[str], list[str]]:
    """Every `name` of ``text``, and those outside any parentheses (the top-level ones)."""
    every, top = [], []
    depth, token = 0, None
    for char in text:
        if token is not None:
            if char == "`":
                every.append(token)
                if depth == 0:
                    top.append(token)
                token = None
            else:
                token += char
        elif char == "`":
            token = ""
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
    return every, top


def documented_manifest_fields(markdown: str) -> tuple[set[str], set[str]]:
    """The names the manifest's field reference mentions, and those it lists as top-level
    fields: the paragraph from "`manifest.json` fields:" to "Per item (`items[]`)", which
    documents ``items``."""
    match = re.search(
        r"`manifest\.json` fields:(.*?)Per\s+item\s+\(`items\[\]`\)", markdown, re.DOTALL
    )
    assert match, f"{DOCS}: no paragraph '`manifest.json` fields: ... Per item (`items[]`)'"
    every, top = _backticked(match.group(1))
    return {*every, "items"}, {*top, "items"}


def test_the_docs_name_every_top_level_field_of_the_manifest_schema_and_no_other():
    mentioned, top = documented_manifest_fields(DOCS.read_text(encoding="utf-8"))
    schema = set().union(*MANIFEST_SCHEMAS)
    undocumented = sorted(schema - mentioned)
    assert not undocumented, (
        f"{DOCS}: the manifest fields {undocumented} of prereg.records are not documented; "
        "name each in the '`manifest.json` fields:' paragraph"
    )
    unknown = sorted(top - schema)
    assert not unknown, (
        f"{DOCS}: the '`manifest.json` fields:' paragraph lists {unknown}, which no manifest "
        "schema of prereg.records has; add them to the schema or correct the docs"
    )


def test_the_docs_check_finds_a_missing_and_an_unknown_field():
    text = DOCS.read_text(encoding="utf-8")
    mentioned, top = documented_manifest_fields(text)
    assert "budget" in top and "seconds" not in top and "seconds" in mentioned
    dropped, _ = documented_manifest_fields(text.replace("`workers`", "workers"))
    assert "workers" not in dropped
    _, added = documented_manifest_fields(text.replace("`workers`;", "`workers`; `cpu`;"))
    assert "cpu" in added and "cpu" not in set().union(*MANIFEST_SCHEMAS)


def documented_approval_fields(markdown: str) -> set[str]:
    """The field names the first column of the approval record's table lists."""
    match = re.search(
        r"## The approval record .*?\n\| field \| what \|\n\|---\|---\|\n(.*?)\n\n",
        markdown,
        re.DOTALL,
    )
    assert match, f"{DOCS}: no table under '## The approval record'"
    return {
        name for row in match.group(1).splitlines() for name in _backticked(row.split("|")[1])[0]
    }


def test_the_docs_name_every_field_of_the_approval_record_and_no_other():
    documented = documented_approval_fields(DOCS.read_text(encoding="utf-8"))
    fields = {f.name for f in dataclasses.fields(formats.Approval)}
    assert documented == fields, (
        f"{DOCS}: the approval record's table names {sorted(documented)}; the record has "
        f"{sorted(fields)}"
    )
    assert "amendment" not in documented_approval_fields(
        DOCS.read_text(encoding="utf-8").replace("| `amendment` |", "| amendment |")
    )
