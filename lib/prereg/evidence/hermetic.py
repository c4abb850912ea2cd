"""Hermetic research runs: the session that runs a stage's items starts from a snapshot.

``pytest --research-stage=S`` in a checkout is the *launcher*: it resolves the approval,
passes the gate, materialises the approved commit (HEAD, the anchor plus the approval
record) into a fresh read-only folder (:mod:`prereg.records.snapshot`), and replaces itself
(``exec``, same process id, so signals reach the run) with the *session*: an isolated
interpreter (``python -I -B``) started in the snapshot by :mod:`prereg.runtime.hermetic_boot`,

* with an allow-listed environment (:data:`PASSED_VARIABLES`: the thread variables, a
  locale, ``PATH``, terminal width), a home and temporary folder of its own
  (:data:`PRIVATE_FOLDERS`) and the user's cache folder (:data:`CACHE_HOME`); never
  ``PYTHONPATH``, ``PYTEST_ADDOPTS``, ``PYTEST_PLUGINS`` or ``GIT_*``;
* with pytest's plugin autoload off and the installed plugins loaded by name
  (:func:`plugin_arguments`: the ``pytest11`` entry points that the environment lock
  binds), the cache and stepwise plugins off (nothing is written into the snapshot);
* with standard input closed and ``breakpoint()`` refusing.

The session runs the gate again in its own process (with the snapshot as the code that
may run), spends the run id, runs the items (xdist workers start from the same snapshot
and environment) and writes the run folder into the checkout's ``runs/<run-id>/``. The
manifest's ``snapshot`` says which tree ran, recomputed from the snapshot's bytes when the
session started and again when it ended; the audit compares both with the source
commit's tree. The snapshot is deleted when the session ends.
"""

from __future__ import annotations

import importlib.metadata
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

import prereg
from prereg.base import gitrepo, provenance
from prereg.proof.keys import RUNNER_KEY_VARIABLE
from prereg.records import snapshot

PASSED_VARIABLES = (
    *provenance.THREAD_VARIABLES,
    "LANG", "LC_ALL", "LC_CTYPE", "TZ",
    "PATH", "USER", "LOGNAME",
    "TERM", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR",
    # Older OpenBLAS builds compute wrong results or crash on some processors without these.
    "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
    "CXX",  # the compiler that builds the GRU kernel when its cached build is missing
    RUNNER_KEY_VARIABLE,  # the runner's key that signs the run's attestation (prereg.proof)
)  # fmt: skip
# Set in the session's environment: its xdist workers (not started with -I) write no
# bytecode and read no user site-packages; pytest loads no plugin by itself.
SESSION_VARIABLES = {
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONNOUSERSITE": "1",
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
}
# Caches libraries keep in the current folder, pointed beside the snapshot: variable -> folder.
CACHE_VARIABLES = {"HYPOTHESIS_STORAGE_DIRECTORY": "hypothesis"}
# The session's own home and temporary folder, empty folders of the scratch folder beside its
# snapshot (made by :func:`private_world`): no dotfile of the user's (``~/.pdbrc``, what a
# kind reads from ``Path.home()``) and no other process's temporary file reaches a run.
PRIVATE_FOLDERS = {"HOME": "home", "TMPDIR": "tmp"}
# The user's cache folder by its resolved path (``XDG_CACHE_HOME``, else ``~/.cache``): the
# caches keyed by content (the GRU kernel's builds, libraries' model caches) stay warm.
CACHE_HOME = "XDG_CACHE_HOME"
# Set in a rehearsal's session: the folder the user typed the command in, against which its
# relative --rehearse-plan and --rehearse-input paths resolve (its own is the copy).
INVOKED_FROM = "PREREG_INVOKED_FROM"
# Set in a rehearsal's session: why a run would refuse the command line the user typed (JSON
# list), judged by the launcher before it added the session's own arguments.
RUN_WOULD_REFUSE = "PREREG_RUN_WOULD_REFUSE"
# Plugins a session never loads: they would write into the snapshot (.pytest_cache).
BLOCKED_PLUGINS = ("cacheprovider", "stepwise")
BOOT = "hermetic_boot.py"


