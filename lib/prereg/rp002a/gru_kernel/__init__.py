"""B2's third GRU implementation, ``"compiled"``: the whole time loop in C++.

A C++ extension (ATen / torch C++ API, CPU only; source ``gru_kernel.cpp``) runs
the forward loop and the backward through time of a single-layer batch-first GRU
with the equations, gate order ``(r, z, n)``, parameter names/shapes and
initialisation of ``torch.nn.GRU``. It is built on first use (or by
``python -m prereg.rp002a.gru_kernel --build``, which ``install.sh`` runs) with
``torch.utils.cpp_extension`` into a per-user cache keyed by the sources, torch
version, CPU and flags; see :mod:`prereg.rp002a.gru_kernel._build`.

If it cannot be built or loaded, :func:`load_kernel` (and so
``CompiledGRU(...)`` and ``build_gru("compiled", ...)``) raises
:class:`KernelUnavailableError` naming the cause; nothing falls back to another
implementation.
"""

from __future__ import annotations

from prereg.rp002a.gru_kernel._build import (
    KernelInfo,
    KernelUnavailableError,
    build_directory,
    build_key,
    compiler_flags,
    load_kernel,
    source_paths,
)
from prereg.rp002a.gru_kernel._function import CompiledGRU, CompiledGRUInputError, compiled_gru

__all__ = [
    "CompiledGRU",
    "CompiledGRUInputError",
    "KernelInfo",
    "KernelUnavailableError",
    "build_directory",
    "build_key",
    "compiled_gru",
    "compiler_flags",
    "load_kernel",
    "source_paths",
]
