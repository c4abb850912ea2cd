"""What a research item sees: its plan parameters, seeds, output folder and budget."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from pathlib import Path

from prereg.base import seeds
from prereg.kinds.stages import load_kind


class BudgetExceeded(RuntimeError):
    """The stage's wall-time budget ran out; the stage ends incomplete, outputs kept.

    The one class of it: the plugin recognises it, and RP002A training raises it between
    two epochs with the epochs completed so far.

    Attributes
    ----------
    trace : tuple
        Work completed before the deadline check failed (training: its epoch records).
    deadline : float or None
        The deadline that was exceeded, when the raiser knows it.
    """

    def __init__(self, message: str, *, trace: tuple = (), deadline: float | None = None):
        super().__init__(message)
        self.trace = tuple(trace)
        self.deadline = deadline


class SeedNamespaceMissing(RuntimeError):
    pass


@dataclass
class ItemContext:
    """Handed to an experiment by the ``research`` fixture.

    Every seed drawn through :meth:`seed` (or the generator helpers) is recorded with its
    derivation string, and :meth:`coords` records the cell's coordinates; both go into the
    item's manifest record.
    """

    stage: str
    run_id: str
    plan: dict
    outputs: Path
    seed_namespace: str | None
    deadline: float | None  # wall-clock (time.time()) deadline when the budget is enforced
    inputs: dict[str, Path] = field(default_factory=dict)  # bound by the approval (--input)
    required_runs: dict[str, Path] = field(default_factory=dict)  # stage -> run folder consumed
    progress_log: Path | None = None  # runs/progress/<run-id>.log, outside the hashed run folder
    # A rehearsal's folder (runs/rehearsals/<name>/), None in a run: state a run shares with
    # later runs (a cache) goes here in a rehearsal, never where a run would read it.
    rehearsal: Path | None = None
    record: dict = field(default_factory=dict)

    @property
    def parameters(self) -> dict:
        """The stage's own parameters from the plan."""
        return self.plan["stages"][self.stage]["parameters"]

    @property
    def shared(self) -> dict:
        """The plan's parameters shared between stages."""
        return self.plan.get("parameters", {})

    @functools.cached_property
    def settings(self) -> object:
        """The stage kind's typed settings of this stage, parsed once per item."""
        kind = load_kind(self.plan["stages"][self.stage]["kind"])
        if kind.settings is None:
            raise TypeError(f"stage kind {kind.name!r} defines no settings")
        return kind.settings(self.plan, self.stage)

    def coords(self, **coordinates: object) -> None:
        self.record.setdefault("coords", {}).update(coordinates)

    def seed(self, *coords: object) -> int:
        if self.seed_namespace is None:
            raise SeedNamespaceMissing(
                f"stage {self.stage} has no seed_namespace in its plan but asked for a seed"
            )
        value = seeds.seed(self.seed_namespace, *coords)
        derivations = self.record.setdefault("seeds", [])
        text = seeds.derivation(self.seed_namespace, *coords)
        if text not in derivations:
            derivations.append(text)
        return value

    def numpy_generator(self, *coords: object):
        self.seed(*coords)
        return seeds.numpy_generator(self.seed_namespace, *coords)

    def torch_generator(self, *coords: object):
        self.seed(*coords)
        return seeds.torch_generator(self.seed_namespace, *coords)

    def progress(self, message: str) -> None:
        """Append one line to the run's progress log (``tail -f`` it during long runs)."""
        if self.progress_log is None:
            return
        stamp = time.strftime("%H:%M:%S")
        with open(self.progress_log, "a", encoding="utf-8") as handle:
            handle.write(f"{stamp} {self.record.get('output_dir', '?')}: {message}\n")

    def check_budget(self) -> None:
        if self.deadline is not None and time.time() > self.deadline:
            raise BudgetExceeded(
                f"stage {self.stage} passed its wall-time budget; run {self.run_id} ends incomplete"
            )
