"""The pieces behind the pinned-stack check: the run comparison, the extras' collection rule
(and its module map, read from pyproject.toml's extras), and install.sh's refusals. Fast; no
pinned venv needed."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pinnedcompare import compare_runs

from support.suite import checks_conftest

pytestmark = pytest.mark.software

REPO = Path(__file__).resolve().parents[2]


def _run(root: Path, figures: dict, trials: bytes = b"\x00\x01") -> Path:
    cell = root / "items" / "test_cell[a]"
    cell.mkdir(parents=True)
    (cell / "figures.json").write_text(json.dumps(figures))
    (cell / "trials.npz").write_bytes(trials)
    (cell / "cpu.timing.json").write_text(json.dumps({"seconds": root.name}))
    (root / "manifest.json").write_text(json.dumps({"host": root.name}))
    return root


def test_identical_runs_compare_identical_and_records_and_timings_are_left_out(tmp_path):
    a = _run(tmp_path / "a", {"x": 1.5, "n": 3})
    b = _run(tmp_path / "b", {"x": 1.5, "n": 3})
    diffs = compare_runs(a, b)
    assert {d.path for d in diffs} == {
        "items/test_cell[a]/figures.json",
        "items/test_cell[a]/trials.npz",
    }
    assert all(d.kind == "identical" for d in diffs)


def test_a_changed_integer_string_or_binary_file_is_a_difference_not_a_tolerance(tmp_path):
    a = _run(tmp_path / "a", {"n": 3, "s": "x"}, trials=b"\x00")
    b = _run(tmp_path / "b", {"n": 4, "s": "y"}, trials=b"\x01")
    kinds = {d.path.rsplit("/", 1)[1]: d for d in compare_runs(a, b)}
    assert kinds["figures.json"].kind == "different"
    assert any("integer 3 != 4" in o for o in kinds["figures.json"].other)
    assert kinds["trials.npz"].kind == "different"


def test_a_file_in_only_one_run_is_missing(tmp_path):
    a = _run(tmp_path / "a", {"x": 1.0})
    b = _run(tmp_path / "b", {"x": 1.0})
    (b / "summary").mkdir()
    (b / "summary" / "extra.json").write_text("{}")
    assert [d.kind for d in compare_runs(a, b) if d.path == "summary/extra.json"] == ["missing"]


@given(
    st.floats(min_value=1e-6, max_value=1e6),
    st.floats(min_value=1e-14, max_value=1e-3),
)
def test_a_float_difference_is_measured_relative(tmp_path_factory, x, r):
    root = tmp_path_factory.mktemp("cmp")
    y = x * (1 + r)
    a = _run(root / "a", {"v": [x]})
    b = _run(root / "b", {"v": [y]})
    (d,) = [d for d in compare_runs(a, b) if d.path.endswith("figures.json")]
    if x == y:
        assert d.kind == "identical"
    else:
        assert d.kind == "numeric" and d.differing == 1
        assert math.isclose(d.max_rel, abs(y - x) / max(x, y), rel_tol=1e-9)


def test_only_an_absent_optional_module_keeps_a_check_module_out(tmp_path, monkeypatch):
    rules = checks_conftest()
    monkeypatch.setitem(rules.OPTIONAL_MODULES, "prereg_absent_extra_pkg", "training")
    needs_extra = tmp_path / "test_a.py"
    needs_extra.write_text("import json\nimport prereg_absent_extra_pkg.sub\n")
    assert rules.imports_missing_extra(needs_extra) == ("prereg_absent_extra_pkg", "training")
    other = tmp_path / "test_b.py"
    other.write_text("import prereg_absent_other_pkg\n")  # not an extra's: pytest's error
    assert rules.imports_missing_extra(other) is None
    installed = tmp_path / "test_c.py"
    installed.write_text("import numpy\n")  # an extra's module that is installed is collected
    monkeypatch.setitem(rules.OPTIONAL_MODULES, "numpy", "training")
    assert rules.imports_missing_extra(installed) is None


def test_the_extras_are_read_from_pyproject_with_normalised_names(tmp_path):
    rules = checks_conftest()
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        "[project.optional-dependencies]\n"
        'training = ["Torch_Nightly.Build>=2", "ninja"]\n'
        'e04 = [\n  "faiss-cpu>=1.15.1",  # a comment\n'
        "  \"tree-sitter-go>=0.25; python_version >= '3.10'\",\n]\n"
        'dev = ["ruff"]\n'
    )
    assert rules.extra_distributions(pyproject) == {
        "training": ["torch-nightly-build", "ninja"],
        "e04": ["faiss-cpu", "tree-sitter-go"],
    }
    assert [rules.import_name(d) for d in ("torch-nightly-build", "faiss-cpu")] == [
        "torch_nightly_build",
        "faiss",
    ]


def test_the_optional_modules_are_those_of_the_checkouts_extras():
    rules = checks_conftest()
    assert rules.OPTIONAL_MODULES == {
        rules.import_name(distribution): extra
        for extra, distributions in rules.extra_distributions().items()
        for distribution in distributions
    }
    assert rules.OPTIONAL_MODULES["torch"] == "training"
    assert rules.OPTIONAL_MODULES["faiss"] == "e04"


def _top_level_modules(distribution: importlib.metadata.Distribution) -> set[str]:
    """The top-level modules and packages an installed distribution's RECORD lists."""
    names = set()
    for file in distribution.files or []:
        top = file.parts[0]
        if top in ("..", "__pycache__") or top.endswith((".dist-info", ".libs", ".data")):
            continue
        if len(file.parts) > 1:
            names.add(top)
        elif top.endswith((".py", ".so", ".pyd")):
            names.add(top.split(".")[0])
    return names


EXTRA_DISTRIBUTIONS = [
    (extra, distribution)
    for extra, distributions in checks_conftest().extra_distributions().items()
    for distribution in distributions
]


@pytest.mark.parametrize(("extra", "distribution"), EXTRA_DISTRIBUTIONS)
def test_every_distribution_of_an_optional_extra_maps_to_a_module_it_installs(extra, distribution):
    rules = checks_conftest()
    module = rules.import_name(distribution)
    assert rules.OPTIONAL_MODULES[module] == extra
    try:
        installed = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{distribution} of the extra {extra} is not installed here")
    provided = _top_level_modules(installed)
    assert module in provided, (
        f"pyproject.toml's extra {extra!r} lists {distribution!r}, which installs the "
        f"top-level modules {sorted(provided)}, not {module!r}: add {distribution!r}: "
        "'<its module>' to IMPORT_NAMES in checks/conftest.py"
    )


def test_install_sh_refuses_a_venv_of_another_python_and_an_unknown_option(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    other = "python3.9" if sys.version_info[:2] != (3, 9) else "python3.11"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / other).write_text("#!/bin/sh\necho 0.0\n")  # reports another minor version
    (fake / other).chmod(0o755)
    done = subprocess.run(
        ["bash", "install.sh", "--pinned", "--venv", str(venv)],
        cwd=REPO,
        env={"PATH": f"{fake}:/usr/bin:/bin", "PYTHON": other},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert f"{venv} holds Python {sys.version_info[0]}.{sys.version_info[1]}" in done.stderr
    done = subprocess.run(
        ["bash", "install.sh", "--pinnned"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert done.returncode == 2 and "unknown option --pinnned" in done.stderr
