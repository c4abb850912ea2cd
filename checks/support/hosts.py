"""Other hosts for the multihost checks: execnet socket servers in separate clones."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from prereg.testing import outer_environment

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
    server: str = "prereg.runtime.remote",
) -> SocketHost:
    """``python -m prereg.runtime.remote 127.0.0.1:PORT`` (execnet's socket server, one connection;
    ``server="execnet.script.socketserver"``: execnet's own script, serving in a loop) in
    ``clone``, inside its own mount namespace where ``hide`` (the controller's checkout) is
    an empty tmpfs."""
    port = _free_port()
    outer = outer_environment()
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
