"""``scipy.stats``, imported when a quantile is first computed.

Importing ``scipy.stats`` takes about a second. Every process that loads an RP002A stage
kind imports this package (the launcher's and the session's gate, ``prereg approve``, the
clean listing, ``prereg audit`` and ``prereg report``), and most of them never compute a
quantile.
"""

from __future__ import annotations


def distributions():
    """The ``scipy.stats`` module (its distributions: ``beta``, ``t``, ``chi2``)."""
    # scipy.stats: heavy (about a second to import), kept off the processes that only load a kind
    from scipy import stats

    return stats
