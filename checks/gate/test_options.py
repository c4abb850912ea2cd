"""The pytest options a research run refuses (prereg.runtime.option_policy), each named as typed.

The unit checks parse real command lines with the installed pytest's own parser (every
plugin the environment loads, xdist's included). The end-to-end checks run
``pytest --research-stage=toy <option>`` in a scratch repository holding an approved toy
stage: a usage error naming the option, and the run id unspent (no ``runs/<id>/start.json``,
no ``refs/prereg/runs/<id>/start``), so the stage then runs whole under the same approval.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import _pytest
import _pytest.config
import pytest
import xdist
from _pytest.config import PrintHelp
from hypothesis import given, settings
from hypothesis import strategies as st

import prereg
from prereg.runtime import option_policy
from prereg.runtime.process_run import registered_options
from support.toy import make_toy_repo

pytestmark = pytest.mark.software

RUN = "toy-20261130-001"
USAGE_ERROR = 4
# A value for each refused option that takes one.
SAMPLE_VALUES = {
    "keyword": "cell0",
    "markexpr": "slow",
    "deselect": "experiments/test_toy.py::test_cell",
    "ignore": "experiments",
    "ignore_glob": "experiments/*",
    "dist": "each",
    "inifilename": "other.ini",
    "importmode": "importlib",
    "xmlpath": "report.xml",
    "junitprefix": "prefix",
    "usepdb_cls": "pdb:Pdb",
}


@dataclass
class RealParser:
    """pytest's own command-line parser, with every option the environment's plugins add."""

    parser: object
    defaults: argparse.Namespace
    root: Path

    def parse(self, args: list[str]) -> argparse.Namespace:
        namespace = copy.deepcopy(self.defaults)
        try:
            self.parser.parse(args, namespace=namespace)
        except PrintHelp:  # --help ends the parse, as in pytest itself
            pass
        return namespace

    def refused(self, args: list[str]) -> list[str]:
        namespace = self.parse(args)
        return option_policy.refused_options(
            namespace,
            rootpath=self.root,
            args_from_command_line=bool(getattr(namespace, "file_or_dir", None)),
            typed=args,
        )

    def action(self, spelling: str) -> argparse.Action:
        return self.parser.optparser._option_string_actions[spelling]


@contextlib.contextmanager
def inside(folder: Path):
    """The current folder set to ``folder`` (contextlib.chdir needs Python 3.11; the pinned
    stack runs these checks on 3.9)."""
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> RealParser:
    root = tmp_path_factory.mktemp("options")
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "sub").mkdir()
    with inside(root):
        config = _pytest.config.get_config([])
        try:
            config.parse([], addopts=False)
        finally:
            config._ensure_unconfigure()  # removes the assertion-rewriting import hook
    defaults = copy.deepcopy(config.option)
    del defaults.file_or_dir  # argparse sets the positional arguments itself
    return RealParser(config._parser, defaults, root)


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        (["--fixtures"], "--fixtures lists fixtures and runs no item"),
        (["--funcargs"], "--funcargs lists fixtures and runs no item"),
        (
            ["--fixtures-per-test"],
            "--fixtures-per-test lists each item's fixtures and runs no item",
        ),
        (["--markers"], "--markers lists markers and runs no item"),
        (["--help"], "--help shows pytest's help and runs no item"),
        (["-h"], "-h shows pytest's help and runs no item"),
        (["-VV"], "-V shows pytest's version and runs no item"),
        (["--collect-only"], "--collect-only collects the items and runs none of them"),
        (["--co"], "--co collects the items and runs none of them"),
        (["--setup-only"], "--setup-only sets up the items' fixtures and runs no item"),
        (["--setup-plan"], "--setup-plan shows the fixtures each item would set up"),
        (["--cache-show"], "--cache-show shows pytest's cache and runs no item"),
        (["-k", "cell0"], "-k selects part of the stage"),
        (["-kcell0"], "-k selects part of the stage"),
        (["-m", "slow"], "-m selects part of the stage"),
        (["--deselect", "a.py::b"], "--deselect selects part of the stage"),
        (["--ignore=experiments"], "--ignore selects part of the stage"),
        (["--ignore-glob=*.py"], "--ignore-glob selects part of the stage"),
        (["--last-failed"], "--last-failed runs only the items that failed last time"),
        (["--sw"], "--sw resumes at the failure the cache recorded last time"),
        (["--sw-skip"], "--sw-skip turns on --sw"),
        (["--stepwise-reset"], "--stepwise-reset turns on --sw"),
        (["-f"], "-f reruns the failing items whenever a file changes"),
        (["--dist", "each"], "--dist=each runs every item on every worker"),
        (["-c", "other.ini"], "-c reads another ini file than the project's pytest.ini"),
        (["--noconftest"], "--noconftest skips the conftest.py files"),
        (["--pyargs"], "--pyargs collects Python packages by name"),
        (["--import-mode=importlib"], "--import-mode=importlib imports the stage's modules"),
        (["--import-mode", "append"], "--import-mode=append imports the stage's modules"),
        (["--runxfail"], "--runxfail ignores the xfail markers"),
        (["--junit-xml=r.xml"], "--junit-xml writes a report of its own"),
        (["--junit-prefix=p"], "--junit-prefix renames the items in the run's report"),
        (["--pdb"], "--pdb would let code typed at a debugger prompt run inside the run"),
        (["--trace"], "--trace would let code typed at a debugger prompt run inside the run"),
        (["--pdbcls=pdb:Pdb"], "--pdbcls=pdb:Pdb loads a debugger of its choosing"),
        (["-o", "python_files=*.py"], "-o python_files=*.py overrides pytest.ini's python_files"),
        (["-p", "no:skipping"], "-p no:skipping disables pytest's skipping plugin"),
        (["-pno:junitxml"], "-p no:junitxml disables pytest's junitxml plugin, which writes"),
        (["-p", "no:python"], "-p no:python disables pytest's python plugin"),
        (["-p", "no:prereg-controller"], "-p no:prereg-controller disables prereg's controller"),
        (["-p", "no:terminalreporter"], "-p no:terminalreporter disables pytest's terminal"),
        (["experiments/test_toy.py"], "the path argument experiments/test_toy.py selects part"),
        (["a.py", "b.py"], "the path arguments a.py b.py select part"),
    ],
)
def test_each_refused_option_is_named_as_typed_and_why(real, args, sentence):
    found = real.refused(args)
    assert len(found) == 1 and found[0].startswith(sentence), found
    dests = {entry.dest for entry in option_policy.REFUSED} - {"help", "version", "markers"}
    assert not set(found[0].split()) & dests, f"{found[0]!r} names a dest, not a spelling"


def test_a_confcutdir_short_of_the_root_is_refused(real):
    found = real.refused(["--confcutdir", str(real.root / "sub")])
    expected = (
        f"--confcutdir={real.root / 'sub'} ends the search for conftest.py files at "
        f"{real.root / 'sub'}, not at the project's root {real.root}"
    )
    assert found == [expected]
    assert real.refused(["--confcutdir", str(real.root)]) == []


def refused_for(config: pytest.Config) -> list[str]:
    """What prereg.plugin passes from a configured pytest (its integration, verbatim)."""
    return option_policy.refused_options(
        config.option,
        rootpath=Path(config.rootpath),
        args_from_command_line=config.args_source == pytest.Config.ArgsSource.ARGS,
        typed=[
            *shlex.split(os.environ.get("PYTEST_ADDOPTS", "")),
            *config.getini("addopts"),
            *config.invocation_params.args,
        ],
    )


def configured(root: Path, args: list[str]) -> pytest.Config:
    with inside(root):
        config = _pytest.config.get_config(args)
        try:
            config.parse(args)
        finally:
            config._ensure_unconfigure()
    return config


def test_options_from_pytest_addopts_and_ini_addopts_are_named_as_typed(tmp_path, monkeypatch):
    (tmp_path / "experiments").mkdir()
    (tmp_path / "pytest.ini").write_text("[pytest]\ntestpaths = experiments\naddopts = --co\n")
    monkeypatch.setenv("PYTEST_ADDOPTS", "-pno:skipping --funcargs")
    found = refused_for(configured(tmp_path, ["-p", "no:cacheprovider", "-kcell0"]))
    assert [sentence.split()[0] for sentence in found] == ["--funcargs", "--co", "-k", "-p"]
    assert found[-1].startswith("-p no:skipping disables pytest's skipping plugin"), found
    monkeypatch.delenv("PYTEST_ADDOPTS")
    (tmp_path / "pytest.ini").write_text("[pytest]\ntestpaths = experiments\n")
    assert refused_for(configured(tmp_path, ["-p", "no:cacheprovider", "-q", "-s"])) == []
    found = refused_for(configured(tmp_path, ["experiments"]))
    assert found == [
        "the path argument experiments " + option_policy.PATHS_WHY.format(verb="selects")
    ]


def test_every_refused_option_is_spelled_as_the_installed_pytest_parses_it(real):
    for entry in option_policy.REFUSED:
        for spelling in entry.spellings:
            action = real.action(spelling)  # KeyError: a spelling pytest does not have
            assert action.dest == entry.dest, (spelling, action.dest, entry.dest)
            value = SAMPLE_VALUES.get(entry.dest)
            args = [spelling] if action.nargs in (0, "?") or value is None else [spelling, value]
            namespace = real.parse(args)
            assert entry.is_set(getattr(namespace, entry.dest)), args
            assert not entry.is_set(getattr(real.defaults, entry.dest)), entry.dest


def test_every_builtin_plugin_is_either_needed_or_unneeded():
    needed, unneeded = set(option_policy.NEEDED_PLUGINS), option_policy.UNNEEDED_PLUGINS
    assert not needed & unneeded
    # Every built-in plugin of the installed pytest is classified (a newer pytest's new one
    # forces a decision; an older pytest has fewer).
    assert set(_pytest.config.builtin_plugins) <= needed | unneeded


def test_every_needed_registration_is_a_name_its_package_registers():
    sources = {
        "prereg": Path(prereg.__file__).parent,
        "_pytest": Path(_pytest.__file__).parent,
        "xdist": Path(xdist.__file__).parent,
    }
    text = {k: "".join(p.read_text() for p in v.rglob("*.py")) for k, v in sources.items()}
    for name in option_policy.NEEDED_REGISTRATIONS:
        assert any(f'"{name}"' in t for t in text.values()), name


HARMLESS = [
    ["-v"], ["-vv"], ["-q"], ["--verbosity=2"], ["-s"], ["--capture=no"], ["--capture=sys"],
    ["-x"], ["--maxfail=2"], ["--tb=short"], ["--tb=no"], ["-l"], ["-r", "a"], ["--color=no"],
    ["-n", "2"], ["-n", "auto"], ["--dist=load"], ["--durations=5"], ["--durations-min=0.5"],
    ["--strict-markers"], ["--strict-config"], ["-o", "console_output_style=classic"],
    ["-p", "no:cacheprovider"], ["-p", "no:randomly"], ["-pno:faulthandler"],
    ["--import-mode=prepend"], ["--setup-show"], ["--no-header"],
]  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(HARMLESS), unique_by=tuple, max_size=8))
def test_options_of_output_and_pace_only_are_never_refused(real, chosen):
    args = [arg for group in chosen for arg in group]
    assert real.refused(args) == [], args


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(HARMLESS), unique_by=tuple, max_size=6),
    st.sampled_from([["--fixtures"], ["-k", "x"], ["--pdb"], ["-p", "no:junitxml"]]),
    st.integers(min_value=0),
)
def test_a_refused_option_among_harmless_ones_is_the_one_named(real, chosen, bad, where):
    groups = list(chosen)
    groups.insert(where % (len(groups) + 1), bad)
    args = [arg for group in groups for arg in group]
    found = real.refused(args)
    assert len(found) == 1 and found[0].startswith(" ".join(bad[:1]) + " "), (args, found)


def test_the_refusal_names_every_option_and_the_fix(real):
    message = option_policy.refusal_message("toy", real.refused(["--co", "-k", "x", "--pdb"]))
    assert (
        "research stage toy refused before any item ran (this refusal spent no run id)" in message
    )
    for phrase in (
        "--co collects",
        "-k selects",
        "--pdb would let",
        "`pytest --research-stage=toy`",
    ):
        assert phrase in message, message
    assert "keyword" not in message and "collectonly" not in message


# -- end to end: the plugin refuses these before the run id is spent ---------------------------


@pytest.fixture
def approved(tmp_path: Path):
    toy = make_toy_repo(tmp_path / "toy")
    toy.approve("toy", RUN)
    return toy


def research_run(toy, *args: str, env: dict[str, str] | None = None):
    """``pytest --research-stage=toy`` with stdin from /dev/null (a debugger prompt ends)."""
    return toy.run(
        "sh", "-c", 'exec "$@" < /dev/null', "sh",
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--research-stage=toy", *args,
        env=env,
    )  # fmt: skip


def assert_refused_unspent(toy, done, sentence: str) -> None:
    text = done.stdout + done.stderr
    assert done.returncode == USAGE_ERROR, text
    assert sentence in done.stderr, text
    assert "run `pytest --research-stage=toy` with none of these" in done.stderr.lower(), text
    assert not toy.layout(RUN).start.exists(), "a refused run must not spend the run id"
    assert toy.git("for-each-ref", f"refs/prereg/runs/{RUN}") == ""
    assert not (toy.root / "runs" / RUN).exists(), text


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        (
            ["--fixtures-per-test"],
            "--fixtures-per-test lists each item's fixtures and runs no item",
        ),
        (["--import-mode=importlib"], "--import-mode=importlib imports the stage's modules"),
        (["-p", "no:skipping"], "-p no:skipping disables pytest's skipping plugin"),
        (["-p", "no:junitxml"], "-p no:junitxml disables pytest's junitxml plugin"),
        (["-p", "no:prereg-controller"], "-p no:prereg-controller disables prereg's controller"),
        (["--pdb"], "--pdb would let code typed at a debugger prompt run inside the run"),
        (["--trace"], "--trace would let code typed at a debugger prompt run inside the run"),
        (["-k", "cell0"], "-k selects part of the stage"),
    ],
)
def test_a_research_run_with_the_option_is_refused_unspent(approved, args, sentence):
    assert_refused_unspent(approved, research_run(approved, *args), sentence)


@settings(max_examples=60, deadline=None)
@given(value=st.text(alphabet=st.sampled_from(" \tabc._"), max_size=8))
def test_pytest_plugins_is_refused_exactly_when_it_names_something(value):
    found = option_policy.refused_variables({"PYTEST_PLUGINS": value})
    assert bool(found) == bool(value.strip()), found
    assert all(f"PYTEST_PLUGINS={value.strip()} is not passed" in s for s in found), found


def test_a_rehearsal_with_pytest_plugins_set_is_refused_as_the_run_would_be(approved):
    """A rehearsal's items run in a session of their own, as a run's do, which never receives
    PYTEST_PLUGINS: the rehearsal is refused with the run's reason, so a rehearsal that passes
    predicts a run that is not refused for it."""
    done = research_run(approved, "--rehearse", env={"PYTEST_PLUGINS": "json"})
    assert done.returncode == 4, done.stdout + done.stderr
    assert "rehearsal of stage toy refused (nothing ran): PYTEST_PLUGINS=json" in done.stderr
    again = research_run(approved, "--rehearse")
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_rehearsal_from_another_root_is_refused_naming_the_projects_root(approved, tmp_path):
    """``--rootdir`` elsewhere made pytest look for the plans there (the rehearsal said a
    plan does not exist), and ``-c`` read an ini naming none (it said the stage is
    unknown). Both are named instead."""
    done = research_run(approved, "--rehearse", f"--rootdir={tmp_path}")
    assert done.returncode == 4, done.stdout + done.stderr
    assert f"pytest's root is {tmp_path} and it reads {approved.root / 'pytest.ini'}" in (
        done.stderr
    ), done.stderr
    assert "does not exist" not in done.stderr
    other = tmp_path / "other.ini"  # -c: another ini file, naming no plan
    other.write_text("[pytest]\n")
    read_other = research_run(approved, "--rehearse", "-c", str(other))
    assert read_other.returncode == 4, read_other.stdout + read_other.stderr
    assert f"it reads {other} (--rootdir, -c)" in read_other.stderr, read_other.stderr
    assert "unknown research stage" not in read_other.stderr
    assert not (approved.root / "runs" / "rehearsals").exists()
    same = research_run(approved, "--rehearse", f"--rootdir={approved.root}")
    assert same.returncode == 0, same.stdout + same.stderr


def test_an_environment_without_pytest_plugins_is_not_refused():
    assert option_policy.refused_variables({}) == []


def test_a_research_run_with_pytest_plugins_set_is_refused_unspent(approved):
    """The session never receives PYTEST_PLUGINS: a plugin it names would load in the
    launcher only, and an item needing its fixture would fail with the run id spent."""
    done = research_run(approved, env={"PYTEST_PLUGINS": "json"})
    assert_refused_unspent(approved, done, "PYTEST_PLUGINS=json is not passed to the hermetic")
    assert "pytest_plugins" in done.stderr, done.stderr


def test_after_a_refused_fixtures_listing_the_stage_runs_whole_under_its_approval(approved):
    done = research_run(approved, "--fixtures")
    assert_refused_unspent(approved, done, "--fixtures lists fixtures and runs no item")
    done = research_run(approved, "-q", "-s")
    assert done.returncode == 0, done.stdout + done.stderr
    assert approved.manifest(RUN)["status"] == "complete"


@pytest.mark.parametrize(
    ("args", "refused"),
    [
        (["-o", "strict_xfail=false"], True),
        (["-o", "strict=false"], True),
        (["-o", "strict_markers=true"], False),
        (["-W", "ignore::RuntimeWarning"], True),
        (["-W", "error::RuntimeWarning"], False),
        (["-p", "experiments.helpers_plugin"], True),
        (["-p", "xdist"], False),
        (["-p", "no:randomly"], False),
    ],
)
def test_options_that_would_let_a_failing_item_pass_or_load_uninstalled_code(real, args, refused):
    """``strict_xfail`` switched off passes an xfail that passes; ``-W ignore`` defeats
    pytest.ini's ``filterwarnings = error``; ``-p`` of a committed module loads code the
    stage's configuration does not. Each is refused; their harmless forms are not."""
    found = option_policy.refused_options(
        real.parse(args),
        rootpath=real.root,
        args_from_command_line=False,
        typed=args,
        installed_plugins=frozenset({"xdist", "prereg.plugin"}),
    )
    assert bool(found) == refused, found


