"""prereg: preregistered research stages executed as pytest collections.

One package per layer, each importing only those below it (docs/architecture.md):
:mod:`.base`, :mod:`.records`, :mod:`.evidence`, :mod:`.kinds`, :mod:`.decisions`,
:mod:`.runtime`, :mod:`.commands`; the faces :mod:`.api` (for stage kinds), :mod:`.plugin`
(pytest's), :mod:`.cli` and :mod:`.testing`; the protocols :mod:`.rp002a` and :mod:`.e04`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

__version__ = "0.1.0"

# Module paths of the release before the layer packages -> where each module is now. Code
# that imports an old path (a check file an earlier `prereg init` wrote) gets the module
# under its new name, with a DeprecationWarning; a path inside a moved package moves with
# it. Removed in the next release.
MOVED = {
    **{
        f"prereg.{m}": f"prereg.base.{m}"
        for m in (
            "arrays",
            "gitrepo",
            "hashing",
            "provenance",
            "schema",
            "seeds",
            "typed_settings",
        )
    },
    **{f"prereg.{m}": f"prereg.records.{m}" for m in ("ledger", "runs", "snapshot", "verdicts")},
    **{f"prereg.{m}": f"prereg.evidence.{m}" for m in ("envlock", "execution", "hermetic")},
    **{f"prereg.{m}": f"prereg.kinds.{m}" for m in ("context", "plans", "registry", "stages")},
    "prereg.kind_tools": "prereg.kinds.helpers",
    "prereg.report": "prereg.kinds.report",
    "prereg.report.header": "prereg.commands.report.header",
    "prereg.report.render": "prereg.commands.report.render",
    **{f"prereg.{m}": f"prereg.decisions.{m}" for m in ("approval", "audit", "gate", "manifest")},
    "prereg.requirements": "prereg.decisions.bindings",
    **{f"prereg.{m}": f"prereg.runtime.{m}" for m in ("eta", "hermetic_boot", "remote")},
    "prereg.options": "prereg.runtime.option_policy",
    **{f"prereg.{m}": f"prereg.commands.{m}" for m in ("demo", "demo_steps", "scaffold", "status")},
    "prereg.stats": "prereg.rp002a.stats",
}


def moved_to(name: str) -> str | None:
    """Where the module an old path ``name`` names is now, or None if it did not move."""
    head, rest = name, ""
    while head not in MOVED:
        if "." not in head:
            return None
        head, _, last = head.rpartition(".")
        rest = f".{last}{rest}"
    return MOVED[head] + rest


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module path as the module at its new one (:data:`MOVED`)."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("prereg.") or moved_to(fullname) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        new = moved_to(spec.name)
        warnings.warn(
            f"{spec.name} is {new} now; import that (the old path goes in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(new)

    def exec_module(self, module):
        """The module is the one at the new path, already executed."""


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedModules())
