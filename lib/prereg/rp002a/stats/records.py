"""Stable serialisation and exact replay of calibration results.

``to_record(result)`` gives plain JSON types only (dict, list, str, int, float,
bool, None; NaN and infinities become None; keys in a fixed order), with the
reproducible figures under ``"cell"``, ``"settings"`` and ``"figures"`` and,
for benchmark cells, CPU time apart under ``"non_reproducible"``.
``trial_arrays(result)`` gives the per-trial diagnostics as numpy arrays (for
``numpy.savez``). ``replay_differences`` recomputes a cell from its record's
inputs with a freshly built generator and lists every difference.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping

import numpy as np

from prereg.rp002a.stats._validation import StatsTypeError
from prereg.rp002a.stats.calibration import (
    CalibrationSettings,
    SimulationCell,
    SimulationCellResult,
    run_simulation_cell,
)
from prereg.rp002a.stats.calibration_bootstrap import (
    BootstrapCell,
    BootstrapCellResult,
    BootstrapSettings,
    run_bootstrap_cell,
)

__all__ = ["RECORD_VERSION", "replay_differences", "to_record", "trial_arrays"]

#: Bump when the record layout changes.
RECORD_VERSION = "stats-calibration-record-1"


def _plain(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, str):
        return value
    raise StatsTypeError(f"cannot serialise {type(value).__name__} value {value!r}")


def to_record(result: SimulationCellResult | BootstrapCellResult) -> dict:
    """Plain-JSON record of a simulation or benchmark cell result (see module docstring)."""
    if isinstance(result, SimulationCellResult):
        kind, figures = "simulation", result.procedures
        extra: dict = {}
    elif isinstance(result, BootstrapCellResult):
        kind, figures = "bootstrap", result.methods
        extra = {"non_reproducible": {"cpu_seconds": _plain(result.cpu_seconds)}}
    else:
        raise StatsTypeError(
            f"result must be a SimulationCellResult or BootstrapCellResult, got "
            f"{type(result).__name__}"
        )
    return {
        "record_version": RECORD_VERSION,
        "kind": kind,
        "cell": _plain(result.cell),
        "settings": _plain(result.settings),
        "figures": _plain(figures),
        "trial_arrays": sorted(result.trial_diagnostics),
        **extra,
    }


def trial_arrays(result: SimulationCellResult | BootstrapCellResult) -> dict[str, np.ndarray]:
    """Per-trial diagnostics as a dict of numpy arrays (copies), keys sorted."""
    return {k: np.array(result.trial_diagnostics[k]) for k in sorted(result.trial_diagnostics)}


def _rebuild(record: Mapping) -> tuple[Callable, object, object]:
    if record.get("kind") == "simulation":
        settings = dict(record["settings"])
        settings["width_quantiles"] = tuple(settings["width_quantiles"])
        return (
            run_simulation_cell,
            SimulationCell(**record["cell"]),
            CalibrationSettings(**settings),
        )
    if record.get("kind") == "bootstrap":
        return (
            run_bootstrap_cell,
            BootstrapCell(**record["cell"]),
            BootstrapSettings(**record["settings"]),
        )
    raise StatsTypeError(
        f"record kind must be 'simulation' or 'bootstrap', got {record.get('kind')!r}"
    )


def replay_differences(
    record: Mapping, arrays: Mapping[str, np.ndarray], rng: np.random.Generator
) -> list[str]:
    """Recompute a cell from its record's inputs and list every difference.

    Parameters
    ----------
    record : mapping
        A :func:`to_record` output (possibly after a JSON round trip).
    arrays : mapping str -> numpy.ndarray
        The matching :func:`trial_arrays` output.
    rng : numpy.random.Generator
        A fresh generator built from the cell's recorded seed derivation.

    Returns
    -------
    list of str
        Empty if the recomputed record (except ``non_reproducible``) and every
        per-trial array are identical (``numpy.array_equal`` with equal dtypes).
    """
    run, cell, settings = _rebuild(record)
    again = run(cell, settings, rng)
    fresh = to_record(again)
    differences = []
    for key in ("record_version", "kind", "cell", "settings", "figures", "trial_arrays"):
        if fresh[key] != record.get(key):
            differences.append(f"record field {key!r} differs on replay")
    fresh_arrays = trial_arrays(again)
    for key in sorted(set(fresh_arrays) | set(arrays)):
        if key not in arrays or key not in fresh_arrays:
            differences.append(f"trial array {key!r} present on one side only")
        elif fresh_arrays[key].dtype != np.asarray(arrays[key]).dtype or not np.array_equal(
            fresh_arrays[key], arrays[key]
        ):
            differences.append(f"trial array {key!r} differs on replay")
    return differences
