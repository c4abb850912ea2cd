"""The code a research run executes is the approved checkout's, the standard library's or
an installed distribution's, and nothing else.

Each attack is performed for real in a toy repository and must be refused by the gate
(condition ``execution``) before the run id is spent; honest runs (genuine bytecode written
by earlier imports, pytest's rewritten test modules, the editable install of prereg and
setuptools' ``.pth``) must pass.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from importlib._bootstrap_external import _code_to_hash_pyc, _code_to_timestamp_pyc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prereg.evidence import execution
from prereg.kinds import stages
from support.distributions import fake_distribution
from support.toy import make_toy_repo

pytestmark = [pytest.mark.software, pytest.mark.attack]

RUN = "toy-20261130-001"
USAGE_ERROR = 4
REPO = Path(__file__).resolve().parents[2]
TAG = sys.implementation.cache_tag
WRITE_BYTECODE = {"PYTHONDONTWRITEBYTECODE": ""}  # empty: Python writes bytecode


def assert_refused(toy, done, *phrases: str) -> None:
    text = done.stdout + done.stderr
    assert done.returncode == USAGE_ERROR, text
    assert "[execution]" in text, text
    for phrase in phrases:
        assert phrase in text, text
    assert not (toy.root / "runs" / RUN / "start.json").exists(), "the run id must stay unspent"
    assert any("execution" in {x["condition"] for x in r["refusals"]} for r in toy.refusals())


def assert_runs(toy, done) -> None:
    assert done.returncode == 0, done.stdout + done.stderr
    assert toy.manifest(RUN)["status"] == "complete"


@pytest.fixture
def toy(approved_toy):
    """The toy project at ``tmp_path / "project"`` with run RUN approved and committed."""
    return approved_toy


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- honest runs ----------------------------------------------------------------------------


def test_an_honest_run_with_genuine_bytecode_from_earlier_imports_passes(toy):
    """Bytecode that Python and pytest wrote themselves is no reason to refuse."""
    software = toy.pytest("checks", env=WRITE_BYTECODE)  # pytest rewrites and caches
    assert software.returncode == 0, software.stdout + software.stderr
    toy.run(sys.executable, "-c", "import conftest", env=WRITE_BYTECODE, check=True)
    caches = sorted(p.name for p in toy.root.rglob("__pycache__/*.pyc"))
    assert f"conftest.{TAG}.pyc" in caches, caches
    assert any("-pytest-" in name for name in caches), caches
    assert_runs(toy, toy.pytest("--research-stage=toy", env=WRITE_BYTECODE))
    assert toy.audit(RUN).returncode == 0


def test_genuine_bytecode_passes_and_planted_bytecode_with_a_valid_header_is_refused(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("VALUE = 1\n\ndef f():\n    return VALUE\n")
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    pyc = cache / f"mod.{TAG}.pyc"
    import py_compile

    py_compile.compile(str(source), cfile=str(pyc), doraise=True)
    assert execution._cache_problems(str(cache), str(tmp_path), None, None, "c") == []
    stat = source.stat()
    other = compile(
        "VALUE = 2\n\ndef f():\n    return VALUE\n", str(source), "exec", dont_inherit=True
    )
    pyc.write_bytes(_code_to_timestamp_pyc(other, int(stat.st_mtime), stat.st_size))
    found = execution._cache_problems(str(cache), str(tmp_path), None, None, "c")
    assert len(found) == 1 and f"c/mod.{TAG}.pyc" in found[0] and "mod.py" in found[0], found
    # An unchecked hash-based pyc is loaded without looking at the source: refused too.
    pyc.write_bytes(_code_to_hash_pyc(other, importlib.util.source_hash(b"x"), checked=False))
    assert execution._cache_problems(str(cache), str(tmp_path), None, None, "c")
    # A header that no longer matches the source is never loaded (Python recompiles).
    pyc.write_bytes(_code_to_timestamp_pyc(other, int(stat.st_mtime) + 7, stat.st_size))
    assert execution._cache_problems(str(cache), str(tmp_path), None, None, "c") == []


@settings(max_examples=40, deadline=None)
@given(
    real=st.lists(st.integers(-50, 50), min_size=1, max_size=6),
    planted=st.lists(st.integers(-50, 50), min_size=1, max_size=6),
)
def test_bytecode_is_refused_exactly_when_its_code_differs_from_the_source(
    tmp_path_factory, real, planted
):
    folder = tmp_path_factory.mktemp("pyc")
    source = folder / "mod.py"
    source.write_text("".join(f"x{i} = {v}\n" for i, v in enumerate(real)))
    (folder / "__pycache__").mkdir()
    code = compile(
        "".join(f"x{i} = {v}\n" for i, v in enumerate(planted)),
        str(source),
        "exec",
        dont_inherit=True,
    )
    stat = source.stat()
    pyc = folder / "__pycache__" / f"mod.{TAG}.pyc"
    pyc.write_bytes(_code_to_timestamp_pyc(code, int(stat.st_mtime), stat.st_size))
    found = execution._cache_problems(str(folder / "__pycache__"), str(folder), None, None, "c")
    assert bool(found) == (real != planted), found


def test_bytecode_found_equal_is_not_compiled_again_by_a_later_process_but_a_planted_pyc_is(
    tmp_path, monkeypatch
):
    """Each pair of files is compiled once per machine: the verdict "equal" is kept in the
    user's cache by both files' hashes, so a pyc planted later, or a verdict of another
    optimisation level, is compared again."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(execution, "_COMPARED", {})
    compiled = []
    compare = execution._compiled_problem
    monkeypatch.setattr(
        execution, "_compiled_problem", lambda *args: compiled.append(args[1]) or compare(*args)
    )
    source = tmp_path / "mod.py"
    source.write_text("VALUE = 1\n")
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    pyc = cache / f"mod.{TAG}.pyc"
    import py_compile

    py_compile.compile(str(source), cfile=str(pyc), doraise=True)

    def problems_of_a_new_process():
        execution._COMPARED.clear()
        return execution._cache_problems(str(cache), str(tmp_path), None, None, "c")

    assert problems_of_a_new_process() == [] and len(compiled) == 1
    assert len(list((tmp_path / "cache" / "prereg" / execution.EQUAL_BYTECODE).rglob("*"))) == 2
    assert problems_of_a_new_process() == [] and len(compiled) == 1
    stat = source.stat()
    planted = compile("VALUE = 2\n", str(source), "exec", dont_inherit=True)
    pyc.write_bytes(_code_to_timestamp_pyc(planted, int(stat.st_mtime), stat.st_size))
    assert problems_of_a_new_process() and len(compiled) == 2
    assert problems_of_a_new_process() and len(compiled) == 3  # a refusal is never kept
    data, text = pyc.read_bytes(), source.read_bytes()
    keys = {execution._comparison_key(data, text, level, None) for level in (0, 1, 2)}
    assert len(keys) == 3


