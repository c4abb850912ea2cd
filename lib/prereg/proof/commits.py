"""git's SSH signatures of commits, judged against a role file that the caller chose.

git verifies an SSH-signed commit with ``ssh-keygen -Y verify`` against an allowed-signers
file under namespace ``git``. prereg hands it the file's bytes (a temporary copy), never a
path the repository's configuration could name, and fixes the programs git would run: a
repository's ``gpg.ssh.program`` or ``gpg.program`` cannot answer for ssh-keygen.

Two rules rest on this:

* an approval commit is signed by a key of the approvers file of its parent
  (:func:`approval_problems`);
* a role file changes only in a commit signed by an approver of that commit's parent, from
  a commit the caller trusts on (:func:`role_history_problems`): the stepwise trust of a
  registration card's freeze commit.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from prereg.base import gitrepo
from prereg.proof.keys import APPROVERS, ROLES, ROLES_DIR, KeyProblem, parse_signers, role_path

GOOD = "G"  # git's %G?: a good signature by a principal of the allowed-signers file
# %G? letters, in words, for messages.
STATUS = {
    "G": "a good signature by a key of the file",
    "U": "a good signature by a key the file does not hold",
    "B": "a bad signature (or a key the file does not allow to sign commits)",
    "X": "an expired signature",
    "Y": "a signature by an expired key",
    "R": "a signature by a revoked key",
    "E": "a signature git cannot check",
    "N": "no signature",
}


@dataclass(frozen=True)
class CommitSignature:
    """What git says of a commit's signature against an allowed-signers file."""

    status: str  # git's %G?
    principal: str  # %GS: the principal of the matching line ("" unless good)
    key: str  # %GK: the key's fingerprint ("" when unsigned)

    @property
    def good(self) -> bool:
        return self.status == GOOD and bool(self.principal)

    def describe(self) -> str:
        said = STATUS.get(self.status, f"signature status {self.status!r}")
        return f"{said}{f' ({self.key})' if self.key else ''}"


def signature(root: Path, commit: str, allowed: bytes) -> CommitSignature:
    """git's verdict on ``commit``'s signature against the allowed-signers bytes ``allowed``."""
    with tempfile.TemporaryDirectory(prefix="prereg-signers-") as place:
        signers = Path(place, "allowed_signers")
        signers.write_bytes(allowed)
        revoked = Path(place, "revoked")
        revoked.write_bytes(b"")
        out = gitrepo.run(
            root,
            "-c", "gpg.format=ssh",
            "-c", "gpg.ssh.program=ssh-keygen",
            "-c", f"gpg.ssh.allowedSignersFile={signers}",
            "-c", f"gpg.ssh.revocationFile={revoked}",
            "-c", "gpg.program=false",
            "-c", "gpg.openpgp.program=false",
            "-c", "gpg.x509.program=false",
            "log", "-1", "--format=%G?%x00%GS%x00%GK", commit, "--",
        ).stdout.decode("utf-8", "replace")  # fmt: skip
    status, principal, key = (out.rstrip("\n").split("\0") + ["", ""])[:3]
    return CommitSignature(status=status or "N", principal=principal, key=key)


def role_file(root: Path, commit: str, role: str) -> bytes | None:
    """The role file's bytes at ``commit`` (None: the commit has none)."""
    try:
        return gitrepo.show_bytes(root, commit, role_path(role))
    except gitrepo.GitError:
        return None


def role_problems(data: bytes | None, where: str) -> list[str]:
    """Why a role file's bytes cannot be used (missing, or a line prereg cannot read)."""
    if data is None:
        return [f"{where} does not exist"]
    try:
        parse_signers(data.decode("utf-8"), where)
    except UnicodeDecodeError:
        return [f"{where} is not UTF-8 text"]
    except KeyProblem as err:
        return [str(err)]
    return []


def signed_by(root: Path, commit: str, trusted_at: str, role: str = APPROVERS) -> tuple[bool, str]:
    """Whether ``commit`` is signed by a key of ``role``'s file at ``trusted_at``, and what
    git found, in words."""
    where = f"{role_path(role)} at {trusted_at[:12]}"
    allowed = role_file(root, trusted_at, role)
    problems = role_problems(allowed, where)
    if problems:
        return False, "; ".join(problems)
    found = signature(root, commit, allowed or b"")
    if found.good:
        return True, f"signed by {found.principal} ({found.key}), checked against {where}"
    return False, f"{found.describe()}, checked against {where}"


def parents_of(root: Path, commit: str) -> list[str]:
    """The parents the commit object names, read and re-hashed by git's object reader."""
    with gitrepo.ObjectReader(root) as objects:
        return objects.commit_parents(commit)


