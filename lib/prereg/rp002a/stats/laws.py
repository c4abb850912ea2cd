"""Centred unit-variance synthetic laws of the RP002A calibration.

=========  =====================================  =========================
name       draw                                   source of the moments
=========  =====================================  =========================
normal     Z ~ N(0, 1)                            --
gamma2     (G - 2) / sqrt(2),  G ~ Gamma(2, 1)    E G = Var G = shape = 2
t5         T * sqrt(3 / 5),    T ~ Student-t(5)   Var T = df / (df - 2) = 5/3
=========  =====================================  =========================

The name carries the law's parameter (protocol: "Gamma(shape=2) and
Student-t(df=5) effects"); the plan names laws, it does not restate the shape.
Each law consumes the generator exactly as the single numpy call in its row.
"""

from __future__ import annotations

import numpy as np

from prereg.rp002a.stats._validation import StatsInputError, check_generator

__all__ = ["LAW_NAMES", "standardized_draws"]

LAW_NAMES = ("normal", "gamma2", "t5")


def standardized_draws(law: str, rng: np.random.Generator, size: tuple[int, ...]) -> np.ndarray:
    """Draw a float64 array of shape ``size`` from a centred unit-variance law.

    Parameters
    ----------
    law : {"normal", "gamma2", "t5"}
    rng : numpy.random.Generator
    size : tuple of int

    Returns
    -------
    numpy.ndarray
        Draws with mean 0 and variance 1 (see the module table).

    Notes
    -----
    ``gamma2`` uses ``rng.standard_gamma(2.0, size)``; ``t5`` uses
    ``rng.standard_t(5, size)``; ``normal`` uses ``rng.standard_normal(size)``.
    """
    check_generator("rng", rng)
    if law == "normal":
        return rng.standard_normal(size)
    if law == "gamma2":
        draws = rng.standard_gamma(2.0, size)
        draws -= 2.0
        draws /= np.sqrt(2.0)
        return draws
    if law == "t5":
        draws = rng.standard_t(5, size)
        draws *= np.sqrt(3.0 / 5.0)
        return draws
    raise StatsInputError(f"law must be one of {LAW_NAMES}, got {law!r}")
