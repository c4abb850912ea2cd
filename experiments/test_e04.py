"""E04: one item per composite cell (task x harness x seed coordinate), the preregistered grid."""

import pytest

from prereg.e04 import stage as e04
from prereg.plugin import project_root, stage_inputs, stage_plan

pytestmark = pytest.mark.research_stage("e04")


def pytest_generate_tests(metafunc):
    if "cell" in metafunc.fixturenames:
        cells = e04.cells_for_run(
            stage_plan(metafunc.config).data, "e04", stage_inputs(metafunc.config)
        )
        metafunc.parametrize("cell", cells, ids=[c.item_id for c in cells])


def test_cell(cell, research, pytestconfig):
    e04.run_item(research, cell, root=project_root(pytestconfig), inputs=research.inputs)
