"""Where E04 library code reports progress: the current item's progress log, if any.

The stage sets the sink for the duration of an item (:func:`reporting_to`, with
:meth:`prereg.kinds.context.ItemContext.progress`); library code calls :func:`note`, which
does nothing outside an item (tests, benchmarks, replay). Lines the library writes
often (embedding batches) go through :class:`Throttle`, so a long loop writes a line
every :data:`INTERVAL_SECONDS` and its last one, not one per batch.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

INTERVAL_SECONDS = 10.0  # at most one throttled line per this many seconds

_SINK: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar(
    "prereg_e04_progress", default=None
)


@contextmanager
def reporting_to(sink: Callable[[str], None] | None) -> Iterator[None]:
    """Send :func:`note` lines to ``sink`` inside the block."""
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)


def active() -> bool:
    return _SINK.get() is not None


def note(message: str) -> None:
    """One progress line (nothing happens outside :func:`reporting_to`)."""
    sink = _SINK.get()
    if sink is not None:
        sink(message)


class Throttle:
    """:meth:`maybe` writes at most one line per :data:`INTERVAL_SECONDS`."""

    def __init__(self, interval: float = INTERVAL_SECONDS) -> None:
        self.interval = interval
        self.started = time.monotonic()
        self._last = self.started

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def maybe(self, message: Callable[[], str]) -> None:
        now = time.monotonic()
        if active() and now - self._last >= self.interval:
            self._last = now
            note(message())
