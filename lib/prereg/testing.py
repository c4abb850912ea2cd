"""Drive research stages from tests as a researcher would, in a scratch git repository.

:class:`ScratchProject` runs ``git``, ``prereg`` and ``pytest`` in subprocesses with this
interpreter, so a test exercises the real gate, workers and manifests. The project's own
checks use it; so can a user's tests of their own stages. Importable without pytest.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from prereg.runs import RunLayout, refusals_dir


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

    def run(
        self, *args: str, check: bool = False, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """Run a command in the project; ``check`` raises with its output if it fails.

        The outer ``PYTEST_*`` and ``COV_*`` variables are dropped; ``env`` then sets
        variables of its own (for example ``PYTEST_ADDOPTS`` or ``PYTHONPATH``)."""
        outer = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
        env = {**outer, **(env or {})}
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

    def pytest(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return self.run(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args, env=env)

    def audit(self, run_id: str, *extra: str) -> subprocess.CompletedProcess:
        return self.prereg("audit", str(self.run_dir(run_id).relative_to(self.root)), *extra)

    def layout(self, run_id: str) -> RunLayout:
        """Every path of run ``run_id`` of this project (:class:`prereg.runs.RunLayout`)."""
        return RunLayout(self.root, run_id)

    def run_dir(self, run_id: str) -> Path:
        return self.layout(run_id).folder

    def manifest(self, run_id: str) -> dict:
        return json.loads(self.layout(run_id).manifest.read_text())


def terminal_signals() -> None:
    """In a child about to run: SIGINT, SIGQUIT and SIGHUP as a terminal gives them. A shell
    without job control starts background jobs (``cmd &``, CI runners) with SIGINT and SIGQUIT
    ignored, ``nohup`` ignores SIGHUP; Python then never turns Ctrl-C into KeyboardInterrupt
    and prereg leaves an ignored SIGHUP ignored, so checks that send them would not test them."""
    for number in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)


# -- a toy stage: the harness's own checks, and a user's first try ---------------------------

PINS = {
    "python": "3.9.6",
    "numpy": "2.0.2",
    "torch": "2.8.0",
    "scipy": "1.13.1",
    "platform": "macOS-arm64",
    "cpu_threads": 2,
}

EXPERIMENT = """
import json, os, signal, time
import pytest
from prereg.plugin import stage_plan

pytestmark = pytest.mark.research_stage("{stage}")
TO_CONTROLLER = ("sigterm-controller", "sighup-controller", "sigint-controller")


def pytest_generate_tests(metafunc):
    if "cell" in metafunc.fixturenames:
        params = stage_plan(metafunc.config).stage("{stage}")["parameters"]
        metafunc.parametrize("cell", range(params["cells"]), ids=lambda c: f"cell{{c}}")


def test_cell(cell, research):
    research.coords(cell=cell)
    rng = research.numpy_generator("cell", cell)
    (research.outputs / "result.json").write_text(json.dumps({{"x": rng.standard_normal(3).tolist()}}))
    bad = research.parameters["misbehave"]
    if cell == bad["cell"]:
        (research.outputs / "partial.txt").write_text("written before the failure")
        if bad["how"] == "raise":
            raise RuntimeError("cell failed on purpose")
        if bad["how"] == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
        if bad["how"] == "exit":
            os._exit(3)
        if bad["how"] == "nonfinite":
            research.coords(score=float("nan"))
        if bad["how"] in TO_CONTROLLER:
            # The run's controller: this process when serial, the parent of an xdist worker.
            controller = os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()
            os.kill(controller, getattr(signal, bad["how"].split("-")[0].upper()))
            (research.outputs / "signalled.txt").write_text("the controller was signalled")
            time.sleep(600)  # still running when the controller ends the run
        if bad["how"] == "ctrl-c":
            # Ctrl-C: SIGINT to the run's whole process group, only when the controller leads
            # one of its own (started with start_new_session); otherwise to the controller.
            controller = os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()
            if os.getpgid(0) == controller:
                os.killpg(controller, signal.SIGINT)
            else:
                os.kill(controller, signal.SIGINT)
            time.sleep(600)
    elif bad["how"] in TO_CONTROLLER and os.environ.get("PYTEST_XDIST_WORKER"):
        # The other worker's items finish just after the controller was signalled.
        signalled = research.outputs.parent / f"test_cell[cell{{bad['cell']}}]" / "signalled.txt"
        for _ in range(600):
            if signalled.exists():
                break
            time.sleep(0.1)
        time.sleep(0.5)
