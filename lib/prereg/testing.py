"""Drive research stages from tests as a researcher would, in a scratch git repository.

:class:`ScratchProject` runs ``git``, ``prereg`` and ``pytest`` in subprocesses with this
interpreter, so a test exercises the real gate, workers and manifests; a user's tests of
their own stages use it, and so do the project's checks. :func:`terminal_signals` restores
a terminal's SIGINT, SIGQUIT and SIGHUP in a child process; :func:`outer_environment` is
this process's environment without the test runner's own variables. Importable without
pytest.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from prereg.commands import signing
from prereg.proof.keys import RUNNER_KEY_VARIABLE
from prereg.records.runs import RunLayout


@dataclass
class ScratchProject:
    root: Path
    # Variables every command run here gets (set_up_signing names the runner's key); not an
    # argument, so a subclass's own fields stay positional.
    env: dict[str, str] = field(default_factory=dict, init=False)

    def init(
        self,
        *,
        plans: list[str],
        testpaths: str = "experiments",
        ignore: tuple[str, ...] = (),
        blocked_plugins: tuple[str, ...] = (),
    ) -> None:
        """Lay out an empty project: git identity, pytest.ini naming ``plans``, the plugin,
        ``plans/approvals/``, ``experiments/`` and a baseline pinning a historical file.

        pytest.ini's ``addopts`` blocks pytest-randomly (items run in collection order) and
        each installed plugin named in ``blocked_plugins`` (by entry-point name): a plugin
        the project's stages do not use is then imported by none of a run's processes."""
        addopts = " ".join(f"-p no:{name}" for name in ("randomly", *blocked_plugins))
        (self.root / "plans" / "approvals").mkdir(parents=True)
        (self.root / "experiments").mkdir()
        self.git("init", "-q")
        self.git("config", "user.email", "researcher@example.org")
        self.git("config", "user.name", "Researcher")
        (self.root / "pytest.ini").write_text(
            f"[pytest]\ntestpaths = {testpaths}\naddopts = {addopts}\n"
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

    def run(
        self, *args: str, check: bool = False, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """Run a command in the project; ``check`` raises with its output if it fails.

        The outer ``PYTEST_*`` and ``COV_*`` variables are dropped; ``env`` then sets
        variables of its own (for example ``PYTEST_ADDOPTS`` or ``PYTHONPATH``)."""
        env = outer_environment(**{**self.env, **(env or {})})
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        done = subprocess.run(
            list(args),
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            preexec_fn=terminal_signals,
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
        """``prereg approve`` naming this machine's deviations; commit the record when it
        succeeds."""
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

    def set_up_signing(self, keys: Path) -> dict[str, Path]:
        """Signing as a project sets it up: fresh keys ``approver``, ``runner`` and
        ``auditor`` in folder ``keys``, their lines in ``.prereg/approvers``, ``runners`` and
        ``auditors``, committed; git here signs every commit with the approver's key, and
        runs sign with the runner's. Returns the private keys by name."""
        made = signing.set_up(self.root, keys)
        self.env[RUNNER_KEY_VARIABLE] = str(made["runner"])
        self.commit("Register the approvers and the runner")
        return made

    def pytest(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return self.run(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args, env=env)

    def audit(self, run_id: str, *extra: str) -> subprocess.CompletedProcess:
        return self.prereg("audit", str(self.run_dir(run_id).relative_to(self.root)), *extra)

    def layout(self, run_id: str) -> RunLayout:
        """Every path of run ``run_id`` of this project (:class:`prereg.records.runs.RunLayout`)."""
        return RunLayout(self.root, run_id)

    def run_dir(self, run_id: str) -> Path:
        return self.layout(run_id).folder

    def manifest(self, run_id: str) -> dict:
        return json.loads(self.layout(run_id).manifest.read_text())


def outer_environment(**overrides: str) -> dict[str, str]:
    """This process's environment without the ``PYTEST_*`` and ``COV_*`` variables the test
    runner sets for itself (a child pytest would read them as its own), then ``overrides``."""
    outer = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    return {**outer, **overrides}


def terminal_signals() -> None:
    """In a child about to run: SIGINT, SIGQUIT and SIGHUP as a terminal gives them. A shell
    without job control starts background jobs (``cmd &``, CI runners) with SIGINT and SIGQUIT
    ignored, ``nohup`` ignores SIGHUP; Python then never turns Ctrl-C into KeyboardInterrupt
    and prereg leaves an ignored SIGHUP ignored, so checks that send them would not test them."""
    for number in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)
