import pytest

pytestmark = pytest.mark.software

# Build machinery of the compiled GRU kernel: the build key, the build directory,
# and the clear refusal when the kernel cannot be built (no silent fallback).
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from prereg.rp002a.gru_kernel import (
    KernelUnavailableError,
    build_directory,
    build_key,
    compiler_flags,
    source_paths,
)
from prereg.rp002a.models import GRU_IMPLEMENTATIONS

FIELDS = {
    "torch_version": "2.13.0+cpu",
    "python_version": "3.11.7",
    "machine": "linux-x86_64",
    "cpu_flags": "fpu sse avx2",
    "flags": ("-O3",),
    "compiler": "c++",
}
SHA = "ab" * 32
text = st.text(min_size=0, max_size=12)


@settings(max_examples=50, deadline=None)
@given(field=st.sampled_from(sorted(FIELDS)), value=text)
def test_build_key_changes_with_every_input(field, value):
    base = build_key(SHA, **FIELDS)
    assert base == build_key(SHA, **FIELDS)  # deterministic
    assert len(base) == 64 and int(base, 16) >= 0
    changed = {**FIELDS, field: (value,) if field == "flags" else value}
    assert (build_key(SHA, **changed) == base) == (changed == FIELDS)


def test_build_key_changes_with_sources():
    assert build_key(SHA, **FIELDS) != build_key("cd" * 32, **FIELDS)


def test_build_directory_root_and_naming(tmp_path):
    key = build_key(SHA, **FIELDS)
    explicit = build_directory(key, {"PREREG_TORCH_EXTENSIONS_DIR": str(tmp_path)})
    assert explicit == tmp_path / key[:16]
    xdg = build_directory(key, {"XDG_CACHE_HOME": str(tmp_path)})
    assert xdg == tmp_path / "prereg" / "torch_extensions" / key[:16]
    home = build_directory(key, {})
    assert home == Path("~/.cache").expanduser() / "prereg" / "torch_extensions" / key[:16]
    with pytest.raises(ValueError, match="64-digit"):
        build_directory("abc", {})


def test_flags_and_sources():
    assert compiler_flags("x86_64") == ("-O3", "-ffp-contract=off", "-march=native")
    assert compiler_flags("aarch64") == ("-O3", "-ffp-contract=off")
    assert all(path.is_file() and path.suffix == ".cpp" for path in source_paths())


def test_compiled_is_registered():
    assert {"stock", "fused", "compiled"} <= set(GRU_IMPLEMENTATIONS)


def _run_without_kernel(tmp_path, cxx, code):
    """Fresh process, fresh build root, CXX overridden: nothing can be reused."""
    env = {**os.environ, "CXX": cxx, "PREREG_TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


BUILD_GRU = """
from prereg.rp002a.gru_kernel import KernelUnavailableError
from prereg.rp002a.models import build_gru
try:
    build_gru("compiled", 5, 8)
except KernelUnavailableError as error:
    print("REFUSED:", error)
    raise SystemExit(3)
print("BUILT")
"""


def test_missing_compiler_is_a_clear_error(tmp_path):
    missing = str(tmp_path / "no-such-dir" / "g++")
    result = _run_without_kernel(tmp_path, missing, BUILD_GRU)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "REFUSED:" in result.stdout
    assert f"C++ compiler {missing!r}" in result.stdout
    assert "environment variable CXX" in result.stdout and "not found" in result.stdout
    assert not (tmp_path / "ext").exists() or not list((tmp_path / "ext").rglob("*.so"))


def test_failing_compiler_reports_the_build_error(tmp_path):
    fake = tmp_path / "fake-cxx"
    fake.write_text("#!/bin/sh\necho 'fake compiler: refusing to compile' >&2\nexit 1\n")
    fake.chmod(0o755)
    result = _run_without_kernel(tmp_path, str(fake), BUILD_GRU)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "building the compiled GRU kernel" in result.stdout
    assert str(fake) in result.stdout


def test_cli_build_failure_exit_status(tmp_path):
    env = {
        **os.environ,
        "CXX": str(tmp_path / "nope"),
        "PREREG_TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"),
    }
    result = subprocess.run(
        [sys.executable, "-m", "prereg.rp002a.gru_kernel", "--build"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert "C++ compiler" in result.stderr and "not found" in result.stderr


def test_error_type_is_runtime_error():
    # An environment failure, not bad input: never caught as a ValueError by callers.
    assert issubclass(KernelUnavailableError, RuntimeError)
    assert not issubclass(KernelUnavailableError, (ValueError, ImportError))


def test_pypi_ninja_is_used_when_not_on_path(tmp_path, monkeypatch):
    import shutil

    from prereg.rp002a.gru_kernel import _build

    ninja = pytest.importorskip("ninja")  # a pinned dependency; present after install.sh
    monkeypatch.setenv("PATH", str(tmp_path))  # no ninja here
    assert shutil.which("ninja") is None
    with _build._ninja_on_path():
        assert Path(shutil.which("ninja")).parent == Path(ninja.BIN_DIR)
    assert os.environ["PATH"] == str(tmp_path)  # restored


def test_missing_ninja_is_a_clear_error(tmp_path, monkeypatch):
    from prereg.rp002a.gru_kernel import _build

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setitem(sys.modules, "ninja", None)  # import ninja -> ImportError
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    refused = pytest.raises(KernelUnavailableError, match="ninja build tool is not installed")
    with refused, _build._ninja_on_path():
        pass
    assert os.environ["PATH"] == str(tmp_path)
