"""The role a process plays, and the launcher.

``pytest --research-stage=S`` typed by a user launches: it passes the gate, materialises a
snapshot of the approved commit and becomes the hermetic session (:mod:`prereg.evidence.hermetic`),
which registers the :class:`~prereg.runtime.controller.Controller`. An xdist worker takes
the run the controller belongs to; a software run, a listing, a session and a rehearsal
(:mod:`prereg.runtime.rehearsal`, a session too, in a copy of the working tree) each get
their own.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from prereg.base import gitrepo
from prereg.base.typed_settings import to_json
from prereg.decisions import gate
from prereg.evidence import execution, hermetic
from prereg.records import snapshot as snapshots
from prereg.runtime.controller import Controller, pass_gate, refuse
from prereg.runtime.listing import entry_point_plugins
from prereg.runtime.process_run import (
    PROCESS_RUN,
    check_rehearsal_command,
    refused_by_a_run,
    resolve_rehearsal,
    resolve_research_run,
    worker_process_run,
)
from prereg.runtime.rehearsal import Rehearsal
from prereg.runtime.roles import REHEARSE_OPTION, STAGE_OPTION, checkout_argument
from prereg.runtime.signals import hold_sigterm, release_sigterm


def launch(config: pytest.Config) -> None:
    """Pass the gate here, then become the hermetic session; this process never collects
    or runs an item itself (it does not return). A rehearsal passes no gate and becomes its
    session in a copy of the working tree (:func:`launch_rehearsal`)."""
    if config.option.prereg_rehearse:
        launch_rehearsal(config)  # does not return
        return
    root = Path(config.rootpath)
    run = resolve_research_run(config, root)
    record, _, gathered = pass_gate(config, run, session_follows=True)
    approved = gathered.facts.head  # the commit the gate judged, and no other
    checkout = Path(gitrepo.toplevel(root))
    lock = record.record.environment_lock
    plugins = entry_point_plugins(config, to_json(lock.distributions) if lock else {})
    handoff = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    if handoff:  # a SIGTERM from now on waits for the session, which ends on it
        hold_sigterm()
    try:
        snapshot = snapshots.materialise(checkout, approved)
    except (snapshots.SnapshotError, gitrepo.GitError, OSError) as err:
        if handoff:
            release_sigterm()
        refusal = gate.Refusal("hermetic", f"the approved commit cannot be run: {err}")
        refuse(config, run, record, [refusal])
    _become_session(config, checkout, snapshot.folder, plugins, handoff=handoff)


def launch_rehearsal(config: pytest.Config) -> None:
    """A rehearsal in the run's world: the working tree copied as a commit of everything
    would hold it (:func:`prereg.records.snapshot.working_copy`: no git-ignored file), then
    this process becomes the rehearsal's session there, with a session's allow-listed
    environment, home, temporary and current folder; standard input stays open for a
    debugger. Does not return."""
    root = Path(config.rootpath)
    check_rehearsal_command(config, root)
    checkout = Path(gitrepo.toplevel(root))
    handoff = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    if handoff:
        hold_sigterm()
    try:
        folder = snapshots.working_copy(checkout)
    except (snapshots.SnapshotError, gitrepo.GitError, OSError) as err:
        if handoff:
            release_sigterm()
        raise pytest.UsageError(
            f"{STAGE_OPTION}={config.option.research_stage} {REHEARSE_OPTION}: the working "
            f"tree cannot be rehearsed (nothing ran): {err}"
        ) from None
    invoked = {
        hermetic.INVOKED_FROM: str(config.invocation_params.dir),
        hermetic.RUN_WOULD_REFUSE: json.dumps(
            refused_by_a_run(config, root)
            + [f"[execution] {p}" for p in execution.environment_problems_of_launcher(checkout)]
        ),
    }
    # pytest's root and ini file, judged to be the project's above, are the copy's there.
    where = [f"--rootdir={folder}"] if config.option.rootdir else []
    where += ["-c", str(folder / "pytest.ini")] if config.option.inifilename else []
    _become_session(
        config, checkout, folder, entry_point_plugins(config),
        handoff=handoff, extra=invoked, args=where,
    )  # fmt: skip


def _become_session(
    config: pytest.Config,
    checkout: Path,
    folder: Path,
    plugins: tuple[list[str], list[str]],
    *,
    handoff: bool,
    extra: dict[str, str] | None = None,
    args: list[str] | None = None,
) -> None:
    """Replace this process with the session in ``folder`` (a snapshot, or a rehearsal's
    copy), which deletes the folder however it ends; ``args`` go after the command line's,
    so they win."""
    try:
        hermetic.private_world(snapshots.scratch(folder))
        argv = hermetic.command(
            checkout=checkout,
            folder=folder,
            args=[
                *config.invocation_params.args,
                *hermetic.output_arguments(
                    hermetic.output_values(config), config.invocation_params.dir
                ),
                *(args or []),
                checkout_argument(checkout),
            ],
            plugins=hermetic.plugin_arguments(*plugins),
            addopts=os.environ.get("PYTEST_ADDOPTS"),
            pythonpath=os.environ.get("PYTHONPATH"),
        )
        capture = config.pluginmanager.getplugin("capturemanager")
        if capture is not None:
            capture.stop_global_capturing()
        hermetic.exec_session(  # the session resets SIGTERM and deletes the folder itself
            argv,
            cwd=folder,
            env={**hermetic.session_environment(folder), **(extra or {})},
            handoff=handoff,
            keep_stdin=bool(config.option.prereg_rehearse),
        )
    except BaseException as err:
        snapshots.remove(folder)
        if handoff:
            release_sigterm()  # a SIGTERM held meanwhile ends this launcher now
        if isinstance(err, OSError):
            raise pytest.UsageError(f"the hermetic session could not start: {err}") from None
        raise


def configure(config: pytest.Config) -> None:
    """The run a process with a research role (:func:`prereg.runtime.roles.has_research_role`)
    belongs to: an xdist worker's, a rehearsal's, a listing's, or a hermetic session's (which
    registers the controller)."""
    root = Path(config.rootpath)
    if hasattr(config, "workerinput"):
        run = worker_process_run(config)
    elif config.option.prereg_rehearse:
        run = resolve_rehearsal(config, root)
        config.pluginmanager.register(Rehearsal(config, run), "prereg-rehearsal")
    elif config.option.prereg_list_items:
        config.option.collectonly = True  # a listing never runs an item
        run = resolve_research_run(config, root, listing=True)
    elif config.option.prereg_checkout:
        run = resolve_research_run(config, root)
        config.pluginmanager.register(Controller(config, run), "prereg-controller")
    else:
        raise pytest.UsageError(
            f"a research run starts from the command line (`pytest {STAGE_OPTION}=NAME`), "
            "which runs it from a snapshot of the approved commit; it cannot run inside "
            "another pytest session"
        )
    config.stash[PROCESS_RUN] = run
    if run.run_id is not None:  # the session, its listing, its workers; not a rehearsal
        hermetic.refuse_debuggers()
