"""The controller's one-line summary of each finished item, with an ETA (no pytest here).

``Controller.pytest_runtest_logreport`` calls :func:`finished_line` when an item's last
report arrives (teardown, or xdist's report of a crashed worker) and writes the line to
the terminal (through pytest's terminal reporter, so it shows with and without ``-n``)
and to the run's progress log. The ETA assumes the items left take the mean wall time
per finished item so far (elapsed since the start divided by items finished, which
already accounts for parallel workers).
"""

from __future__ import annotations

import time
from pathlib import Path

PREFIX = "prereg item"


def duration(seconds: float) -> str:
    """``seconds`` as ``42 s``, ``3 min 05 s`` or ``2 h 07 min``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def eta_seconds(done: int, total: int, elapsed: float) -> float | None:
    """Seconds left at the mean pace so far; None before the first item or past the end."""
    if done <= 0 or total <= 0 or done > total:
        return None
    return elapsed / done * (total - done)


def finished_line(
    *, nodeid: str, outcome: str, seconds: float, done: int, total: int, elapsed: float
) -> str:
    """``prereg item 12/135 passed test_cell[T01-H000-s0] in 3.2 s; 1 min 10 s elapsed, ETA
    ...``."""
    name = nodeid.rsplit("::", 1)[-1]
    left = eta_seconds(done, total, elapsed)
    if left is None:
        tail = ""
    elif done >= total:
        tail = ", all items finished"
    else:
        finish = time.strftime("%H:%M:%S", time.localtime(time.time() + left))
        tail = f", ETA {duration(left)} (about {finish})"
    return (
        f"{PREFIX} {done}/{total} {outcome} {name} in {seconds:.1f} s; "
        f"{duration(elapsed)} elapsed{tail}"
    )


def append(log: Path, line: str) -> None:
    """Append ``line`` with a timestamp to the progress log; a failing log is not fatal."""
    try:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"{time.strftime('%H:%M:%S')} controller: {line}\n")
    except OSError:
        pass
