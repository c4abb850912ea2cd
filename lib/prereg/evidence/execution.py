"""The code a research run executes: every loaded module and plugin accounted for.

A research run's results are only as good as the code that produced them. The gate
(``pytest_sessionstart``, before the run id is spent; also ``prereg approve``) refuses
with condition ``execution`` each string :func:`problems` returns. Loaded code (every
module in ``sys.modules`` with a file, and every pytest plugin object) must be

* a committed file of the approved checkout (tracked, and byte-equal to the index,
  which the gate's clean-tree condition ties to HEAD),
* a file of the running interpreter's standard library,
* a file listed in the RECORD of a distribution installed in a site-packages folder,
  hashed against RECORD's SHA-256 (source and compiled modules alike), or
* a tracked, not git-ignored file of the git checkout that an installed distribution is
  *editable* from (``pip install -e``, e.g. prereg itself in a user's project): the
  checkout's commit and every loaded file differing from it are then recorded by
  :func:`record`, not refused, so work in progress on the harness stays usable.

Beyond loaded modules it refuses what would run code later or elsewhere:

* ``.pth`` files in the site-packages folders (run at every interpreter start) that
  are not files of an installed distribution with RECORD's hash;
* ``sys.path`` entries outside the checkout, the standard library and site-packages
  (a module imported from one during collection, after the gate, would run unchecked);
* untracked or git-ignored files in the checkout's Python folders (every folder holding
  a committed ``.py`` file, the folders above it, and ``sys.path`` entries inside the
  checkout): Python files (``.py``, bytecode, extension modules, ``.pth``); bytecode
  caches (``__pycache__``, or the ``PYTHONPYCACHEPREFIX`` mirror) where a file this
  interpreter or the loaded pytest would load (its header matches the source) is not a
  genuine compilation of the source beside it, code object compared with code object;
  package metadata (``*.egg-info``, ``*.dist-info``) that could change what runs (see
  :func:`_metadata_problems`). Below the top, every ignored sub-folder of a Python folder
  is walked (packages, namespace packages, folders pytest collects); at the top, where
  data folders live (``runs/``, ``cache/``, ``demo-output/``), only one that is a package
  or holds a ``conftest.py``; virtual environments (``pyvenv.cfg``) never, their
  site-packages being checked against RECORD;
* the cached bytecode of the harness's installed machinery (pytest, pluggy, xdist,
  execnet) that differs from its source;
* xdist ``--tx`` specs that start workers with another interpreter, variables or folder
  on this host (a remote ``socket=`` or ``ssh=`` worker proves its own checkout and
  environment before the run id is spent: :mod:`prereg.runtime.remote`);
* a process started from ``python -c`` or interactively, and ``python -O``.

What it cannot see: code loaded later by a path nobody imports by name (``ctypes``,
``torch.ops.load_library``; the GRU kernel is keyed by its source hash), a conftest or
module first imported during collection from inside the checkout (covered by the clean
tree and the ignored-file scan, not by the loaded-module check), the bytecode of other
installed packages (compiling all of torch would take seconds), and edits to the
interpreter's own standard library.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import marshal
import os
import shutil
import site
import sys
import sysconfig
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from urllib.parse import unquote, urlparse

from prereg.base import gitrepo, usercache
from prereg.base.hashing import sha256_file, status_proof
from prereg.evidence import imports
from prereg.evidence.hermetic import (
    PASSED_VARIABLES,
    SET_BY_LIBRARIES,
    environment_at_start,
    foreign_variables,
    set_by_code,
)

PYC_SUFFIXES = (".pyc", ".pyo")
# The hashes a RECORD row may give (PEP 376: sha256 or stronger) that a loaded file is checked by.
RECORD_HASHES = ("sha256", "sha384", "sha512")
# Every file name ending Python imports or the site module runs.
LOADABLE_SUFFIXES = tuple(
    sorted(set(importlib.machinery.all_suffixes()) | {".pyw", ".pth", *PYC_SUFFIXES})
)
METADATA_SUFFIXES = (".egg-info", ".dist-info")
RECORDED_VARIABLES = ("PYTEST_ADDOPTS", "PYTHONPATH", "PYTEST_PLUGINS")
# prereg's own pytest plugin entry point, (name, value) of [project.entry-points.pytest11] in
# pyproject.toml: the one pytest11 entry that package metadata inside a checkout may declare
# (``pip install -e .`` writes it to lib/prereg.egg-info). Its name is the module's name, so a
# conftest.py's pytest_plugins = ("prereg.plugin",) and the autoloaded entry are one plugin.
PYTEST_PLUGIN_ENTRY_POINT = ("prereg.plugin", "prereg.plugin")
CUSTOMIZE_MODULES = ("sitecustomize", "usercustomize")
# Installed distributions that decide which items run and what is recorded: their cached
# bytecode is compared with their source (see _installed_bytecode_problems).
HARNESS_DISTRIBUTIONS = ("pytest", "pluggy", "pytest_xdist", "execnet", "iniconfig")
# Marks a folder as reached by Python (a package) or by pytest (a conftest) on its own.
FOLDER_MARKERS = ("__init__.py", "conftest.py")


# -- facts about the environment ------------------------------------------------------------


# Folders of installed packages: an absolute plugin file below one was installed by pip.
INSTALLED_FOLDERS = ("site-packages", "dist-packages")


# path -> (the device and inode it names, its real path): a session resolves each loaded
# module's file at the gate, at collection and at the end; resolving (an lstat of every
# folder on the way) is done again only when the path names another file than it did.
_RESOLVED: dict[str, tuple[tuple[int, int], str]] = {}


def _real(path: str | os.PathLike) -> str:
    path = os.fspath(path)
    try:
        status = os.stat(path)
    except OSError:
        return os.path.realpath(path)
    names = (status.st_dev, status.st_ino)
    held = _RESOLVED.get(path)
    if held is not None and held[0] == names:
        return held[1]
    real = os.path.realpath(path)
    _RESOLVED[path] = (names, real)
    return real


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _git_blob(path: str, algorithm: str) -> str:
    return gitrepo.object_id("blob", Path(path).read_bytes(), algorithm)


def site_dirs() -> list[str]:
    """The folders the ``site`` module processes (``.pth`` files) and pip installs into."""
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE and site.getusersitepackages():
        dirs.append(site.getusersitepackages())
    return sorted({_real(d) for d in dirs if os.path.isdir(d)})


def scripts_dir() -> str:
    """Where pip writes console scripts (``.venv/bin``); each is listed in its RECORD."""
    return _real(sysconfig.get_path("scripts"))


def stdlib_dirs() -> list[str]:
    """The running interpreter's standard library folders (``site-packages`` excluded)."""
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    base |= {"installed_base": sys.base_prefix, "installed_platbase": sys.base_exec_prefix}
    paths = sysconfig.get_paths(vars=base)
    dirs = {paths["stdlib"], paths["platstdlib"], os.path.dirname(os.__file__)}
    return sorted({_real(d) for d in dirs if os.path.isdir(d)})


