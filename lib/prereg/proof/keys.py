"""OpenSSH ed25519 keys and allowed-signers files: the identities of the three roles.

A role file is an allowed-signers file (ssh-keygen(1), "ALLOWED SIGNERS"):
``principal namespaces="..." ssh-ed25519 BASE64 [comment]``, one key per line. Each role's
lines carry its namespaces (:data:`NAMESPACES`), so git refuses a runner key's signature on
a commit (namespace ``git``) even when a verifier is handed the wrong file.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

ROLES_DIR = ".prereg"
APPROVERS, RUNNERS, AUDITORS = "approvers", "runners", "auditors"
ROLES = (APPROVERS, RUNNERS, AUDITORS)
# The namespaces each role's lines allow: git commits for people, DSSE run statements for
# the runner (a namespace of prereg's own, which no git signature uses).
RUN_NAMESPACE = "prereg-run"
NAMESPACES = {APPROVERS: ("git",), RUNNERS: (RUN_NAMESPACE,), AUDITORS: ("git",)}
ED25519 = "ssh-ed25519"
# The environment variable naming the runner's private key; else RUNNER_KEY under the home.
RUNNER_KEY_VARIABLE = "PREREG_RUNNER_KEY"
RUNNER_KEY = Path(".config", "prereg", "runner_ed25519")

# An allowed-signers line as prereg reads it, and docs/how-to/verify-a-run.sh reads it the same
# way: blanks (space, tab) split the fields; a quoted option value holds no blank; the options
# field is name or name="value", separated by commas.
_BLANKS = " \t"
_QUOTED = re.compile(r'"[^" \t]*"')
_OPTIONS = re.compile(r'[A-Za-z-]+(?:="[^"]*")?(?:,[A-Za-z-]+(?:="[^"]*")?)*')
_OPTION = re.compile(r'([A-Za-z-]+)(?:="([^"]*)")?')
_VALUED_OPTIONS = ("namespaces", "valid-after", "valid-before")


class KeyProblem(ValueError):
    """A key or an allowed-signers line prereg cannot read; the message names it."""


def role_path(role: str) -> str:
    """The role file's path in the repository: ``.prereg/<role>``."""
    if role not in ROLES:
        raise KeyProblem(f"no role {role!r}: the roles are {', '.join(ROLES)}")
    return f"{ROLES_DIR}/{role}"


def fingerprint(blob: bytes) -> str:
    """OpenSSH's fingerprint of a public key blob: what ``ssh-keygen -lf`` prints."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def _ssh_strings(blob: bytes) -> list[bytes]:
    parts, at = [], 0
    while at < len(blob):
        if at + 4 > len(blob):
            raise KeyProblem("a truncated key blob")
        (size,) = struct.unpack(">I", blob[at : at + 4])
        parts.append(blob[at + 4 : at + 4 + size])
        at += 4 + size
    if at != len(blob):
        raise KeyProblem("a truncated key blob")
    return parts


def ed25519_blob(raw: bytes) -> bytes:
    """The OpenSSH public key blob of a raw 32-byte ed25519 key."""
    name = ED25519.encode()
    return struct.pack(">I", len(name)) + name + struct.pack(">I", len(raw)) + raw


@dataclass(frozen=True)
class PublicKey:
    """An ed25519 public key as OpenSSH writes it."""

    blob: bytes

    @classmethod
    def from_text(cls, keytype: str, b64: str) -> PublicKey:
        if keytype != ED25519:
            raise KeyProblem(f"a {keytype} key: prereg's roles take {ED25519} keys only")
        try:
            blob = base64.b64decode(b64, validate=True)
        except ValueError:
            raise KeyProblem("its key is not base64") from None
        if base64.b64encode(blob).decode("ascii") != b64:  # padding or bits beyond the blob
            raise KeyProblem("its key is not base64 as OpenSSH writes it")
        try:
            parts = _ssh_strings(blob)
        except KeyProblem:
            raise KeyProblem(f"its key is not an {ED25519} key (a truncated key blob)") from None
        if len(parts) != 2 or parts[0] != ED25519.encode() or len(parts[1]) != 32:
            raise KeyProblem(f"its key is not an {ED25519} key")
        return cls(blob)

    @classmethod
    def from_line(cls, line: str) -> PublicKey:
        """From a ``.pub`` file's line ``ssh-ed25519 BASE64 [comment]``."""
        fields = line.split()
        if len(fields) < 2:
            raise KeyProblem(f"not an OpenSSH public key line: {line.strip()[:60]!r}")
        return cls.from_text(fields[0], fields[1])

    @property
    def raw(self) -> bytes:
        return _ssh_strings(self.blob)[1]

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.blob)

    def text(self) -> str:
        return f"{ED25519} {base64.b64encode(self.blob).decode()}"


