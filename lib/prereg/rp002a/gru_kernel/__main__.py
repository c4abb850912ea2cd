"""Build (if needed) and load the compiled GRU kernel; print what was built.

Usage::

    python -m prereg.rp002a.gru_kernel --build [--verbose]

Exit status 0 with a summary line (library path, build key, flags) on success;
1 with the cause on stderr if the kernel cannot be built or loaded.
"""

from __future__ import annotations

import argparse
import sys

import torch

from prereg.rp002a.gru_kernel._build import KernelUnavailableError, load_kernel
from prereg.rp002a.gru_kernel._function import compiled_gru


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m prereg.rp002a.gru_kernel", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--build", action="store_true", help="build (if needed) and load")
    parser.add_argument("--verbose", action="store_true", help="show the compiler output")
    args = parser.parse_args(argv)
    if not args.build:
        parser.print_help()
        return 2
    try:
        info = load_kernel(verbose=args.verbose)
        # smoke test: one tiny step through the loaded ops, compared with nn.GRU
        generator = torch.Generator().manual_seed(0)
        stock = torch.nn.GRU(3, 4, batch_first=True)
        with torch.no_grad():
            for parameter in stock.parameters():
                parameter.uniform_(-0.5, 0.5, generator=generator)
        x = torch.randn(2, 3, 3, generator=generator)
        with torch.no_grad():
            want, _ = stock(x)
            got, _ = compiled_gru(x, x.new_zeros(2, 4), *stock.parameters())
        error = float((got - want).abs().max())
    except KernelUnavailableError as exc:
        print(f"prereg.rp002a.gru_kernel: {exc}", file=sys.stderr)
        return 1
    if not error <= 1e-6:
        print(f"prereg.rp002a.gru_kernel: smoke test failed (|compiled - nn.GRU| = {error:.3g})",
              file=sys.stderr)  # fmt: skip
        return 1
    state = "built" if info.built_now else "already built"
    print(
        f"compiled GRU kernel {state}: {info.library} (key {info.build_key[:16]}, "
        f"torch {info.torch_version}, {info.compiler} {' '.join(info.flags)}; "
        f"smoke test |compiled - nn.GRU| = {error:.1e})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
