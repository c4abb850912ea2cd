"""Stage kinds: what a stage computes beyond its items.

A stage's plan entry names a kind. A kind validates the stage's parameters, may
check the inputs an approval binds, writes the complete-stage summary on the
controller once every item passed, and replays the stage for the auditor. Kinds are
found by name in the entry-point group ``prereg.stage_kinds`` (``pyproject.toml``), so a
user's own package can add one; :func:`register_kind` adds one in-process (tests).
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from prereg.hashing import read_json

ENTRY_POINT_GROUP = "prereg.stage_kinds"


@dataclass(frozen=True)
class RunView:
    """A run directory as the summary and replay functions see it."""

    root: Path  # repository root
    run_dir: Path
    plan: object  # prereg.plans.Plan
    stage: str
    items: tuple[dict, ...]  # per-item manifest records, in node-id order

    @property
    def parameters(self) -> dict:
        return self.plan.stage(self.stage)["parameters"]

    @property
    def approval(self) -> dict:
        """The approval record this run started under (its copy in the run folder)."""
        return read_json(self.run_dir / "approval.json", what="approval copy")

    def required_run(self, stage: str) -> Path:
        return self.run_dir.parent / self.approval["requires"][stage]["run_id"]

    @property
    def summary_dir(self) -> Path:
        return self.run_dir / "summary"

    def item_dir(self, item: dict) -> Path:
        return self.run_dir / "items" / item["output_dir"]

    def load_item_json(self, item: dict, name: str) -> dict:
        return read_json(self.item_dir(item) / name, what=f"output of {item['nodeid']}")


def _no_check(plan: object, stage: str) -> None:
    return None


@dataclass(frozen=True)
class StageKind:
    name: str
    validate: Callable[[object, str], None] = _no_check
    check_inputs: Callable[[object, str, dict[str, Path]], None] | None = None
    # Checked by the gate and by prereg approve: (root, plan, stage, approval record data) ->
    # problems; e.g. the confirmatory stage refuses when the frozen config forbids confirmation.
    gate_check: Callable[[Path, object, str, dict], list[str]] | None = None
    summarise: Callable[[RunView], None] | None = None
    replay: Callable[[RunView], list[str]] | None = None
    doc: str = field(default="")


PLAIN = StageKind(name="plain", doc="items only: no summary, audit by hashes alone")

_registered: dict[str, StageKind] = {PLAIN.name: PLAIN}


class UnknownStageKind(LookupError):
    pass


def register_kind(kind: StageKind) -> None:
    _registered[kind.name] = kind


def load_kind(name: str) -> StageKind:
    if name in _registered:
        return _registered[name]
    points = {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    if name not in points:
        known = sorted(set(_registered) | set(points))
        raise UnknownStageKind(
            f"stage kind {name!r} is not registered; known kinds: {known} "
            f"(a package adds one under the entry-point group {ENTRY_POINT_GROUP!r})"
        )
    kind = points[name].load()
    _registered[name] = kind
    return kind
