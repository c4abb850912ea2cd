"""Stage sections of a report: one small renderer per stage kind.

A renderer takes a :class:`SectionContext` of a *complete* run and returns an HTML
fragment built from the run's complete-stage summary. It is never called for an
incomplete run (such a run shows no aggregate). The built-in renderers are imported
lazily by kind name; :func:`register_section` adds or replaces one in-process (a user's
own stage kind, or a test).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from prereg.hashing import read_json
from prereg.report.model import RunRecord


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

# kind name -> "module:function" of the built-in renderers (imported on first use)
BUILTIN = {
    "rp002a.calibration": "prereg.report.calibration:render_calibration",
    "rp002a.target-variance": "prereg.report.rp002a:render_target_variance",
    "rp002a.confirmatory-config": "prereg.report.rp002a:render_confirmatory_config",
    "rp002a.confirmatory": "prereg.report.rp002a:render_confirmatory",
    "e04.robustness": "prereg.report.e04:render_e04",
}

_registered: dict[str, SectionRenderer] = {}


def register_section(kind: str, renderer: SectionRenderer) -> None:
    """Use ``renderer`` for complete runs of stage kind ``kind``."""
    if not callable(renderer):
        raise TypeError(f"renderer for kind {kind!r} must be callable, got {renderer!r}")
    _registered[kind] = renderer


def section_for(kind: str | None) -> SectionRenderer | None:
    """The renderer of a stage kind, or None when the kind has none (header and items only)."""
    if kind is None:
        return None
    if kind in _registered:
        return _registered[kind]
    target = BUILTIN.get(kind)
    if target is None:
        return None
    module, _, name = target.partition(":")
    renderer = getattr(importlib.import_module(module), name)
    _registered[kind] = renderer
    return renderer
