"""The import contracts in .importlinter hold (import-linter's ``lint-imports``), their module
lists cover every module of prereg, and each contract fails when its rule is broken.

docs/architecture.md describes the layers and the contracts. The pinned Python 3.9 stack
does not install import-linter (the ``dev`` extra): these checks skip there.
"""

from __future__ import annotations

import ast
import configparser
import os
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

pytestmark = pytest.mark.software

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / ".importlinter"
PACKAGE = ROOT / "lib" / "prereg"
# The worked example is analysed from its source in the checkout, not from its installed copy.
SEARCH_PATH = (ROOT / "lib", ROOT / "examples" / "prereg-paired-models" / "src")
PUBLIC = {"api"}
PROTOCOLS = {"rp002a", "e04"}


def _lint_imports() -> str:
    found = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip(
            f"import-linter is not installed beside {sys.executable} (the dev extra installs it; "
            "the pinned Python 3.9 stack does not)"
        )
    return found


def _run(config: Path, cache: Path, *contracts: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    inherited = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []
    env["PYTHONPATH"] = os.pathsep.join([*map(str, SEARCH_PATH), *inherited])
    selected = [arg for contract in contracts for arg in ("--contract", contract)]
    return subprocess.run(
        [_lint_imports(), str(config), "--no-logo", "--cache-dir", str(cache), *selected],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One graph cache for this module's runs, outside the checkout."""
    return tmp_path_factory.mktemp("import-linter-cache")


def _read() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read_string(CONFIG.read_text(encoding="utf-8"))
    return parser


def _section(contract: str) -> str:
    return f"importlinter:contract:{contract}"


def _lines(parser: configparser.ConfigParser, contract: str, key: str) -> list[str]:
    value = parser[_section(contract)].get(key, "")
    return [line.strip() for line in value.splitlines() if line.strip()]


def _set_lines(parser, contract: str, key: str, lines: list[str]) -> None:
    parser[_section(contract)][key] = "\n" + "\n".join(lines)


def _children() -> set[str]:
    """The top-level modules and sub-packages of prereg, from the files in lib/prereg."""
    return {info.name for info in pkgutil.iter_modules([str(PACKAGE)])}


def _short(modules: list[str]) -> set[str]:
    assert all(m.startswith("prereg.") and m.count(".") == 1 for m in modules), modules
    return {m.split(".", 1)[1] for m in modules}


def _imports_pytest(name: str) -> bool:
    """Whether prereg.NAME (a module, or any module of a sub-package) imports pytest."""
    target = PACKAGE / name
    files = sorted(target.rglob("*.py")) if target.is_dir() else [target.with_suffix(".py")]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            if any(n.split(".")[0] in ("pytest", "_pytest") for n in names):
                return True
    return False


def test_every_contract_holds(cache):
    done = _run(CONFIG, cache)
    assert done.returncode == 0, (
        f"lint-imports {CONFIG.name} found a broken import contract "
        f"(docs/architecture.md):\n{done.stdout}{done.stderr}"
    )
    assert "0 broken" in done.stdout, done.stdout


def test_the_example_may_import_prereg_api_only_and_the_list_names_every_other_module():
    forbidden = _short(_lines(_read(), "example-uses-public-api", "forbidden_modules"))
    missing = _children() - PUBLIC - forbidden
    assert not missing, (
        f"{CONFIG.name} [{_section('example-uses-public-api')}] forbidden_modules does not "
        f"list prereg.{', prereg.'.join(sorted(missing))}: add each, or make it public"
    )
    assert not forbidden & PUBLIC, f"{CONFIG.name}: the public prereg.api is forbidden"
    assert not forbidden - _children(), f"{CONFIG.name}: no such modules {forbidden - _children()}"


def test_the_core_list_names_every_module_but_the_protocols():
    source = _short(_lines(_read(), "core-without-protocols", "source_modules"))
    missing = _children() - PROTOCOLS - source
    assert not missing, (
        f"{CONFIG.name} [{_section('core-without-protocols')}] source_modules does not list "
        f"prereg.{', prereg.'.join(sorted(missing))}: add each (or, for a new protocol, "
        "forbid it there)"
    )
    assert not source & PROTOCOLS
    assert not source - _children(), f"{CONFIG.name}: no such modules {source - _children()}"


def test_the_protocols_may_import_prereg_api_only_and_the_list_names_every_other_module():
    contract = "protocols-use-public-api"
    source = _short(_lines(_read(), contract, "source_modules"))
    forbidden = _short(_lines(_read(), contract, "forbidden_modules"))
    assert source == PROTOCOLS, f"{CONFIG.name} [{_section(contract)}]: sources {source}"
    missing = _children() - PUBLIC - PROTOCOLS - forbidden
    assert not missing, (
        f"{CONFIG.name} [{_section(contract)}] forbidden_modules does not list "
        f"prereg.{', prereg.'.join(sorted(missing))}: add each, or make what the protocols "
        "use of it public through prereg.api"
    )
    allowed = forbidden & (PUBLIC | PROTOCOLS)
    assert not allowed, f"{CONFIG.name} [{_section(contract)}] forbids {allowed}"
    assert not forbidden - _children(), f"{CONFIG.name}: no such modules {forbidden - _children()}"


def test_only_modules_that_run_inside_pytest_are_left_out_of_the_no_pytest_list():
    source = _short(_lines(_read(), "no-pytest-outside-runtime", "source_modules"))
    exempt = _children() - source
    assert exempt >= {"plugin", "runtime"}, exempt
    needless = sorted(name for name in exempt if not _imports_pytest(name))
    assert not needless, (
        f"{CONFIG.name} [{_section('no-pytest-outside-runtime')}] source_modules leaves out "
        f"prereg.{', prereg.'.join(needless)}, which imports no pytest: add it"
    )
    assert not source - _children(), f"{CONFIG.name}: no such modules {source - _children()}"


def _add(contract: str, key: str, line: str) -> Callable:
    def mutate(parser):
        _set_lines(parser, contract, key, [*_lines(parser, contract, key), line])

    return mutate


def _drop(contract: str, key: str, line: str) -> Callable:
    def mutate(parser):
        lines = _lines(parser, contract, key)
        assert line in lines, f"{CONFIG.name} [{_section(contract)}] {key} has no {line!r}"
        _set_lines(parser, contract, key, [x for x in lines if x != line])

    return mutate


def _swap_layers(contract: str, upper: str, lower: str) -> Callable:
    def mutate(parser):
        lines = _lines(parser, contract, "layers")
        i, j = lines.index(upper), lines.index(lower)
        lines[i], lines[j] = lines[j], lines[i]
        _set_lines(parser, contract, "layers", lines)

    return mutate


# (contract, how its copy of the config is broken, what lint-imports must then report)
BREAKS = {
    "pytest-in-plugin": (
        "no-pytest-outside-runtime",
        _add("no-pytest-outside-runtime", "source_modules", "prereg.plugin"),
        "prereg.plugin -> pytest",
    ),
    "example-imports-api": (
        "example-uses-public-api",
        _add("example-uses-public-api", "forbidden_modules", "prereg.api"),
        "prereg_paired_models.settings -> prereg.api",
    ),
    "core-imports-a-forbidden-module": (
        "core-without-protocols",
        _add("core-without-protocols", "forbidden_modules", "prereg.records"),
        "prereg.commands.demo -> prereg.records",
    ),
    "protocols-share-a-module": (
        "protocols-independent",
        _add("protocols-independent", "modules", "prereg.api"),
        "prereg.e04.stage -> prereg.api",
    ),
    "protocol-imports-api": (
        "protocols-use-public-api",
        _add("protocols-use-public-api", "forbidden_modules", "prereg.api"),
        "prereg.e04.stage -> prereg.api",
    ),
    "kinds-above-decisions": (
        "layers",
        _swap_layers("layers", "decisions", "kinds"),
        "prereg.decisions.gate -> prereg.kinds",
    ),
    "audit-above-bindings": (
        "decisions",
        _swap_layers("decisions", "bindings", "audit"),
        "prereg.decisions.bindings -> prereg.decisions.audit",
    ),
    "module-in-no-layer": (
        "layers",
        _drop("layers", "layers", "records"),
        "prereg.records",
    ),
    "stale-ignore": (
        "layers",
        _add("layers", "ignore_imports", "prereg.base.hashing -> prereg.decisions.gate"),
        "prereg.base.hashing -> prereg.decisions.gate",
    ),
}


@pytest.mark.parametrize("case", list(BREAKS))
def test_a_broken_rule_fails_its_contract(case, cache, tmp_path):
    contract, mutate, expected = BREAKS[case]
    parser = _read()
    mutate(parser)
    broken = tmp_path / "importlinter.ini"
    with broken.open("w", encoding="utf-8") as handle:
        parser.write(handle)
    done = _run(broken, cache, contract)
    output = done.stdout + done.stderr
    assert done.returncode != 0, f"{case}: lint-imports kept the broken contract:\n{output}"
    assert expected in output, f"{case}: lint-imports did not name {expected!r}:\n{output}"
