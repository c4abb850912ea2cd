"""Run one stage through the real gate in a scratch clone of this checkout, with a given Python.

The clone's own ``lib/`` goes first on ``PYTHONPATH`` (as ``prereg demo`` does), so the code
that runs is the committed code; the interpreter (this project's venv or the pinned 3.9
venv) decides the stack. Importable without pytest.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from prereg.testing import outer_environment

REPO = Path(__file__).resolve().parents[2]


def _run(cmd: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise AssertionError(f"{cmd} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def clone(base: Path, plan: dict | None = None, plan_path: str | None = None) -> Path:
    """A scratch clone of the committed HEAD; ``plan`` is committed at ``plan_path`` if given."""
    root = base / "repo"
    env = dict(os.environ)
    _run(["git", "clone", "--quiet", str(REPO), str(root)], base, env)
    _run(["git", "remote", "remove", "origin"], root, env)  # its runs never reach REPO's ledger
    _run(["git", "config", "user.name", "pinned check"], root, env)
    _run(["git", "config", "user.email", "check@prereg.invalid"], root, env)
    if plan is not None and plan_path is not None:
        (root / plan_path).write_text(json.dumps(plan, indent=2) + "\n")
        _run(["git", "add", plan_path], root, env)
        _run(["git", "commit", "-q", "-m", f"Plan {plan_path} for the pinned check"], root, env)
    return root


def run_stage(root: Path, python: str, stage: str, plan: str, *, workers: int = 2) -> Path:
    """Approve (naming this stack's deviations), commit, run and audit ``stage``; the run folder."""
    env = outer_environment()
    env["PYTHONPATH"] = str(root / "lib")
    env["PATH"] = f"{Path(python).parent}{os.pathsep}{env.get('PATH', '')}"
    run_id = f"{stage}-{datetime.now(timezone.utc).strftime('%Y%m%d')}-001"
    prereg = [python, "-m", "prereg.cli"]
    _run([*prereg, "approve", "--stage", stage, "--run-id", run_id, "--plan", plan,
          "--accept-deviations"], root, env)  # fmt: skip
    _run(["git", "add", "plans/approvals"], root, env)
    _run(["git", "commit", "-q", "-m", f"Approve {run_id}"], root, env)
    pytest = [python, "-m", "pytest", f"--research-stage={stage}", "-p", "no:cacheprovider"]
    _run(pytest + (["-n", str(workers)] if workers > 1 else []), root, env)
    _run([*prereg, "audit", f"runs/{run_id}"], root, env)
    return root / "runs" / run_id
