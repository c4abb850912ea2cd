"""Installing prereg costs a pytest process without a research role almost nothing: the
autoloaded ``prereg.plugin`` loads a handful of prereg's modules and none of the runtime, the
decisions, the evidence, the proof or the protocols; numpy and hypothesis stay unloaded.
A process with a research role loads the runtime (see checks/run for those runs)."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import textwrap

import pytest

from prereg.testing import outer_environment

pytestmark = pytest.mark.software

# What `import prereg.plugin` may load of prereg: the package, the plugin, and the options
# and roles module it reads (prereg.runtime's __init__ is its docstring only).
THIN = {"prereg", "prereg.plugin", "prereg.runtime", "prereg.runtime.roles"}
NEVER = ("numpy", "hypothesis", "scipy", "torch")

REPORT = """
import json, os, sys

def pytest_sessionfinish(session):
    worker = getattr(session.config, "workerinput", {{}}).get("workerid", "main")
    loaded = sorted(m for m in sys.modules if m == "prereg" or m.startswith("prereg."))
    others = sorted(m for m in {NEVER!r} if m in sys.modules)
    with open(os.path.join({out!r}, worker + ".json"), "w") as f:
        json.dump({{"prereg": loaded, "others": others}}, f)
"""


def _loaded_by(code: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_importing_the_plugin_loads_only_the_thin_part_of_prereg():
    loaded = _loaded_by("import prereg.plugin")
    assert {m for m in loaded if m.partition(".")[0] == "prereg"} == THIN
    assert not [m for m in NEVER if m in loaded]


def test_the_experiments_helpers_still_come_from_the_plugin():
    loaded = _loaded_by("from prereg.plugin import parametrize_items, stage_plan")
    assert "prereg.runtime.process_run" in loaded  # loaded on first use, by name
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        import prereg.plugin

        prereg.plugin.nothing  # noqa: B018 -- the attribute access is what is checked


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_software_run_with_prereg_autoloaded_never_loads_the_runtime(tmp_path, workers):
    """A project's ordinary checks, with prereg installed and autoloaded (its entry point),
    serially and on xdist workers: every process ends with only the thin part loaded."""
    project, out = tmp_path / "p", tmp_path / "loaded"
    project.mkdir()
    out.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "conftest.py").write_text(textwrap.dedent(REPORT.format(NEVER=NEVER, out=str(out))))
    (project / "test_plain.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *workers],
        cwd=project,
        env=outer_environment(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    reports = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert set(reports) == ({"main", "gw0", "gw1"} if workers else {"main"})
    for worker, report in reports.items():
        assert set(report["prereg"]) == THIN, (worker, report)
        assert report["others"] == [], (worker, report)


def test_hypothesis_is_a_dependency_of_the_checks_only():
    """A project that installs prereg gets no hypothesis, whose pytest plugin would load in
    every one of its research processes; prereg's own checks install it (the test extra)."""
    from packaging.requirements import Requirement

    requirements = [Requirement(r) for r in importlib.metadata.requires("prereg") or []]
    hypothesis = [r for r in requirements if r.name == "hypothesis"]
    assert hypothesis, "prereg's own checks need hypothesis (the test extra)"
    assert all(r.marker is not None and 'extra == "test"' in str(r.marker) for r in hypothesis)


LOADERS = """
import json, os, sys
import prereg.runtime.process_run

def test_which_loader(request):
    assert 2 * 2 == 4
    with open(os.path.join({out!r}, "loaders.json"), "w") as f:
        json.dump({{
            name: type(sys.modules[name].__loader__).__name__
            for name in ("prereg.runtime.process_run", "prereg.decisions.gate", __name__)
        }}, f)
"""


def test_pytest_rewrites_the_projects_tests_but_not_prereg_s_own_modules(tmp_path):
    """prereg's distribution declares a pytest11 entry point, so pytest would parse and
    rewrite every module of prereg that a process imports (in every process, where no
    bytecode is written); the plugin takes prereg off that list as it loads, and the
    project's own test modules are rewritten as before."""
    project, out = tmp_path / "p", tmp_path / "out"
    project.mkdir()
    out.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "test_loaders.py").write_text(textwrap.dedent(LOADERS.format(out=str(out))))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env={**outer_environment(), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    loaders = json.loads((out / "loaders.json").read_text())
    assert loaders.pop("test_loaders") == "AssertionRewritingHook"
    assert "AssertionRewritingHook" not in loaders.values(), loaders
