"""Drive research stages from tests as a researcher would, in a scratch git repository.

:class:`ScratchProject` runs ``git``, ``prereg`` and ``pytest`` in subprocesses with this
interpreter, so a test exercises the real gate, workers and manifests. The project's own
checks use it; so can a user's tests of their own stages. Importable without pytest.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ScratchProject:
    root: Path

    def init(
        self, *, plans: list[str], testpaths: str = "experiments", ignore: tuple[str, ...] = ()
    ) -> None:
        """Lay out an empty project: git identity, pytest.ini naming ``plans``, the plugin,
        ``plans/approvals/``, ``experiments/`` and a baseline pinning a historical file."""
        (self.root / "plans" / "approvals").mkdir(parents=True)
        (self.root / "experiments").mkdir()
        self.git("init", "-q")
        self.git("config", "user.email", "researcher@example.org")
        self.git("config", "user.name", "Researcher")
        (self.root / "pytest.ini").write_text(
            f"[pytest]\ntestpaths = {testpaths}\naddopts = -p no:randomly\n"
            f"prereg_plans = {' '.join(plans)}\nprereg_research_paths = experiments\n"
        )
        (self.root / "conftest.py").write_text('pytest_plugins = ("prereg.plugin",)\n')
        (self.root / ".gitignore").write_text("\n".join(["runs/", "__pycache__/", *ignore]) + "\n")
        historical = self.root / "plans" / "CONFIG_PROPOSAL.json"
        historical.write_text('{"historical": true}\n')
        digest = hashlib.sha256(historical.read_bytes()).hexdigest()
        (self.root / "plans" / "BASELINE.json").write_text(json.dumps(
            {"description": "immutable", "files": {"plans/CONFIG_PROPOSAL.json": digest}}
        ))  # fmt: skip

    def run(self, *args: str, check: bool = False) -> subprocess.CompletedProcess:
        """Run a command in the project; ``check`` raises with its output if it fails."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        done = subprocess.run(
            list(args), cwd=self.root, env=env, capture_output=True, text=True, check=False
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done

    def git(self, *args: str) -> str:
        return self.run("git", *args, check=True).stdout

    def commit(self, message: str) -> None:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)

    def prereg(self, *args: str, check: bool = False) -> subprocess.CompletedProcess:
        return self.run(sys.executable, "-m", "prereg.cli", *args, check=check)

    def approve(
        self, stage: str, run_id: str, *extra: str, check: bool = True
    ) -> subprocess.CompletedProcess:
        """``prereg approve`` naming this machine's deviations; commit the record when it succeeds."""
        done = self.prereg(
            "approve",
            "--stage",
            stage,
            "--run-id",
            run_id,
            "--accept-deviations",
            *extra,
            check=check,
        )
        if done.returncode == 0:
            self.commit(f"Approve {run_id}")
        return done

    def pytest(self, *args: str) -> subprocess.CompletedProcess:
        return self.run(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args)

    def audit(self, run_id: str, *extra: str) -> subprocess.CompletedProcess:
        return self.prereg("audit", f"runs/{run_id}", *extra)

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    def manifest(self, run_id: str) -> dict:
        return json.loads((self.run_dir(run_id) / "manifest.json").read_text())