# Set by the launcher when SIGTERM had its default action: it is ignored across the exec and
# the boot turns it into a clean exit, so no moment is left where it kills with the snapshot
# on disk.
SIGTERM_HANDOFF = "PREREG_SIGTERM_HANDOFF"
# Variables pytest and xdist set in a session's own environment while it runs.
SET_BY_PYTEST = ("PYTEST_VERSION", "PYTEST_CURRENT_TEST")
SET_BY_XDIST_PREFIX = "PYTEST_XDIST_"
# Variables libraries set in os.environ when they load, which a session's code may therefore
# set before its gate records the execution (a kind's gate check loads them): scikit-learn
# and threadpoolctl (the OpenMP pair) and sentence-transformers (the inductor cache). Any
# other variable a session's code sets before then is refused, as one it started with
# would be: the session's processes (xdist workers) inherit it.
SET_BY_LIBRARIES = ("KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK", "TORCHINDUCTOR_CACHE_DIR")


# What every way into a debugger says in a research run (the boot says it too, before
# prereg is imported).
DEBUGGER_REFUSED = (
    "a debugger (breakpoint(), pdb) is disabled in a research run: code typed at its prompt "
    "would run unrecorded; rehearse the stage outside a research run to debug it"
)


def refuse_debuggers() -> None:
    """Make every way into a debugger in this process raise :data:`DEBUGGER_REFUSED`:
    ``breakpoint()``, ``pdb.set_trace()`` (pytest's too), a ``pdb.Pdb`` or other ``bdb``
    debugger set or run by hand, and a post-mortem. A prompt would read the user's
    ``.pdbrc`` and run whatever is typed, unrecorded."""
    # pdb, bdb: only in a research run's processes (a software run never loads them here)
    import bdb
    import pdb  # noqa: T100 -- to disable it

    def refuse(*args, **kwargs):
        raise RuntimeError(DEBUGGER_REFUSED)

    sys.breakpointhook = refuse
    for name in ("set_trace", "run", "runeval", "runcall"):
        setattr(bdb.Bdb, name, refuse)
    pdb.Pdb.interaction = refuse


def boot_script(package: Path) -> Path:
    """The boot script (:data:`BOOT`, a file of :mod:`prereg.runtime` run by path) of the
    prereg package in folder ``package``."""
    return package / "runtime" / BOOT


def foreign_variables(names) -> list[str]:
    """The names in ``names`` that a session started by the launcher never has."""
    own = {*PASSED_VARIABLES, *SESSION_VARIABLES, *CACHE_VARIABLES, *SET_BY_PYTEST}
    own |= {*PRIVATE_FOLDERS, CACHE_HOME, gitrepo.USER_HOME}
    own.add(SIGTERM_HANDOFF)
    return sorted(n for n in names if n not in own and not n.startswith(SET_BY_XDIST_PREFIX))


def set_by_code(names) -> list[str]:
    """The names in ``names`` (variables a session's code set after it started) that neither
    a session started by the launcher nor a library it loads (:data:`SET_BY_LIBRARIES`) sets."""
    return [n for n in foreign_variables(names) if n not in SET_BY_LIBRARIES]


def environment_at_start() -> tuple[tuple[str, ...], dict[str, str]]:
    """(names of the variables this process started with, the variables set since).

    In a hermetic session the names are those the boot read before anything was imported
    (:data:`prereg.runtime.hermetic_boot.ENVIRONMENT_AT_START`); what the session's own code set
    later (a library loaded by a kind's gate check sets its OpenMP variables) is the second
    value, recorded beside them and judged against :data:`SET_BY_LIBRARIES`
    (:func:`set_by_code`). Any other process (approve, a rehearsal, a process not started
    from the boot) reports its environment as it is now, with nothing set since.
    """
    main = sys.modules.get("__main__")
    started = None
    if os.path.basename(getattr(main, "__file__", None) or "") == BOOT:
        started = getattr(main, "ENVIRONMENT_AT_START", None)
    if not isinstance(started, tuple):
        return tuple(sorted(os.environ)), {}
    return started, {n: os.environ[n] for n in sorted(set(os.environ) - set(started))}


