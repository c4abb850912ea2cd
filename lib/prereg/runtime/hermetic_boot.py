"""The first code of a hermetic research session (run as a file: ``python -I -B THIS PATHS ARGS``).

``PATHS`` is an ``os.pathsep``-joined list of folders of the snapshot put first on
``sys.path`` (the snapshot's ``lib`` when the project is prereg's own checkout; empty
otherwise); ``ARGS`` are pytest's arguments. The script's own folder, which Python 3.9
puts on ``sys.path`` although ``-I`` is given, is taken off first; debugger breakpoints
refuse; standard input is already closed by the launcher. Nothing of prereg is imported
before pytest runs (the plugin is loaded by pytest, from the snapshot); when the session
ends, however it ends, its snapshot folder is deleted.

:data:`ENVIRONMENT_AT_START` keeps the names of the variables the process was started with,
read before anything is imported: the environment the launcher gave, which the session's
gate judges (:func:`prereg.evidence.hermetic.environment_at_start`). Libraries that set variables
when they load (sentence-transformers, scikit-learn) change ``os.environ`` later, and a
kind's gate check may load them before the gate records the execution.
"""

import os
import signal
import sys

ENVIRONMENT_AT_START = tuple(sorted(os.environ))


def _no_debugger(*args, **kwargs):
    raise RuntimeError(  # as prereg.evidence.hermetic.DEBUGGER_REFUSED, which every process of
        # the run sets once prereg's plugin is configured
        "a debugger (breakpoint(), pdb) is disabled in a research run: code typed at its prompt "
        "would run unrecorded; rehearse the stage outside a research run to debug it"
    )


def main():
    here = os.path.dirname(os.path.realpath(__file__))
    if sys.path and os.path.realpath(sys.path[0] or os.getcwd()) == here:
        del sys.path[0]
    sys.path[:0] = [entry for entry in sys.argv[1].split(os.pathsep) if entry]
    sys.breakpointhook = _no_debugger
    args = sys.argv[2:]
    # The session (not its clean listing) deletes its snapshot however it ends; a SIGTERM
    # before the controller installs its own handlers ends it through that cleanup too.
    session = not any(a.startswith("--prereg-list-items") for a in args)
    try:
        if session and os.environ.get("PREREG_SIGTERM_HANDOFF") == "1":  # hermetic.SIGTERM_HANDOFF
            # The launcher blocked SIGTERM from its snapshot on (prereg.runtime.signals
            # .hold_sigterm): one sent meanwhile is delivered here, inside the try whose
            # cleanup deletes the snapshot.
            signal.signal(signal.SIGTERM, _exit_on_signal)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        # pytest: only once sys.path is fixed above (this file's folder, which Python 3.9 puts
        # first, holds modules named like others')
        import pytest

        code = pytest.main(args)
    finally:
        if session:
            # prereg: only after the session, from the snapshot's sys.path (nothing of prereg loads
            # before pytest)
            from prereg.records import snapshot

            if os.path.basename(os.getcwd()).startswith(snapshot.PREFIX):
                snapshot.remove(os.getcwd())
    raise SystemExit(code)


def _exit_on_signal(signum, frame):
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    main()