def _in_stdlib(path: str, stdlib: list[str]) -> bool:
    parts = set(Path(path).parts)
    if parts & set(INSTALLED_FOLDERS):
        return False
    return any(_under(path, d) for d in stdlib)


# The metadata files of a distribution's .dist-info or .egg-info folder that the environment
# lock and :class:`Installed` read.
METADATA_FILES = ("RECORD", "METADATA", "PKG-INFO", "direct_url.json", "entry_points.txt")
_Read = TypeVar("_Read")
_READ_WHILE_UNCHANGED: dict[tuple[str, tuple[str, ...]], tuple[tuple, object]] = {}


def metadata_proof(dirs: list[str]) -> tuple:
    """A cheap proof that the distributions installed in ``dirs`` are as they were: each
    folder's and each metadata folder's own status and that of its :data:`METADATA_FILES`
    (:func:`prereg.base.hashing.status_proof`, which a file rewritten in place with its old
    size and modification time restored still changes). Reading it costs a directory listing
    and a few ``stat`` calls per distribution, not a parse of every RECORD."""
    proof: list[tuple] = []

    def stamp(path: str) -> None:
        try:
            proof.append((path, status_proof(os.stat(path))))
        except OSError:
            return

    for folder in dirs:
        stamp(folder)
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if name.endswith((".dist-info", ".egg-info")):
                path = os.path.join(folder, name)
                stamp(path)
                for file in METADATA_FILES:
                    stamp(os.path.join(path, file))
    return tuple(proof)


# A reading of the installed distributions' metadata kept in prereg's user cache, named by
# the SHA-256 of what it depends on (:func:`_kept_reading`): a later process whose
# :func:`metadata_proof` is the same takes it instead of parsing every RECORD again.
METADATA_READINGS = "metadata-read"
_READING_CODE: dict[str, str] = {}


def _reading_code(filename: str) -> str:
    """The SHA-256 of the module that reads (and of this one), so a changed reader never
    takes what an older one kept."""
    if filename not in _READING_CODE:
        digest = hashlib.sha256()
        for path in (filename, __file__):
            try:
                digest.update(Path(path).read_bytes())
            except OSError:
                digest.update(os.urandom(16))  # unreadable: never found again
        _READING_CODE[filename] = digest.hexdigest()
    return _READING_CODE[filename]


def _kept_reading(kind: str, dirs: list[str], proof: tuple, read: Callable) -> Path:
    """``metadata-read/<the folders' key>/<the proof's key>``: one folder per reading and
    set of site folders, holding the latest reading only (:func:`_keep`)."""
    where = hashlib.sha256(repr((kind, tuple(dirs), sys.version)).encode()).hexdigest()
    code = _reading_code(getattr(getattr(read, "__code__", None), "co_filename", "?"))
    parts = repr((proof, marshal.version, code))
    return usercache.folder(METADATA_READINGS, where, hashlib.sha256(parts.encode()).hexdigest())


def _load_kept(path: Path, decode: Callable[[object], _Read]) -> _Read | None:
    try:
        return decode(marshal.loads(path.read_bytes()))
    except (OSError, ValueError, EOFError, TypeError, KeyError, IndexError):
        return None  # absent, unreadable or damaged: read again


def _keep(path: Path, plain: object) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        partial.write_bytes(marshal.dumps(plain))
        os.replace(partial, path)  # whole or absent, whatever ends this process
        for older in path.parent.iterdir():  # superseded: those folders changed since
            if older != path and not older.name.endswith(".partial"):
                older.unlink(missing_ok=True)
    except (OSError, ValueError):
        pass  # a read-only or full cache: the next process reads again


def read_while_unchanged(
    kind: str,
    dirs: list[str],
    read: Callable[[], _Read],
    *,
    encode: Callable[[_Read], object] = lambda value: value,
    decode: Callable[[object], _Read] = lambda plain: plain,  # type: ignore[assignment,return-value]
) -> _Read:
    """``read()`` of the distributions installed in ``dirs``, read once while
    :func:`metadata_proof` stays the same: the gate and the run's end share one reading of
    every RECORD, and a distribution installed, removed or rewritten in between is read
    again. A reading is kept in prereg's user cache too (:data:`METADATA_READINGS`: ``encode``
    gives its plain, marshal-able form, ``decode`` the value again), for the next process
    that finds the same proof. The value is shared: callers do not change it."""
    key = (kind, tuple(dirs))
    proof = metadata_proof(dirs)
    held = _READ_WHILE_UNCHANGED.get(key)
    if held is not None and held[0] == proof:
        return held[1]  # type: ignore[return-value]
    kept = _kept_reading(kind, dirs, proof, read)
    value = _load_kept(kept, decode)
    if value is None:
        value = read()
        if metadata_proof(dirs) != proof:  # something changed while it was read
            return value
        _keep(kept, encode(value))
    _READ_WHILE_UNCHANGED[key] = (proof, value)
    return value


@dataclass(frozen=True)
class Recorded:
    distribution: str
    version: str
    hash: str  # "sha256=<urlsafe b64>" or ""


