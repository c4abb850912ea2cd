"""The audit's replay process (run as a file: ``python -I -B THIS PATHS REQUEST RESULT``).

``PATHS`` is an ``os.pathsep``-joined list of folders of a snapshot of the run's source
commit, put first on ``sys.path`` before anything of prereg is imported: the stage kind
(and, when the project is prereg's own checkout, prereg itself) is the code the run ran,
not the code the checkout holds now. ``REQUEST`` is a JSON file naming the run
(:func:`prereg.decisions.replay.request`); the process writes ``RESULT``, a JSON object:

- ``{"unavailable": why}``: the stage kind cannot be loaded from that code;
- ``{"findings": null, ...}``: the kind has no replay;
- ``{"findings": [...], ...}``: what the replay found (``failed``: why it stopped, if it did);

each with ``"prereg"``, the file of the prereg package that was imported. This file
imports nothing of prereg at its top, so it can run an older prereg's kinds: it uses only
names :mod:`prereg.api` has long had (``Plan``, ``RunView``, ``load_kind``).
"""

import json
import os
import sys
import traceback
from pathlib import Path


def _describe(err: BaseException) -> str:
    """As :func:`prereg.decisions.manifest.describe`, which an older prereg may not have."""
    frames = traceback.extract_tb(err.__traceback__)
    where = f" (at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
    return f"{type(err).__name__}: {err}{where}"


def replay(request: dict) -> dict:
    """Load the kind the request names from ``sys.path`` as it is and run its replay."""
    # prereg: only once main() has put the snapshot's folders first on sys.path
    import prereg
    from prereg import api

    done: dict = {"prereg": str(Path(prereg.__file__).resolve().parent)}
    try:
        kind = api.load_kind(request["kind"])
    except Exception as err:  # noqa: BLE001 -- reported to the audit, which names it
        return {**done, "unavailable": _describe(err)}
    if kind.replay is None:
        return {**done, "findings": None}
    plan = request["plan"]
    view = api.RunView(
        root=Path(request["root"]),
        run_dir=Path(request["run_dir"]),
        plan=api.Plan(path=Path(plan["path"]), sha256=plan["sha256"], data=plan["data"]),
        stage=request["stage"],
        items=tuple(request["items"]),
    )
    try:
        return {**done, "findings": [str(f) for f in kind.replay(view)]}
    except Exception as err:  # noqa: BLE001 -- a replay that fails is a finding of the audit
        return {**done, "findings": [], "failed": _describe(err)}


def main() -> None:
    here = os.path.dirname(os.path.realpath(__file__))
    if sys.path and os.path.realpath(sys.path[0] or os.getcwd()) == here:
        del sys.path[0]  # Python 3.9 puts this file's folder first although -I is given
    paths, request, result = sys.argv[1:4]
    sys.path[:0] = [entry for entry in paths.split(os.pathsep) if entry]
    with open(request, encoding="utf-8") as handle:
        done = replay(json.load(handle))
    with open(result, "w", encoding="utf-8") as handle:
        json.dump(done, handle)


if __name__ == "__main__":
    main()
