"""Reports an auditor reads: one self-contained HTML page per run, and an index of all runs.

``prereg report runs/<run-id>`` writes ``runs/reports/<run-id>.html``; ``prereg runs`` lists
every run (``--json`` for scripts). Stage results come from the stage kind's own renderer
(``StageKind.render``; :mod:`prereg.report.sections`); an incomplete run shows its failure
record and never a complete-stage aggregate.
"""

from __future__ import annotations

import importlib

# name -> the module of this package that defines it, imported on first use: a stage kind
# that draws a section with prereg.report.html loads neither the page renderer nor the audit.
_HOME = {
    "RunRecord": "model",
    "load_run": "model",
    "every_run": "render",
    "index_rows": "render",
    "render_index": "render",
    "render_report": "render",
    "report_path": "render",
    "reports_dir": "render",
    "write_index": "render",
    "write_report": "render",
    "SectionContext": "sections",
    "section_for": "sections",
}

__all__ = [
    "RunRecord",
    "SectionContext",
    "every_run",
    "index_rows",
    "load_run",
    "render_index",
    "render_report",
    "report_path",
    "reports_dir",
    "section_for",
    "write_index",
    "write_report",
]


def __getattr__(name: str):  # the names of __all__, each from its module
    if name in _HOME:
        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
