"""The registration card: what a researcher publishes outside the repository when they
preregister, and all a verifier trusts.

``{"format", "repository", "freeze_commit", "plans": {path: sha256}, "roles": {role: sha256}}``
(:class:`prereg.records.formats.Card`, with the optional ``witness`` and
``timestamp_authority``): the repository's root commit, the commit that freezes the plans,
the SHA-256 of every plan file under ``plans/`` at that commit (approvals excluded), and of
each role file there. A role file that changes later counts only when an approver of the
parent commit signed the change (:func:`prereg.proof.commits.role_history_problems`); a
changed plan needs a new card.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from prereg.base import gitrepo
from prereg.base.typed_settings import SettingsError, parse_as
from prereg.proof.commits import role_problems, roles_at
from prereg.proof.keys import role_path
from prereg.proof.statement import repository_id
from prereg.records import APPROVALS_DIR, documents
from prereg.records.formats import Card

FORMAT = "prereg-registration/1"
PLANS_DIR = "plans"
# Closed (prereg.records.formats.Card): a field it does not name is refused, and so is a
# field of another shape.
FIELDS = tuple(f.name for f in dataclasses.fields(Card))


class CardProblem(ValueError):
    """A card that cannot be made or read; the message says what to do."""


class NotACard(CardProblem):
    """A card that was read and is not a registration card as prereg writes it: a verifier
    given it refuses the run (the card's claim cannot hold), where a card it cannot read is
    evidence it could not obtain."""


def plan_files(root: Path, commit: str) -> dict[str, str]:
    """Every JSON file under ``plans/`` at ``commit`` but the approvals: path -> SHA-256."""
    listed = gitrepo.git(root, "ls-tree", "-r", "--name-only", commit, "--", PLANS_DIR).split("\n")
    return {
        rel: hashlib.sha256(gitrepo.show_bytes(root, commit, rel)).hexdigest()
        for rel in sorted(listed)
        if rel.endswith(".json") and not rel.startswith(APPROVALS_DIR + "/")
    }


def make(root: Path, commit: str) -> dict:
    """The card of ``commit``: it must hold every role file, each readable."""
    roles = roles_at(root, commit)
    problems = [p for role, data in roles.items() for p in role_problems(data, role_path(role))]
    if problems:
        raise CardProblem(
            f"commit {commit[:12]} cannot be registered: {'; '.join(problems)}. Add each role's "
            "keys (prereg keys add ROLE NAME KEY.pub; an empty file is a role with no key), "
            "commit, and register again"
        )
    return {
        "format": FORMAT,
        "repository": repository_id(root, commit),
        "freeze_commit": commit,
        "plans": plan_files(root, commit),
        "roles": {role: hashlib.sha256(data or b"").hexdigest() for role, data in roles.items()},
    }


def read_root(path: Path) -> str:
    """A root certificate (PEM) for the card's timestamp authority."""
    try:
        text = Path(path).read_text(encoding="ascii")
    except (OSError, ValueError) as err:
        raise CardProblem(f"the root certificate {path} cannot be read: {err}") from None
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise CardProblem(f"{path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    return text


def load(path: Path) -> Card:
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise CardProblem(f"the card {path} cannot be read: {err}") from None
    try:
        value = documents.loads(data, f"the card {path}")
    except documents.NotJson as err:
        raise NotACard(str(err)) from None
    if not isinstance(value, dict) or value.get("format") != FORMAT:
        raise NotACard(f"{path} is not a registration card (format {FORMAT})")
    try:
        card = parse_as(Card, value, path="")
    except SettingsError as err:
        raise NotACard(f"the card {path} is not a valid Card record: {err}") from None
    if card.timestamp_authority and not card.timestamp_authority.roots:
        raise NotACard(f"the card {path} names a timestamp authority with no root certificate")
    return card


def problems(root: Path, card: Card) -> list[str]:
    """Where the repository disagrees with the card at its freeze commit."""
    freeze = card.freeze_commit
    if not gitrepo.is_object_id(freeze):
        return [f"the card's freeze commit {freeze!r} is not a full commit id"]
    if not gitrepo.commit_exists(root, freeze):
        return [f"the repository has no commit {freeze} (the card's freeze commit)"]
    found = []
    if repository_id(root, freeze) != card.repository:
        found.append(f"the repository's root commit is not the card's {card.repository[:12]}")
    for role, data in roles_at(root, freeze).items():
        if hashlib.sha256(data or b"").hexdigest() != card.roles.get(role):
            found.append(f"{role_path(role)} at {freeze[:12]} is not the file the card registers")
    if plan_files(root, freeze) != card.plans:
        found.append(f"the plans at {freeze[:12]} are not the plans the card registers")
    return found
