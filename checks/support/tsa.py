"""A local RFC 3161 timestamp authority for the checks: a root and a timestamping
certificate made with ``openssl``, and an HTTP server on loopback whose every answer is
``openssl ts -reply`` (RFC 3161 over HTTP, section 3.4)."""

from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prereg.proof.timestamp import QUERY_TYPE, REPLY_TYPE

EXTENSIONS = """basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=critical,timeStamping
"""

CONFIG = """[ tsa ]
default_tsa = local
[ local ]
serial = {folder}/serial
crypto_device = builtin
signer_cert = {folder}/tsa.pem
signer_key = {folder}/tsa.key
signer_digest = sha256
default_policy = 1.2.3.4.1
digests = sha256
accuracy = secs:1
ordering = yes
tsa_name = no
ess_cert_id_chain = no
ess_cert_id_alg = sha256
"""


def _openssl(folder: Path, *args: str, data: bytes | None = None) -> bytes:
    done = subprocess.run(
        ["openssl", *args], cwd=folder, input=data, capture_output=True, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"openssl {' '.join(args)}: {done.stderr.decode()}")
    return done.stdout


@dataclass
class Authority:
    """A running authority: its ``url``, its root certificate (PEM) and its folder."""

    folder: Path
    url: str
    root_pem: str
    server: ThreadingHTTPServer

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start(folder: Path, name: str = "prereg checks TSA") -> Authority:
    """Make the authority's keys and certificates in ``folder`` and serve it on loopback."""
    folder.mkdir(parents=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(folder, "req", "-x509", *ec, "-keyout", "root.key", "-out", "root.pem",
             "-days", "3650", "-subj", f"/CN={name} root",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    _openssl(folder, "req", "-new", *ec, "-keyout", "tsa.key", "-out", "tsa.csr",
             "-subj", f"/CN={name}")  # fmt: skip
    (folder / "ext.cnf").write_text(EXTENSIONS)
    _openssl(folder, "x509", "-req", "-in", "tsa.csr", "-CA", "root.pem", "-CAkey", "root.key",
             "-set_serial", "2", "-days", "3650", "-extfile", "ext.cnf", "-out", "tsa.pem")  # fmt: skip
    (folder / "serial").write_text("01\n")
    (folder / "ts.cnf").write_text(CONFIG.format(folder=folder))
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            query = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Type") != QUERY_TYPE:
                self.send_error(415)
                return
            with lock:  # openssl ts keeps its serial in one file
                (folder / "query.tsq").write_bytes(query)
                reply = _openssl(folder, "ts", "-reply", "-config", "ts.cnf",
                                 "-queryfile", "query.tsq")  # fmt: skip
            self.send_response(200)
            self.send_header("Content-Type", REPLY_TYPE)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/tsa"
    return Authority(folder, url, (folder / "root.pem").read_text(), server)
