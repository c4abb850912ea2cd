"""Stage paired-models: one item per dataset replicate (the plan's grid). Thin: the settings
come from the approved plan, the work from the installed prereg-paired-models package."""

import pytest

from prereg.plugin import parametrize_items
from prereg_paired_models import kind as paired

STAGE = "paired-models"
pytestmark = pytest.mark.research_stage(STAGE)


def pytest_generate_tests(metafunc):
    parametrize_items(metafunc, paired.KIND, STAGE)


def test_replicate(replicate, research):
    paired.run_item(research, replicate)
