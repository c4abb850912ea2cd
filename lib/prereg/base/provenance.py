"""What ran and where: environment, thread settings, peak memory.

Peak RSS on Linux is measured per item: writing ``5`` to ``/proc/self/clear_refs``
resets the process's resident-set high-water mark (``VmHWM``), so ``VmHWM`` read after
the item is the item's own peak. Where that is impossible (macOS, a kernel that refuses)
the figure is the process's lifetime high-water mark from ``getrusage`` (``ru_maxrss``:
KiB on Linux, bytes on macOS), and the record says so in ``peak_rss_scope``.
"""

from __future__ import annotations

import csv
import email.message
import importlib.metadata
import inspect
import os
import platform
import re
import resource
import sys

THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)

ITEM_SCOPE = "own peak (VmHWM reset at the start via /proc/self/clear_refs)"
LIFETIME_SCOPE = "process lifetime high-water mark (getrusage ru_maxrss)"


def platform_tag() -> str:
    """``Linux-x86_64``, ``macOS-arm64``: the form the plan's platform pin uses."""
    system = {"Darwin": "macOS"}.get(platform.system(), platform.system())
    return f"{system}-{platform.machine()}"


def cpu_threads_available() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def pinned_environment() -> dict:
    """The environment in the fields a plan pins (``environment_pins``)."""
    return {
        "python": platform.python_version(),
        "numpy": _version("numpy"),
        "torch": (_version("torch") or "").split("+")[0] or None,
        "scipy": _version("scipy"),
        "platform": platform_tag(),
        "cpu_threads": cpu_threads_available(),
    }


NOT_INSTALLED = "not installed"
"""A plan's pin for a package it runs without; an environment lacking the package meets it."""


def deviations(pins: dict, actual: dict) -> list[dict]:
    """Each pinned field whose actual value differs: ``{"field", "pinned", "actual"}``.

    ``actual`` is :func:`pinned_environment`'s form, where an absent package is ``None``;
    it meets the pin :data:`NOT_INSTALLED` and deviates from any version.
    """
    return [
        {"field": field, "pinned": pinned, "actual": actual.get(field)}
        for field, pinned in sorted(pins.items())
        if pin_form(actual.get(field)) != pinned
    ]


def describe(found: list[dict]) -> str:
    """Deviations for a message: ``torch: plan pins '2.8.0', here 'not installed'; ...``."""
    return "; ".join(
        f"{d['field']}: plan pins {d['pinned']!r}, here {pin_form(d['actual'])!r}" for d in found
    )


def pin_form(value):
    """An environment value as a plan spells its pin: ``None`` (absent) is NOT_INSTALLED."""
    return NOT_INSTALLED if value is None else value


