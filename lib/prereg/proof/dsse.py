"""DSSE envelopes (github.com/secure-systems-lab/dsse, protocol.md) signed with ed25519.

The signature is over ``PAE(payloadType, payload)``; each signature's ``keyid`` is the
OpenSSH fingerprint of the key (``SHA256:...``, what ``ssh-keygen -lf`` prints), so a
verifier finds the key in an allowed-signers file. Signing needs ``cryptography`` (the extra
``prereg[sign]``), and so does verifying here; docs/how-to/verify-a-run.md verifies with
openssl instead.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

from prereg.proof.keys import PublicKey, Signer, ed25519_blob
from prereg.records import documents

PAYLOAD_TYPE = "application/vnd.in-toto+json"


class SignatureProblem(ValueError):
    """An envelope whose signatures do not hold; the message says which and why."""


class NoCrypto(RuntimeError):
    """``cryptography`` is not installed."""


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: ``DSSEv1 LEN(type) type LEN(body) body``."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def _crypto():
    try:
        # cryptography: the sign extra, optional (a run without it writes unsigned statements)
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise NoCrypto(
            "signing and verifying need the package cryptography: pip install 'prereg[sign]'"
        ) from None
    return serialization, ed25519, InvalidSignature


@dataclass(frozen=True)
class PrivateKey:
    """An unencrypted OpenSSH ed25519 private key, as ``ssh-keygen -t ed25519 -N ''`` writes."""

    key: object
    public: PublicKey

    @classmethod
    def load(cls, path: Path) -> PrivateKey:
        serialization, ed25519, _ = _crypto()
        try:
            key = serialization.load_ssh_private_key(Path(path).read_bytes(), password=None)
        except (ValueError, TypeError) as err:
            raise SignatureProblem(
                f"{path} is not an unencrypted OpenSSH private key ({err}); make one with "
                "prereg keys runner"
            ) from None
        if not isinstance(key, ed25519.Ed25519PrivateKey):
            raise SignatureProblem(
                f"{path} is not an ed25519 key: make one with prereg keys runner"
            )
        raw = key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return cls(key, PublicKey(ed25519_blob(raw)))

    def sign(self, message: bytes) -> bytes:
        return self.key.sign(message)  # type: ignore[attr-defined]


def envelope(payload: bytes, key: PrivateKey | None, payload_type: str = PAYLOAD_TYPE) -> dict:
    """A DSSE envelope of ``payload``, signed by ``key`` (no signature when None)."""
    signatures = []
    if key is not None:
        signature = key.sign(pae(payload_type, payload))
        signatures.append(
            {"keyid": key.public.fingerprint, "sig": base64.b64encode(signature).decode()}
        )
    return {
        "payload": base64.b64encode(payload).decode(),
        "payloadType": payload_type,
        "signatures": signatures,
    }


def payload_of(env: dict) -> bytes:
    """The envelope's payload bytes (unverified)."""
    try:
        return base64.b64decode(env["payload"], validate=True)
    except (KeyError, TypeError, ValueError):
        raise SignatureProblem("the envelope has no base64 payload") from None


def verify(env: dict, signers: list[Signer], namespace: str) -> tuple[bytes, list[Signer]]:
    """The payload and who signed it, when every signature of the envelope is a valid
    signature by a key of ``signers`` whose line allows ``namespace``, and there is one at
    least; otherwise :class:`SignatureProblem`. A signature is matched to its key by
    ``keyid`` (the key's fingerprint)."""
    _, ed25519, invalid = _crypto()
    if not isinstance(env, dict) or env.get("payloadType") != PAYLOAD_TYPE:
        raise SignatureProblem(f"the envelope's payloadType is not {PAYLOAD_TYPE}")
    payload = payload_of(env)
    signatures = env.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise SignatureProblem("the envelope is not signed")
    by_print = {s.key.fingerprint: s for s in signers}
    who = []
    for number, signature in enumerate(signatures, 1):
        keyid = signature.get("keyid") if isinstance(signature, dict) else None
        signer = by_print.get(keyid)
        if signer is None:
            raise SignatureProblem(f"signature {number} is by key {keyid}, not a key of the file")
        if not signer.allows(namespace):
            raise SignatureProblem(
                f"signature {number}: the key of line {signer.line} ({','.join(signer.principals)}) "
                f"is not allowed namespace {namespace!r}"
            )
        try:
            sig = base64.b64decode(signature.get("sig", ""), validate=True)
            ed25519.Ed25519PublicKey.from_public_bytes(signer.key.raw).verify(
                sig, pae(env["payloadType"], payload)
            )
        except (invalid, ValueError):
            raise SignatureProblem(
                f"signature {number} by {keyid} does not verify: the statement or its type "
                "changed after it was signed, or another key made it"
            ) from None
        who.append(signer)
    return payload, who


def parse_lines(data: bytes, where: str) -> list[dict]:
    """The envelopes of an attestation's bytes, as prereg writes them: UTF-8, each line a
    JSON object ended by a line feed, and nothing else (no carriage return, no blank line, no
    line without its line feed). Any other framing is refused, so that every verifier counts
    the same lines (docs/how-to/verify-a-run.sh refuses the same files)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SignatureProblem(f"{where} is not UTF-8: {err}") from None
    if "\r" in text:
        raise SignatureProblem(f"{where} holds a carriage return; its lines end with a line feed")
    if text and not text.endswith("\n"):
        raise SignatureProblem(f"{where}: its last line has no line feed")
    envelopes = []
    for number, line in enumerate(text[:-1].split("\n") if text else [], 1):
        try:
            envelopes.append(documents.loads_object(line.encode(), f"{where}:{number}"))
        except documents.NotJson as err:
            raise SignatureProblem(str(err)) from None
    return envelopes


def read_lines(path: Path) -> list[dict]:
    """The envelopes of an attestation file (:func:`parse_lines`)."""
    return parse_lines(Path(path).read_bytes(), str(path))