def test_a_pytest_rewritten_module_is_checked_against_pytests_own_rewrite(tmp_path):
    from _pytest.assertion import rewrite

    source = tmp_path / "test_mod.py"
    source.write_text("def test_x():\n    assert 1 + 1 == 2\n")
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    pyc = cache / ("test_mod" + rewrite.PYC_TAIL)
    digest, code = rewrite._rewrite_test(source, None)
    with open(pyc, "wb") as handle:
        rewrite._write_pyc_fp(handle, digest, code)
    tail, check = execution._pytest_rewriter([])
    assert execution._cache_problems(str(cache), str(tmp_path), tail, check, "c") == []
    planted = compile("def test_x():\n    pass\n", str(source), "exec", dont_inherit=True)
    with open(pyc, "wb") as handle:
        rewrite._write_pyc_fp(handle, digest, planted)
    found = execution._cache_problems(str(cache), str(tmp_path), tail, check, "c")
    assert found and "test_mod" in found[0], found


# -- attacks, end to end ----------------------------------------------------------------------


def test_a_plugin_from_outside_the_checkout_through_pytest_addopts_is_refused(toy, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "swapgate.py").write_text("def pytest_configure(config):\n    pass\n")
    env = {"PYTEST_ADDOPTS": "-p swapgate", "PYTHONPATH": str(outside)}
    done = toy.pytest("--research-stage=toy", env=env)
    text = done.stdout + done.stderr
    assert done.returncode == USAGE_ERROR, text
    assert "-p swapgate loads a plugin that is not an installed pytest plugin" in text, text
    assert not (toy.root / "runs" / RUN / "start.json").exists(), "the run id must stay unspent"


def test_a_conftest_above_the_root_with_confcutdir_is_refused(toy, tmp_path):
    above = tmp_path / "conftest.py"
    above.write_text("def pytest_configure(config):\n    pass\n")
    done = toy.pytest(f"--confcutdir={tmp_path}", "--research-stage=toy")
    text = done.stdout + done.stderr
    assert done.returncode == USAGE_ERROR, text  # the option itself may be refused first
    assert not (toy.root / "runs" / RUN / "start.json").exists()
    # However pytest came to load it, a conftest outside the checkout is refused by name.
    script = (
        "import json, sys, importlib.util\n"
        "from pathlib import Path\n"
        "from prereg import execution\n"
        f"spec = importlib.util.spec_from_file_location('conftest', {str(above)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        f"plugins = [({str(above)!r}, module)]\n"
        "print(json.dumps(execution.problems(Path('.'), plugins)))\n"
    )
    found = json.loads(toy.run(sys.executable, "-c", script, check=True).stdout)
    assert any(str(above) in f and "outside the approved" in f for f in found), found


