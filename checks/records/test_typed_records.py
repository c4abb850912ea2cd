"""Records as frozen classes (prereg.records.formats), parsed by typed_settings: a mapping, a
field that may be absent (distinct from null), a JSON name that is no Python name and an
open record read and written back exactly; every record a run writes loads as its class and
writes back the same JSON; a record of another shape is refused naming the field."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prereg.base.typed_settings import (
    ABSENT,
    SettingsError,
    absent,
    named,
    parse_as,
    rest,
    to_json,
)
from prereg.records import documents, formats
from support.toy import make_toy_repo, stage_spec

pytestmark = pytest.mark.software


@dataclass(frozen=True)
class Part:
    size: int


@dataclass(frozen=True)
class Shape:
    type: str = named("_type")
    parts: dict[str, Part] = named("partsByName", default=ABSENT)
    note: str | None = absent()
    tags: tuple[str, ...] = absent()
    kept: dict[str, Any] = rest()


KEYS = st.text(min_size=1, max_size=5).filter(
    lambda k: k not in ("_type", "partsByName", "note", "tags")
)
JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
SHAPES = st.fixed_dictionaries(
    {"_type": st.text(max_size=8)},
    optional={
        "partsByName": st.dictionaries(
            st.text(max_size=4), st.builds(lambda n: {"size": n}, st.integers())
        ),
        "note": st.none() | st.text(max_size=6),
        "tags": st.lists(st.text(max_size=3), max_size=3),
    },
).flatmap(
    lambda known: st.dictionaries(KEYS, JSON_SCALARS, max_size=3).map(
        lambda more: {**more, **known}
    )
)


@given(SHAPES)
def test_a_record_reads_and_writes_back_the_same_json(data):
    value = parse_as(Shape, data, path="")
    assert to_json(value) == data
    assert parse_as(Shape, to_json(value), path="") == value
    assert value.note is ABSENT if "note" not in data else value.note == data["note"]


def test_absent_and_null_are_two_values():
    assert parse_as(Shape, {"_type": "x"}, path="").note is ABSENT
    assert parse_as(Shape, {"_type": "x", "note": None}, path="").note is None
    assert "note" not in to_json(parse_as(Shape, {"_type": "x"}, path=""))


@pytest.mark.parametrize(
    "data, field",
    [
        ({}, "_type"),
        ({"_type": 3}, "_type"),
        ({"_type": "x", "partsByName": {"a": {"size": "big"}}}, "partsByName.a.size"),
        ({"_type": "x", "partsByName": []}, "partsByName"),
        ({"_type": "x", "tags": None}, "tags"),
    ],
)
def test_a_record_of_another_shape_is_refused_naming_the_field(data, field):
    with pytest.raises(SettingsError) as raised:
        parse_as(Shape, data, path="")
    assert field in str(raised.value)


def test_a_closed_record_refuses_a_field_it_does_not_name():
    with pytest.raises(SettingsError, match="unknown field"):
        parse_as(Part, {"size": 1, "colour": "red"}, path="")


def test_the_door_refuses_what_another_reader_would_read_otherwise():
    for data in (b'{"a": 1, "a": 2}', b'{"a": NaN}', b"{}{}", "{}".encode("utf-16"),
                 b"\xef\xbb\xbf{}", b'{"a": 1e999}'):  # fmt: skip
        with pytest.raises(documents.NotJson, match="not JSON as prereg reads it"):
            documents.loads(data, "x")
    assert documents.loads(b' {"a": 1}\r\n', "x") == {"a": 1}


def test_a_record_of_another_class_names_the_record_and_the_field():
    with pytest.raises(
        formats.NotARecord, match=r"start\.json is not a valid Start record: .*run_id"
    ):
        formats.loads(b'{"stage": "s"}', formats.Start, "start.json")


def test_every_record_a_run_writes_loads_as_its_class_and_writes_back_the_same(tmp_path):
    toy = make_toy_repo(tmp_path / "toy", {"toy": stage_spec("toy")})
    toy.set_up_signing(tmp_path / "keys")
    card = toy.prereg("register", check=True).stdout.encode()
    run_id = "toy-20261207-001"
    toy.approve("toy", run_id)
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 0, done.stdout + done.stderr
    run = toy.layout(run_id)
    for data, kind in (
        (card, formats.Card),
        (run.approval_copy.read_bytes(), formats.Approval),
        (run.start.read_bytes(), formats.Start),
        (run.manifest.read_bytes(), formats.Manifest),
    ):
        read = formats.loads(data, kind, kind.__name__)
        assert to_json(read.value) == json.loads(data), kind
        assert read.data == data and len(read.sha256) == 64