@dataclass
class Installed:
    """The distributions installed in the site-packages folders, by the files they record."""

    files: dict[str, tuple[int, str]] = field(default_factory=dict)  # path -> (owner, hash)
    owners: list[tuple[str, str]] = field(default_factory=list)  # (distribution, version)
    editable: dict[str, tuple[str, str]] = field(default_factory=dict)  # dist -> (version, dir)

    @classmethod
    def scan(cls, dirs: list[str] | None = None) -> Installed:
        """The distributions installed in ``dirs`` (the site-packages folders by default),
        read once while they are unchanged (:func:`read_while_unchanged`: in this process,
        else from the reading an earlier process kept)."""
        folders = dirs if dirs is not None else site_dirs()
        return read_while_unchanged(
            "installed",
            folders,
            lambda: cls._read(folders),
            encode=lambda found: (found.files, found.owners, found.editable),
            decode=cls._from_plain,
        )

    @classmethod
    def _from_plain(cls, plain: object) -> Installed:
        files, owners, editable = plain  # type: ignore[misc]
        if not (
            isinstance(files, dict) and isinstance(owners, list) and isinstance(editable, dict)
        ):
            raise TypeError("not a kept reading of the installed distributions")
        return cls(files, owners, editable)

    @classmethod
    def _read(cls, dirs: list[str]) -> Installed:
        found = cls()
        for dist in importlib.metadata.distributions(path=dirs):
            folder = getattr(dist, "_path", None)  # <name>-<version>.dist-info: no parsing
            stem = folder.name.rsplit(".", 1)[0] if isinstance(folder, Path) else ""
            name, _, version = stem.partition("-")
            if not (name and version):
                name, version = dist.metadata["Name"] or "?", dist.version
            owner = len(found.owners)
            found.owners.append((name, version))
            base = _real(dist.locate_file(""))
            prefix = base + os.sep
            record = dist.read_text("RECORD")
            for row in csv.reader((record or "").splitlines()):
                if row:
                    rel = row[0]
                    path = (
                        prefix + rel
                        if ".." not in rel and not rel.startswith("/") and "//" not in rel
                        else os.path.normpath(os.path.join(base, rel))
                    )
                    found.files[path] = (owner, row[1] if len(row) > 1 else "")
            direct = dist.read_text("direct_url.json")
            if direct:
                try:
                    info = json.loads(direct)
                except ValueError:
                    continue
                if info.get("dir_info", {}).get("editable") and info.get("url", "").startswith(
                    "file:"
                ):
                    found.editable[name] = (version, _real(unquote(urlparse(info["url"]).path)))
        return found

    def owner(self, path: str) -> Recorded | None:
        """The distribution whose RECORD lists ``path``, and the hash it records."""
        if path not in self.files:
            return None
        owner, digest = self.files[path]
        return Recorded(*self.owners[owner], digest)

    def check(self, path: str) -> str | None:
        """Why ``path`` is not an unchanged file of an installed distribution, or None."""
        recorded = self.owner(path)
        if recorded is None:
            return (
                "is not listed in the RECORD of any installed distribution: remove it, or "
                "install the package that should provide it"
            )
        algorithm, _, want = recorded.hash.partition("=")
        if algorithm not in RECORD_HASHES or not want:
            if path.endswith(PYC_SUFFIXES):  # bytecode compiled at install; its source is checked
                return None
            return (
                f"has no hash prereg can check in the RECORD of {recorded.distribution} "
                f"{recorded.version} ({recorded.hash or 'none'}), so its bytes are bound by "
                "nothing: reinstall that distribution with pip, which records sha256"
            )
        if _record_hash(path, algorithm) != want:
            return (
                f"differs from the RECORD of {recorded.distribution} {recorded.version}: "
                "reinstall that distribution"
            )
        return None


# path -> (its status when hashed, (algorithm, its RECORD-style hash)): a file is hashed again
# only when its inode, size, modification or change time differ (a replaced or rewritten
# file changes its change time, which no caller can set), so the many checks of one process
# (the gate, at collection, at the end) read a large shared library once.
_HASHED: dict[str, tuple[tuple, tuple[str, str]]] = {}


def _record_hash(path: str, algorithm: str) -> str:
    """The file's hash as a RECORD writes it (urlsafe base64, unpadded)."""
    status = os.stat(path)
    key = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)
    known = _HASHED.get(path)
    if known is not None and known[0] == key and known[1][0] == algorithm:
        return known[1][1]
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    have = base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
    _HASHED[path] = (key, (algorithm, have))
    return have


@dataclass
class Checkout:
    """A git work tree whose committed files may run."""

    top: str  # real path
    blobs: dict[str, str]  # relative posix path -> blob id in the index
    others: list[str]  # untracked or ignored entries, folders ending in "/"
    ignored: list[str]  # ignored entries only
    strict: bool  # the approved checkout (True) or an editable install's (False)
    algorithm: str = "sha1"  # the repository's object format, which the blob ids use

    @classmethod
    def read(cls, folder: str | os.PathLike, *, strict: bool) -> Checkout | None:
        def git(*args: str) -> str | None:
            done = gitrepo.run(os.fspath(folder), *args, check=False)
            return done.stdout.decode("utf-8", "surrogateescape") if done.returncode == 0 else None

        top = git("rev-parse", "--show-toplevel")
        if top is None:
            return None
        blobs = {}
        for entry in (git("ls-files", "-z", "-s") or "").split("\0"):
            if "\t" in entry:
                meta, path = entry.split("\t", 1)
                blobs[path] = meta.split()[1]
        others = [p for p in (git("ls-files", "-z", "--others", "--directory") or "").split("\0")]
        ignored = git(
            "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"
        )
        return cls(
            top=_real(top.strip()),
            blobs=blobs,
            others=[p for p in others if p],
            ignored=[p for p in (ignored or "").split("\0") if p],
            strict=strict,
            algorithm=gitrepo.object_format(Path(top.strip())),
        )

    def relative(self, path: str) -> str | None:
        return Path(os.path.relpath(path, self.top)).as_posix() if _under(path, self.top) else None

    def is_ignored(self, rel: str) -> bool:
        return any(
            rel == e.rstrip("/") or (e.endswith("/") and rel.startswith(e)) for e in self.ignored
        )

    def check(self, path: str) -> str | None:
        """Why ``path`` (inside this checkout) may not run, or None."""
        rel = self.relative(path)
        if rel in self.blobs:
            compiled = (
                imports.verdict(path, self.blobs[rel], self.algorithm) if self.strict else None
            )
            if compiled is not None:  # what its loader read, not the file as it is now
                return compiled
            if self.strict and _git_blob(path, self.algorithm) != self.blobs[rel]:
                return "differs from the committed file: commit it or restore it"
            return None
        if self.strict or self.is_ignored(rel):
            what = "git-ignored" if self.is_ignored(rel) else "untracked"
            return f"is a {what} file, not a committed file of {self.top}: delete it or commit it"
        return None

    def changed(self, paths: set[str]) -> list[dict]:
        """Loaded files of this checkout that differ from the index: name them and their hash."""
        out = []
        for path in sorted(paths):
            rel = self.relative(path)
            if rel is not None and (
                rel not in self.blobs or _git_blob(path, self.algorithm) != self.blobs[rel]
            ):
                out.append({"file": rel, "sha256": sha256_file(path)})
        return out

    def head(self) -> str | None:
        return gitrepo.resolve(Path(self.top), "HEAD")


# -- loaded code ----------------------------------------------------------------------------


def _module_file(module: object) -> str | None:
    path = getattr(module, "__file__", None)
    if not isinstance(path, str) or not path:
        return None
    path = _real(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)  # a module inside a zip archive: the archive
    return path if os.path.isfile(path) else None  # None: a made-up name (torch.ops)


SHARED_LIBRARY = "shared library"


