"""The bytes a research run compiled, recorded as they were read.

A hermetic session proves its snapshot (the tree id of the bytes on disk is the approved
commit's) and then imports from it. Checking a module's file again later proves only what
the file holds *then*: a file replaced between the proof and the import, and restored
afterwards, would run unseen. So in a session and in each of its workers, :func:`watch`
makes every loader that reads a module from the snapshot record the git blob id of the exact
bytes it compiles, and :func:`verdict` tells the execution check (:mod:`.execution`) what
was compiled from a file, which is compared with the commit's blob.

The loaders covered: Python's source and sourceless file loaders (through a path hook that
replaces the standard one) and pytest's assertion rewriter, which reads test modules and
conftest files itself (its ``_rewrite_test`` is handed the bytes read here, and its cached
rewritten bytecode is never read under the snapshot). A module file under the snapshot that
no covered loader read (an extension module, a loader of a plugin's own) cannot show what
ran, and the execution check says so. Modules imported before :func:`watch` (pytest's ``-p``
plugins, and prereg's own modules when prereg is the snapshot's) are judged by their file
as it is, as before.

Standard library only; no state but this module's.
"""

from __future__ import annotations

import hashlib
import os
import sys
from importlib import machinery
from pathlib import Path

_ALGORITHMS = ("sha1", "sha256")  # git's object formats

# real path of a file read by a covered loader -> {algorithm: blob id} of each read
_READ: dict[str, list[dict[str, str]]] = {}
_WATCHED: list[str] = []  # real paths of the folders whose reads are recorded
_PRELOADED: set[str] = set()  # module files already loaded when the watch began


def _real(path: str | os.PathLike) -> str:
    return os.path.realpath(os.fspath(path))


def _watched(path: str | os.PathLike) -> bool:
    real = _real(path)
    return any(real == folder or real.startswith(folder + os.sep) for folder in _WATCHED)


def blob_ids(data: bytes) -> dict[str, str]:
    """The git blob id of ``data`` in each object format."""
    header = b"blob %d\0" % len(data)
    return {name: hashlib.new(name, header + data).hexdigest() for name in _ALGORITHMS}


def _record(path: str | os.PathLike, data: bytes) -> None:
    _READ.setdefault(_real(path), []).append(blob_ids(data))


class _NoCachedBytecode(OSError):
    """Raised for a cached ``.pyc`` under the snapshot: the loader compiles the source."""


class VerifyingSourceLoader(machinery.SourceFileLoader):
    """Python's source loader; under a watched folder it records the source bytes it
    compiles and never reads cached bytecode (which would run bytes no source shows)."""

    def get_data(self, path):
        if _watched(path) and path.endswith(tuple(machinery.BYTECODE_SUFFIXES)):
            raise _NoCachedBytecode(path)
        data = super().get_data(path)
        if _watched(path):
            _record(path, data)
        return data


class VerifyingSourcelessLoader(machinery.SourcelessFileLoader):
    """Python's loader of a lone ``.pyc``; under a watched folder it records its bytes."""

    def get_data(self, path):
        data = super().get_data(path)
        if _watched(path):
            _record(path, data)
        return data


_HOOK = machinery.FileFinder.path_hook(
    (machinery.ExtensionFileLoader, machinery.EXTENSION_SUFFIXES),
    (VerifyingSourceLoader, machinery.SOURCE_SUFFIXES),
    (VerifyingSourcelessLoader, machinery.BYTECODE_SUFFIXES),
)


def _standard_hook(hook) -> bool:
    return getattr(hook, "__name__", "") == "path_hook_for_FileFinder" and hook is not _HOOK


class _ReadOnce(type(Path())):
    """A path whose ``read_bytes`` returns the bytes already read (and recorded) once."""

    def read_bytes(self):
        return self._bytes


def _patch_rewriter(rewrite) -> None:
    """Hand pytest's assertion rewriter (the module ``_pytest.assertion.rewrite``) the
    recorded bytes of a watched file, and keep it from reading a cached rewritten ``.pyc``
    there. It reads a test module as ``_rewrite_test(fn, config)`` with ``fn.read_bytes()``;
    a pytest that reads otherwise compiles bytes this module did not record, and the
    execution check then refuses its test modules as showing nothing."""
    original_rewrite, original_read = rewrite._rewrite_test, rewrite._read_pyc
    if getattr(original_rewrite, "prereg_verified", False):
        return

    def _rewrite_test(fn, config):
        if not _watched(fn):
            return original_rewrite(fn, config)
        data = Path(fn).read_bytes()
        _record(fn, data)
        once = _ReadOnce(fn)
        once._bytes = data
        return original_rewrite(once, config)

    def _read_pyc(source, pyc, *args, **kwargs):
        return None if _watched(source) else original_read(source, pyc, *args, **kwargs)

    _rewrite_test.prereg_verified = True
    rewrite._rewrite_test, rewrite._read_pyc = _rewrite_test, _read_pyc


def watch(folder: str | os.PathLike, rewriter=None) -> None:
    """From now on, record what the covered loaders compile from files under ``folder``;
    ``rewriter``: pytest's ``_pytest.assertion.rewrite`` module, when pytest runs."""
    real = _real(folder)
    if real in _WATCHED:
        return
    if not _WATCHED:
        _PRELOADED.update(
            _real(path)
            for module in list(sys.modules.values())
            if isinstance(path := getattr(module, "__file__", None), str)
        )
        sys.path_hooks[:] = [_HOOK if _standard_hook(h) else h for h in sys.path_hooks]
        if _HOOK not in sys.path_hooks:
            sys.path_hooks.append(_HOOK)
        sys.path_importer_cache.clear()
    if rewriter is not None:
        _patch_rewriter(rewriter)
    _WATCHED.append(real)


def verdict(path: str | os.PathLike, expected: str, algorithm: str) -> str | None:
    """Why the module file ``path`` (under a watched folder) did not run as the committed
    blob ``expected``, or None: each read of it compiled exactly that blob. A file loaded
    before the watch began is not judged here (None)."""
    real = _real(path)
    if not _watched(real) or real in _PRELOADED and real not in _READ:
        return None
    reads = _READ.get(real)
    if not reads:
        return (
            "was loaded by a loader that does not show prereg the bytes it compiled (an "
            "extension module, or a plugin's own importer): a research run imports only "
            "Python source and bytecode from its snapshot"
        )
    if any(read[algorithm] != expected for read in reads):
        return (
            "was compiled from bytes that are not the committed file's (it changed between "
            "the snapshot's proof and its import): the run's code is not the approved code"
        )
    return None


def watched() -> list[str]:
    """The folders whose reads this process records (empty: none; the execution record says
    which protection ran)."""
    return list(_WATCHED)
