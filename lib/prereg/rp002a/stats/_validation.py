"""Input checks shared by the statistics core; every failure names the argument and value."""

from __future__ import annotations

import numbers

import numpy as np


class StatsInputError(ValueError):
    """An argument of a statistics function is outside its documented domain."""


class StatsTypeError(TypeError):
    """An argument of a statistics function has the wrong type."""


def check_probability(name: str, value: float) -> float:
    """Return ``value`` as float if ``0 < value < 1``; raise otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise StatsTypeError(f"{name} must be a real number in (0, 1), got {value!r}")
    value = float(value)
    if not 0.0 < value < 1.0:
        raise StatsInputError(f"{name} must lie strictly between 0 and 1, got {value!r}")
    return value


def check_fraction(name: str, value: float) -> float:
    """Return ``value`` as float if ``0 <= value <= 1``; raise otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise StatsTypeError(f"{name} must be a real number in [0, 1], got {value!r}")
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise StatsInputError(f"{name} must lie in [0, 1], got {value!r}")
    return value


def check_positive_real(name: str, value: float) -> float:
    """Return ``value`` as float if finite and ``> 0``; raise otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise StatsTypeError(f"{name} must be a positive real number, got {value!r}")
    value = float(value)
    if not (np.isfinite(value) and value > 0.0):
        raise StatsInputError(f"{name} must be finite and > 0, got {value!r}")
    return value


def check_int(name: str, value: int, minimum: int) -> int:
    """Return ``value`` as int if it is an integer ``>= minimum``; raise otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise StatsTypeError(f"{name} must be an integer >= {minimum}, got {value!r}")
    value = int(value)
    if value < minimum:
        raise StatsInputError(f"{name} must be >= {minimum}, got {value!r}")
    return value


def check_finite_array(name: str, values: object, ndim: int | None = None) -> np.ndarray:
    """Return ``values`` as a float64 array; raise if non-finite or of the wrong rank."""
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise StatsTypeError(f"{name} must be an array of real numbers, got {values!r}") from exc
    if ndim is not None and array.ndim != ndim:
        raise StatsInputError(
            f"{name} must be {ndim}-dimensional, got shape {array.shape}; reshape it"
        )
    if not np.all(np.isfinite(array)):
        raise StatsInputError(
            f"{name} contains NaN or infinite values (first at index "
            f"{tuple(int(i) for i in np.argwhere(~np.isfinite(array))[0])}); "
            "remove or repair them before computing an interval"
        )
    return array


def check_generator(name: str, rng: object) -> np.random.Generator:
    """Return ``rng`` if it is a ``numpy.random.Generator``; raise otherwise."""
    if not isinstance(rng, np.random.Generator):
        raise StatsTypeError(
            f"{name} must be a numpy.random.Generator (build it with "
            f"prereg.base.seeds.numpy_generator), got {type(rng).__name__}"
        )
    return rng
