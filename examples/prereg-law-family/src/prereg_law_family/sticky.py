"""Family ``sticky-erasure``: a hidden-Markov erasure law stated by how long a state lasts.

A plan's law spec names it with ``"family": "sticky-erasure"`` and gives ``mean_dwell``
(the expected number of steps a hidden state lasts, >= 1) in place of the shipped family's
``stay_probability``; the law is the same generator with ``stay_probability = 1 - 1 /
mean_dwell``. Fields: ``name``, ``n_states``, ``mean_dwell``, ``erasure_probability``,
``target_corruption``, optional ``erased_target`` ("corrupted" or "uniform").

A law records its family, and a stored dataset records ``law_to_spec(law)``, which gives
``stay_probability``; ``build`` accepts that form too, so a dataset written with this
family reads back to the equal law.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from prereg.rp002a.laws import ErasedTarget, HiddenMarkovLaw, LawError

FAMILY = "sticky-erasure"
_COMMON = ("name", "n_states", "erasure_probability", "target_corruption")


def build(spec: Mapping[str, Any]) -> HiddenMarkovLaw:
    """The law of ``spec`` (plan fields, see the module docstring)."""
    if spec.get("family") != FAMILY:
        raise LawError(f"family={spec.get('family')!r} is not {FAMILY!r}")
    given = [key for key in ("mean_dwell", "stay_probability") if key in spec]
    if len(given) != 1:
        raise LawError(
            f"{FAMILY} law spec {dict(spec)!r} must give mean_dwell (or, as a stored law "
            "records it, stay_probability), exactly one of them"
        )
    required = (*_COMMON, given[0])
    missing = [key for key in required if key not in spec]
    if missing:
        raise LawError(f"{FAMILY} law spec {dict(spec)!r} lacks field(s) {missing}")
    allowed = {*required, "erased_target", "family"}
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise LawError(
            f"{FAMILY} law spec for {spec.get('name')!r} has unknown field(s) {unknown}; "
            f"allowed: {sorted(allowed)}"
        )
    if given[0] == "mean_dwell":
        dwell = spec["mean_dwell"]
        if isinstance(dwell, bool) or not isinstance(dwell, (int, float)):
            raise LawError(f"mean_dwell={dwell!r} must be a number of steps >= 1")
        if not (math.isfinite(dwell) and dwell >= 1):
            raise LawError(f"mean_dwell={dwell!r} must be a finite number of steps >= 1")
        stay = 1.0 - 1.0 / float(dwell)
    else:
        stay = spec["stay_probability"]
    return HiddenMarkovLaw(
        name=spec["name"],
        n_states=spec["n_states"],
        stay_probability=stay,
        erasure_probability=spec["erasure_probability"],
        target_corruption=spec["target_corruption"],
        erased_target=spec.get("erased_target", ErasedTarget.CORRUPTED.value),
        family=FAMILY,
    )
