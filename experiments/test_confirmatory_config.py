"""RP002A stage 3: derive the frozen confirmatory configuration by the fixed rule."""

import pytest

from prereg.plugin import project_root
from prereg.rp002a import config_stage

pytestmark = pytest.mark.research_stage("confirmatory-config")


def test_derive_config(research, pytestconfig):
    config_stage.run_item(research, project_root(pytestconfig))