def test_a_path_entry_outside_the_checkout_is_refused_before_anything_is_imported_from_it(
    toy, tmp_path
):
    """A module the experiment imports only during collection, after the gate, would come
    from PYTHONPATH unchecked: the entry itself is refused."""
    outside = tmp_path / "later"
    outside.mkdir()
    (outside / "shadowed_helper.py").write_text("X = 'not approved'\n")
    done = toy.pytest("--research-stage=toy", env={"PYTHONPATH": str(outside)})
    assert_refused(toy, done, f"sys.path entry {outside}")


def test_a_run_started_from_command_line_code_is_refused(toy):
    """``python -c`` could patch the gate in memory before calling pytest."""
    code = (
        "import sys, pytest\n"
        "sys.exit(pytest.main(['-p', 'no:cacheprovider', '--research-stage=toy']))\n"
    )
    done = toy.run(sys.executable, "-c", code)
    assert_refused(toy, done, "python -c")


def test_a_sitecustomize_outside_the_standard_library_is_refused(toy, tmp_path):
    outside = tmp_path / "custom"
    outside.mkdir()
    (outside / "sitecustomize.py").write_text("import os\nos.environ['CUSTOMIZED'] = '1'\n")
    done = toy.pytest("--research-stage=toy", env={"PYTHONPATH": str(outside)})
    assert_refused(toy, done, "sitecustomize", str(outside / "sitecustomize.py"))


@pytest.mark.parametrize("prefix", [False, True], ids=["pycache", "pycache-prefix"])
def test_planted_bytecode_for_committed_source_is_refused(tmp_path, prefix):
    toy = make_toy_repo(tmp_path / "project")
    (toy.root / "toyhelper.py").write_text("VALUE = 1\n")
    (toy.root / "conftest.py").write_text(
        'import toyhelper  # noqa: F401\n\npytest_plugins = ("prereg.plugin",)\n'
    )
    toy.commit("A helper the conftest imports")
    toy.approve("toy", RUN)
    source = toy.root / "toyhelper.py"
    stat = source.stat()
    planted = compile("VALUE = 2\n", str(source), "exec", dont_inherit=True)  # same size
    env = {}
    cache = toy.root / "__pycache__"
    if prefix:  # PYTHONPYCACHEPREFIX: bytecode lives in a mirror of the source folders
        env = {"PYTHONPYCACHEPREFIX": str(tmp_path / "pyc")}
        cache = tmp_path / "pyc" / str(toy.root.resolve()).lstrip(os.sep)
    cache.mkdir(parents=True, exist_ok=True)
    pyc = cache / f"toyhelper.{TAG}.pyc"
    pyc.write_bytes(_code_to_timestamp_pyc(planted, int(stat.st_mtime), stat.st_size))
    probe = "import toyhelper; print(toyhelper.VALUE)"
    loaded = toy.run(sys.executable, "-c", probe, env=env, check=True)
    assert loaded.stdout.strip() == "2", "the planted bytecode is what Python runs"
    done = toy.pytest("--research-stage=toy", env=env)
    assert_refused(toy, done, f"toyhelper.{TAG}.pyc", "toyhelper.py")
    pyc.unlink()
    assert_runs(toy, toy.pytest("--research-stage=toy", env={**env, **WRITE_BYTECODE}))


def test_python_optimisation_that_strips_asserts_is_refused(toy):
    done = toy.pytest("--research-stage=toy", env={"PYTHONOPTIMIZE": "1"})
    assert_refused(toy, done, "optimisation level 1", "PYTHONOPTIMIZE")


def _ignore(toy, *patterns: str) -> None:
    with open(toy.root / ".gitignore", "a") as handle:
        handle.write("\n".join(patterns) + "\n")
    toy.commit("Ignore local files")


