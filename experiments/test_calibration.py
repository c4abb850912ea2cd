"""RP002A stage 1: calibration. The parametrization is the preregistered grid."""

import pytest

from prereg.plugin import stage_plan
from prereg.rp002a import calibration_stage as calibration

pytestmark = pytest.mark.research_stage("calibration")


def pytest_generate_tests(metafunc):
    settings = calibration.settings_of(stage_plan(metafunc.config).data)
    if "simulation_cell" in metafunc.fixturenames:
        cells = calibration.simulation_cells(settings)
        metafunc.parametrize(
            "simulation_cell", cells, ids=[calibration.simulation_id(c) for c in cells]
        )
    if "bootstrap_cell" in metafunc.fixturenames:
        cells = calibration.bootstrap_cells(settings)
        metafunc.parametrize(
            "bootstrap_cell", cells, ids=[calibration.bootstrap_id(c) for c in cells]
        )


def test_simulation_cell(simulation_cell, research):
    research.coords(**calibration.cell_coordinates(simulation_cell))
    rng = research.numpy_generator(*calibration.simulation_coords(simulation_cell))
    calibration.run_simulation_item(research.settings, simulation_cell, rng, research.outputs)


def test_bootstrap_cell(bootstrap_cell, research):
    research.coords(**calibration.cell_coordinates(bootstrap_cell))
    rng = research.numpy_generator(*calibration.bootstrap_coords(bootstrap_cell))
    calibration.run_bootstrap_item(research.settings, bootstrap_cell, rng, research.outputs)