def mapped_libraries(sites: list[str]) -> list[str]:
    """The shared libraries mapped into this process from the site-packages folders
    ``sites`` (Linux: ``/proc/self/maps``; elsewhere none): the ones an extension module
    loads (numpy's bundled OpenBLAS, torch's libraries), which no module's file names. Each
    must be an unchanged file of an installed distribution's RECORD, as a module must."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    found = set()
    for line in maps.splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].startswith("/") and ".so" in fields[5]:
            path = _real(fields[5])  # a replaced file reads "... (deleted)": it cannot be read
            if any(_under(path, site) for site in sites):
                found.add(path)
    return sorted(found)


def loaded_files(plugins: list[tuple[str, object]]) -> dict[str, list[str]]:
    """Each file of a loaded module or pytest plugin, with the names it was loaded as."""
    files: dict[str, list[str]] = {}
    for name, module in list(sys.modules.items()):
        path = _module_file(module)
        if path is not None:
            files.setdefault(path, []).append(name)
    for name, plugin in plugins:
        if plugin is None:
            continue
        module = plugin if isinstance(plugin, types.ModuleType) else None
        if module is None:
            module = sys.modules.get(getattr(type(plugin), "__module__", ""), None)
        path = _module_file(module) if module is not None else None
        if path is not None:
            files.setdefault(path, []).append(f"pytest plugin {name}")
    return files


@dataclass
class Environment:
    root: Checkout | None
    checkouts: list[Checkout]  # the root's first, then editable installs' checkouts
    installed: Installed
    sites: list[str]
    stdlib: list[str]
    editable_dirs: dict[str, tuple[str, str]]  # dist -> (version, dir)
    scripts: str = field(default_factory=lambda: scripts_dir())  # console scripts' folder

    @classmethod
    def read(cls, root: Path, snapshot=None) -> Environment:
        """``snapshot`` (:class:`prereg.records.snapshot.Snapshot`): the code runs from that
        verified folder, whose files are exactly the approved commit's (``root`` is that
        folder)."""
        sites = site_dirs()
        installed = Installed.scan(sites)
        if snapshot is not None:
            top = Checkout(
                top=_real(snapshot.folder), blobs=dict(snapshot.blobs), others=[], ignored=[],
                strict=True, algorithm=snapshot.algorithm,
            )  # fmt: skip
        else:
            top = Checkout.read(root, strict=True)
        checkouts = [top] if top is not None else []
        for _dist, (_version, folder) in sorted(installed.editable.items()):
            if any(_under(folder, c.top) for c in checkouts) or not os.path.isdir(folder):
                continue
            other = Checkout.read(folder, strict=False)
            if other is not None and all(other.top != c.top for c in checkouts):
                checkouts.append(other)
        return cls(top, checkouts, installed, sites, stdlib_dirs(), installed.editable)

    def account(self, path: str) -> str | None:
        """Why the code in ``path`` is not accounted for, or None when it is."""
        if any(_under(path, d) for d in self.sites):
            return self.installed.check(path)
        if _under(path, self.scripts) and self.installed.owner(path) is not None:
            return self.installed.check(path)  # a console script (.venv/bin/pytest) pip wrote
        for checkout in self.checkouts:
            if _under(path, checkout.top):
                return checkout.check(path)
        if _in_stdlib(path, self.stdlib):
            return None
        for dist, (_version, folder) in self.editable_dirs.items():
            if _under(path, folder):
                return (
                    f"comes from the editable install of {dist} in {folder}, which is not a git "
                    "checkout: install it normally (pip install) or make it a git checkout"
                )
        return (
            "lies outside the approved checkout, the standard library and every installed "
            "distribution: run from the approved checkout with only installed packages (unset "
            "PYTHONPATH, PYTEST_ADDOPTS and PYTEST_PLUGINS; no -p or --confcutdir naming outside "
            "code; no sitecustomize or usercustomize outside the standard library)"
        )


def _show(path: str, env: Environment) -> str:
    rel = env.root.relative(path) if env.root is not None else None
    return rel if rel is not None else path


def _module_problems(env: Environment, files: dict[str, list[str]]) -> list[str]:
    found = []
    for path, names in sorted(files.items()):
        try:
            why = env.account(path)
        except OSError as error:  # vanished or unreadable since it was loaded
            why = f"cannot be read ({error.strerror}): nothing shows what ran"
        if why is not None:
            found.append(
                f"loaded code {', '.join(sorted(set(names)))} from {_show(path, env)} {why}"
            )
    return found


def _scripts_folder_problems(env: Environment, folder: str) -> list[str]:
    """What an import from the scripts ``folder`` on ``sys.path`` could load unchecked.

    Python puts a started script's folder first on ``sys.path``: a console script
    (``.venv/bin/pytest``, ``prereg``) puts the environment's scripts folder there, and xdist
    copies the controller's ``sys.path`` to each local worker. So a prereg installed into an
    environment outside the checkout runs with that ``bin`` on ``sys.path``; it is accepted
    by what it holds, wherever it lies (a ``.venv`` inside the checkout too, which the
    ignored-file scan never walks), whatever put it there.

    Python's path finder loads from a folder only a file whose name ends in a module suffix
    (``.py``, bytecode, extension modules) and a sub-folder (a package, or a namespace
    package even without ``__init__.py``); importlib.metadata (pytest's plugin autoload)
    reads ``*.dist-info`` and ``*.egg-info`` there. The console scripts pip writes carry no
    suffix (``pytest``, ``prereg``), and neither do ``python`` and ``activate``: nothing in a
    plain environment's scripts folder can be imported. So every sub-folder is refused, and
    every file with such a suffix must be listed in an installed distribution's RECORD with
    its hash (a distribution's own script ``tool.py``, trusted as its site-packages modules
    are); the rest of the folder is not importable and is not read.
    """
    found = []
    where = (
        "in the scripts folder on sys.path (a console script's folder, from which an import "
        "after the gate would load code unchecked)"
    )
    other = (
        "or start the run with python -m pytest (python -m prereg.cli), which keeps the "
        "folder off sys.path"
    )
    for entry in sorted(os.listdir(folder)):
        path = os.path.join(folder, entry)
        if os.path.isdir(path):
            found.append(
                f"folder {path} {where} could be imported as a package: move it out of "
                f"{folder}, {other}"
            )
        elif entry.lower().endswith((*LOADABLE_SUFFIXES, *METADATA_SUFFIXES)):
            try:
                why = env.installed.check(_real(path))
            except OSError as error:
                why = f"cannot be read ({error.strerror}): remove it"
            if why is not None:
                found.append(f"file {path} {where} {why}, {other}")
    return found


def _main_problems() -> list[str]:
    """The process must be started from a file (``pytest``, ``python -m pytest``): code given
    on the command line (``python -c``) or typed interactively runs before the gate and is
    recorded nowhere."""
    main = sys.modules.get("__main__")
    if main is None or _module_file(main) is not None:
        return []
    return [
        (
            "this process was started from code given on the command line (python -c) or "
            "typed interactively, which nothing records and which ran before the gate: start "
            "the run with pytest or python -m pytest"
        )
    ]


def _path_problems(env: Environment) -> list[str]:
    """``sys.path`` entries from which a later import (during collection or in an item,
    after the gate) could load code that nothing accounts for."""
    found = []
    scripts = env.scripts
    if any(_real(entry or os.getcwd()) == scripts for entry in sys.path):
        found += _scripts_folder_problems(env, scripts)
    for entry in sys.path:
        path = _real(entry or os.getcwd())
        if path == scripts:
            continue  # checked by its content above
        if not os.path.exists(path):
            continue  # the import system never looks there again (path_importer_cache)
        allowed = [*env.sites, *(c.top for c in env.checkouts), *env.stdlib]
        inside = any(_under(path, folder) for folder in allowed)
        if inside and (not os.path.isfile(path) or env.account(path) is None):
            continue
        if inside:
            found.append(
                f"sys.path entry {entry} is a file, an archive Python imports code from: "
                "that code shows prereg no bytes it compiled, so nothing checks it; import "
                "modules from the project's folders instead"
            )
            continue
        found.append(
            f"sys.path entry {entry or '(current folder)'} lies outside the approved checkout, "
            "the standard library and site-packages: code imported from it later would run "
            "unchecked; unset PYTHONPATH (or PYTEST_ADDOPTS/pythonpath options adding it)"
        )
    return found


def _installed_bytecode_problems(env: Environment, files: dict[str, list[str]]) -> list[str]:
    """The bytecode of the harness's own installed machinery (:data:`HARNESS_DISTRIBUTIONS`).

    RECORD hashes an installed module's source, but Python runs its cached bytecode when
    the header matches; for the distributions that decide which items run and what is
    recorded, that bytecode is compared with the source's (about half a second; all of
    torch and numpy would take several, so theirs is trusted as installed).
    """
    found = []
    for path in sorted(files):
        recorded = env.installed.owner(path) if path.endswith(".py") else None
        name = recorded.distribution.lower().replace("-", "_") if recorded else ""
        if name not in HARNESS_DISTRIBUTIONS:
            continue
        pyc = importlib.util.cache_from_source(path)
        if os.path.isfile(pyc):
            why = _pyc_problem(pyc, path, sys.flags.optimize, None)
            if why is not None:
                found.append(
                    f"bytecode {pyc} of {recorded.distribution} {recorded.version} {why}: "
                    f"delete it or reinstall {recorded.distribution}"
                )
    return found


def environment_problems_of_launcher(root: Path) -> list[str]:
    """What a run's launcher refuses in the environment it was started in, whatever the code:
    ``sys.path`` entries (``PYTHONPATH``) and ``.pth`` hooks outside the checkout and the
    recorded packages. A rehearsal asks it, so that one started where a run would be refused
    says so."""
    env = Environment.read(Path(root))
    return _path_problems(env) + _pth_problems(env)


def _pth_problems(env: Environment) -> list[str]:
    found = []
    for folder in env.sites:
        for entry in sorted(os.listdir(folder)):
            if entry.endswith(".pth"):
                path = os.path.join(folder, entry)
                why = env.installed.check(_real(path))
                if why is not None:
                    found.append(
                        f".pth file {path} (run at every interpreter start) {why}; remove it or "
                        "reinstall the distribution that owns it"
                    )
    return found


# -- ignored files in the checkout's Python folders -----------------------------------------


def _python_folders(checkout: Checkout) -> set[str]:
    """Relative folders ("" is the top) where Python or pytest look for code."""
    folders = {""}
    for rel in checkout.blobs:
        if rel.endswith(".py"):
            parent = os.path.dirname(rel)
            while parent not in folders:
                folders.add(parent)
                parent = os.path.dirname(parent)
    sites = site_dirs()  # checked against RECORD instead (a .venv inside the checkout)
    for entry in sys.path:
        if _real(entry or os.getcwd()) in sites:
            continue
        rel = checkout.relative(_real(entry or os.getcwd()))
        if rel is not None and os.path.isdir(os.path.join(checkout.top, rel)):
            folders.add("" if rel == "." else rel)
    return folders


@dataclass(frozen=True)
class _Rewrite:
    """pytest's assertion rewrite of a test module's source, as the loaded pytest does it;
    ``identity`` names what its code depends on beside the source: pytest's version (its
    pyc tail) and the one setting the rewrite reads (``enable_assertion_pass_hook``)."""

    module: types.ModuleType  # _pytest.assertion.rewrite
    config: object
    identity: str

    def __call__(self, source: Path) -> types.CodeType:
        return self.module._rewrite_test(source, self.config)[1]


def _pytest_rewriter(plugins: list[tuple[str, object]]):
    """(pyc tail, :class:`_Rewrite`) of the loaded pytest, or None."""
    rewrite = sys.modules.get("_pytest.assertion.rewrite")
    if rewrite is None:
        return None
    config = dict(plugins).get("pytestconfig")
    hook = config.getini("enable_assertion_pass_hook") if config is not None else False
    identity = f"{rewrite.PYC_TAIL} enable_assertion_pass_hook={bool(hook)}"
    return rewrite.PYC_TAIL, _Rewrite(rewrite, config, identity)


def _pyc_problem(pyc: str, source: str, optimize: int, rewrite) -> str | None:
    """Why the bytecode in ``pyc`` would run instead of ``source``'s code, or None.

    A pyc whose header does not match its source is never loaded (Python recompiles), so
    only a pyc that would be loaded is compared, code object with code object.
    """
    data = Path(pyc).read_bytes()
    if len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER:
        return None
    source_bytes = Path(source).read_bytes()
    flags = int.from_bytes(data[4:8], "little")
    if rewrite is not None:  # pytest's checked-hash pyc of a rewritten test module
        if flags != 3 or data[8:16] != importlib.util.source_hash(source_bytes):
            return None
    elif flags & 1:  # hash-based (PEP 552)
        check = flags & 2 and sys.flags.check_hash_based_pycs != "never"
        if check and data[8:16] != importlib.util.source_hash(source_bytes):
            return None
    else:
        stat = os.stat(source)
        mtime = int.from_bytes(data[8:12], "little")
        size = int.from_bytes(data[12:16], "little")
        if mtime != int(stat.st_mtime) & 0xFFFFFFFF or size != stat.st_size & 0xFFFFFFFF:
            return None
    key = _comparison_key(data, source_bytes, optimize, rewrite)
    if key not in _COMPARED:
        _COMPARED[key] = _remembered_problem(key, data, source, source_bytes, optimize, rewrite)
    return _COMPARED[key]


# The outcome of each comparison of bytecode with its source in this process, keyed by both
# contents: the gate, the collection-time check and the end-of-run check compare the same
# files, and equal bytes compile to equal code.
_COMPARED: dict[str, str | None] = {}
# Comparisons that found bytecode equal to its source's compilation, kept across processes
# and runs in prereg's user cache (prereg.base.usercache): one empty file per comparison,
# named by its key (_comparison_key). The session and each worker of every run load the
# same installed pytest and the same editable checkout: each pair is compiled once per
# machine, not once per process. A changed or planted file has another key, so it is
# compared again. Who can write the user's cache can write an installed package's
# bytecode too, which no run compares (numpy's, torch's): docs/explanation/threat-model.md.
EQUAL_BYTECODE = "bytecode-equal"


def _comparison_key(data: bytes, source_bytes: bytes, optimize: int, rewrite) -> str:
    """The SHA-256 of what a comparison's outcome depends on: both files' bytes, the
    interpreter (its bytecode magic and version), the optimisation level and, for a test
    module, pytest's rewrite (:func:`_pytest_rewriter`)."""
    parts = (
        importlib.util.MAGIC_NUMBER.hex(), sys.version, sys.implementation.cache_tag,
        str(optimize), rewrite.identity if rewrite is not None else "-",
        hashlib.sha256(data).hexdigest(), hashlib.sha256(source_bytes).hexdigest(),
    )  # fmt: skip
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _remembered_problem(
    key: str, data: bytes, source: str, source_bytes: bytes, optimize: int, rewrite
) -> str | None:
    """:func:`_compiled_problem`, or None at once when an earlier process found these bytes
    equal (:data:`EQUAL_BYTECODE`); a new finding of equality is kept for later ones."""
    marker = usercache.folder(EQUAL_BYTECODE, key[:2], key)
    if marker.is_file():
        return None
    why = _compiled_problem(data, source, source_bytes, optimize, rewrite)
    if why is None:
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
        except OSError:
            pass  # a read-only cache: the next process compares again
    return why


