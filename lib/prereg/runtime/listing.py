"""The stage's full item set, listed at the gate by a clean session, and the pytest plugins
a session started from here loads by entry point."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from prereg.evidence import envlock, hermetic
from prereg.evidence.execution import PYTEST_PLUGIN_ENTRY_POINT
from prereg.runtime.process_run import LISTING_DROPS, ProcessRun
from prereg.runtime.roles import LIST_OPTION, RUN_ID_OPTION, STAGE_OPTION, checkout_argument

# Loaded by name: the listing reads no conftest.py, so none can load it.
PLUGIN_MODULE = PYTEST_PLUGIN_ENTRY_POINT[1]


def entry_point_plugins(
    config: pytest.Config, locked: dict | None = None
) -> tuple[list[str], list[str]]:
    """The installed (``pytest11``) plugins loaded here by their entry-point names, and the
    names blocked with ``-p no:NAME``. With ``locked`` (the distributions of the approval's
    environment lock: normalised name -> its entry), only plugins of distributions it holds at that
    version count: one installed after approval is never loaded by a session (and the gate refuses
    it)."""
    manager = config.pluginmanager
    loaded = [
        manager.get_name(plugin)
        for plugin, dist in manager.list_plugin_distinfo()
        if locked is None
        or (locked.get(envlock.normalised(dist.project_name)) or {}).get("version") == dist.version
    ]
    blocked = [name for name, plugin in manager.list_name_plugin() if plugin is None and name]
    return sorted(n for n in loaded if n), sorted(blocked)


class Listing:
    """The stage's full item set, listed at the gate by a clean session started like this one
    (:mod:`prereg.evidence.hermetic`: the snapshot, its environment, the approved plugins) but
    without its options, PYTEST_ADDOPTS, xdist, the stepwise and cache plugins or any conftest.py:
    the stage's items are what its module alone collects, so a conftest hook that drops, repeats
    or adds items differs from the listing and is refused. It writes no file but its list (a
    log file or debug trace pytest.ini names goes to the null device)."""

    def __init__(self, root: Path, run: ProcessRun, config: pytest.Config) -> None:
        handle, self.path = tempfile.mkstemp(prefix="prereg-items-", suffix=".json")
        os.close(handle)
        env = {k: v for k, v in os.environ.items() if k not in LISTING_DROPS}
        loaded, blocked = entry_point_plugins(config)
        command = hermetic.command(
            checkout=run.project,
            folder=root,
            source=root,
            args=[
                f"{STAGE_OPTION}={run.stage}", f"{RUN_ID_OPTION}={run.run_id}",
                f"{LIST_OPTION}={self.path}", "-q", f"--rootdir={root}", "--noconftest",
                *hermetic.null_arguments(hermetic.output_values(config)),
                checkout_argument(run.project),
            ],
            plugins=hermetic.plugin_arguments(
                [*loaded, PLUGIN_MODULE], [*blocked, "xdist", "randomly"]
            ),
        )  # fmt: skip
        self.process = subprocess.Popen(
            command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    def wait(self) -> list[str] | str:
        """The node ids, or a sentence saying why the stage's items could not be listed. A
        listing ended by a signal (a batch scheduler's SIGTERM to the process group, a kill)
        says nothing of the stage: that ends the run as an interruption, nothing spent."""
        output, _ = self.process.communicate()
        if self.process.returncode < 0:
            Path(self.path).unlink(missing_ok=True)
            number = -self.process.returncode
            name = signal.Signals(number).name if number in signal.valid_signals() else number
            raise KeyboardInterrupt(f"the clean listing of the stage's items was ended by {name}")
        try:
            listed = json.loads(Path(self.path).read_text() or "null")
        finally:
            Path(self.path).unlink(missing_ok=True)
        if self.process.returncode not in (0, 5) or not isinstance(listed, list):
            tail = "\n    ".join(output.strip().splitlines()[-15:])
            return (
                "the stage's full item set could not be listed in a clean process, which "
                "collects the stage's module with no conftest.py, options or PYTEST_ADDOPTS "
                f"(exit {self.process.returncode}): the module must collect on its own, so a "
                "marker, option or fixture parametrization it needs at collection belongs in "
                f"pytest.ini or the module itself:\n    {tail}"
            )
        return listed

    def discard(self) -> None:
        """Stop the listing if it still runs and remove its file: a run refused or ended
        before it compared its items leaves neither a process nor a file behind."""
        if self.process.returncode is None:  # not yet waited for
            self.process.kill()
            self.process.communicate()
        Path(self.path).unlink(missing_ok=True)
