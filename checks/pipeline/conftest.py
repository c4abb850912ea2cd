from __future__ import annotations

from pathlib import Path

import pytest

from prereg.rp002a.scratch import run_pipeline, scratch_clone, steps, tiny_plan


@pytest.fixture(scope="module")
def tiny_pipeline(tmp_path_factory) -> Path:
    """Every RP002A stage, end to end, on the tiny plan; the runs' repository."""
    clone = scratch_clone(tmp_path_factory.mktemp("rp002a"), tiny_plan())
    return run_pipeline(
        clone, steps("calibration", "target-variance", "confirmatory-config", "confirmatory")
    )