def _compiled_problem(
    data: bytes, source: str, source_bytes: bytes, optimize: int, rewrite
) -> str | None:
    try:
        code = marshal.loads(data[16:])
    except (ValueError, EOFError, TypeError):
        return "is not readable bytecode"
    try:
        if rewrite is not None:
            want = rewrite(Path(source))
        else:
            want = compile(source_bytes, source, "exec", dont_inherit=True, optimize=optimize)
    except (SyntaxError, ValueError):
        return "has no compilable source beside it"
    if code != want:
        return f"is not a compilation of {os.path.basename(source)}"
    return None


def _cache_problems(
    cache: str, source_dir: str, tail: str | None, rewrite, shown: str
) -> list[str]:
    """Bytecode in ``cache`` (a ``__pycache__`` or its prefix mirror) for ``source_dir``."""
    found = []
    tag = sys.implementation.cache_tag
    for entry in sorted(os.listdir(cache)):
        path = os.path.join(cache, entry)
        if not os.path.isfile(path):
            continue
        stem, opt, rewriter = None, 0, None
        if tail is not None and entry.endswith(tail):
            stem, rewriter = entry[: -len(tail)], rewrite
        elif entry.endswith(PYC_SUFFIXES) and f".{tag}" in entry:
            stem, rest = entry.split(f".{tag}", 1)
            level = rest[: -len(".pyc")]
            if level not in ("", ".opt-1", ".opt-2"):
                stem = None  # e.g. another pytest's rewrite: this process never loads it
            opt = int(level[-1]) if level else 0
        if stem is None:
            continue  # another interpreter's bytecode: this interpreter never loads it
        source = os.path.join(source_dir, stem + ".py")
        if not os.path.isfile(source):
            continue  # a cached pyc without its source is never loaded
        try:
            why = _pyc_problem(path, source, opt, rewriter)
        except FileNotFoundError:
            continue  # removed meanwhile (a concurrent rewrite): it can no longer be loaded
        if why is not None:
            found.append(
                f"bytecode {shown}/{entry} {why}: Python would run it instead of the committed "
                f"source; delete {shown}"
            )
    return found