def session_environment(folder: Path, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The session's environment: the allow-listed variables of ``environ``, and its own.

    Libraries that keep a cache in the current folder are pointed at the snapshot's scratch
    folder (:func:`prereg.records.snapshot.scratch`): hypothesis, collected with the software
    checks, would otherwise write ``.hypothesis/`` into the snapshot and change its tree."""
    environ = os.environ if environ is None else environ
    kept = {name: environ[name] for name in PASSED_VARIABLES if name in environ}
    own = private_variables(snapshot.scratch(folder), environ)
    return {**kept, **SESSION_VARIABLES, **cache_variables(folder), **own}


def private_variables(place: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """A process's own world in folder ``place``: :data:`PRIVATE_FOLDERS` there, the user's
    cache folder by its path (:data:`CACHE_HOME`), and the user's home for git's remotes
    (:data:`prereg.base.gitrepo.USER_HOME`), from ``environ``."""
    own = {name: str(Path(place) / sub) for name, sub in PRIVATE_FOLDERS.items()}
    home = environ.get("HOME")
    if home:
        own[gitrepo.USER_HOME] = home
    cache = environ.get(CACHE_HOME) or (home and str(Path(home, ".cache")))
    if cache:
        own[CACHE_HOME] = cache
    return own


def private_world(place: Path) -> None:
    """Make the folders of :func:`private_variables` in ``place``."""
    for sub in PRIVATE_FOLDERS.values():
        (Path(place) / sub).mkdir(parents=True, exist_ok=True)


def cache_variables(folder: Path) -> dict[str, str]:
    """:data:`CACHE_VARIABLES`, each pointing into the scratch folder beside ``folder``."""
    return {name: str(snapshot.scratch(folder) / sub) for name, sub in CACHE_VARIABLES.items()}


def installed_plugins() -> frozenset[str]:
    """The entry-point names of the installed pytest plugins (group ``pytest11``)."""
    return frozenset(
        point.name
        for dist in importlib.metadata.distributions()  # entry_points(group=) needs 3.10
        for point in dist.entry_points
        if point.group == "pytest11"
    )


def plugin_arguments(loaded: list[str], blocked: list[str]) -> list[str]:
    """``-p`` arguments that load exactly the entry-point plugins the launcher had loaded
    (each by its entry-point name, as autoload would) and block the rest."""
    args = []
    for name in sorted(set(loaded) - set(blocked)):
        args += ["-p", name]
    for name in sorted(set(blocked) | set(BLOCKED_PLUGINS)):
        args += ["-p", f"no:{name}"]
    return args


def snapshot_paths(folder: Path, source: Path, pythonpath: str | None) -> tuple[list[str], Path]:
    """(the ``sys.path`` entries of snapshot ``folder`` a process of it puts first, the
    prereg package it runs) for code coming from folder ``source`` (the checkout the
    snapshot is of, or another snapshot of it).

    When prereg is part of ``source`` (prereg's own checkout), the snapshot's prereg is
    imported, from its folder in the snapshot; otherwise the installed one is. Entries of
    ``pythonpath`` (``os.pathsep``-joined) inside ``source`` become the same folders of the
    snapshot; the others are dropped."""
    package = Path(prereg.__file__).resolve().parent
    source = Path(source).resolve()
    try:
        inside = package.relative_to(source)
    except ValueError:  # prereg is installed, not part of the checkout: site-packages has it
        paths = []
    else:
        paths, package = [str(folder / inside.parent)], folder / inside
    for entry in pythonpath.split(os.pathsep) if pythonpath else ():
        try:
            rel = Path(entry or ".").resolve().relative_to(source)
        except ValueError:
            continue
        if str(folder / rel) not in paths:
            paths.append(str(folder / rel))
    return paths, package


def command(
    *,
    checkout: Path,
    folder: Path,
    args: list[str],
    plugins: list[str],
    addopts: str | None = None,
    pythonpath: str | None = None,
    source: Path | None = None,
) -> list[str]:
    """The session's command line: the boot script, its sys.path entries, pytest's arguments.

    ``folder`` is the snapshot; ``source`` the folder this process's code comes from (the
    checkout for a launcher, the snapshot for a session); ``args`` pytest's arguments as
    typed, among them the one naming ``checkout``
    (:func:`prereg.runtime.roles.checkout_argument`); ``addopts`` the launcher's
    ``PYTEST_ADDOPTS`` (put before them, as pytest reads it), ``plugins`` the ``-p``
    arguments. The launcher's ``PYTHONPATH`` entries inside the checkout (the gate refuses
    any other) become the same folders of the snapshot."""
    paths, package = snapshot_paths(folder, Path(source or checkout), pythonpath)
    boot = boot_script(package)
    return [
        sys.executable, "-I", "-B", str(boot), os.pathsep.join(paths),
        *shlex.split(addopts or ""), *args, *plugins,
    ]  # fmt: skip


# Options naming a file or folder pytest writes: a relative one would resolve in the
# snapshot, so the session is given it resolved against the launcher's folder.
OUTPUT_OPTIONS = {"basetemp": "--basetemp", "log_file": "--log-file", "debug": "--debug"}
# Of those, the ones an ini file may set too (pytest reads the option, else the ini value).
OUTPUT_INIS = ("log_file",)
# Of those, the files pytest writes as soon as it starts.
NULLED = ("log_file", "debug")


def output_values(config) -> dict[str, object]:
    """Each output option's value as the session would use it: the command line's (or
    ``PYTEST_ADDOPTS``'), else the ini file's."""
    values = {dest: config.getoption(dest, None) for dest in OUTPUT_OPTIONS}
    for dest in OUTPUT_INIS:
        values[dest] = values[dest] or config.getini(dest) or None
    return values


def output_arguments(values: dict[str, object], cwd: Path) -> list[str]:
    """``--basetemp=/abs`` etc. for each of ``values`` (:func:`output_values`) that is a
    relative path, resolved against ``cwd`` (given last, they win)."""
    return [
        f"{OUTPUT_OPTIONS[dest]}={Path(cwd, value)}"
        for dest, value in values.items()
        if isinstance(value, (str, os.PathLike)) and not os.path.isabs(value)
    ]


def null_arguments(values: dict[str, object]) -> list[str]:
    """``--log-file=/dev/null`` etc. for each file of ``values`` (:func:`output_values`) that
    is set, for a process that must write none (the item listing). ``basetemp`` is made only
    when an item asks for a ``tmp_path``, which a listing never does."""
    return [f"{OUTPUT_OPTIONS[dest]}={os.devnull}" for dest in NULLED if values.get(dest)]


def exec_session(
    argv: list[str], *, cwd: Path, env: dict[str, str], handoff: bool, keep_stdin: bool = False
) -> None:
    """Replace this process with the session (standard input closed unless ``keep_stdin``,
    which a rehearsal's debugger reads; never returns). ``handoff``: SIGTERM had its default
    action and is blocked (:func:`prereg.runtime.signals.hold_sigterm`); the mask and a
    pending SIGTERM survive ``exec``, and the boot unblocks it once it has taken it."""
    if handoff:
        env = {**env, SIGTERM_HANDOFF: "1"}
    sys.stdout.flush()
    sys.stderr.flush()
    if not keep_stdin:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    os.chdir(cwd)
    os.execve(argv[0], argv, env)