def committed_at(root: Path, commit: str) -> datetime:
    """The committer date the commit object states (the committer's own clock)."""
    with gitrepo.ObjectReader(root) as objects:
        line = dict(objects.commit_headers(commit)).get("committer", "")
    try:
        return datetime.fromtimestamp(int(line.rsplit(" ", 2)[-2]), timezone.utc)
    except (ValueError, IndexError):
        raise gitrepo.GitError(f"commit {commit[:12]} has no readable committer date") from None


def beyond_adding(root: Path, commit: str, rel: str) -> list[str]:
    """What ``commit`` (one parent) changes other than adding the file ``rel``, as
    ``STATUS path`` lines: an approval or audit commit adds its record and nothing else."""
    changed = gitrepo.git(
        root, "diff-tree", "--no-commit-id", "--name-status", "-r", "--no-renames",
        f"{commit}^", commit,
    ).splitlines()  # fmt: skip
    if changed == [f"A\t{rel}"]:
        return []
    return [line.replace("\t", " ") for line in changed] or [f"nothing (no {rel} added)"]


def role_changes(root: Path, trusted: str, commit: str) -> list[str]:
    """The commits after ``trusted`` up to ``commit`` that change a file under ``.prereg/``,
    oldest first (every such commit of every path between them)."""
    out = gitrepo.git(
        root, "rev-list", "--reverse", "--full-history", "--topo-order",
        f"{trusted}..{commit}", "--", ROLES_DIR,
    )  # fmt: skip
    return out.split()


def role_history_problems(root: Path, trusted: str, commit: str) -> list[str]:
    """Each change to a role file after ``trusted`` (an ancestor of ``commit``) that no
    approver of its parent signed: the role files at ``commit`` count only if every change
    since the trusted commit did."""
    if not gitrepo.is_ancestor(root, trusted, commit):
        return [f"{commit[:12]} does not descend from the trusted commit {trusted[:12]}"]
    problems = []
    for change in role_changes(root, trusted, commit):
        parents = parents_of(root, change)
        if len(parents) != 1:
            problems.append(
                f"commit {change[:12]} changes {ROLES_DIR}/ in a merge: change role files in "
                "a commit of their own, signed by an approver"
            )
            continue
        good, said = signed_by(root, change, parents[0])
        if not good:
            problems.append(
                f"commit {change[:12]} changes {ROLES_DIR}/ and is not signed by an "
                f"approver of its parent: {said}"
            )
    return problems


def first_role_commit(root: Path, commit: str) -> str | None:
    """The oldest commit before or at ``commit`` that added the approvers file (None: none)."""
    out = gitrepo.git(
        root, "rev-list", "--reverse", "--topo-order", commit, "--", role_path(APPROVERS)
    ).split()
    for candidate in out:
        parents = parents_of(root, candidate)
        if all(role_file(root, p, APPROVERS) is None for p in parents):
            return candidate
    return None


def _no_approvers() -> str:
    return (
        f"the stage needs its approval commit signed by an approver, and the source holds no "
        f"{role_path(APPROVERS)}: add the approvers' keys (prereg keys add approvers NAME "
        "KEY.pub), commit, and approve again"
    )


def approval_problems(root: Path, commit: str, *, trusted: str | None) -> list[str]:
    """Why the approval commit ``commit`` is not signed by an approver: a key of the
    approvers file of its parent, whose role files every change since ``trusted`` (a
    registration's freeze commit; None: the commit that first added the approvers file)
    kept under an approver's signature."""
    parents = parents_of(root, commit)
    if len(parents) != 1:
        return [f"the approval commit {commit[:12]} has {len(parents)} parents, not one"]
    parent = parents[0]
    start = trusted if trusted is not None else first_role_commit(root, parent)
    if start is None:
        return [_no_approvers()]
    problems = role_history_problems(root, start, parent)
    good, said = signed_by(root, commit, parent)
    if not good:
        problems.append(
            f"the approval commit {commit[:12]} is not signed by an approver: {said}; sign it "
            "with an approver's key (git commit -S with gpg.format=ssh and user.signingkey)"
        )
    return problems


def signing_problems(root: Path, commit: str, *, at_approval: bool) -> list[str]:
    """The approval-signature condition, judged at the gate and again by the audit.

    At approval (``commit`` is the anchor an approval is being written for), the approved
    source must hold an approvers file whose every change an approver signed; at a run
    (``commit`` is the approval commit), that commit must be signed by an approver
    (:func:`approval_problems`), trusting the commit that first added the approvers file."""
    if not at_approval:
        return approval_problems(root, commit, trusted=None)
    start = first_role_commit(root, commit)
    if start is None:
        return [_no_approvers()]
    return role_history_problems(root, start, commit)


def roles_at(root: Path, commit: str) -> dict[str, bytes | None]:
    """Each role file's bytes at ``commit``."""
    return {role: role_file(root, commit, role) for role in ROLES}