def test_ignored_metadata_that_maps_a_built_in_kind_to_plain_is_refused(toy):
    _ignore(toy, "*.egg-info/")
    toy.approve("toy", "toy-20261130-002")
    meta = toy.root / "toy_extras.egg-info"
    meta.mkdir()
    (meta / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: toy-extras\nVersion: 0.1\n")
    (meta / "entry_points.txt").write_text(
        "[prereg.stage_kinds]\ne04.robustness = prereg.kinds.stages:PLAIN\n"
    )
    probe = toy.run(
        sys.executable,
        "-c",
        "import importlib.metadata as m, prereg.kinds.stages as s; "
        "print([p.value for p in m.entry_points(group='prereg.stage_kinds')]); "
        "print(s.load_kind('e04.robustness').name)",
        check=True,
    )
    assert "prereg.kinds.stages:PLAIN" in probe.stdout, "the planted entry point is visible"
    assert probe.stdout.splitlines()[-1] == "e04.robustness", "but load_kind never uses it"
    done = toy.pytest("--research-stage=toy", "--run-id=toy-20261130-002")
    text = done.stdout + done.stderr
    assert done.returncode == USAGE_ERROR and "[execution]" in text, text
    assert "toy_extras.egg-info" in text and "e04.robustness" in text, text


def test_ignored_metadata_declaring_a_pytest_plugin_is_refused(toy):
    _ignore(toy, "*.dist-info/")
    toy.approve("toy", "toy-20261130-002")
    meta = toy.root / "toy_plug-0.1.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-plug\nVersion: 0.1\n")
    (meta / "entry_points.txt").write_text("[pytest11]\ntoyplug = conftest\n")
    done = toy.pytest("--research-stage=toy", "--run-id=toy-20261130-002")
    text = done.stdout + done.stderr
    assert done.returncode == USAGE_ERROR and "[execution]" in text, text
    assert "toy_plug-0.1.dist-info" in text and "pytest11" in text, text


def test_ignored_python_files_in_source_folders_are_refused_but_data_folders_are_not(toy):
    _ignore(toy, "local_*.py", "cache/", "extra/")
    toy.approve("toy", "toy-20261130-002")
    (toy.root / "experiments" / "local_patch.py").write_text("X = 1\n")
    extra = toy.root / "experiments" / "extra"  # no package, no conftest at its top
    (extra / "deeper").mkdir(parents=True)
    (extra / "deeper" / "conftest.py").write_text("def pytest_configure(config):\n    pass\n")
    (toy.root / "cache").mkdir()
    (toy.root / "cache" / "scratch.py").write_text("X = 1\n")  # a data folder: never imported
    done = toy.pytest("--research-stage=toy", "--run-id=toy-20261130-002")
    text = done.stdout + done.stderr
    assert done.returncode == USAGE_ERROR and "[execution]" in text, text
    assert "experiments/local_patch.py" in text, text
    assert "experiments/extra/deeper/conftest.py" in text, text
    assert "cache/scratch.py" not in text, text
    (toy.root / "experiments" / "local_patch.py").unlink()
    (extra / "deeper" / "conftest.py").unlink()
    assert toy.pytest("--research-stage=toy", "--run-id=toy-20261130-002").returncode == 0


# -- .pth files, installed distributions, stage kinds --------------------------------------


def test_pth_files_must_be_recorded_by_an_installed_distribution(tmp_path, monkeypatch):
    site = tmp_path / "site-packages"
    fake_distribution(site, "good", {"good.pth": "import os\n", "tampered.pth": "\n"}, {})
    (site / "tampered.pth").write_text("import os; os.environ['X'] = '1'\n")
    (site / "stray.pth").write_text("import os\n")
    monkeypatch.setattr(execution, "site_dirs", lambda: [str(site)])
    env = execution.Environment.read(REPO)
    found = execution._pth_problems(env)
    assert len(found) == 2, found
    assert any("stray.pth" in f and "not listed in the RECORD" in f for f in found), found
    assert any("tampered.pth" in f and "differs from the RECORD of good" in f for f in found)


def test_a_loaded_file_whose_record_row_binds_no_hash_is_refused_and_a_stronger_hash_checked(
    tmp_path,
):
    """A RECORD row may omit the hash (an old installer, a hand-edited RECORD): such a file,
    edited after approval, would run unchecked, so it is refused by name; bytecode compiled
    at install (no hash, by design) passes; a sha384 row is checked like a sha256 one."""
    site = tmp_path / "site-packages"
    files = {"nohash.py": "X = 1\n", "strong.py": "Y = 2\n", "pkg/__pycache__/m.cpython.pyc": "b"}
    meta = fake_distribution(site, "loose", files, {})
    strong = base64.urlsafe_b64encode(hashlib.sha384(b"Y = 2\n").digest()).rstrip(b"=")
    rows = [
        "nohash.py,,6",
        f"strong.py,sha384={strong.decode()},6",
        "pkg/__pycache__/m.cpython.pyc,,",
        f"{meta.name}/RECORD,,",
    ]
    (meta / "RECORD").write_text("\n".join(rows) + "\n")
    installed = execution.Installed.scan([str(site)])
    found = installed.check(str(site / "nohash.py"))
    assert found is not None and "has no hash prereg can check in the RECORD of loose" in found
    assert installed.check(str(site / "strong.py")) is None
    assert installed.check(str(site / "pkg" / "__pycache__" / "m.cpython.pyc")) is None
    (site / "strong.py").write_text("Y = 3\n")
    assert "differs from the RECORD of loose" in (installed.check(str(site / "strong.py")) or "")


