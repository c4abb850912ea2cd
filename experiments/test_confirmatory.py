"""RP002A stage 4: confirmatory execution at the frozen n. One item per unit."""

import pytest

from prereg.plugin import stage_plan
from prereg.rp002a import confirmatory_stage, variance_stage

pytestmark = pytest.mark.research_stage("confirmatory")


def pytest_generate_tests(metafunc):
    if "unit" in metafunc.fixturenames:
        units = confirmatory_stage.stage_units(
            metafunc.config.rootpath, stage_plan(metafunc.config).data
        )
        metafunc.parametrize("unit", units, ids=[u.unit_id for u in units])


def test_unit(unit, research):
    variance_stage.run_unit_item(research, unit)