def _entry_point_module(value: str) -> str:
    return value.split(":", 1)[0].strip()


# group -> (what an entry is, built-in name -> the "module:attribute" it is, or None when no
# entry point names it): each extension point's built-in table, declared by
# prereg.kinds.registry.ExtensionPoint as its owner is imported (this layer imports no owner).
_built_in_entries: dict[str, tuple[str, dict[str, str | None]]] = {}


def declare_built_in(group: str, what: str, references: dict[str, str | None]) -> None:
    """Record the built-in entries of extension point ``group`` (``what``: "stage kind"), so
    package metadata inside the checkout naming one of them otherwise is refused."""
    _built_in_entries[group] = (what, dict(references))


def _metadata_problems(checkout: Checkout, rel: str) -> list[str]:
    """Package metadata inside the checkout (for example ``lib/prereg.egg-info``).

    ``pip install -e .`` writes ``<name>.egg-info`` beside the package; importlib.metadata
    finds it on ``sys.path``. Its ``PKG-INFO``, ``SOURCES.txt``, ``requires.txt``,
    ``top_level.txt`` and ``dependency_links.txt`` change nothing that runs, and RECORD files
    inside the checkout vouch for nothing here (only site-packages metadata does). What
    could change code is an entry point: so every entry point must name a committed module
    of the checkout, none may be a pytest plugin (``pytest11``, autoloaded) except prereg's
    own declaration (:data:`PYTEST_PLUGIN_ENTRY_POINT`, name and value exactly), and a
    entry of a declared extension point's group may not redirect a built-in entry of it
    (:func:`declare_built_in`; an extension point never reads those from metadata anyway).
    """
    folder = os.path.join(checkout.top, rel)
    found = []
    modules = {
        p[: -len("/__init__.py")] if p.endswith("/__init__.py") else p[: -len(".py")]
        for p in checkout.blobs
        if p.endswith(".py")
    }
    try:
        points = importlib.metadata.PathDistribution(Path(folder)).entry_points
    except Exception as error:  # noqa: BLE001 - a malformed file: any parse error refuses
        return [f"package metadata {rel}: entry points unreadable ({error}); delete {rel}"]
    for point in points:
        where = f"package metadata {rel} (not committed) declares entry point [{point.group}] {point.name} = {point.value}"
        module = _entry_point_module(point.value)
        entry = (point.name, point.value.replace(" ", ""))
        if point.group == "pytest11" and entry != PYTEST_PLUGIN_ENTRY_POINT:
            # prereg's own entry passes on to the committed-module check below
            found.append(f"{where}: a pytest plugin loaded at every start; delete {rel}")
        elif point.name in _built_in_entries.get(point.group, ("", {}))[1]:
            what, references = _built_in_entries[point.group]
            if entry[1] != references[point.name]:
                found.append(
                    f"{where}: it redirects the built-in {what} {point.name!r} (tracked code: "
                    f"{references[point.name] or 'not named by an entry point'}) to other "
                    f"code; delete {rel} and reinstall (pip install -e .)"
                )
        elif not any(
            m == module.replace(".", "/") or m.endswith("/" + module.replace(".", "/"))
            for m in modules
        ):
            found.append(f"{where}: {module} is not a committed module; delete {rel}")
    return found


