"""prereg's wheel as a user gets it: built from the checkout's committed files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.checkout import CHECKOUT

COMMAND_SECONDS = 900  # a subprocess timeout, never asserted on


def _outer_bin() -> str:
    return os.path.dirname(os.path.abspath(sys.executable))


def user_env(venv: Path) -> dict[str, str]:
    """A shell where the user activated ``venv``: no PYTHON*, PYTEST_*, COV_* variables and
    no other environment's ``bin`` (this check's own) on PATH."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "PYTEST_", "COV_")) and k != "VIRTUAL_ENV"
    }
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != _outer_bin()]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    env["VIRTUAL_ENV"] = str(venv)
    return env


def run(args: list, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``args`` (paths allowed) in ``cwd`` with ``env``, output captured, never checked."""
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=COMMAND_SECONDS,
    )


def ok(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """``done``, asserted to have exited 0 (the message holds its command and output)."""
    assert done.returncode == 0, (
        f"{done.args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    )
    return done


def build_head_wheel(base: Path, env: dict[str, str]) -> Path:
    """The wheel ``pip wheel --no-deps`` builds from ``git archive HEAD`` (unpacked under
    ``base/source``; the wheel in ``base/wheels``), with ``env`` as the builder's shell."""
    source = base / "source"
    source.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(CHECKOUT), "archive", "HEAD"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    wheels = base / "wheels"
    ok(
        run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels, source],
            base,
            env,
        )
    )
    (wheel,) = wheels.glob("prereg-*.whl")
    return wheel
