"""RP002A stage 2: target-variance. One item per unit (world x replicate)."""

import pytest

from prereg.plugin import stage_plan
from prereg.rp002a import variance_stage

pytestmark = pytest.mark.research_stage("target-variance")


def pytest_generate_tests(metafunc):
    if "unit" in metafunc.fixturenames:
        units = variance_stage.stage_units(stage_plan(metafunc.config).data)
        metafunc.parametrize("unit", units, ids=[u.unit_id for u in units])


def test_unit(unit, research):
    variance_stage.run_unit_item(research, unit)