@dataclass(frozen=True)
class Signer:
    """One line of an allowed-signers file."""

    principals: tuple[str, ...]
    namespaces: tuple[str, ...] | None  # None: the line allows every namespace
    key: PublicKey
    line: int

    def allows(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces


def parse_signers(text: str, where: str) -> list[Signer]:
    """The lines of an allowed-signers file (``where`` names it in errors); blank lines and
    ``#`` comments are skipped. Lines end with a line feed; blanks (space, tab) split a line's
    fields, and a quoted option value holds none. Options other than ``namespaces``,
    ``cert-authority``, ``valid-after`` and ``valid-before`` are refused as git would, and so is
    an option given twice or one of the three without its value; a certificate authority line
    is refused, since a role names keys. docs/how-to/verify-a-run.sh reads a role file by the
    same rules, and checks/proof/test_role_file_reading.py runs both on a corpus of lines."""
    if "\0" in text:
        raise KeyProblem(f"{where} holds a NUL byte")
    signers = []
    for number, line in enumerate(text.split("\n"), 1):
        line = line.strip(_BLANKS)
        if not line or line.startswith("#"):
            continue
        if '"' in _QUOTED.sub("", line):
            raise KeyProblem(
                f"{where}:{number}: a quoted value holds a blank, or a quote is unpaired"
            )
        fields = re.split(r"[ \t]+", line)
        if len(fields) < 3:
            raise KeyProblem(f"{where}:{number}: not 'principal [options] keytype key'")
        principals = tuple(fields[0].split(","))
        options: dict[str, str | None] = {}
        rest = fields[1:]
        if not rest[0].startswith(("ssh-", "sk-")):
            if not _OPTIONS.fullmatch(rest[0]):
                raise KeyProblem(
                    f'{where}:{number}: options {rest[0]!r} are not name or name="value" '
                    "separated by commas"
                )
            for match in _OPTION.finditer(rest[0]):
                name = match.group(1).lower()
                if name in options:
                    raise KeyProblem(f"{where}:{number}: option {name} given twice")
                options[name] = match.group(2)
            rest = rest[1:]
        if "cert-authority" in options:
            raise KeyProblem(f"{where}:{number}: a certificate authority; a role names keys")
        unknown = sorted(set(options) - set(_VALUED_OPTIONS))
        if unknown:
            raise KeyProblem(f"{where}:{number}: unknown option(s) {', '.join(unknown)}")
        bare = sorted(name for name, value in options.items() if value is None)
        if bare:
            raise KeyProblem(f'{where}:{number}: option(s) {", ".join(bare)} without ="value"')
        if len(rest) < 2:
            raise KeyProblem(f"{where}:{number}: no key after the principal and options")
        try:
            key = PublicKey.from_text(rest[0], rest[1])
        except KeyProblem as err:
            raise KeyProblem(f"{where}:{number}: {err}") from None
        spaces = options.get("namespaces")
        signers.append(
            Signer(
                principals=principals,
                namespaces=None if spaces is None else tuple(spaces.split(",")),
                key=key,
                line=number,
            )
        )
    return signers


def signers_of(data: bytes | None, role: str) -> list[Signer]:
    """The signers of ``role``'s file from its bytes (None: no file, so no signer)."""
    try:
        return parse_signers((data or b"").decode("utf-8"), role_path(role))
    except UnicodeDecodeError:
        raise KeyProblem(f"{role_path(role)} is not UTF-8 text") from None


def signer_line(principal: str, role: str, key: PublicKey) -> str:
    """The allowed-signers line of ``key`` in ``role``'s file, with the role's namespaces."""
    if not principal or any(c.isspace() or c in ',"' for c in principal):
        raise KeyProblem(f"principal {principal!r}: one word, no comma or quote (e.g. alice@lab)")
    return f'{principal} namespaces="{",".join(NAMESPACES[role])}" {key.text()}'


def runner_key_path(environ: dict[str, str] | None = None, home: str | None = None) -> Path:
    """Where the runner's private key is: :data:`RUNNER_KEY_VARIABLE`, else
    :data:`RUNNER_KEY` under the user's home."""
    environ = os.environ if environ is None else environ
    named = environ.get(RUNNER_KEY_VARIABLE)
    if named:
        return Path(named).expanduser()
    return Path(home or environ.get("HOME") or Path.home()) / RUNNER_KEY