def test_planted_bytecode_in_the_harness_installed_machinery_is_refused(tmp_path, monkeypatch):
    site = tmp_path / "site-packages"
    source_text = "def hook():\n    return 'checked'\n"
    fake_distribution(site, "pluggy", {"pluggy_copy/__init__.py": source_text}, {})
    monkeypatch.setattr(execution, "site_dirs", lambda: [str(site.resolve())])
    env = execution.Environment.read(REPO)
    source = str((site / "pluggy_copy" / "__init__.py").resolve())
    pyc = Path(importlib.util.cache_from_source(source))
    pyc.parent.mkdir()
    stat = os.stat(source)
    genuine = compile(source_text, source, "exec", dont_inherit=True)
    pyc.write_bytes(_code_to_timestamp_pyc(genuine, int(stat.st_mtime), stat.st_size))
    files = {source: ["pluggy_copy"]}
    assert execution._installed_bytecode_problems(env, files) == []
    planted = compile(source_text.replace("checked", "skipped"), source, "exec", dont_inherit=True)
    pyc.write_bytes(_code_to_timestamp_pyc(planted, int(stat.st_mtime), stat.st_size))
    found = execution._installed_bytecode_problems(env, files)
    assert len(found) == 1 and str(pyc) in found[0] and "reinstall pluggy" in found[0], found


@pytest.mark.parametrize("session_follows", [False, True], ids=["session", "launcher"])
def test_a_launcher_leaves_to_its_session_the_bytecode_the_session_loads_again(
    monkeypatch, session_follows
):
    """The installed harness and an editable install's checkout are loaded by the hermetic
    session from the same files, and its gate compares their bytecode; the launcher judges
    only the approved checkout's working tree, which the session never loads."""
    env = execution.Environment.read(REPO)
    editable = execution.Checkout(top="/elsewhere", blobs={}, others=[], ignored=[], strict=False)
    env.checkouts = [env.root, editable]
    monkeypatch.setattr(execution, "_installed_bytecode_problems", lambda *_: ["harness pyc"])
    monkeypatch.setattr(execution, "_ignored_problems", lambda checkout, _: [checkout.top])
    found = execution.problems(REPO, [], env=env, session_follows=session_follows)
    assert env.root.top in found, found
    assert ("harness pyc" in found) is not session_follows, found
    assert ("/elsewhere" in found) is not session_follows, found


def test_the_real_environment_pth_files_and_packages_pass():
    """setuptools' distutils-precedence.pth and prereg's editable-install .pth are recorded."""
    env = execution.Environment.read(REPO)
    assert execution._pth_problems(env) == []
    assert any(p.endswith(".pth") for p in env.installed.files), "the venv has .pth files"


def test_stage_kinds_from_installed_distributions_need_a_recorded_module(tmp_path, monkeypatch):
    site = tmp_path / "site-packages"
    module = "from prereg.kinds.stages import StageKind\nKIND = StageKind(name='toy.extra')\n"
    points = "[prereg.stage_kinds]\ntoy.extra = toykinds_mod:KIND\n"
    fake_distribution(site, "toykinds", {"toykinds_mod.py": module}, {"entry_points.txt": points})
    monkeypatch.setattr(execution, "site_dirs", lambda: [str(site)])
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(stages.KIND_POINT, "_loaded", {})
    (site / "toykinds_mod.py").write_text(module + "# edited after install\n")
    with pytest.raises(stages.UnknownStageKind, match="differs from the RECORD of toykinds 1.0"):
        stages.load_kind("toy.extra")
    (site / "toykinds_mod.py").write_text(module)
    assert stages.load_kind("toy.extra").name == "toy.extra"
    assert stages.kind_origin("toy.extra")["distribution"] == "toykinds 1.0"


def test_built_in_kinds_resolve_to_tracked_code_only():
    for name, target in stages.BUILT_IN_KINDS.items():
        kind = stages.load_kind(name)
        module = sys.modules[target.split(":")[0]]
        assert kind.name == name and Path(module.__file__).is_relative_to(REPO / "lib")
        assert stages.kind_origin(name) == {"built_in": target}
    with pytest.raises(ValueError, match="built in"):
        stages.register_kind(stages.StageKind(name="e04.robustness"))
    with pytest.raises(stages.UnknownStageKind, match="not built in nor installed"):
        stages.load_kind("no.such-kind")
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '[project.entry-points."prereg.stage_kinds"]' not in pyproject, (
        "the built-in kinds have one home: prereg.kinds.stages.BUILT_IN_KINDS"
    )


# -- what the manifest records --------------------------------------------------------------


