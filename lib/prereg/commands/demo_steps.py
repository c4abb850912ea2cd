"""The stages ``prereg demo`` runs, in order, with their demo plans and prepared inputs.

:class:`DemoStep` and :data:`STEPS` live here; :mod:`prereg.commands.demo` imports them (this module
imports nothing of the demo runner). The steps are the protocols' own: each protocol
module named in :data:`PROTOCOL_DEMOS` declares its ``DEMO_STEPS``, a sequence of the
fields of a :class:`DemoStep` (mappings), and :data:`STEPS` is theirs in the table's order.
The protocols are imported by name, as :data:`prereg.kinds.stages.BUILT_IN_KINDS` names their
stage kinds, so the core imports none of their modules.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# ``module:attribute`` of each protocol's demo steps, in the order the demo runs them.
PROTOCOL_DEMOS: tuple[str, ...] = (
    "prereg.rp002a:DEMO_STEPS",
    "prereg.e04.demo_inputs:DEMO_STEPS",
)


@dataclass(frozen=True)
class DemoStep:
    """One stage of ``prereg demo`` (:func:`prereg.commands.demo.run_demo` runs a list of them)."""

    stage: str
    plan: str
    workers: int = 2
    prepare: Callable[[Path], dict[str, Path]] | None = None  # returns --input NAME=PATH pairs
    after: Callable[[Path, str], None] | None = None  # prints what the stage found


def protocol_steps(table: tuple[str, ...] = PROTOCOL_DEMOS) -> list[DemoStep]:
    """The demo steps the protocols named in ``table`` declare, in the table's order."""
    steps = []
    for target in table:
        module, _, attribute = target.partition(":")
        for fields in getattr(importlib.import_module(module), attribute):
            try:
                steps.append(DemoStep(**fields))
            except TypeError as error:
                raise TypeError(
                    f"{target}: a demo step has fields {sorted(fields)}: {error}; give it the "
                    "fields of prereg.commands.demo_steps.DemoStep (stage, plan, workers, prepare, after)"
                ) from None
    return steps


STEPS: list[DemoStep] = protocol_steps()
