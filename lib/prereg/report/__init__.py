"""Reports an auditor reads: one self-contained HTML page per run, and an index of all runs.

``prereg report runs/<run-id>`` writes ``runs/reports/<run-id>.html``; ``prereg runs`` lists
every run (``--json`` for scripts). Stage results come from the stage kind's own renderer
(``StageKind.render``; :mod:`prereg.report.sections`); an incomplete run shows its failure
record and never a complete-stage aggregate.
"""

from __future__ import annotations

from prereg.report.model import RunRecord, load_run
from prereg.report.render import (
    every_run,
    index_rows,
    render_index,
    render_report,
    report_path,
    reports_dir,
    write_index,
    write_report,
)
from prereg.report.sections import SectionContext, section_for

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
