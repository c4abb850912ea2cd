"""What a process collects: a software run never collects the research folders and
deselects every item marked ``research_stage``; a research run keeps exactly its stage's
items, from the module its plan names."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from prereg.runtime.process_run import PROCESS_RUN

# The hooks through which a conftest.py or plugin can change which items a session collects.
ITEM_HOOKS = (
    "pytest_collection",
    "pytest_ignore_collect",
    "pytest_collect_file",
    "pytest_pycollect_makemodule",
    "pytest_pycollect_makeitem",
    "pytest_make_collect_report",
    "pytest_collectreport",
    "pytest_generate_tests",
    "pytest_itemcollected",
    "pytest_collection_modifyitems",
)


def ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A software run never collects the research folders. A research run (a session, a
    listing, a rehearsal) collects only the stage's module and the folders above it: the
    other checks of the project are never imported, which would only slow the gate and widen
    what the execution condition must account for (their items would be deselected anyway)."""
    run = config.stash.get(PROCESS_RUN, None)
    if run is None:
        return None
    root = Path(run.root)
    if run.research and run.module:
        module = root / run.module
        return None if collection_path == module or collection_path in module.parents else True
    research_roots = [root / p for p in config.getini("prereg_research_paths")]
    if not any(collection_path == r or r in collection_path.parents for r in research_roots):
        return None
    if not run.research:
        return True  # a software run never collects research stages
    if collection_path.is_file() and collection_path.suffix == ".py":
        return collection_path != root / run.module or None
    return None


def select_items(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect every item not of this run's stage; a listing writes the node ids it kept."""
    run = config.stash[PROCESS_RUN]
    module = Path(run.root) / run.module if run.research else None
    keep, drop = [], []
    for item in items:
        marker = item.get_closest_marker("research_stage")
        item_stage = marker.args[0] if marker and marker.args else None
        # A research item counts only from the module its plan names.
        selected = item_stage == run.stage and (module is None or item.path == module)
        (keep if selected else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if run.research and config.option.prereg_list_items:
        Path(config.option.prereg_list_items).write_text(json.dumps([i.nodeid for i in items]))


# The one plugin an inert conftest.py may declare (prereg's own, loaded by the listing too).
DECLARED_PLUGIN = "prereg.plugin"
# Plugin modules of these packages load in the clean listing too.
OWN_PACKAGES = ("_pytest", "pytest", "prereg")


def inert_conftest(source: str) -> bool:
    """Whether a conftest.py only declares prereg's plugin (``pytest_plugins`` naming
    :data:`DECLARED_PLUGIN`, besides a docstring and comments): loading it runs no other code,
    so the items collected with it are the items collected without it."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if not body:
        return True
    if len(body) != 1 or not isinstance(body[0], ast.Assign) or len(body[0].targets) != 1:
        return False
    target, value = body[0].targets[0], body[0].value
    names = value.elts if isinstance(value, (ast.Tuple, ast.List)) else [value]
    return (
        isinstance(target, ast.Name)
        and target.id == "pytest_plugins"
        and all(isinstance(n, ast.Constant) and n.value == DECLARED_PLUGIN for n in names)
    )


def clean_listing_reasons(config: pytest.Config, root: Path, module: str) -> tuple[str, ...]:
    """What could make the stage's items as this session collects them differ from what its
    module alone collects in a clean process (:class:`prereg.runtime.listing.Listing`: no
    conftest.py, no plugin but the installed ones and prereg's): each conftest.py on the way
    from ``root`` to the stage's ``module`` (where a worker loads it at collection) and each
    plugin module loaded here that is not inert (:func:`inert_conftest`), pytest's, prereg's
    or an installed entry-point plugin. None: the two collections are one by construction
    (the option policy refuses every option that selects items), and the session's own is
    the stage's full item set."""
    reasons = set()
    folder = (Path(root) / module).parent
    for where in (folder, *folder.parents):
        conftest = where / "conftest.py"
        if conftest.is_file() and not inert_conftest(conftest.read_text(errors="replace")):
            reasons.add(_shown(conftest, root))
        if where == Path(root):
            break
    installed = {id(plugin) for plugin, _ in config.pluginmanager.list_plugin_distinfo()}
    for _, plugin in config.pluginmanager.list_name_plugin():
        file, name = getattr(plugin, "__file__", None), getattr(plugin, "__name__", "")
        if not file or id(plugin) in installed or name.partition(".")[0] in OWN_PACKAGES:
            continue  # objects are registered by code judged here; installed plugins load there
        path = Path(file)
        if path.name == "conftest.py" and inert_conftest(path.read_text(errors="replace")):
            continue
        reasons.add(_shown(path, root))
    return tuple(sorted(reasons))


def _shown(path: Path, root: Path) -> str:
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return str(path)


def item_changers(config: pytest.Config, root: Path) -> tuple[str, ...]:
    """The conftest.py files and other modules of ``root`` loaded here as plugins that
    implement a hook able to change the collected items (prereg's own aside), by path."""
    found = set()
    for _, plugin in config.pluginmanager.list_name_plugin():
        name, file = getattr(plugin, "__name__", ""), getattr(plugin, "__file__", None)
        if not file or name.partition(".")[0] == "prereg":
            continue
        try:
            path = Path(file).resolve().relative_to(Path(root).resolve())
        except ValueError:
            continue
        if any(hasattr(plugin, hook) for hook in ITEM_HOOKS):
            found.add(path.as_posix())
    return tuple(sorted(found))
