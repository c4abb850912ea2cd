"""A worked prereg experiment: ridge regression (model A) against k-nearest neighbours
(model B) on seeded synthetic regression data, compared by a preregistered paired t
interval of the test-loss difference and a preregistered decision rule.

Modules: :mod:`.settings` (the plan's parameters, parsed once), :mod:`.models` (data and the
two models), :mod:`.analysis` (the interval and the decision), :mod:`.kind` (the stage kind
prereg loads by entry point: items, summary, replay, report section).
"""
