"""The role a pytest process plays, read from its options alone, and everything a process
without a research role needs of prereg: the options, the markers and a software run's
collection rule.

Every pytest process of a project that installs prereg imports :mod:`prereg.plugin`
(autoloaded through ``pytest11``), so the plugin imports only pytest and this module, and
this module only the standard library (the command line's option policy reads its
spellings, and imports no pytest). A process has a *research role* when it is a research run's
launcher, session, clean listing or one of its xdist workers, or a rehearsal; only then
does the plugin load :mod:`prereg.runtime` (as pytest-xdist loads its scheduler only for
``-n``). A software run never collects the research folders and deselects every item
marked ``research_stage``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

STAGE_OPTION = "--research-stage"
RUN_ID_OPTION = "--run-id"
REHEARSE_OPTION = "--rehearse"
LIST_OPTION = "--prereg-list-items"
# The internal option naming the checkout a session writes its run into. Typed by hand in a
# checkout, the session's proof of its snapshot refuses the run (condition hermetic).
CHECKOUT_OPTION = "--prereg-checkout"
# The key of prereg's data in an xdist worker's workerinput and workeroutput, and of an
# item's record in its report's user properties.
PROPERTY = "prereg"
MARKERS = (
    "software: a software check, what CI runs",
    "research_stage(name): an item of a research stage",
)


def add_options(parser: pytest.Parser) -> None:
    """prereg's command-line options and ini settings."""
    group = parser.getgroup("prereg", "preregistered research stages")
    group.addoption(
        STAGE_OPTION,
        dest="research_stage",
        default=None,
        metavar="NAME",
        help="run the items of one research stage, behind its committed approval record",
    )
    group.addoption(
        RUN_ID_OPTION,
        dest="prereg_run_id",
        default=None,
        metavar="RUN_ID",
        help="the approved run id to use (default: the stage's only unspent approval)",
    )
    group.addoption(
        REHEARSE_OPTION,
        dest="prereg_rehearse",
        action="store_true",
        default=False,
        help="rehearse the stage from the working tree without an approval, into "
        "runs/rehearsals/ (any selection: -k, one item, --pdb); not a run, nothing spent",
    )
    group.addoption(
        "--rehearse-full-scale",
        dest="prereg_rehearse_full_scale",
        action="store_true",
        help="rehearse with the plan's parameters, not its rehearsal_parameters",
    )
    group.addoption(
        "--rehearse-plan",
        dest="prereg_rehearse_plan",
        default=None,
        metavar="PATH",
        help="the plan to rehearse the stage under (default: the plan in pytest.ini naming it)",
    )
    group.addoption(
        "--rehearse-input",
        dest="prereg_rehearse_inputs",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="an input the rehearsed stage reads (as prereg approve --input binds it)",
    )
    group.addoption(
        "--rehearse-use-run",
        dest="prereg_rehearse_use_runs",
        action="append",
        default=[],
        metavar="STAGE=RUN_ID",
        help="the run of a required stage the rehearsal reads (default: its latest complete "
        "run, else its latest passing rehearsal of the whole stage)",
    )
    group.addoption(
        LIST_OPTION,
        dest="prereg_list_items",
        default=None,
        metavar="PATH",
        help=argparse.SUPPRESS,  # internal: the controller's clean listing of a stage's items
    )
    group.addoption(
        CHECKOUT_OPTION,
        dest="prereg_checkout",
        default=None,
        metavar="PATH",
        help=argparse.SUPPRESS,  # internal: a hermetic session's checkout (prereg.evidence.hermetic)
    )
    parser.addini("prereg_plans", type="linelist", help="plan files whose stages are known")
    parser.addini("prereg_research_paths", type="linelist", help="folders holding research stages")


def checkout_argument(checkout: Path | str) -> str:
    """The session's argument naming the checkout it writes its run into."""
    return f"{CHECKOUT_OPTION}={checkout}"


def launches(config: pytest.Config) -> bool:
    """A research run typed by a user: a process with a research role that is none of its
    session, its listing or a worker launches the hermetic session."""
    option = config.option
    return (
        has_research_role(config)
        and not hasattr(config, "workerinput")
        and not option.prereg_list_items
        and not option.prereg_checkout
    )


def has_research_role(config: pytest.Config) -> bool:
    """Whether this process belongs to a research run or a rehearsal (its launcher, session,
    clean listing or an xdist worker of its session), judged from its options: a worker
    from its workerinput, any other process from ``--research-stage``."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return bool(workerinput.get(PROPERTY))
    option = config.option
    return option.research_stage is not None and not option.help and not option.version


def refused_rehearsal(config: pytest.Config) -> str | None:
    """Why the command line's ``--rehearse`` cannot be taken (None: it can, or is not given)."""
    option = config.option
    if option.prereg_rehearse and (option.research_stage is None or option.prereg_run_id):
        return (
            f"{REHEARSE_OPTION} rehearses one stage, which has no run id: give "
            f"{STAGE_OPTION}=NAME {REHEARSE_OPTION}, without --run-id"
        )
    return None


def ignored_by_software_run(collection_path: Path, config: pytest.Config) -> bool | None:
    """A software run never collects the folders pytest.ini's ``prereg_research_paths``
    names."""
    root = Path(config.rootpath)
    research_roots = [root / p for p in config.getini("prereg_research_paths")]
    if any(collection_path == r or r in collection_path.parents for r in research_roots):
        return True
    return None


def deselect_research_items(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A software run keeps no item marked ``research_stage``, wherever it was collected."""
    keep, drop = [], []
    for item in items:
        (drop if item.get_closest_marker("research_stage") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def leave_unrewritten(package: str = "prereg") -> None:
    """Take ``package`` off the modules pytest's assertion rewriter rewrites from now on.

    pytest marks every module of a distribution that declares a ``pytest11`` entry point,
    so that a plugin's own assertions explain themselves; prereg's modules hold none a user
    reads. Rewritten, each module of the runtime is parsed and rewritten in every process
    that has no rewritten bytecode of it: all of them, where bytecode is not written
    (``PYTHONDONTWRITEBYTECODE``, a read-only install). The mark is pytest's own set
    (``AssertionRewritingHook._must_rewrite``); a pytest without it leaves things as they
    were, which ``checks/run/test_thin_plugin.py`` notices."""
    for finder in sys.meta_path:
        marked = getattr(finder, "_must_rewrite", None)
        if isinstance(marked, set):
            marked.discard(package)