def _set_away_from_default(real: RealParser, action: argparse.Action) -> list[str]:
    """Arguments that set ``action``'s option to a value other than its default."""
    spelling = action.option_strings[-1]
    if action.nargs == 0:
        return [spelling]
    if action.choices:
        return [spelling, next(str(c) for c in action.choices if c != action.default)]
    return [spelling, SAMPLE_VALUES.get(action.dest, "7")]


def test_every_option_pytest_and_its_plugins_register_is_taken_or_refused_by_name(real):
    """The allow-list, enumerated: every option the installed pytest and plugins register,
    set away from its default, is either one a run takes, one judged by its value, or
    refused naming the spelling typed; a future option is refused until it is taken."""
    registered = registered_options(real.parser)
    stale = set(option_policy.TAKEN) - set(registered)
    assert not stale, f"TAKEN names options no installed pytest or plugin registers: {stale}"
    judged = (
        set(option_policy.TAKEN)
        | option_policy.JUDGED
        | {entry.dest for entry in option_policy.REFUSED}
    )
    checked = 0
    for action in real.parser.optparser._actions:
        if not action.option_strings or action.dest in judged or action.dest == "help":
            continue
        args = _set_away_from_default(real, action)
        namespace = real.parse(args)
        if getattr(namespace, action.dest) == registered[action.dest][1]:
            continue  # an alias that sets the default back (--no-showlocals)
        found = option_policy.refused_options(
            namespace, rootpath=real.root, args_from_command_line=False, typed=args,
            registered=registered,
        )  # fmt: skip
        assert found == [f"{args[0]} {option_policy.NOT_TAKEN}"], (args, found)
        checked += 1
    assert checked > 30, checked  # --basetemp, --log-file, --debug, --rootdir, --ff ...
    for dest in set(option_policy.TAKEN) - {
        entry.dest for entry in option_policy.REFUSED
    }:  # --dist=each
        action = next(a for a in real.parser.optparser._actions if a.dest == dest)
        args = _set_away_from_default(real, action)
        found = option_policy.refused_options(
            real.parse(args), rootpath=real.root, args_from_command_line=False, typed=args,
            registered=registered,
        )  # fmt: skip
        assert found == [], (args, found)
