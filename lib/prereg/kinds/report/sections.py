"""Stage sections of a report: each stage kind renders its own.

A renderer takes a :class:`SectionContext` of a *complete* run and returns an HTML
fragment built from the run's complete-stage summary. It is never called for an
incomplete run (such a run shows no aggregate). A kind's renderer is its
:attr:`prereg.kinds.stages.StageKind.render`, found with :func:`prereg.kinds.stages.load_kind`: the
project's kinds name theirs, and a user's installed kind carries its own. A kind that is
unknown here, or has no ``render``, gets the header-and-items report alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from prereg.base.hashing import read_json
from prereg.kinds.report.model import RunRecord
from prereg.kinds.stages import StageKind, UnknownStageKind, load_kind


@dataclass(frozen=True)
class SectionContext:
    """What a stage renderer sees: the run, its plan at the run's commit, its folder."""

    root: Path
    record: RunRecord
    plan: dict | None
    kind: str

    @property
    def summary_dir(self) -> Path:
        return self.record.files.summary_dir

    def summary_json(self, name: str) -> dict:
        return read_json(self.summary_dir / name, what=f"summary file of {self.record.run_id}")

    def has_summary(self, name: str) -> bool:
        return (self.summary_dir / name).is_file()


SectionRenderer = Callable[[SectionContext], str]


def kind_named(kind: str | None) -> StageKind | None:
    """The stage kind named ``kind``, or None when the run names none or the kind is unknown
    here (its report then shows header and items only)."""
    if kind is None:
        return None
    try:
        return load_kind(kind)
    except UnknownStageKind:
        return None


def section_for(kind: str | None) -> SectionRenderer | None:
    """A stage kind's ``render``, or None when the kind is unknown here or gives none."""
    found = kind_named(kind)
    return found.render if found is not None else None
