"""Run ids and markers of the throw-away runs that conftest.py makes (importable by name)."""

COMPLETE = "calibration-20261130-001"
INCOMPLETE = "calibration-20261130-002"
KILLED = "calibration-20261130-003"
FAILING_CELL = "n20-t5-rho0-f1"
FAILURE_MESSAGE = "simulated failure of one calibration cell"
