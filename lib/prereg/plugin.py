"""pytest glue: ``--research-stage``, deselection, the gate and the run manifest.

Software runs (no ``--research-stage``) never collect the research folders and
deselect any item marked ``research_stage``. ``pytest --research-stage=S`` is a launcher:
it resolves the approval, passes the gate and replaces itself with a hermetic session run
from a snapshot of the approved commit, which passes the gate again in
``pytest_sessionstart`` (before xdist starts workers, and before any item), spends the run
id, runs exactly the stage's items and writes the manifest. See README.md, "For
researchers".

This module is the table of prereg's pytest hooks and fixtures; each delegates to
:mod:`prereg.runtime`:

=================================  ======================================================
``pytest_addoption``               :func:`prereg.runtime.process_run.add_options`
``pytest_cmdline_main``            :mod:`prereg.runtime.launcher`: gate, snapshot, session
``pytest_configure`` (tryfirst)    :func:`prereg.runtime.launcher.configure`: the process's
                                   role; a session registers the ``prereg-controller``
                                   (:class:`prereg.runtime.controller.Controller`)
``pytest_ignore_collect``          :func:`prereg.runtime.collection.ignore_collect`
``pytest_collection_modifyitems``  :func:`prereg.runtime.collection.select_items`
(trylast)
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
:func:`stage_inputs` from here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from prereg.kinds.context import ItemContext
from prereg.runtime import collection, launcher, process_run
from prereg.runtime import items as item_side
from prereg.runtime.process_run import parametrize_items, project_root, stage_inputs, stage_plan

__all__ = ["parametrize_items", "project_root", "stage_inputs", "stage_plan"]


def pytest_addoption(parser: pytest.Parser) -> None:
    process_run.add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Before pytest writes its ``--debug`` file and imports any conftest.py, once the command
    line is parsed."""
    process_run.refuse_early_outputs(early_config)
    process_run.watch_snapshot_imports(early_config)


def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """``pytest --research-stage=S``: pass the gate here, then become the hermetic session
    (:mod:`prereg.evidence.hermetic`); this process never collects or runs an item itself."""
    if launcher.launches(config):
        launcher.launch(config)  # does not return
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    launcher.configure(config)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    return collection.ignore_collect(collection_path, config)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    collection.select_items(config, items)


@pytest.hookimpl(tryfirst=True)  # before xdist sends the worker's collection to the controller
def pytest_collection_finish(session: pytest.Session) -> None:
    item_side.judge_worker_collection(session)


# -- per item (serial process or xdist worker) --------------------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item_side.start_item(item)


@pytest.fixture(scope="session")
def _prereg_plan(request: pytest.FixtureRequest) -> dict:
    """The plan, re-checked in this process against the approval (the worker-side gate)."""
    return item_side.proved_plan(request)


@pytest.fixture
def research(request: pytest.FixtureRequest, _prereg_plan: dict) -> ItemContext:
    """The item's context: plan parameters, recorded seeds, output folder, budget."""
    return item_side.item_context(request, _prereg_plan)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    item_side.record_report(item, call, report)
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    item_side.finish_worker(session)
