"""``scipy.stats`` (about a second to import) loads when a quantile is first computed, not
when a process merely loads an RP002A stage kind (both gates, approve, the listing, audit)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from prereg.kinds.stages import BUILT_IN_KINDS

pytestmark = pytest.mark.software

PROBE = """
import json, sys
from prereg.kinds.stages import load_kind
for name in sys.argv[1:]:
    load_kind(name)
loaded = "scipy.stats" in sys.modules
from prereg.rp002a.stats.binomial import clopper_pearson_upper
bound = clopper_pearson_upper(3, 200, 0.05)
print(json.dumps({"after_kinds": loaded, "after_quantile": "scipy.stats" in sys.modules}))
"""


def test_loading_every_rp002a_kind_leaves_scipy_stats_until_a_quantile_is_computed():
    kinds = sorted(name for name in BUILT_IN_KINDS if name.startswith("rp002a."))
    assert kinds, BUILT_IN_KINDS
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *kinds], capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout) == {"after_kinds": False, "after_quantile": True}, kinds
