"""``prereg keys``, ``prereg register`` and ``prereg verify``: the identities of a project's
roles, the card a researcher publishes, and the check a third party runs (:mod:`prereg.proof`)."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path

from prereg.base import gitrepo
from prereg.proof import card as cards
from prereg.proof import keys
from prereg.proof.verify import Verdict, verify_run


class SigningRefused(ValueError):
    """What a signing command cannot do; the message says what to do instead."""


def make_key(path: Path, comment: str) -> Path:
    """A fresh ed25519 key at ``path`` (and ``path.pub``) by ``ssh-keygen``, with no
    passphrase: a run signs with nobody at the keyboard."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    done = subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SigningRefused(f"ssh-keygen could not make {path}: {done.stderr.strip()}")
    return path


def runner_key(path: Path) -> tuple[str, bool]:
    """The runner key's public line, made first when ``path`` does not exist; and whether
    it was made."""
    path = Path(path)
    made = False
    if not path.exists():
        make_key(path, f"runner@{socket.gethostname()}")
        made = True
    public = Path(f"{path}.pub")
    if not public.is_file():
        raise SigningRefused(f"{public} does not exist: ssh-keygen -y -f {path} > {public}")
    key = keys.PublicKey.from_line(public.read_text())
    return key.text(), made


def add_signer(root: Path, role: str, principal: str, public: Path) -> str:
    """Append ``principal``'s key (a ``.pub`` file) to the role's file, with the role's
    namespaces; returns the line. Committing it is the user's step: after a card's freeze
    commit, an approver must sign that commit."""
    try:
        key = keys.PublicKey.from_line(Path(public).read_text())
    except OSError as err:
        raise SigningRefused(f"{public} cannot be read: {err}") from None
    line = keys.signer_line(principal, role, key)
    ensure_role_files(root)  # only once the key and its line are good
    target = Path(root) / keys.role_path(role)
    existing = target.read_text() if target.is_file() else ""
    keys.parse_signers(existing, keys.role_path(role))  # an unreadable file is not extended
    if key.text() in existing:
        raise SigningRefused(f"{keys.role_path(role)} already holds that key")
    target.parent.mkdir(exist_ok=True)
    sep = "" if not existing or existing.endswith("\n") else "\n"
    target.write_text(existing + sep + line + "\n")
    return line


def ensure_role_files(root: Path) -> list[str]:
    """Create each missing role file, empty (a role with no key yet); the paths made."""
    made = []
    for role in keys.ROLES:
        target = Path(root) / keys.role_path(role)
        if not target.exists():
            target.parent.mkdir(exist_ok=True)
            target.write_text("")
            made.append(keys.role_path(role))
    return made


def register(
    root: Path,
    commit: str | None,
    *,
    witness: str | None = None,
    timestamp_authority: str | None = None,
    timestamp_roots: Sequence[str] = (),
) -> str:
    """The card of ``commit`` (default: HEAD of a clean tree), naming ``witness`` and the
    timestamp authority with its root certificates (PEM files) when given, as JSON text."""
    if bool(timestamp_authority) != bool(timestamp_roots):
        raise SigningRefused(
            "a card names a timestamp authority with the root certificates its timestamps "
            "chain to: give both --timestamp-authority URL and --timestamp-root PEM"
        )
    roots = [cards.read_root(Path(pem)) for pem in timestamp_roots]
    if commit is None:
        dirty = gitrepo.dirty_paths(root)
        if dirty:
            raise SigningRefused(
                f"the working tree is not clean ({', '.join(dirty[:5])}): a card registers a "
                "commit; commit first, or name one with --commit"
            )
        commit = gitrepo.head_commit(root)
    resolved = gitrepo.resolve(root, commit)
    if resolved is None:
        raise SigningRefused(f"no commit {commit!r} in {root}")
    card = cards.make(root, resolved)
    if witness is not None:
        card["witness"] = witness
    if timestamp_authority is not None:
        card["timestamp_authority"] = {"url": timestamp_authority, "roots": roots}
    return json.dumps(card, indent=2, sort_keys=True) + "\n"


def verify(root: Path, run_dir: Path, card_path: Path, *, require_audit: bool = False) -> Verdict:
    return verify_run(root, run_dir, cards.load(card_path), require_audit=require_audit)


def describe(verdict: Verdict) -> list[str]:
    """What ``prereg verify`` prints."""
    if verdict.code == 0:
        head = f"verify {verdict.run_id}: verified"
    elif verdict.could_not:
        head = f"verify {verdict.run_id}: could not verify"
    else:
        head = f"verify {verdict.run_id}: refused, {len(verdict.problems)} problem(s)"
    return [
        head,
        *(f"  - {p}" for p in verdict.could_not + verdict.problems),
        *(f"  ok: {s}" for s in verdict.said if verdict.code == 0),
    ]


# The throwaway keys of set_up, and the role each signs in.
THROWAWAY = {"approver": keys.APPROVERS, "runner": keys.RUNNERS, "auditor": keys.AUDITORS}


def set_up(root: Path, keys_dir: Path) -> dict[str, Path]:
    """Signing in ``root`` with throwaway keys ``approver``, ``runner`` and ``auditor``
    made in ``keys_dir``: each key's line in its role file, and git there signing every
    commit with the approver's key. The caller commits the role files. Returns the private
    keys by name."""
    made = {name: make_key(Path(keys_dir) / name, f"{name}@lab") for name in THROWAWAY}
    ensure_role_files(root)
    for name, role in THROWAWAY.items():
        add_signer(root, role, f"{name}@lab", Path(f"{made[name]}.pub"))
    for name, value in (
        ("gpg.format", "ssh"),
        ("user.signingkey", str(made["approver"])),
        ("commit.gpgsign", "true"),
    ):
        gitrepo.git(root, "config", name, value)
    return made
