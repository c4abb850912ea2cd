"""Reports an auditor reads: one self-contained HTML page per run, and an index of all runs.

``prereg report runs/<run-id>`` writes ``runs/reports/<run-id>.html``; ``prereg runs`` lists
every run (``--json`` for scripts). Stage results come from the stage kind's own renderer
(``StageKind.render``; :mod:`prereg.kinds.report.sections`); an incomplete run shows its failure
record and never a complete-stage aggregate. :mod:`.render` writes the pages,
:mod:`.header` draws what every page shows above the stage's section.
"""
