"""The E04 project fixtures (the scratch project itself is :mod:`support.e04_project`; the
synthetic fixture they use is the session's shared ``e04_fixture`` of checks/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from prereg.e04.synthetic import SyntheticFixture
from support.e04_project import E04Project, check_plan, make_project


@pytest.fixture(scope="session")
def e04_runs(tmp_path_factory: pytest.TempPathFactory, e04_fixture: SyntheticFixture):
    """One project, two complete runs of the stage: serial (001) and on two workers (002)."""
    project = make_project(tmp_path_factory.mktemp("e04project") / "p", e04_fixture, check_plan())
    results = {}
    for run_id, args in (("e04-20260101-001", ()), ("e04-20260101-002", ("-n", "2"))):
        project.approve(run_id)
        results[run_id] = project.pytest("--research-stage=e04", "--run-id", run_id, *args)
    return project, results


@pytest.fixture
def e04_project(tmp_path: Path, e04_fixture: SyntheticFixture) -> E04Project:
    return make_project(tmp_path / "p", e04_fixture, check_plan())
