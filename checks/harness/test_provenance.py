from __future__ import annotations

import sys

import numpy as np
import pytest

from prereg import provenance

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