def _ignored_problems(checkout: Checkout, plugins: list[tuple[str, object]]) -> list[str]:
    folders = _python_folders(checkout)
    rewriter = _pytest_rewriter(plugins)
    tail, rewrite = rewriter if rewriter is not None else (None, None)
    found: list[str] = []

    def show(rel: str) -> str:
        return rel if checkout.strict else os.path.join(checkout.top, rel)

    def visit(rel: str, is_dir: bool, inside: bool) -> None:
        name = os.path.basename(rel)
        parent = os.path.dirname(rel)
        if not inside and parent not in folders:
            return
        path = os.path.join(checkout.top, rel)
        if not is_dir:
            if name.endswith(LOADABLE_SUFFIXES):
                found.append(
                    f"Python file {show(rel)} is not committed (untracked or git-ignored) but lies "
                    "where Python or pytest would load it; delete it or commit it"
                )
            return
        if name == "__pycache__":
            if not sys.pycache_prefix:
                found.extend(_cache_problems(path, os.path.dirname(path), tail, rewrite, show(rel)))
            return
        if name.lower().endswith(METADATA_SUFFIXES):  # importlib.metadata ignores case
            found.extend(_metadata_problems(checkout, rel))
            return
        if os.path.isfile(os.path.join(path, "pyvenv.cfg")):
            return  # a virtual environment: its site-packages are checked against RECORD
        # Below a source folder every folder is part of it (packages, namespace packages,
        # test folders pytest collects); at the top, where data folders live, only a
        # package, a folder with a conftest.py, or a folder on sys.path is.
        if (
            inside
            or parent != ""
            or rel in folders
            or any(os.path.isfile(os.path.join(path, m)) for m in FOLDER_MARKERS)
        ):
            for entry in sorted(os.listdir(path)):
                child = os.path.join(rel, entry)
                full = os.path.join(checkout.top, child)
                visit(child, os.path.isdir(full) and not os.path.islink(full), True)

    # An editable install's checkout may hold work in progress (untracked files are recorded
    # when loaded); only its git-ignored files are hidden from git and refused.
    for entry in checkout.others if checkout.strict else checkout.ignored:
        visit(entry.rstrip("/"), entry.endswith("/"), False)
    if sys.pycache_prefix:  # bytecode lives in a mirror of the source folders
        for rel in sorted(folders):
            source_dir = os.path.join(checkout.top, rel)
            mirror = os.path.join(sys.pycache_prefix, source_dir.lstrip(os.sep))
            if os.path.isdir(mirror):
                found.extend(_cache_problems(mirror, source_dir, tail, rewrite, mirror))
    return found


# -- xdist workers -------------------------------------------------------------------------


def _config(plugins: list[tuple[str, object]]) -> object | None:
    """The pytest config among the plugins (pytest registers it as ``pytestconfig``)."""
    return dict(plugins).get("pytestconfig")


def worker_specs(plugins: list[tuple[str, object]]) -> list[str]:
    """The xdist worker specifications (``--tx``; ``-n N`` gives N times ``popen``)."""
    config = _config(plugins)
    option = getattr(config, "option", None)
    specs = []
    for spec in getattr(option, "tx", None) or []:
        count, star, rest = str(spec).partition("*")
        specs.extend([rest] * int(count) if star and count.isdigit() else [str(spec)])
    return specs


# Gateways of workers on other hosts, and the options they may take: each such worker
# proves its own state to the controller before the run id is spent (prereg.runtime.remote).
REMOTE_GATEWAYS = ("socket=", "ssh=")
REMOTE_OPTIONS = ("chdir", "id", "python")


def _worker_problems(plugins: list[tuple[str, object]]) -> list[str]:
    """xdist workers run the items: they must be this interpreter, here, with this environment.

    The gate checks this process; a ``--tx`` spec could start workers with another
    interpreter (a wrapper setting PYTHONPATH), other variables (``env:``), in another
    folder (``chdir=``) or on another machine. Only ``popen`` with this interpreter is allowed.
    """
    found = []
    me = _real(sys.executable)
    for spec in sorted(set(worker_specs(plugins))):
        kind, *options = spec.split("//")
        if kind.startswith(REMOTE_GATEWAYS) and all(
            o.partition("=")[0] in REMOTE_OPTIONS for o in options
        ):
            continue  # proves its own checkout and environment (prereg.runtime.remote)
        wrong = [] if kind == "popen" else [kind]
        for option in options:
            key, _, value = option.partition("=")
            python = shutil.which(value) or value if key == "python" else None
            if key == "id" or (python is not None and _real(python) == me):
                continue
            wrong.append(option)
        if wrong:
            found.append(
                f"xdist worker spec --tx {spec} ({', '.join(wrong)}) would run the items with "
                "code or an environment the gate did not check: use -n N (workers of this "
                "interpreter, here)"
            )
    option = getattr(_config(plugins), "option", None)
    for name in ("px", "rsyncdir"):
        if getattr(option, name, None):
            found.append(f"xdist option --{name} is not allowed in a research run: use -n N")
    return found


# -- the two entry points -------------------------------------------------------------------


def problems(
    root: Path,
    plugins: list[tuple[str, object]],
    *,
    worker: bool = False,
    snapshot=None,
    env: Environment | None = None,
    session_follows: bool = False,
) -> list[str]:
    """Each way this process's code escapes the approved checkout and recorded packages.

    ``plugins`` is ``config.pluginmanager.list_name_plugin()``. Each string names the file
    and says what to do. ``worker``: an xdist worker, whose ``__main__`` is execnet's
    bootstrap (code given on its command line by xdist, a recorded package). ``env``: the
    :meth:`Environment.read` of ``root`` and ``snapshot`` when the caller has it already.
    ``session_follows``: this process is a launcher; the hermetic session it becomes loads the
    installed harness and every editable install's checkout from the same files and compares
    their bytecode and ignored files itself, before anything is spent. The launcher judges
    only the code that it alone runs: the approved checkout's working tree (a planted pyc a
    conftest imports), its loaded modules, paths and ``.pth`` files.
    """
    env = env or Environment.read(Path(root), snapshot)
    if env.root is None:
        return [f"{root} is not a git checkout: nothing approves the code that would run"]
    found = []
    if sys.flags.optimize:
        found.append(
            f"Python runs with optimisation level {sys.flags.optimize} (python -O or "
            "PYTHONOPTIMIZE), which strips assert statements from the code that runs: run "
            "without -O and unset PYTHONOPTIMIZE"
        )
    files = loaded_files(plugins)
    for library in mapped_libraries(env.sites):
        files.setdefault(library, []).append(SHARED_LIBRARY)
    found += _module_problems(env, files)
    found += [] if session_follows else _installed_bytecode_problems(env, files)
    found += [] if worker else _main_problems()
    # The controller judges the gateways it opens; a worker's own --tx (xdist's -n replaces
    # the controller's, not the worker's) says nothing about where it runs.
    found += [] if worker else _worker_problems(plugins)
    found += _path_problems(env)
    found += _pth_problems(env)
    for checkout in env.checkouts:
        if checkout.strict or not session_follows:
            found += _ignored_problems(checkout, plugins)
    return found