def metadata_headers(dist: importlib.metadata.Distribution) -> email.message.Message:
    """The header fields of ``dist``'s core metadata (``METADATA``, ``PKG-INFO``), read as
    :attr:`importlib.metadata.Distribution.metadata` reads them but without the body (a long
    description can be most of the file): one parse gives both ``Name`` and ``Version``."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or dist.read_text("") or ""
    headers = re.split(r"\r?\n\r?\n", text, maxsplit=1)[0]
    return email.message_from_string(headers + "\n")


def _top_level_names(dist: importlib.metadata.Distribution) -> list[str]:
    """The top-level modules ``dist`` provides, by ``importlib.metadata.packages_distributions``'
    rule: its ``top_level.txt``, else the first part of each file it records that lies in a
    folder, and the module name of each top-level file, without names holding a dot. The
    RECORD is read as text (no path object per row: numpy's and scipy's have thousands)."""
    declared = (dist.read_text("top_level.txt") or "").split()
    if declared:
        return declared
    record = dist.read_text("RECORD")
    if record is None:  # an egg-info: installed-files.txt or SOURCES.txt, as dist.files reads
        paths = [str(f) for f in dist.files or ()]
    else:
        paths = [row[0] for row in csv.reader(record.splitlines()) if row]
    names = set()
    for path in paths:
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if path.startswith("/"):  # a root, as PurePosixPath parts it ("//" is its own)
            parts.insert(0, "//" if path.startswith("//") and path[2:3] != "/" else "/")
        if not parts:
            continue
        name = parts[0] if len(parts) > 1 else inspect.getmodulename(parts[0]) or parts[0]
        if "." not in name:
            names.add(name)
    return sorted(names)


def imported_packages() -> dict[str, str]:
    """Distributions whose top-level modules are imported in this process, with versions:
    the version of the first distribution of each name on ``sys.path``, as
    ``importlib.metadata.version`` finds it. One pass over the installed metadata."""
    top = {name.split(".")[0] for name in list(sys.modules)}
    provides: dict[str, list[str]] = {}
    versions: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        headers = metadata_headers(dist)
        name = headers.get("Name")
        if name is None:
            continue
        versions.setdefault(normalised(name), headers.get("Version") or "")
        for module in _top_level_names(dist):
            if module in top:
                provides.setdefault(module, []).append(name)
    found: dict[str, str] = {}
    for module in sorted(provides):
        for dist_name in provides[module]:
            version = versions.get(normalised(dist_name))
            if version:
                found[dist_name] = version
    return found


def normalised(name: str) -> str:
    """A distribution's name as PEP 503 compares names: ``Foo_Bar.baz`` -> ``foo-bar-baz``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def set_thread_environment(threads: int) -> None:
    """Set every thread variable; done before worker processes start so they inherit it."""
    for name in THREAD_VARIABLES:
        os.environ[name] = str(threads)


def apply_thread_limits(threads: int) -> dict:
    """Limit BLAS/OpenMP (threadpoolctl) and torch in this process; return what is in force."""
    # threadpoolctl: only when a process limits its threads (import prereg.api does not load it)
    from threadpoolctl import threadpool_info, threadpool_limits

    threadpool_limits(threads)
    settings: dict = {
        "threads_per_process": threads,
        "environment": {name: os.environ.get(name) for name in THREAD_VARIABLES},
        "threadpools": sorted(
            {f"{p['internal_api']}:{p['num_threads']}" for p in threadpool_info()}
        ),
    }
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        torch.set_num_threads(threads)
        if torch.get_num_interop_threads() != threads:
            try:
                torch.set_num_interop_threads(threads)
            except RuntimeError:  # only settable before torch's first parallel work
                pass
        settings["torch_threads"] = torch.get_num_threads()
        settings["torch_interop_threads"] = torch.get_num_interop_threads()
    return settings


def _read_hwm() -> int | None:
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _lifetime_peak() -> int:
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss * (1 if sys.platform == "darwin" else 1024)


_open_scopes: list[PeakScope] = []


class PeakScope:
    """The peak resident set of a stretch of work (an item, or one fit inside an item).

    Scopes nest: opening an inner scope resets the kernel's high-water mark, so the
    outer scope first folds the peak it has seen so far into its own record. Use as a
    context manager, or :meth:`start` / :meth:`stop`. ``bytes`` and ``scope`` are set
    by :meth:`stop`.
    """

    def __init__(self) -> None:
        self.seen = 0
        self.exact = False
        self.bytes: int | None = None
        self.scope: str | None = None

    def start(self) -> PeakScope:
        current = _read_hwm()
        if _open_scopes and current is not None:
            _open_scopes[-1].seen = max(_open_scopes[-1].seen, current)
        self.exact = _reset_hwm() and current is not None
        _open_scopes.append(self)
        return self

    def stop(self) -> tuple[int, str]:
        if self in _open_scopes:
            _open_scopes.remove(self)
        current = _read_hwm() if self.exact else None
        if current is not None:
            self.bytes, self.scope = max(self.seen, current), ITEM_SCOPE
        else:
            self.bytes, self.scope = _lifetime_peak(), LIFETIME_SCOPE
        return self.bytes, self.scope

    def __enter__(self) -> PeakScope:  # noqa: PYI034
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
