"""Signal handling of a research run: SIGTERM, SIGHUP and SIGXCPU (a CPU-time limit
reached, as a batch scheduler's ``ulimit -t`` sends it before SIGKILL) end it as an
interruption (the manifest is written), and while the manifest is written every ending
signal is noted, not obeyed."""

from __future__ import annotations

import signal

# Signals that end a run from outside; each ends it as an interruption, manifest written.
ENDING_SIGNALS = ("SIGTERM", "SIGHUP", "SIGXCPU")


def install_signal_handlers() -> dict:
    """Each of :data:`ENDING_SIGNALS` raises KeyboardInterrupt naming itself; returns what to
    restore.

    A signal the run was started ignoring stays ignored: ``nohup pytest --research-stage=...``
    asks that a closed terminal (SIGHUP) not end the run."""
    saved = {}
    for name in ENDING_SIGNALS:
        number = getattr(signal, name, None)
        if number is not None and signal.getsignal(number) is not signal.SIG_IGN:
            saved[number] = signal.signal(number, _raise_keyboard_interrupt)
    return saved


def hold_sigterm() -> None:
    """From a launcher's snapshot to its session: SIGTERM is blocked, so one that arrives is
    kept pending across ``exec`` until the session's boot, having taken SIGTERM, unblocks it
    (:func:`release_sigterm`) and ends there, deleting the snapshot. Released earlier (the
    launcher stops before its session), it raises KeyboardInterrupt naming itself."""
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def release_sigterm() -> None:
    """Unblock SIGTERM: one held meanwhile is delivered now."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt(f"{signal.Signals(signum).name} received (signal {signum})")


def defer_signals(late: list[str]) -> dict:
    """While the manifest is written, SIGINT and :data:`ENDING_SIGNALS` are noted, not obeyed."""

    def note(signum, frame):
        late.append(
            f"{signal.Signals(signum).name} arrived while the manifest was written; noted, not obeyed"
        )

    saved = {}
    for name in ("SIGINT", *ENDING_SIGNALS):
        number = getattr(signal, name, None)
        if number is not None:
            try:
                saved[number] = signal.signal(number, note)
            except ValueError:  # not the main thread: nothing to defer
                pass
    return saved


def restore_signals(saved: dict) -> None:
    for number, handler in saved.items():
        try:
            signal.signal(number, signal.SIG_DFL if handler is None else handler)
        except ValueError:
            pass
