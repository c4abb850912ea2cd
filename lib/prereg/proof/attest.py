"""Writing a run's attestation at its end: the statements, signed by the runner's key when
one is there, unsigned (and said so) when not."""

from __future__ import annotations

import json
import os
from pathlib import Path

from prereg.proof import dsse, keys
from prereg.proof.statement import payload, statements
from prereg.records import ATTESTATION


def runner_key(path: Path) -> tuple[dsse.PrivateKey | None, str]:
    """The runner's key at ``path``, or None and why the statements go unsigned."""
    if not Path(path).is_file():
        return None, f"no runner key at {path} (prereg keys runner makes one)"
    try:
        return dsse.PrivateKey.load(path), ""
    except (dsse.NoCrypto, dsse.SignatureProblem, OSError) as err:
        return None, str(err)


def envelope_lines(envelopes: list[dict]) -> bytes:
    """JSON Lines: one envelope per line, keys sorted, no blanks."""
    return b"".join(
        json.dumps(e, sort_keys=True, separators=(",", ":")).encode() + b"\n" for e in envelopes
    )


def write(root: Path, run_dir: Path, target: Path, key: dsse.PrivateKey | None) -> bytes:
    """Build the run's statements, sign them with ``key`` and write them to ``target``
    (created, never replaced); returns the bytes written."""
    data = envelope_lines([dsse.envelope(payload(s), key) for s in statements(root, run_dir)])
    write_new(target, data)
    return data


def write_new(target: Path, data: bytes) -> None:
    """Create ``target`` with ``data`` on disk (FileExistsError when it exists: never replaced)."""
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(descriptor, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def problems(run_dir: Path, recorded: bytes | None, runners: bytes | None) -> list[str]:
    """What the audit finds in a run's attestation: it is not the attestation git recorded
    when the run wrote it (edited, replaced, copied from another run, deleted), or a
    signature does not verify against ``runners`` (the runners file at the run's commit).
    Whether its statements match the files is the manifest's checks here, and
    ``prereg verify``'s from a card. A run with neither file nor record (made before
    attestations) and an unsigned attestation give nothing here: ``prereg verify`` refuses
    them."""
    target = Path(run_dir) / ATTESTATION
    if not target.is_file():
        return (
            [] if recorded is None else [f"{ATTESTATION} is missing; git records one for the run"]
        )
    data = target.read_bytes()
    if recorded is None:
        return [f"{ATTESTATION}: git records no attestation of the run; the run did not write it"]
    if data != recorded:
        return [f"{ATTESTATION} is not the attestation git records for the run"]
    try:
        envelopes = dsse.parse_lines(data, ATTESTATION)
    except dsse.SignatureProblem as err:
        return [f"{ATTESTATION} cannot be read: {err}"]
    if not any(isinstance(e, dict) and e.get("signatures") for e in envelopes):
        return []
    try:
        signers = keys.signers_of(runners, keys.RUNNERS)
        for envelope in envelopes:
            dsse.verify(envelope, signers, keys.RUN_NAMESPACE)
    except dsse.NoCrypto:
        return []  # nothing to judge the signatures with here; prereg verify says so
    except (dsse.SignatureProblem, keys.KeyProblem) as err:
        return [f"{ATTESTATION}: a signature does not hold: {err}"]
    return []