def test_record_names_the_variables_plugins_and_customize_modules(tmp_path):
    custom = tmp_path / "custom"
    custom.mkdir()
    (custom / "sitecustomize.py").write_text("X = 1\n")
    toy = make_toy_repo(tmp_path / "project")
    script = (
        "import json, sys, pytest, prereg.plugin\n"
        "from pathlib import Path\n"
        "from prereg import execution\n"
        "plugins = [('prereg.plugin', prereg.plugin), ('blocked', None)]\n"
        "print(json.dumps({'record': execution.record(Path('.'), plugins),"
        " 'problems': execution.problems(Path('.'), plugins)}))\n"
    )
    env = {"PYTHONPATH": str(custom), "PYTEST_ADDOPTS": "-p no:xdist", "PYTEST_PLUGINS": ""}
    out = json.loads(toy.run(sys.executable, "-c", script, env=env, check=True).stdout)
    record = out["record"]
    assert record["PYTHONPATH"] == str(custom) and record["PYTEST_ADDOPTS"] == "-p no:xdist"
    assert record["PYTEST_PLUGINS"] == ""
    assert record["sitecustomize"] == {
        "file": str(custom / "sitecustomize.py"),
        "sha256": sha256(custom / "sitecustomize.py"),
    }
    (plugin,) = record["plugins"]
    import prereg.plugin

    assert plugin["name"] == "prereg.plugin" and plugin["module"] == "prereg.plugin"
    assert plugin["sha256"] == sha256(Path(prereg.plugin.__file__))
    assert any("sitecustomize" in p for p in out["problems"]), out["problems"]
    editable = record["editable"]
    if Path(prereg.plugin.__file__).resolve().is_relative_to(toy.root):
        assert editable == []
    else:  # prereg runs from its own checkout: the commit and any edits are recorded
        assert editable and editable[0]["commit"], editable


