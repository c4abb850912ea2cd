"""The stage's parameters, parsed once into frozen typed settings (errors name the field)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# Every field the stage's "parameters" hold, by section; any other field is refused.
FIELDS = {
    "replicates": None,
    "data": ("n_train", "n_test", "n_features", "noise_sd", "amplitude", "frequency"),
    "ridge": ("penalty",),
    "knn": ("neighbours",),
    "analysis": ("confidence",),
}


@dataclass(frozen=True)
class Settings:
    """One stage of kind ``paired-models.compare``, as its plan entry states it."""

    stage: str
    seed_namespace: str
    replicates: int  # dataset replicates, one item each (>= 2: the interval needs an SD)
    n_train: int  # training points per replicate
    n_test: int  # test points per replicate (the loss is their mean squared error)
    n_features: int  # standard normal features
    noise_sd: float  # SD of the Gaussian noise added to the signal
    amplitude: float  # signal: amplitude * sum_j sin(frequency * x_j)
    frequency: float
    penalty: float  # ridge: the L2 penalty on the centred least-squares fit (>= 0)
    neighbours: int  # k-nearest neighbours: k (1 <= k <= n_train)
    confidence: float  # of the two-sided paired t interval, in (0, 1)


class SettingsError(ValueError):
    """The stage's plan entry is not a valid ``paired-models.compare`` stage."""


def _mapping(value: Any, where: str, names) -> dict:
    if not isinstance(value, dict):
        raise SettingsError(f"{where} must be an object, got {type(value).__name__}")
    unknown = sorted(set(value) - set(names))
    missing = sorted(set(names) - set(value))
    if unknown:
        raise SettingsError(f"{where}: unknown field(s) {unknown}; the fields are {sorted(names)}")
    if missing:
        raise SettingsError(f"{where}: missing field(s) {missing}")
    return value


def _count(value: Any, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SettingsError(f"{where} must be an integer, got {value!r}")
    if value < minimum:
        raise SettingsError(f"{where} must be >= {minimum}, got {value}")
    return value


def _number(value: Any, where: str, *, minimum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SettingsError(f"{where} must be a finite number, got {value!r}")
    if minimum is not None and value < minimum:
        raise SettingsError(f"{where} must be >= {minimum}, got {value}")
    return float(value)


def parse_settings(plan: dict, stage: str) -> Settings:
    """The typed settings of ``stage`` in the plan data ``plan`` (a ``SettingsError``, which
    is a ``ValueError``, names the field on bad input)."""
    try:
        spec = plan["stages"][stage]
    except (KeyError, TypeError):
        raise SettingsError(f"the plan has no stage {stage!r}") from None
    where = f"stages.{stage}.parameters"
    namespace = spec.get("seed_namespace")
    if not isinstance(namespace, str) or not namespace:
        raise SettingsError(f"stages.{stage}.seed_namespace must name a namespace (not null)")
    params = _mapping(spec.get("parameters"), where, FIELDS)
    sections = {
        name: _mapping(params[name], f"{where}.{name}", fields)
        for name, fields in FIELDS.items()
        if fields is not None
    }
    data, analysis = sections["data"], sections["analysis"]
    n_train = _count(data["n_train"], f"{where}.data.n_train", 1)
    neighbours = _count(sections["knn"]["neighbours"], f"{where}.knn.neighbours", 1)
    if neighbours > n_train:
        raise SettingsError(
            f"{where}.knn.neighbours ({neighbours}) exceeds {where}.data.n_train ({n_train})"
        )
    confidence = _number(analysis["confidence"], f"{where}.analysis.confidence")
    if not 0 < confidence < 1:
        raise SettingsError(f"{where}.analysis.confidence must lie in (0, 1), got {confidence}")
    return Settings(
        stage=stage,
        seed_namespace=namespace,
        replicates=_count(params["replicates"], f"{where}.replicates", 2),
        n_train=n_train,
        n_test=_count(data["n_test"], f"{where}.data.n_test", 1),
        n_features=_count(data["n_features"], f"{where}.data.n_features", 1),
        noise_sd=_number(data["noise_sd"], f"{where}.data.noise_sd", minimum=0),
        amplitude=_number(data["amplitude"], f"{where}.data.amplitude"),
        frequency=_number(data["frequency"], f"{where}.data.frequency"),
        penalty=_number(sections["ridge"]["penalty"], f"{where}.ridge.penalty", minimum=0),
        neighbours=neighbours,
        confidence=confidence,
    )
