"""A witness for spent run ids: a bare git repository the operator cannot rewrite, whose
``update`` hook accepts only the creation of a ref under ``refs/prereg/``.

An approval that names a witness (``prereg approve --witness URL``, signed with the
approval commit) runs only after the witness took the run's start record, before any item
runs; so a second run under a spent approval is refused by the witness, and a verifier who
never saw the operator's repository finds that the witness holds another start.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

# The witness's hook: git passes the ref, its old and its new object id. A ref that exists
# (old not all zeros) is never moved or deleted; nothing outside refs/prereg/ is taken.
HOOK = """#!/bin/sh
# prereg witness: refs/prereg/* are created once, never moved or deleted; nothing else is taken.
ref=$1 old=$2
case "$ref" in
  refs/prereg/*) ;;
  *) echo "prereg witness: only refs/prereg/* are taken, not $ref" >&2; exit 1 ;;
esac
case "$old" in
  *[!0]*) echo "prereg witness: $ref exists: a record is created once, never moved or deleted" >&2; exit 1 ;;
esac
exit 0
"""


class WitnessProblem(RuntimeError):
    """A witness that cannot be made; the message says why."""


def init(path: Path) -> Path:
    """Make the witness: a bare repository at ``path`` with :data:`HOOK`, refusing deletes
    and non-fast-forward updates in its own configuration too."""
    path = Path(path)
    if path.exists() and any(path.iterdir()):
        raise WitnessProblem(f"{path} exists and is not empty: a witness starts empty")
    done = subprocess.run(
        ["git", "init", "--quiet", "--bare", str(path)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise WitnessProblem(f"git init --bare {path} failed: {done.stderr.strip()}")
    for name, value in (("receive.denyDeletes", "true"), ("receive.denyNonFastForwards", "true")):
        subprocess.run(["git", "-C", str(path), "config", name, value], check=True)
    hook = path / "hooks" / "update"
    hook.write_text(HOOK)
    os.chmod(hook, 0o755)
    return path
