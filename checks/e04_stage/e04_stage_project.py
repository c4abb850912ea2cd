"""Not a test module: the scratch E04 project lives in :mod:`prereg.e04.scratch`, which the
checks import directly. Kept only for checks/report/test_report_stages.py, which loads this
file by its path; it can import prereg.e04.scratch instead and this file can then go."""

from prereg.e04.scratch import (
    CODE_REVISION,
    PROJECT,
    TASKS,
    E04Project,
    check_plan,
    make_fixture,
    make_project,
)

__all__ = [
    "CODE_REVISION",
    "PROJECT",
    "TASKS",
    "E04Project",
    "check_plan",
    "make_fixture",
    "make_project",
]
