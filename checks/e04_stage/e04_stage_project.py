"""Shared by the E04 stage checks (not a test module): the scratch E04 project lives in
:mod:`prereg.e04.scratch`, so other check folders can drive it too."""

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
