"""RP002A stage 1: calibration. The parametrization is the preregistered grid."""

import pytest

from prereg.plugin import stage_plan
from prereg.rp002a import calibration_stage as calibration

pytestmark = pytest.mark.research_stage("calibration")


def pytest_generate_tests(metafunc):
    plan = stage_plan(metafunc.config).data
    if "simulation_cell" in metafunc.fixturenames:
        cells = calibration.simulation_cells(plan)
        metafunc.parametrize(
            "simulation_cell", cells, ids=[calibration.simulation_id(c) for c in cells]
        )
    if "bootstrap_cell" in metafunc.fixturenames:
        cells = calibration.bootstrap_cells(plan)
        metafunc.parametrize(
            "bootstrap_cell", cells, ids=[calibration.bootstrap_id(c) for c in cells]
        )


def test_simulation_cell(simulation_cell, research):
    research.coords(**simulation_cell.__dict__)
    rng = research.numpy_generator(*calibration.simulation_coords(simulation_cell))
    calibration.run_simulation_item(research.plan, simulation_cell, rng, research.outputs)


def test_bootstrap_cell(bootstrap_cell, research):
    research.coords(**bootstrap_cell.__dict__)
    rng = research.numpy_generator(*calibration.bootstrap_coords(bootstrap_cell))
    calibration.run_bootstrap_item(research.plan, bootstrap_cell, rng, research.outputs)
