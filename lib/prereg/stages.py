"""Stage kinds: what a stage computes beyond its items.

A stage's plan entry names a kind. A kind validates the stage's parameters, may
check the inputs an approval binds, writes the complete-stage summary on the
controller once every item passed, and replays the stage for the auditor.

The project's own kinds are listed in :data:`BUILT_IN_KINDS`, tracked code and the one
home of that mapping: :func:`load_kind` resolves them there first, so no package metadata
(an ignored ``lib/prereg.egg-info`` included) can point them at other code. A user's own
package adds other kinds under the entry-point group ``prereg.stage_kinds``; those are
read only from distributions installed in site-packages whose module is a file listed,
with a matching hash, in the distribution's RECORD (a recorded package version; an
editable install does not qualify). :func:`register_kind` adds one in-process (tests).
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import importlib.metadata
import os
import sys
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

# The project's own kinds: name -> "module:attribute" (tracked code, imported on first use).
BUILT_IN_KINDS: dict[str, str] = {
    "rp002a.calibration": "prereg.rp002a.calibration_stage:KIND",
    "rp002a.target-variance": "prereg.rp002a.variance_stage:KIND",
    "rp002a.confirmatory-config": "prereg.rp002a.config_stage:KIND",
    "rp002a.confirmatory": "prereg.rp002a.confirmatory_stage:KIND",
    "e04.robustness": "prereg.e04.stage:KIND",
}

_registered: dict[str, StageKind] = {PLAIN.name: PLAIN}
# Where each kind loaded from an installed distribution came from (see kind_origin).
_origins: dict[str, dict] = {}


class UnknownStageKind(LookupError):
    pass


def register_kind(kind: StageKind) -> None:
    if kind.name in BUILT_IN_KINDS or kind.name == PLAIN.name:
        raise ValueError(f"stage kind {kind.name!r} is built in; register another name")
    _registered[kind.name] = kind


def _built_in(name: str) -> StageKind:
    module, attribute = BUILT_IN_KINDS[name].split(":")
    kind = getattr(importlib.import_module(module), attribute)
    if not isinstance(kind, StageKind) or kind.name != name:
        raise UnknownStageKind(
            f"built-in stage kind {name!r}: {BUILT_IN_KINDS[name]} is not StageKind {name!r}"
        )
    return kind


def _installed_point(name: str):
    """(entry point, label, module file) for ``name`` from site-packages, or the reasons not."""
    from prereg.execution import site_dirs

    reasons = []
    for dist in importlib.metadata.distributions(path=site_dirs()):
        for point in dist.entry_points:
            if point.group != ENTRY_POINT_GROUP or point.name != name:
                continue
            label = f"{dist.metadata['Name']} {dist.version}"
            module = point.value.split(":", 1)[0].strip()
            wanted = {f"{module.replace('.', '/')}.py", f"{module.replace('.', '/')}/__init__.py"}
            files = [f for f in dist.files or () if f.as_posix() in wanted]
            if not files:
                reasons.append(
                    f"{label} declares it as {point.value}, but its RECORD does not list module "
                    f"{module} (an editable install? install the package normally)"
                )
                continue
            path = os.path.realpath(dist.locate_file(files[0]))
            recorded = files[0].hash
            if recorded is None or recorded.mode != "sha256":
                reasons.append(f"{label}: RECORD gives no SHA-256 of {path}; reinstall {label}")
                continue
            digest = hashlib.sha256(Path(path).read_bytes()).digest()
            if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != recorded.value:
                reasons.append(f"{label}: {path} differs from the RECORD of {label}; reinstall it")
                continue
            return point, label, path
    return reasons


def load_kind(name: str) -> StageKind:
    if name in BUILT_IN_KINDS:
        return _built_in(name)  # never _registered: built-in kinds have one home
    if name in _registered:
        return _registered[name]
    found = _installed_point(name)
    if isinstance(found, list):
        known = sorted(set(_registered) | set(BUILT_IN_KINDS))
        why = f" ({'; '.join(found)})" if found else ""
        raise UnknownStageKind(
            f"stage kind {name!r} is not built in nor installed{why}; known kinds: {known} "
            f"(a package installed in site-packages adds one under the entry-point group "
            f"{ENTRY_POINT_GROUP!r})"
        )
    point, label, path = found
    kind = point.load()
    module = sys.modules.get(point.value.split(":", 1)[0].strip())
    loaded = os.path.realpath(getattr(module, "__file__", "") or "")
    if loaded != path or not isinstance(kind, StageKind) or kind.name != name:
        raise UnknownStageKind(
            f"stage kind {name!r} from {label}: {point.value} loaded from {loaded}, not the "
            f"recorded {path}, or is not StageKind {name!r}"
        )
    _registered[name] = kind
    _origins[name] = {"distribution": label, "entry_point": point.value, "file": path}
    return kind


def kind_origin(name: str) -> dict:
    """Where kind ``name`` comes from: built in, registered in-process, or a distribution."""
    if name in BUILT_IN_KINDS:
        return {"built_in": BUILT_IN_KINDS[name]}
    if name == PLAIN.name:
        return {"built_in": f"{__name__}:PLAIN"}
    return _origins.get(name, {"registered": True})
