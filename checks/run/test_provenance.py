from __future__ import annotations

import importlib.metadata
import inspect
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from prereg.base import provenance
from prereg.kinds.plans import ENVIRONMENT_PINS

pytestmark = pytest.mark.software

MIB = 1 << 20


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="exact peaks need /proc/self/clear_refs"
)
def test_nested_scopes_keep_the_outer_peak_and_measure_the_inner_one_alone():
    outer = provenance.PeakScope().start()
    big = np.ones(200 * MIB // 8)  # 200 MiB touched before the inner scope opens
    del big
    with provenance.PeakScope() as inner:
        small = np.ones(20 * MIB // 8)
        del small
    outer_bytes, scope = outer.stop()
    assert "own peak" in scope and "own peak" in inner.scope
    assert outer_bytes >= 200 * MIB, (
        "the outer scope must not lose what it saw before the inner reset"
    )
    assert inner.bytes < outer_bytes - 150 * MIB, (
        "the inner scope measures its own peak, not the outer's"
    )


def test_deviations_name_each_differing_pin():
    pins = {"python": "3.9.6", "cpu_threads": 2}
    assert provenance.deviations(pins, {"python": "3.9.6", "cpu_threads": 2}) == []
    assert provenance.deviations(pins, {"python": "3.11.7", "cpu_threads": 2}) == [
        {"field": "python", "pinned": "3.9.6", "actual": "3.11.7"}
    ]


ENVIRONMENTS = st.dictionaries(
    st.sampled_from(sorted(ENVIRONMENT_PINS)),
    st.none() | st.text(min_size=1, max_size=8) | st.integers(1, 256),
    min_size=1,
)


@given(ENVIRONMENTS, st.data())
def test_pins_in_an_environments_own_form_meet_it_and_each_other_pin_is_named(actual, data):
    """An absent package (``None``) meets the pin "not installed"; any changed pin is named
    with the raw value found, and a message spells the absence as the plan does."""
    pins = {field: provenance.pin_form(value) for field, value in actual.items()}
    assert provenance.deviations(pins, actual) == []
    field = data.draw(st.sampled_from(sorted(pins)))
    other = data.draw(st.text(min_size=1, max_size=8).filter(lambda v: v != pins[field]))
    moved = {**pins, field: other}
    found = provenance.deviations(moved, actual)
    assert found == [{"field": field, "pinned": other, "actual": actual[field]}]
    assert provenance.describe(found) == (
        f"{field}: plan pins {other!r}, here {provenance.pin_form(actual[field])!r}"
    )


def test_a_version_pin_on_an_absent_package_is_a_deviation_named_as_not_installed():
    found = provenance.deviations({"torch": "2.8.0"}, {"torch": None})
    assert found == [{"field": "torch", "pinned": "2.8.0", "actual": None}]
    assert provenance.describe(found) == "torch: plan pins '2.8.0', here 'not installed'"
    assert provenance.deviations({"torch": provenance.NOT_INSTALLED}, {"torch": "2.13.0"}) == [
        {"field": "torch", "pinned": "not installed", "actual": "2.13.0"}
    ]


@pytest.mark.skipif(
    sys.version_info < (3, 10), reason="importlib has packages_distributions from 3.10"
)
def test_imported_packages_are_importlibs_distributions_with_their_versions():
    """One pass over the metadata gives what importlib.metadata's packages_distributions and
    version give for every module this process imported (numpy, scipy, pytest, hypothesis,
    prereg's editable install among them)."""
    top = {name.split(".")[0] for name in list(sys.modules)}
    expected: dict[str, str] = {}
    mapping = importlib.metadata.packages_distributions()
    for module in sorted(top):
        for dist in mapping.get(module, ()):
            expected[dist] = importlib.metadata.version(dist)
    found = provenance.imported_packages()
    assert list(found.items()) == list(expected.items())
    assert {"numpy", "pytest", "prereg"} <= set(found)


@given(
    st.lists(
        st.sampled_from(["pkg", "pkg/sub", "mod.py", "ext.so", "data.txt", ".", "..", "", "a.b"]),
        min_size=1,
        max_size=4,
    ).map("/".join)
)
def test_a_distributions_top_level_names_follow_importlibs_rule_for_any_recorded_path(path):
    """The names read from a RECORD row as text are those importlib.metadata infers from
    the row's PackagePath, whatever the row holds."""

    class Dist(importlib.metadata.Distribution):
        def read_text(self, filename):
            return f"{path},,\n" if filename == "RECORD" else None

        def locate_file(self, name):
            return name

    dist = Dist()
    expected = {
        part.parts[0] if len(part.parts) > 1 else inspect.getmodulename(str(part)) or str(part)
        for part in dist.files
        if part.parts
    }
    assert provenance._top_level_names(dist) == sorted(n for n in expected if "." not in n)