"""


def stage_spec(stage: str, **overrides) -> dict:
    spec = {
        "kind": "plain",
        "module": f"experiments/test_{stage}.py",
        "budget_seconds": 600,
        "budget_enforced": False,
        "requires": [],
        "seed_namespace": f"{stage}-1.0",
        "single_attempt": False,
        "threads_per_worker": 1,
        "inputs": [],
        "parameters": {"cells": 4, "misbehave": {"cell": -1, "how": "none"}},
    }
    spec.update(overrides)
    return spec


class ToyRepo(ScratchProject):
    """A scratch project holding toy stages (plan TOY_PLAN.json, experiments from EXPERIMENT)."""

    def refusals(self) -> list[dict]:
        folder = refusals_dir(self.root)
        return (
            [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
            if folder.exists()
            else []
        )

    def write_plan(self, stages: dict) -> None:
        plan = {
            "plan_id": "toy-1.0",
            "protocol": "toy protocol for the harness checks",
            "environment_pins": PINS,
            "stages": stages,
        }
        (self.root / "plans" / "TOY_PLAN.json").write_text(json.dumps(plan, indent=2))
        for stage, spec in stages.items():
            (self.root / spec["module"]).write_text(EXPERIMENT.format(stage=stage))


def make_toy_repo(root: Path, stages: dict | None = None) -> ToyRepo:
    repo = ToyRepo(root)
    repo.init(plans=["plans/TOY_PLAN.json"], testpaths="checks experiments")
    (root / "checks").mkdir()
    (root / "checks" / "test_soft.py").write_text(
        "import pytest\n\n@pytest.mark.software\ndef test_software():\n    assert 1 + 1 == 2\n\n"
        "@pytest.mark.research_stage('toy')\ndef test_stray_research_item():\n    raise AssertionError('never runs')\n"
    )
    repo.write_plan(stages or {"toy": stage_spec("toy")})
    repo.commit("Toy project")
    return repo


# -- hosts: execnet socket servers in separate clones -----------------------------------------

# Seconds a socket server may take to listen, and to stop.
HOST_START_SECONDS = 30
HOST_STOP_SECONDS = 10


def clone_host(source: Path, clone: Path) -> Path:
    """A clone of the project standing in for another host's checkout."""
    subprocess.run(
        ["git", "clone", "--quiet", str(source), str(clone)], check=True, capture_output=True
    )
    return clone


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _listening(port: int) -> bool:
    """A socket listening on 127.0.0.1:``port`` (read from /proc: connecting would use up
    the one connection execnet's socket server serves)."""
    wanted = f"0100007F:{port:04X}"
    for table in ("/proc/net/tcp",):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            return False
        if any(line.split()[1] == wanted and line.split()[3] == "0A" for line in lines):
            return True
    return False


@dataclass
class SocketHost:
    """An execnet socket server (one connection, one xdist worker) run in ``clone``."""

    clone: Path
    port: int
    process: subprocess.Popen
    log: Path

    @property
    def spec(self) -> str:
        return f"socket=127.0.0.1:{self.port}//chdir={self.clone}"

    @staticmethod
    def unavailable() -> str | None:
        """Why hosts cannot be started here (None: they can)."""
        import shutil

        if sys.platform != "linux":
            return "the host checks use Linux mount namespaces (unshare --mount)"
        if os.geteuid() != 0:
            return (
                "the host checks hide the controller's folder from each worker with "
                "unshare --mount and a tmpfs, which needs root"
            )
        if shutil.which("unshare") is None:
            return "unshare (util-linux) is missing"
        return None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=HOST_STOP_SECONDS)


def start_socket_host(
    clone: Path,
    hide: Path,
    env: dict[str, str] | None = None,
    server: str = "prereg.remote",
) -> SocketHost:
    """``python -m prereg.remote 127.0.0.1:PORT`` (execnet's socket server, one connection;
    ``server="execnet.script.socketserver"``: execnet's own script, serving in a loop) in
    ``clone``, inside its own mount namespace where ``hide`` (the controller's checkout) is
    an empty tmpfs."""
    port = _free_port()
    outer = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    script = 'mount -t tmpfs -o size=1m prereg-hidden "$1" && exec "$2" -u -m "$3" "$4"'
    log = clone.parent / f"{clone.name}-server.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
             str(hide), sys.executable, server, f"127.0.0.1:{port}"],
            cwd=clone, env={**outer, **(env or {})}, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    host = SocketHost(clone=clone, port=port, process=process, log=log)
    for _ in range(HOST_START_SECONDS * 10):
        if _listening(port):
            return host
        if process.poll() is not None:
            break
        time.sleep(0.1)
    host.stop()
    raise RuntimeError(f"the socket server in {clone} did not listen:\n{log.read_text()}")


# -- installed distributions, made by hand (extension points, the execution check) ----------


def fake_distribution(
    site: Path, name: str, files: dict[str, str], extra: dict[str, str], version: str = "1.0"
) -> Path:
    """A distribution ``name`` at ``version`` installed in ``site``: its files (relative to
    ``site``) and a RECORD listing each with its SHA-256, plus ``extra`` metadata files (for
    example ``entry_points.txt``). Returns its ``.dist-info`` folder."""
    meta = Path(site) / f"{name}-{version}.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    rows = []
    for rel, text in files.items():
        (Path(site) / rel).parent.mkdir(parents=True, exist_ok=True)
        (Path(site) / rel).write_text(text)
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        rows.append(f"{rel},sha256={digest.decode()},{len(text)}")
    for rel, text in extra.items():
        (meta / rel).write_text(text)
    rows.append(f"{meta.name}/RECORD,,")
    (meta / "RECORD").write_text("\n".join(rows) + "\n")
    return meta


def checkout_with_metadata(root: Path, folder: str, entry_points: str, name: str = "other") -> Path:
    """A committed git checkout ``root`` holding a minimal ``lib/prereg/`` (``plugin.py``,
    ``cli.py``), with uncommitted (git-ignored when it is an ``*.egg-info``) package metadata
    ``lib/<folder>`` of distribution ``name`` declaring ``entry_points``. Returns ``root``."""
    root = Path(root)
    root.mkdir()
    for args in (["init", "-q"], ["config", "user.email", "a@b.c"], ["config", "user.name", "A"]):
        subprocess.run(["git", *args], cwd=root, check=True)
    package = root / "lib" / "prereg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "plugin.py").write_text("")
    (package / "cli.py").write_text("def main():\n    return 0\n")
    (root / ".gitignore").write_text("*.egg-info/\n__pycache__/\n")
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "scratch"], cwd=root, check=True)
    meta = root / "lib" / folder
    meta.mkdir()
    (meta / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
    (meta / "entry_points.txt").write_text(entry_points)
    return root
