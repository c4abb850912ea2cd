"""The statistics core: pure functions, no I/O, nothing of the project imported.

Modules: :mod:`.intervals` (paired replicate-mean t intervals), :mod:`.decisions`
(benefit / equivalence / indeterminate / analysis-failure), :mod:`.binomial`
(Clopper-Pearson, Monte Carlo SE), :mod:`.planning` (fixed sample-count rule),
:mod:`.bootstrap` (whole-cluster and nested percentile bootstrap), :mod:`.laws`
(synthetic laws), :mod:`.calibration` (simulation cells, eligibility),
:mod:`.calibration_bootstrap` (bootstrap benchmark cells) and :mod:`.records`
(JSON records, per-trial arrays, exact replay).
"""

from __future__ import annotations

from prereg.rp002a.stats._validation import StatsInputError, StatsTypeError

__all__ = ["StatsInputError", "StatsTypeError"]
