"""Build (once per machine) and load the compiled GRU kernel.

The C++ sources shipped next to this file are compiled with
``torch.utils.cpp_extension.load`` (ninja + the C++ compiler in ``CXX``, default
``c++``) into a build directory keyed by everything that affects the binary::

    <root>/<first 16 hex digits of the build key>/

with ``<root>`` = ``$PREREG_TORCH_EXTENSIONS_DIR`` if set, else
``$XDG_CACHE_HOME/prereg/torch_extensions`` (``~/.cache/prereg/torch_extensions``).
The build key (:func:`build_key`) is the SHA-256 of the sources, the torch and
Python versions, the platform, the CPU flags (the code is built with
``-march=native`` on x86-64), the compiler flags and ``CXX``. A successful build
writes ``prereg_build.json`` next to the library; later processes load the library
directly from it (no compiler or ninja needed), so xdist workers do not rebuild.

Failure to build or load raises :class:`KernelUnavailableError` naming the cause
(compiler missing, ninja missing, compiler error output, ...). Nothing here falls
back to another implementation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import platform
import shutil
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch

from prereg.api import user_cache_folder

__all__ = [
    "EXTENSION_NAME",
    "KernelInfo",
    "KernelUnavailableError",
    "build_directory",
    "build_key",
    "compiler_flags",
    "load_kernel",
    "source_paths",
]

EXTENSION_NAME = "prereg_gru_kernel"
OPS_NAMESPACE = "prereg_gru"
MARKER = "prereg_build.json"
_FORMAT = 1  # bump when the build recipe changes in a way the key does not see

# Loaded library of this process: a TORCH_LIBRARY namespace can be registered
# once per process, so the first successful load is reused.
_LOADED: dict[str, KernelInfo] = {}


class KernelUnavailableError(RuntimeError):
    """The compiled GRU kernel cannot be built or loaded here; the message says why."""


@dataclasses.dataclass(frozen=True)
class KernelInfo:
    """Identity of a loaded kernel (for manifests).

    Attributes
    ----------
    build_key : str
        SHA-256 hex of sources, torch/python/platform versions, CPU flags, flags, CXX.
    sources_sha256 : str
        SHA-256 hex of the C++ sources alone.
    library : str
        Path of the loaded shared library.
    build_directory : str
    flags : tuple of str
        Compiler flags added to torch's defaults.
    compiler : str
        ``CXX`` at build time (``c++`` when unset).
    torch_version : str
    built_now : bool
        True if this process compiled it, False if it was loaded from a previous build.
    """

    build_key: str
    sources_sha256: str
    library: str
    build_directory: str
    flags: tuple[str, ...]
    compiler: str
    torch_version: str
    built_now: bool

    def to_dict(self) -> dict[str, object]:
        """JSON-ready mapping of the fields."""
        return {**dataclasses.asdict(self), "flags": list(self.flags)}


def source_paths() -> tuple[Path, ...]:
    """The C++ sources of the kernel, in build order."""
    return (Path(__file__).with_name("gru_kernel.cpp"),)


def compiler_flags(machine: str | None = None) -> tuple[str, ...]:
    """Flags added to torch's defaults for ``machine`` (default: this one).

    ``-ffp-contract=off`` keeps every floating-point operation a single IEEE
    rounding (no fused multiply-add contraction), so vectorised and scalar loop
    iterations agree bit for bit; ``-march=native`` only on x86-64.
    """
    machine = platform.machine() if machine is None else machine
    flags = ["-O3", "-ffp-contract=off"]
    if machine.lower() in ("x86_64", "amd64"):
        flags.append("-march=native")
    return tuple(flags)


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith(("flags", "Features")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _sources_sha256(paths: tuple[Path, ...]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError as error:
            raise KernelUnavailableError(
                f"kernel source {path} is missing ({error}); reinstall prereg (install.sh)"
            ) from error
        digest.update(path.name.encode() + b"\0" + data + b"\0")
    return digest.hexdigest()


def build_key(
    sources_sha256: str,
    *,
    torch_version: str,
    python_version: str,
    machine: str,
    cpu_flags: str,
    flags: tuple[str, ...],
    compiler: str,
) -> str:
    """SHA-256 hex of everything that determines the built library.

    Parameters
    ----------
    sources_sha256 : str
        Digest of the C++ sources.
    torch_version, python_version, machine, cpu_flags : str
        Environment the binary is built for.
    flags : tuple of str
        Extra compiler flags.
    compiler : str
        Compiler command (``CXX``).

    Returns
    -------
    str
        64 hex digits; equal inputs give equal keys, any change gives another key.
    """
    record = {
        "format": _FORMAT,
        "sources": sources_sha256,
        "torch": torch_version,
        "python": python_version,
        "machine": machine,
        "cpu_flags": cpu_flags,
        "flags": list(flags),
        "compiler": compiler,
    }
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def build_root(environ: Mapping[str, str] | None = None) -> Path:
    """Root of the build directories (see the module docstring)."""
    environ = os.environ if environ is None else environ
    explicit = environ.get("PREREG_TORCH_EXTENSIONS_DIR")
    if explicit:
        return Path(explicit).expanduser()
    return user_cache_folder("torch_extensions", environ=environ)


def build_directory(key: str, environ: Mapping[str, str] | None = None) -> Path:
    """Build directory of the build ``key``: ``<root>/<key[:16]>``."""
    if not (isinstance(key, str) and len(key) == 64):
        raise ValueError(f"key must be a 64-digit hex build key; got {key!r}")
    return build_root(environ) / key[:16]


@contextlib.contextmanager
def _ninja_on_path() -> Iterator[None]:
    """Make ninja findable for the build (the PyPI ``ninja`` package if not on PATH)."""
    if shutil.which("ninja") is not None:
        yield
        return
    candidates = [os.path.dirname(sys.executable)]
    try:
        # ninja: the training extra, optional
        import ninja  # type: ignore[import-not-found]

        candidates.insert(0, str(ninja.BIN_DIR))
    except ImportError:
        pass
    found = next((d for d in candidates if shutil.which("ninja", path=d)), None)
    if found is None:
        raise KernelUnavailableError(
            "cannot build the compiled GRU kernel: the ninja build tool is not installed "
            "(not on PATH, no PyPI 'ninja' package); run install.sh or "
            "`.venv/bin/python -m pip install ninja`"
        )
    old = os.environ.get("PATH", "")
    os.environ["PATH"] = found + os.pathsep + old
    try:
        yield
    finally:
        os.environ["PATH"] = old


def _check_compiler(compiler: str) -> None:
    if shutil.which(compiler) is None:
        origin = "environment variable CXX" if os.environ.get("CXX") else "default; CXX unset"
        raise KernelUnavailableError(
            f"cannot build the compiled GRU kernel: C++ compiler {compiler!r} ({origin}) "
            "was not found; install one (e.g. apt-get install g++) or set CXX to a "
            "working compiler, then run install.sh"
        )


def _check_ops() -> None:
    namespace = getattr(torch.ops, OPS_NAMESPACE)
    for name in ("forward", "backward"):
        if not hasattr(namespace, name):
            raise KernelUnavailableError(
                f"the compiled GRU library loaded but defines no op {OPS_NAMESPACE}.{name}; "
                "delete its build directory and rebuild"
            )


def load_kernel(*, verbose: bool = False) -> KernelInfo:
    """Load the kernel, building it first if this machine has no build of it.

    Parameters
    ----------
    verbose : bool
        Show the compiler's output while building.

    Returns
    -------
    KernelInfo
        Identity of the loaded library; the ops are ``torch.ops.prereg_gru.*``.

    Raises
    ------
    KernelUnavailableError
        The compiler or ninja is missing, the build failed (with the compiler's
        output), or the library cannot be loaded.
    """
    if "info" in _LOADED:
        return _LOADED["info"]
    sources = source_paths()
    sources_sha = _sources_sha256(sources)
    flags = compiler_flags()
    compiler = os.environ.get("CXX") or "c++"
    key = build_key(
        sources_sha,
        torch_version=torch.__version__,
        python_version=platform.python_version(),
        machine=f"{sys.platform}-{platform.machine()}",
        cpu_flags=_cpu_flags(),
        flags=flags,
        compiler=compiler,
    )
    directory = build_directory(key)
    marker = directory / MARKER
    library = _library_from_marker(marker, key)
    built_now = library is None
    if library is None:
        library = _build(sources, directory, flags, compiler, verbose)
        record = {"key": key, "library": library, "torch": torch.__version__, "flags": flags}
        temporary = marker.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(record, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(temporary, marker)
    else:
        try:
            torch.ops.load_library(library)
        except (OSError, RuntimeError) as error:
            raise KernelUnavailableError(
                f"cannot load the compiled GRU library {library}: {error}; delete "
                f"{directory} and rebuild (python -m prereg.rp002a.gru_kernel --build)"
            ) from error
    _check_ops()
    info = KernelInfo(
        build_key=key,
        sources_sha256=sources_sha,
        library=str(library),
        build_directory=str(directory),
        flags=flags,
        compiler=compiler,
        torch_version=torch.__version__,
        built_now=built_now,
    )
    _LOADED["info"] = info
    return info


def _library_from_marker(marker: Path, key: str) -> str | None:
    try:
        record = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    library = record.get("library") if isinstance(record, dict) else None
    if record.get("key") != key or not isinstance(library, str) or not Path(library).is_file():
        return None
    return library


def _build(
    sources: tuple[Path, ...], directory: Path, flags: tuple[str, ...], compiler: str, verbose: bool
) -> str:
    _check_compiler(compiler)
    # torch: the training extra, optional
    from torch.utils import cpp_extension

    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise KernelUnavailableError(
            f"cannot create the kernel build directory {directory}: {error}; set "
            "PREREG_TORCH_EXTENSIONS_DIR to a writable directory"
        ) from error
    with _ninja_on_path():
        try:
            library = cpp_extension.load(
                name=EXTENSION_NAME,
                sources=[str(path) for path in sources],
                extra_cflags=list(flags),
                build_directory=str(directory),
                is_python_module=False,
                verbose=verbose,
            )
        except KernelUnavailableError:
            raise
        except Exception as error:  # the build's own error, with compiler output
            text = str(error).strip().splitlines()
            tail = "\n".join(text[-40:])
            raise KernelUnavailableError(
                f"building the compiled GRU kernel in {directory} with compiler "
                f"{compiler!r} failed ({type(error).__name__}):\n{tail}"
            ) from error
    return str(library)