def _file_record(path: str | None, env: Environment) -> dict | None:
    if path is None:
        return None
    return {"file": _show(path, env), "sha256": sha256_file(path)}


def record(
    root: Path, plugins: list[tuple[str, object]], snapshot=None, env: Environment | None = None
) -> dict:
    """What the manifest records of the execution environment.

    The variables that change what pytest loads, every loaded pytest plugin (module, file,
    SHA-256), ``sitecustomize``/``usercustomize`` when loaded, and each editable install
    outside the checkout: its git commit and the loaded files that differ from it. The
    environment's names are those the process started with; variables its code set since
    (libraries do when they load) are ``environment_set_in_session``
    (:func:`prereg.evidence.hermetic.environment_at_start`).
    """
    env = env or Environment.read(Path(root), snapshot)
    plugin_records = []
    for name, plugin in plugins:
        if plugin is None:
            continue
        module = plugin if isinstance(plugin, types.ModuleType) else None
        module_name = (
            module.__name__ if module is not None else getattr(type(plugin), "__module__", None)
        )
        if module is None:
            module = sys.modules.get(module_name or "")
        path = _module_file(module) if module is not None else None
        plugin_records.append(
            {
                "name": str(name),
                "module": module_name,
                **(_file_record(path, env) or {"file": None, "sha256": None}),
            }
        )
    loaded = set(loaded_files(plugins))
    editable = []
    for checkout in env.checkouts[1:]:
        dists = sorted(
            (d, v) for d, (v, folder) in env.editable_dirs.items() if _under(folder, checkout.top)
        )
        editable.append(
            {
                "distributions": [f"{d}-{v}" for d, v in dists],
                "checkout": checkout.top,
                "commit": checkout.head(),
                "changed": checkout.changed(
                    {
                        p
                        for p in loaded
                        if _under(p, checkout.top) and not any(_under(p, d) for d in env.sites)
                    }
                ),
            }
        )
    started_with, set_since = environment_at_start()
    return {
        **{name: os.environ.get(name) for name in RECORDED_VARIABLES},
        "python_optimize": sys.flags.optimize,
        "argv": list(sys.argv),
        "isolated": sys.flags.isolated,
        "environment_names": list(started_with),
        "environment_set_in_session": set_since,
        "passed_variables": {n: os.environ[n] for n in PASSED_VARIABLES if n in os.environ},
        "sys_path": list(sys.path),
        # the folders whose modules were compared as compiled, not as found later (.imports)
        "verified_import_folders": imports.watched(),
        "xdist_workers": worker_specs(plugins),
        "plugins": sorted(plugin_records, key=lambda p: p["name"]),
        **{
            name: _file_record(_module_file(sys.modules[name]), env)
            if name in sys.modules
            else None
            for name in CUSTOMIZE_MODULES
        },
        "editable": editable,
    }


def environment_problems(record: dict) -> list[str]:
    """Each way a recorded execution's environment (:func:`record`) is not a hermetic
    session's: a variable it started with that the allow-list does not pass, or one its code
    set besides those the libraries it loads set
    (:data:`prereg.evidence.hermetic.SET_BY_LIBRARIES`). Part of :func:`recorded_problems`; the
    session judges it again once the stage kind's own check (which loads libraries) has run."""
    found = []
    foreign = foreign_variables(record.get("environment_names") or ())
    if foreign:
        found.append(
            f"the session's environment held {', '.join(foreign)}, which a session "
            "started by `pytest --research-stage=NAME` never has (its environment is "
            "allow-listed)"
        )
    added = set_by_code(record.get("environment_set_in_session") or ())
    if added:
        found.append(
            f"the session's code set {', '.join(added)} in its environment before its run id "
            "was spent; the processes it starts (xdist workers) inherit them. A "
            "research run's code sets no variable but those the libraries it loads set "
            f"({', '.join(SET_BY_LIBRARIES)}): pass settings to the code, not through "
            "os.environ in a conftest or stage module"
        )
    return found


def recorded_problems(record: dict, committed_sha256) -> list[str]:
    """Each way a hermetic session's recorded execution (:func:`record`) escapes the snapshot
    and the installed packages: judged by the session's gate on its own record, and by the
    audit on the manifest's, so a gate switched off from inside the run is still found.

    ``committed_sha256(rel)`` is the SHA-256 of file ``rel`` at the source commit (None when
    the commit has no such file)."""
    found = []
    if record.get("isolated") == 0:
        found.append(
            "the session did not run in isolated mode (python -I): it was not started by "
            "`pytest --research-stage=NAME`, which starts it from a snapshot"
        )
    found += environment_problems(record)
    for name in RECORDED_VARIABLES:
        if record.get(name):
            found.append(
                f"{name} was {record[name]!r}; a research session runs with none (it starts from "
                "a snapshot in an allow-listed environment): start the run with `pytest "
                "--research-stage=NAME` and give options on its command line"
            )
    if record.get("python_optimize"):
        found.append(f"Python ran with optimisation level {record['python_optimize']} (-O)")
    editable = [e.get("checkout") for e in record.get("editable") or [] if isinstance(e, dict)]
    for plugin in record.get("plugins") or []:
        path = plugin.get("file") if isinstance(plugin, dict) else None
        if not isinstance(path, str):
            continue
        name = plugin.get("name")
        if not os.path.isabs(path):
            if committed_sha256(path) != plugin.get("sha256"):
                found.append(
                    f"pytest plugin {name} ran from {path}, which is not that file of the source "
                    "commit: the code that ran is not the approved code"
                )
        elif not (
            set(Path(path).parts) & set(INSTALLED_FOLDERS)
            or any(isinstance(c, str) and _under(path, c) for c in editable)
        ):
            found.append(
                f"pytest plugin {name} ran from {path}, outside the snapshot and every installed "
                "package: unset PYTHONPATH, PYTEST_ADDOPTS and PYTEST_PLUGINS and install plugins "
                "with pip"
            )
    return found
