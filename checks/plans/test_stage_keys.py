"""Item keys from recorded coordinates (prereg.kinds.stages): the default key and RunView.match."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prereg.kinds.stages import RunView, StageKind, coordinate_key

pytestmark = pytest.mark.software

VALUES = st.one_of(
    st.text(max_size=6), st.integers(), st.floats(allow_nan=False, allow_infinity=False)
)
COORDS = st.dictionaries(st.text(max_size=4), VALUES, max_size=4)


@given(COORDS, COORDS)
def test_the_default_key_tells_different_coordinates_apart(a, b):
    """Injective: no value can pass for another coordinate (``{"a": "1,b=2"}`` vs a, b)."""
    assert (coordinate_key(a) == coordinate_key(b)) == (_canonical(a) == _canonical(b))


def _canonical(coords: dict) -> list:
    return sorted((k, type(v).__name__, repr(v)) for k, v in coords.items())


@given(COORDS)
def test_the_default_key_ignores_the_order_coordinates_were_recorded_in(coords):
    assert coordinate_key(coords) == coordinate_key(dict(reversed(list(coords.items()))))


def _view(items) -> RunView:
    return RunView(
        root=None,
        run_dir=None,
        plan=None,
        stage="s",
        items=tuple(items),
        kind=StageKind(name="toy.keys"),
    )


def _item(nodeid: str, **coords) -> dict:
    return {"nodeid": nodeid, "coords": coords}


def test_match_pairs_by_coordinates_whatever_the_test_is_called():
    expected = {coordinate_key({"cell": c}): c for c in (1, 2)}
    pairs, findings = _view([_item("m.py::renamed[2]", cell=2), _item("m.py::x[1]", cell=1)]).match(
        expected
    )
    assert findings == []
    assert [(cell, item["nodeid"]) for _, item, cell in pairs] == [
        (2, "m.py::renamed[2]"),
        (1, "m.py::x[1]"),
    ]


def test_match_finds_a_foreign_item_a_duplicate_and_a_missing_cell():
    expected = {coordinate_key({"cell": c}): c for c in (1, 2, 3)}
    items = [_item("a", cell=1), _item("b", cell=1), _item("c", cell=9), _item("d", cell=2)]
    pairs, findings = _view(items).match(expected)
    assert [cell for _, _, cell in pairs] == [1, 2]
    assert len(findings) == 3, findings
    assert any("two items" in f for f in findings)
    assert any("'c'" in f and "not a cell" in f for f in findings)
    assert any("no item" in f and "3" in f for f in findings)
