"""The pytest options a research run takes, and the ones it refuses, each named as it is
typed on the command line.

A research stage runs whole, once, and only code the approval covers runs inside it. A run
takes the options of :data:`TAKEN` (its output, its pace, its workers, prereg's own) and a
few judged by value (``-p``, ``-o``, ``-W``, ``--confcutdir``); every other option set away
from its default is refused before its run id is spent, a future pytest's or plugin's
included. :data:`REFUSED` says why for the common ones: a run that selects part of the
stage, runs none of its items (``--fixtures``, ``--collect-only``), runs them otherwise than
the stage's clean listing does (``--import-mode=importlib``, a disabled pytest plugin) or
lets code typed at a debugger prompt run inside it (``--pdb``). :func:`refused_options` reads plain
values (pytest's option namespace, the root folder, where the path arguments came from), so it
imports no pytest; :func:`prereg.runtime.process_run.resolve_research_run` calls it and raises
pytest's usage error with :func:`refusal_message`.

Option names shown are command-line spellings (``-k``, ``--collect-only``), never pytest's
internal names (``keyword``, ``collectonly``): :data:`REFUSED` maps each of those to its
spellings, and ``checks/gate/test_options.py`` proves every entry against the installed
pytest's own parser.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prereg.records.runs import NOTHING_SPENT
from prereg.runtime.roles import STAGE_OPTION

DEFAULT_IMPORT_MODE = "prepend"
# Ini overrides (-o NAME=VALUE) a research run accepts: output style, and strictness switched
# on (pytest itself spells --strict-markers as -o strict_markers=true); switched off, a
# strict_xfail would let a failing item pass.
HARMLESS_OVERRIDES = ("console_output_style", "verbosity_")
STRICTNESS = "strict"
TRUE = ("true", "1", "yes", "on")
RUNS_NO_ITEM = "and runs no item"
PART = "selects part of the stage"
PATHS_WHY = "{verb} part of the stage (a research stage collects its plan's module)"
DEBUGGER = "would let code typed at a debugger prompt run inside the run"


@dataclass(frozen=True)
class Option:
    """One refused pytest option: its namespace field, its spellings (the first is the one
    named when the typed spelling is unknown), why it is refused and when it is set."""

    dest: str
    spellings: tuple[str, ...]
    why: str
    is_set: Callable[[Any], bool] = bool
    with_value: bool = False  # name it with its value: ``--import-mode=importlib``
    show: Callable[[Any], str] = str  # the value as typed


REFUSED: tuple[Option, ...] = (
    # Modes that run no item.
    Option("help", ("--help", "-h"), f"shows pytest's help {RUNS_NO_ITEM}"),
    Option("version", ("--version", "-V"), f"shows pytest's version {RUNS_NO_ITEM}"),
    Option("showfixtures", ("--fixtures", "--funcargs"), f"lists fixtures {RUNS_NO_ITEM}"),
    Option(
        "show_fixtures_per_test",
        ("--fixtures-per-test",),
        f"lists each item's fixtures {RUNS_NO_ITEM}",
    ),
    Option("markers", ("--markers",), f"lists markers {RUNS_NO_ITEM}"),
    Option(
        "collectonly",
        ("--collect-only", "--co", "--collectonly"),
        "collects the items and runs none of them",
    ),
    Option(
        "setuponly", ("--setup-only", "--setuponly"), f"sets up the items' fixtures {RUNS_NO_ITEM}"
    ),
    Option(
        "setupplan",
        ("--setup-plan", "--setupplan"),
        f"shows the fixtures each item would set up {RUNS_NO_ITEM}",
    ),
    Option("cacheshow", ("--cache-show",), f"shows pytest's cache {RUNS_NO_ITEM}"),
    # Part of the stage.
    Option("keyword", ("-k",), PART),
    Option("markexpr", ("-m",), PART),
    Option("deselect", ("--deselect",), PART),
    Option("ignore", ("--ignore",), PART),
    Option("ignore_glob", ("--ignore-glob",), PART),
    Option(
        "lf", ("--lf", "--last-failed"), f"runs only the items that failed last time: it {PART}"
    ),
    Option(
        "stepwise",
        ("--sw", "--stepwise"),
        f"resumes at the failure the cache recorded last time: it {PART}",
    ),
    Option(
        "stepwise_skip",
        ("--sw-skip", "--stepwise-skip"),
        f"turns on --sw, which resumes at the failure the cache recorded last time: it {PART}",
    ),
    Option(
        "stepwise_reset",
        ("--sw-reset", "--stepwise-reset"),
        "turns on --sw, which stops at the first failure and resumes there next time",
    ),
    Option(
        "looponfail",
        ("--looponfail", "-f"),
        "reruns the failing items whenever a file changes: a stage runs once",
    ),
    Option(
        "dist",
        ("--dist",),
        "runs every item on every worker: a stage runs each item once",
        is_set=lambda value: value == "each",
        with_value=True,
    ),
    # What is collected, and how.
    Option(
        "inifilename",
        ("-c", "--config-file"),
        "reads another ini file than the project's pytest.ini, which fixes what a stage collects",
    ),
    Option(
        "noconftest", ("--noconftest",), "skips the conftest.py files the stage's items run with"
    ),
    Option(
        "pyargs", ("--pyargs",), "collects Python packages by name instead of the stage's module"
    ),
    Option(
        "importmode",
        ("--import-mode",),
        "imports the stage's modules otherwise than the clean listing of its items does (a "
        f"research run imports with the default --import-mode={DEFAULT_IMPORT_MODE})",
        is_set=lambda value: value not in (None, DEFAULT_IMPORT_MODE),
        with_value=True,
    ),
    Option("runxfail", ("--runxfail",), "ignores the xfail markers of the stage's items"),
    # The run's own report.
    Option(
        "xmlpath",
        ("--junitxml", "--junit-xml"),
        "writes a report of its own: prereg writes the run's report to runs/<run-id>/junit.xml",
    ),
    Option(
        "junitprefix",
        ("--junit-prefix", "--junitprefix"),
        "renames the items in the run's report runs/<run-id>/junit.xml",
    ),
    # Debuggers.
    Option("usepdb", ("--pdb",), DEBUGGER),
    Option("trace", ("--trace",), DEBUGGER),
    Option(
        "usepdb_cls",
        ("--pdbcls",),
        "loads a debugger of its choosing into the run: code typed at its prompt would run "
        "inside the run",
        with_value=True,
        show=lambda value: ":".join(value),  # pytest parses MODULE:CLASS into a pair
    ),
)

# The options a research run takes, by their namespace field: each changes only what the run
# shows or how fast it stops, lays out its workers (which the gate and each worker prove),
# or is prereg's own. Strictness switched on (--strict-markers, --strict-config) makes more
# items fail, never fewer.
TAKEN: dict[str, str] = {
    **dict.fromkeys(
        (
            "verbose", "reportchars", "tbstyle", "showlocals", "fulltrace", "color",
            "code_highlight", "capture", "showcapture", "durations", "durations_min",
            "no_header", "no_summary", "fold_skipped", "force_short_summary", "xfail_tb",
            "disable_warnings", "setupshow", "traceconfig", "hypothesis_verbosity",
            "hypothesis_show_statistics", "hypothesis_explain",
        ),
        "output",
    ),
    "maxfail": "pace",
    **dict.fromkeys(
        (
            "numprocesses", "maxprocesses", "dist", "tx", "px", "distload", "maxschedchunk",
            "loadscopereorder", "testrunuid", "maxworkerrestart",
        ),
        "workers",
    ),
    **dict.fromkeys(("strict", "strict_config", "strict_markers"), "strictness"),
    **dict.fromkeys(
        ("research_stage", "prereg_run_id", "prereg_checkout", "prereg_list_items"), "prereg"
    ),
}  # fmt: skip
# Options judged by their value below rather than taken or refused whole.
JUDGED = frozenset({"plugins", "override_ini", "pythonwarnings", "confcutdir", "file_or_dir"})
NOT_TAKEN = (
    "is not an option a research run takes: it takes only options that change what the run "
    "shows or how its workers are laid out (below), so that nothing else changes what runs, "
    "what it reads or where it writes"
)

# pytest's built-in plugins (``_pytest.config.builtin_plugins``) a research run needs, with
# what each does for it; ``-p no:NAME`` for any of them is refused.
NEEDED_PLUGINS: dict[str, str] = {
    "mark": "selects items by marker, as prereg selects the stage's items",
    "main": "runs the session",
    "runner": "runs the items",
    "fixtures": "provides the fixtures, the research fixture among them",
    "helpconfig": "reads -p and -o",
    "python": "collects the stage's test functions",
    "terminal": "prints the run's progress and outcome",
    "unittest": "collects unittest.TestCase items",
    "capture": "captures the items' output and provides capsys and capfd",
    "skipping": "honours the items' skip and xfail markers",
    "legacypath": "provides the tmpdir fixtures",
    "tmpdir": "provides tmp_path",
    "monkeypatch": "provides monkeypatch",
    "recwarn": "provides recwarn",
    "assertion": "rewrites assert statements so a failing assert reports its values",
    "junitxml": "writes the run's report runs/<run-id>/junit.xml",
    "doctest": "collects doctests",
    "unraisableexception": "reports exceptions raised where nothing can catch them",
    "threadexception": "reports exceptions raised in threads",
    "warnings": "applies the filterwarnings setting of pytest.ini",
    "logging": "captures logging and provides caplog",
    "reports": "sends the items' reports from xdist workers",
    "subtests": "provides subtests",
}
# Built-in plugins a run does without: caching and stepwise (a research run uses neither),
# pastebin, faulthandler's crash tracebacks, the terminal's progress bar, the debugger (its
# options are refused anyway), setup-only and setup-plan (refused modes), pytester.
UNNEEDED_PLUGINS = frozenset({
    "cacheprovider", "stepwise", "pastebin", "faulthandler", "terminalprogress", "debugging",
    "setuponly", "setupplan", "pytester", "pytester_assertions",
    "freeze_support",  # pytest < 9: only for frozen executables
})  # fmt: skip
# Plugin objects pytest, xdist and prereg register under a name of their own during a run;
# ``-p no:NAME`` keeps them from being registered.
NEEDED_REGISTRATIONS: dict[str, str] = {
    "prereg-controller": "prereg's controller, which runs the gate and writes the manifest",
    "prereg.plugin": "prereg's plugin",
    "session": "pytest's session",
    "pytestconfig": "pytest's configuration hooks",
    "terminalreporter": "pytest's terminal report",
    "funcmanage": "pytest's fixture manager",
    "capturemanager": "pytest's capture manager",
    "logging-plugin": "pytest's logging capture",
    "legacypath-tmpdir": "pytest's tmpdir fixture",
    "dsession": "xdist's distribution of the items over the -n workers",
    "terminaldistreporter": "xdist's terminal report of its workers",
}


# The variable that names plugins to load, which the hermetic session never receives
# (prereg.evidence.hermetic.PASSED_VARIABLES): the launcher would load them and the session not.
PLUGINS_VARIABLE = "PYTEST_PLUGINS"


def refused_variables(environ: Mapping[str, str]) -> list[str]:
    """One sentence when ``environ`` sets :data:`PLUGINS_VARIABLE` to anything but blanks:
    the items run in the hermetic session, which never receives it, so a plugin it names
    (a fixture, a hook) would silently not load there and the run could fail spent."""
    value = (environ.get(PLUGINS_VARIABLE) or "").strip()
    if not value:
        return []
    why = (
        f"{PLUGINS_VARIABLE}={value} is not passed to the hermetic session that runs the "
        "items, so what it names would not load there: name a committed plugin module in the "
        "root conftest.py's pytest_plugins, install a plugin package (its pytest11 entry "
        f"point loads it), or unset {PLUGINS_VARIABLE}"
    )
    return [why]


def refused_options(
    option: Any,
    *,
    rootpath: Path,
    args_from_command_line: bool,
    typed: Sequence[str] = (),
    installed_plugins: frozenset[str] | None = None,
    registered: Mapping[str, tuple[Sequence[str], Any]] | None = None,
) -> list[str]:
    """One sentence per option that keeps a research run from running its stage whole.

    ``option`` is pytest's option namespace (``config.option``): its values come from the
    command line, ``PYTEST_ADDOPTS`` and pytest.ini's addopts alike, ``option.plugins``
    holding every ``-p`` value. ``args_from_command_line``: the path arguments came from the
    command line (``config.args_source`` is ``ARGS``), not from testpaths. ``typed`` is the
    arguments as given (those three sources), only to name each option by the spelling used
    (``--co`` rather than ``--collect-only``). ``installed_plugins``: the entry-point names
    of the installed pytest plugins, the only ones ``-p NAME`` may load (None: not checked).
    ``registered``: every option pytest and its plugins registered, namespace field ->
    (its spellings, its default) (:func:`prereg.runtime.process_run.registered_options`); one
    set away from its default that is neither :data:`TAKEN`, :data:`JUDGED` nor in
    :data:`REFUSED` is refused as :data:`NOT_TAKEN` (None: not checked)."""
    found = []
    for entry in REFUSED:
        value = getattr(option, entry.dest, None)
        if entry.is_set(value):
            spelling = typed_spelling(entry.spellings, typed)
            named = f"{spelling}={entry.show(value)}" if entry.with_value else spelling
            found.append(f"{named} {entry.why}")
    named_already = {entry.dest for entry in REFUSED} | set(TAKEN) | JUDGED
    for dest, (spellings, default) in (registered or {}).items():
        if dest not in named_already and getattr(option, dest, default) != default:
            found.append(f"{typed_spelling(spellings, typed)} {NOT_TAKEN}")
    for override in getattr(option, "override_ini", None) or ():
        name, _, value = (part.strip() for part in override.partition("="))
        stricter = name.startswith(STRICTNESS) and value.lower() in TRUE
        if not name.startswith(HARMLESS_OVERRIDES) and not stricter:
            found.append(
                f"-o {override} overrides pytest.ini's {name}, which fixes what a stage "
                "collects and how its items pass (only strict*=true, console_output_style "
                "and verbosity_* may be overridden)"
            )
    for warning in getattr(option, "pythonwarnings", None) or ():
        if not str(warning).startswith("error"):
            found.append(
                f"-W {warning} changes pytest.ini's warning filters, which decide whether an "
                "item that warns passes (only -W error... filters may be added)"
            )
    if installed_plugins is not None:
        for arg in getattr(option, "plugins", None) or ():
            name = str(arg).strip()
            if not name.startswith("no:") and name not in installed_plugins:
                found.append(
                    f"-p {name} loads a plugin that is not an installed pytest plugin: code the "
                    "stage's configuration does not load would run inside the run (name it in "
                    "a committed conftest.py's pytest_plugins instead)"
                )
    confcutdir = getattr(option, "confcutdir", None)
    if confcutdir and Path(confcutdir).resolve() != Path(rootpath).resolve():
        found.append(
            f"--confcutdir={confcutdir} ends the search for conftest.py files at {confcutdir}, "
            f"not at the project's root {rootpath}"
        )
    found += blocked_plugins(getattr(option, "plugins", None) or ())
    paths = [str(p) for p in getattr(option, "file_or_dir", None) or ()]
    if args_from_command_line and not getattr(option, "help", False):
        # --help stops the parse, so its path arguments are never decided.
        many = len(paths) > 1
        found.append(
            f"the path argument{'s' if many else ''} {' '.join(paths) or '(none)'} "
            + PATHS_WHY.format(verb="select" if many else "selects")
        )
    return found


# What pytest does to the file or folder each output option names (hermetic.OUTPUT_OPTIONS).
OUTPUT_EFFECTS = {
    "basetemp": "empties it before use",
    "log_file": "overwrites it",
    "debug": "overwrites it",
}


def outputs_over_records(
    values: Mapping[str, object], *, spellings: Mapping[str, str], cwd: Path, root: Path
) -> list[str]:
    """One sentence per output option (``values``: namespace field -> its value, as
    :func:`prereg.evidence.hermetic.output_values` reads them) whose path, resolved against
    ``cwd``, is the project's root or a folder above it, or lies in its ``runs/`` or
    ``.git``: pytest would empty or overwrite the project, its runs or its git records."""
    root = Path(root).resolve()
    guarded = (root / "runs", root / ".git")
    found = []
    for dest, value in values.items():
        if not isinstance(value, (str, Path)) or not str(value) or str(value) == os.devnull:
            continue
        target = Path(cwd, value).resolve()
        inside = any(target == g or g in target.parents for g in guarded)
        if inside or target == root or target in root.parents:
            found.append(
                f"{spellings[dest]}={value} names {target}, and pytest {OUTPUT_EFFECTS[dest]}: "
                f"it would destroy records of {root} (its runs/, its .git or the project itself); "
                "name a path outside the project"
            )
    return found


def blocked_plugins(plugin_args: Iterable[str]) -> list[str]:
    """The ``-p no:NAME`` values (``option.plugins``) that disable what a research run needs."""
    found = []
    for arg in plugin_args:
        arg = str(arg).strip()
        if not arg.startswith("no:"):
            continue
        name = arg[3:]
        if name in NEEDED_PLUGINS:
            found.append(
                f"-p no:{name} disables pytest's {name} plugin, which {NEEDED_PLUGINS[name]}"
            )
        elif name in NEEDED_REGISTRATIONS:
            found.append(f"-p no:{name} disables {NEEDED_REGISTRATIONS[name]}")
    return found


def typed_spelling(spellings: Sequence[str], typed: Sequence[str]) -> str:
    """The spelling of an option found in ``typed`` (``--co``, ``-kcell0``, ``--dist=each``
    all count), or its first spelling."""
    for arg in typed:
        for spelling in spellings:
            if spelling.startswith("--"):
                if arg == spelling or arg.startswith(spelling + "="):
                    return spelling
            elif arg.startswith(spelling) and not arg.startswith("--"):
                return spelling
    return spellings[0]


def refusal_message(stage: str, refused: Sequence[str]) -> str:
    """The usage error of a research run refused for its options: each of them and the fix."""
    return (
        f"research stage {stage} refused before any item ran ({NOTHING_SPENT}): a "
        "research stage runs whole, once, and only its approved code runs inside it, so:\n  "
        + "\n  ".join(refused)
        + "\n"
        + allowed_summary(stage)
    )


def allowed_summary(stage: str) -> str:
    """What to run instead of a refused research run."""
    return (
        f"Run `pytest {STAGE_OPTION}={stage}` with none of these. Options that change only the "
        "output or pace of a run are fine: -v, -q, -r, -s, --capture, --tb, -l, --color, "
        "--durations, -x, --maxfail, and the workers' -n, --dist, --tx (docs/reference/gate.md "
        "lists them all). To try the stage with any of these (one item, -k, "
        f"--collect-only, --pdb) without an approval, rehearse it: `pytest {STAGE_OPTION}={stage} "
        "--rehearse ...` runs it into runs/rehearsals/ (not a run, nothing spent)."
    )


def name_value_pairs(values: list[str], option: str) -> dict[str, str]:
    """``NAME=VALUE`` option values by name (``--input``, ``--use-run`` and their rehearsal
    forms); a value without a name, an ``=`` or a value raises ``ValueError`` naming it."""
    pairs = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name or not rest:
            raise ValueError(f"{option} takes NAME=VALUE, got {value!r}")
        pairs[name] = rest
    return pairs
