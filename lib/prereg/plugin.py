"""pytest glue: ``--research-stage``, deselection, the gate and the run manifest.

Software runs (no ``--research-stage``) never collect the research folders and
deselect any item marked ``research_stage``. ``pytest --research-stage=S`` is a launcher:
it resolves the approval, passes the gate and replaces itself with a hermetic session run
from a snapshot of the approved commit, which passes the gate again in
``pytest_sessionstart`` (before xdist starts workers, and before any item), spends the run
id, runs exactly the stage's items and writes the manifest. See README.md, "For
researchers".

Every pytest process of a project that installs prereg imports this module, so it imports
only :mod:`prereg.runtime.roles` (pytest and the standard library). A process with a
research role (:func:`prereg.runtime.roles.has_research_role`: a research run's launcher,
session, listing or worker, or a rehearsal) loads :mod:`prereg.runtime` when its hooks
first need it; a software run never does.

This module is the table of prereg's pytest hooks and fixtures; each delegates to
:mod:`prereg.runtime`:

=================================  ======================================================
``pytest_addoption``               :func:`prereg.runtime.roles.add_options`
``pytest_cmdline_main``            :mod:`prereg.runtime.launcher`: gate, snapshot, session
``pytest_configure`` (tryfirst)    prereg's markers, the process's role
                                   (:func:`prereg.runtime.roles.has_research_role`); with
                                   a research role
                                   :func:`prereg.runtime.launcher.configure`: the run; a
                                   session registers the ``prereg-controller``
                                   (:class:`prereg.runtime.controller.Controller`)
``pytest_ignore_collect``          :func:`prereg.runtime.roles.ignored_by_software_run`,
                                   :func:`prereg.runtime.collection.ignore_collect`
``pytest_collection_modifyitems``  :func:`prereg.runtime.roles.deselect_research_items`,
(trylast)                          :func:`prereg.runtime.collection.select_items`
``pytest_runtest_setup``           :func:`prereg.runtime.items.start_item`
(tryfirst)
``_prereg_plan`` fixture           :func:`prereg.runtime.items.proved_plan`
``research`` fixture               :func:`prereg.runtime.items.item_context`
``pytest_runtest_makereport``      :func:`prereg.runtime.items.record_report`
(wrapper)
``pytest_sessionfinish``           :func:`prereg.runtime.items.finish_worker`
=================================  ======================================================

The controller's own hooks (the gate, the spend, item records, the manifest, the xdist
bridge, the terminal summary) are methods of the controller plugin. Experiments import
:func:`parametrize_items`, :func:`project_root`, :func:`stage_plan` and
:func:`stage_inputs` from here (loaded on first use, from :mod:`prereg.runtime.process_run`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from prereg.runtime import roles

if TYPE_CHECKING:
    from prereg.kinds.context import ItemContext

# Served by the module __getattr__ below.
__all__ = ["parametrize_items", "project_root", "stage_inputs", "stage_plan"]  # noqa: F822


def __getattr__(name: str) -> Any:
    """The experiments' helpers, loaded from the runtime on first use."""
    if name in __all__:
        from prereg.runtime import process_run  # the runtime: a research role only

        return getattr(process_run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


RESEARCH = pytest.StashKey[bool]()  # this process's role (roles.has_research_role)

roles.leave_unrewritten()  # before anything else of prereg loads


def _research(config: pytest.Config) -> bool:
    return config.stash.get(RESEARCH, False)


def pytest_addoption(parser: pytest.Parser) -> None:
    roles.add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Before pytest writes its ``--debug`` file and imports any conftest.py, once the command
    line is parsed."""
    if getattr(early_config.known_args_namespace, "research_stage", None):
        from prereg.runtime import process_run  # the runtime: a research role only

        process_run.refuse_early_outputs(early_config)
        process_run.watch_snapshot_imports(early_config)


def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """``pytest --research-stage=S``: pass the gate here, then become the hermetic session
    (:mod:`prereg.evidence.hermetic`); this process never collects or runs an item itself."""
    if roles.launches(config):
        from prereg.runtime import launcher  # the runtime: a research role only

        launcher.launch(config)  # does not return
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    for marker in roles.MARKERS:
        config.addinivalue_line("markers", marker)
    refused = roles.refused_rehearsal(config)
    if refused:
        raise pytest.UsageError(refused)
    config.stash[RESEARCH] = roles.has_research_role(config)
    if config.stash[RESEARCH]:
        from prereg.runtime import launcher  # the runtime: a research role only

        launcher.configure(config)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if not _research(config):
        return roles.ignored_by_software_run(collection_path, config)
    from prereg.runtime import collection  # the runtime: a research role only

    return collection.ignore_collect(collection_path, config)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _research(config):
        roles.deselect_research_items(config, items)
        return
    from prereg.runtime import collection  # the runtime: a research role only

    collection.select_items(config, items)


@pytest.hookimpl(tryfirst=True)  # before xdist sends the worker's collection to the controller
def pytest_collection_finish(session: pytest.Session) -> None:
    if _research(session.config):
        from prereg.runtime import items  # the runtime: a research role only

        items.judge_worker_collection(session)


# -- per item (serial process or xdist worker) --------------------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if _research(item.config):
        from prereg.runtime import items  # the runtime: a research role only

        items.start_item(item)


@pytest.fixture(scope="session")
def _prereg_plan(request: pytest.FixtureRequest) -> dict:
    """The plan, re-checked in this process against the approval (the worker-side gate)."""
    if not _research(request.config):
        raise RuntimeError("the research fixture is only available under --research-stage")
    from prereg.runtime import items  # the runtime: a research role only

    return items.proved_plan(request)


@pytest.fixture
def research(request: pytest.FixtureRequest, _prereg_plan: dict) -> ItemContext:
    """The item's context: plan parameters, recorded seeds, output folder, budget."""
    from prereg.runtime import items  # the runtime: a research role only

    return items.item_context(request, _prereg_plan)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if _research(item.config):
        from prereg.runtime import items  # the runtime: a research role only

        items.record_report(item, call, report)
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _research(session.config):
        from prereg.runtime import items  # the runtime: a research role only

        items.finish_worker(session)