def test_the_real_project_is_accounted_for_with_its_heavy_packages_loaded():
    """The project's own checkout with torch and numpy loaded: nothing but work in progress."""
    script = (
        "import json, torch, numpy, scipy, pytest\n"
        "import prereg.e04.stage, prereg.rp002a.confirmatory_stage\n"
        "from pathlib import Path\n"
        "from prereg import execution\n"
        "print(json.dumps(execution.problems(Path('.'), [])))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    in_progress = [line[3:] for line in status.splitlines()]
    unexplained = [
        p
        for p in json.loads(done.stdout)
        if not any(path in p for path in in_progress) and "(python -c)" not in p  # this probe
    ]
    assert unexplained == []


# -- xdist workers ----------------------------------------------------------------------------


def test_workers_started_with_another_interpreter_or_environment_are_refused(toy, tmp_path):
    """The gate checks its own process; ``--tx`` could run the items somewhere else."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "sitecustomize.py").write_text("import os\nos.environ['SWAPPED'] = '1'\n")
    wrapper = outside / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={outside} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    marker = tmp_path / "marker"
    (outside / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'a').write('ran')\n")
    spec = f"2*popen//python={wrapper}"
    software = toy.pytest("checks", "--dist", "load", "--tx", spec)
    assert software.returncode == 0 and marker.read_text() == "ranran", "the workers ran it"
    for spec in (f"popen//python={wrapper}", f"popen//env:PYTHONPATH={outside}", "popen//chdir=/"):
        done = toy.pytest("--research-stage=toy", "--dist", "load", "--tx", f"2*{spec}")
        assert_refused(toy, done, "xdist worker spec", spec)


def test_workers_of_this_interpreter_pass(toy):
    assert_runs(toy, toy.pytest("--research-stage=toy", "-n", "2"))


class _Config:
    def __init__(self, **options):
        self.option = type("Options", (), options)()


@given(
    count=st.integers(1, 4),
    extra=st.sampled_from(
        ["", "//id=gw9", "//python=PYTHON", "//python=/usr/bin/env", "//env:A=1", "//chdir=/"]
    ),
    kind=st.sampled_from(["popen", "ssh=host", "socket=127.0.0.1:8888"]),
)
def test_only_popen_workers_of_this_interpreter_or_proving_remote_workers_pass(count, extra, kind):
    """A local worker must be this interpreter, here; a remote one (socket=, ssh=) with only
    chdir/id/python options passes here because it proves its own state (prereg.runtime.remote)."""
    spec = f"{count}*{kind}{extra.replace('PYTHON', sys.executable)}"
    found = execution._worker_problems([("pytestconfig", _Config(tx=[spec]))])
    local_ok = kind == "popen" and extra in ("", "//id=gw9", "//python=PYTHON")
    remote_ok = kind != "popen" and not extra.startswith("//env:")
    honest = local_ok or remote_ok
    assert (found == []) == honest, (spec, found)
    assert execution.worker_specs([("pytestconfig", _Config(tx=[spec]))]) == [spec[2:]] * count


def _scratch_checkout(root: Path) -> None:
    root.mkdir()
    for args in (["init", "-q"], ["config", "user.email", "a@b.c"], ["config", "user.name", "A"]):
        subprocess.run(["git", *args], cwd=root, check=True)
    (root / "lib" / "pkg").mkdir(parents=True)
    (root / "lib" / "pkg" / "__init__.py").write_text("")
    (root / "lib" / "pkg" / "cli.py").write_text("def main():\n    return 0\n")
    (root / ".gitignore").write_text("*.egg-info/\n__pycache__/\n")
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "scratch"], cwd=root, check=True)


def test_editable_install_metadata_is_allowed_only_while_it_names_committed_code(tmp_path):
    """``pip install -e .`` writes lib/<name>.egg-info (git-ignored): allowed while every
    entry point names a committed module and none adds a pytest plugin or remaps a kind."""
    root = tmp_path / "scratch"
    _scratch_checkout(root)
    meta = root / "lib" / "pkg.egg-info"
    meta.mkdir()
    for name in ("PKG-INFO", "SOURCES.txt", "top_level.txt", "dependency_links.txt"):
        (meta / name).write_text("Metadata-Version: 2.1\nName: pkg\nVersion: 0.1\n")
    built_in = "\n".join(f"{k} = {v}" for k, v in stages.BUILT_IN_KINDS.items())
    honest = f"[console_scripts]\npkg = pkg.cli:main\n\n[prereg.stage_kinds]\n{built_in}\n"
    (meta / "entry_points.txt").write_text(honest)
    checkout = execution.Checkout.read(root, strict=True)
    assert execution._ignored_problems(checkout, []) == []
    for extra, phrase in (
        ("[console_scripts]\nother = pkg.planted:main\n", "pkg.planted is not a committed"),
        ("[pytest11]\nplug = pkg.cli\n", "pytest plugin"),
        ("[prereg.stage_kinds]\ne04.robustness = prereg.kinds.stages:PLAIN\n", "redirects"),
    ):
        (meta / "entry_points.txt").write_text(extra)
        found = execution._ignored_problems(checkout, [])
        assert len(found) == 1 and "lib/pkg.egg-info" in found[0] and phrase in found[0], found


def test_the_manifest_records_the_execution_environment(toy):
    done = toy.pytest("--research-stage=toy", "-n", "2", env={"PYTEST_ADDOPTS": "-p no:randomly"})
    assert_runs(toy, done)  # each worker re-checked its own code too
    recorded = toy.manifest(RUN)["environment"]["execution"]
    # The session takes the launcher's PYTEST_ADDOPTS on its command line, never from the
    # environment; the manifest records both.
    assert recorded["PYTEST_ADDOPTS"] is None and recorded["PYTHONPATH"] is None
    assert "-p no:randomly" in " ".join(recorded["argv"]), recorded["argv"]
    plugins = {p["name"]: p for p in recorded["plugins"]}
    import prereg.plugin

    mine = [p for p in plugins.values() if p["module"] == "prereg.plugin"]
    assert mine and mine[0]["sha256"] == sha256(Path(prereg.plugin.__file__))
    assert "conftest.py" in {Path(p["file"]).name for p in plugins.values() if p["file"]}


def test_console_scripts_are_accounted_for_by_their_record(tmp_path, monkeypatch):
    """``.venv/bin/pytest`` is __main__ of a run started as the README says: pip wrote it and
    listed it, with its hash, in pytest's RECORD. An edited copy is refused."""
    site = tmp_path / "lib" / "site-packages"
    script = "#!/usr/bin/python\nfrom tool import main\nmain()\n"
    fake_distribution(site, "tool", {"../../bin/tool": script}, {})
    monkeypatch.setattr(execution, "site_dirs", lambda: [str(site.resolve())])
    monkeypatch.setattr(execution, "scripts_dir", lambda: str((tmp_path / "bin").resolve()))
    env = execution.Environment.read(REPO)
    path = str((tmp_path / "bin" / "tool").resolve())
    assert env.account(path) is None
    (tmp_path / "bin" / "tool").write_text(script + "import os\n")
    assert "differs from the RECORD of tool" in (env.account(path) or ""), env.account(path)
    stray = tmp_path / "bin" / "stray"
    stray.write_text(script)
    assert env.account(str(stray.resolve())) is not None, "a script no RECORD lists is refused"


def test_a_run_started_from_the_venv_console_scripts_passes_the_gate(toy):
    """The README's researcher commands start ``.venv/bin/pytest`` and ``.venv/bin/prereg``."""
    bin_dir = Path(sys.executable).parent
    assert_runs(
        toy, toy.run(str(bin_dir / "pytest"), "-p", "no:cacheprovider", "--research-stage=toy")
    )
    again = toy.run(
        str(bin_dir / "prereg"),
        "approve",
        "--stage",
        "toy",
        "--run-id",
        "toy-20261130-002",
        "--accept-deviations",
    )
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_tx_spec_beside_n_is_replaced_by_n_and_the_run_completes(toy, tmp_path):
    """``-n 2`` replaces ``--tx popen//chdir=DIR`` (xdist's rule): both workers are popen
    workers of the session's snapshot, and a worker does not judge the --tx it was given."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = toy.pytest("--research-stage=toy", "-n", "2", "--tx", f"popen//chdir={elsewhere}")
    assert_runs(toy, done)
    ran = toy.manifest(RUN)["environment"]
    assert {w["checkout"] for w in ran["workers"]} == {ran["snapshot"]["folder"]}


def test_a_package_installed_after_the_gate_is_refused_by_the_environment_the_gate_read(
    tmp_path, monkeypatch
):
    """The collection-time check judges against the Environment the gate read: a package
    pip-installed between the gate and collection (a stage module importing it) is listed in
    no RECORD the gate saw, so its code is refused although a fresh read would accept it."""
    site = tmp_path / "site-packages"
    fake_distribution(site, "early", {"early_mod.py": "X = 1\n"}, {})
    monkeypatch.setattr(execution, "site_dirs", lambda: [str(site.resolve())])
    at_gate = execution.Environment.read(REPO)
    fake_distribution(site, "late", {"late_mod.py": "X = 2\n"}, {})
    late = str((site / "late_mod.py").resolve())
    early = str((site / "early_mod.py").resolve())
    assert at_gate.account(early) is None
    assert "not listed in the RECORD" in (at_gate.account(late) or ""), at_gate.account(late)
    assert execution.Environment.read(REPO).account(late) is None, "a fresh read accepts it"


SHARED_LIBRARY_SCENARIO = """
import ctypes, json, shutil, sys
from pathlib import Path
from prereg.evidence import execution
site = sys.argv[1]
ctypes.CDLL(str(Path(site, "fakelib.libs", "libfake.so")))  # mapped, as a bundled library is
ctypes.CDLL(str(Path(site, "stray.so")))  # mapped, listed in no RECORD
installed = execution.Installed.scan([site])
out = {"mapped": execution.mapped_libraries([site])}
out["before"] = {Path(p).name: installed.check(p) for p in out["mapped"]}
library = Path(site, "fakelib.libs", "libfake.so")
other = library.with_name("replacement")
other.write_bytes(library.read_bytes() + b"replaced after it was loaded")
other.replace(library)  # the mapped one is now deleted; the path holds other bytes
out["after"] = installed.check(str(library.resolve()))
checkout = execution.Checkout(top=site, blobs={}, others=[], ignored=[], strict=False)
env = execution.Environment(checkout, [checkout], installed, [site], [], {})
judged = execution.problems(Path(site), [], worker=True, env=env)
out["judged"] = [p for p in judged if p.startswith("loaded code shared library")]
print(json.dumps(out))
"""


def test_a_shared_library_an_extension_loads_is_checked_against_its_record(tmp_path):
    # Shared libraries a distribution bundles (numpy's OpenBLAS) are listed in its RECORD
    # with a hash, but no module's file names them: they were never compared.
    site = tmp_path / "site"
    candidates = sorted(Path("/usr/lib").rglob("libz.so*")) or sorted(
        Path("/lib").rglob("libz.so*")
    )
    if not candidates:
        pytest.skip("no libz.so to load on this machine")
    data = candidates[0].read_bytes()
    fake_distribution(site, "fakelib", {"fakelib.libs/libfake.so": data}, {})
    (site / "stray.so").write_bytes(data)
    done = subprocess.run(
        [sys.executable, "-c", SHARED_LIBRARY_SCENARIO, str(site)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout)
    assert [Path(p).name for p in out["mapped"]] == ["libfake.so", "stray.so"]
    assert out["before"]["libfake.so"] is None
    assert "is not listed in the RECORD of any installed distribution" in out["before"]["stray.so"]
    assert "differs from the RECORD of fakelib 1.0" in out["after"]
    judged = [line.split(" from ")[1].split(" ")[0] for line in out["judged"]]
    assert judged == ["fakelib.libs/libfake.so", "stray.so"]  # the replaced one, the stray one


def test_a_path_is_resolved_again_once_it_names_another_file(tmp_path):
    """Each loaded module's file is resolved at the gate, at collection and at the end; a
    resolution is reused only while the path names the same file, so a symbolic link turned
    towards other code in between is followed there."""
    approved, other = tmp_path / "approved.py", tmp_path / "other.py"
    approved.write_text("x = 1\n")
    other.write_text("x = 2\n")
    link = tmp_path / "module.py"
    link.symlink_to(approved)
    assert execution._real(link) == str(approved)
    assert execution._real(link) == str(approved)  # the same file: the same answer
    link.unlink()
    link.symlink_to(other)
    assert execution._real(link) == str(other)
    link.unlink()
    assert execution._real(link) == str(link)  # gone: resolved as far as it goes
