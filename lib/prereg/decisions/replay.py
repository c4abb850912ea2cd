"""The audit's replay, run with the run's own code.

A stage kind's replay reruns what a run did from its records. It runs in a process of
its own (:mod:`prereg.decisions.replay_boot`) whose ``sys.path`` starts with a snapshot of
the run's source commit (:func:`prereg.records.snapshot.materialise`), laid out as the run's
session was (:func:`prereg.evidence.hermetic.snapshot_paths`, and the snapshot's
``pythonpath`` folders of its pytest.ini): a project's kind is the code the run ran,
whatever the checkout holds now, so an honest run audits clean after any later commit.
prereg itself is the snapshot's when the project is prereg's own checkout, else the
installed one; the replay's note names which (:attr:`Replay.note`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from prereg.base import gitrepo
from prereg.evidence import hermetic
from prereg.kinds.stages import ini_list
from prereg.records import snapshot as snapshots

BOOT = Path(__file__).with_name("replay_boot.py")


@dataclass(frozen=True)
class Replay:
    """What the replay step did: whether it ran, a note saying so, what it found, what
    kept it from running."""

    replayed: bool
    note: str
    findings: tuple[str, ...] = ()
    blockers: tuple[str, ...] = ()
    defined: bool = True  # False: the stage kind defines no replay (hashes and records only)


def request(root: Path, run_dir: Path, plan, stage: str, kind: str, items) -> dict:
    """What the replay process is given: the run (its folder, the checkout it was made in,
    its per-item manifest records) and the plan as committed at its source commit."""
    return {
        "root": str(root),
        "run_dir": str(run_dir),
        "plan": {"path": str(plan.path), "sha256": plan.sha256, "data": plan.data},
        "stage": stage,
        "kind": kind,
        "items": list(items),
    }


def sys_path(folder: Path, checkout: Path) -> list[str]:
    """The ``sys.path`` entries a replay from snapshot ``folder`` of ``checkout`` puts
    first: its pytest.ini's ``pythonpath`` folders, prereg's (when part of the checkout)
    and ``PYTHONPATH``'s inside the checkout, then the snapshot's top, as in the run."""
    paths = [str(folder / rel) for rel in ini_list(folder, "pythonpath")]
    paths += hermetic.snapshot_paths(folder, checkout, os.environ.get("PYTHONPATH"))[0]
    return [*dict.fromkeys([*paths, str(folder)])]


def replay_run(root: Path, commit: str, run: dict) -> Replay:
    """Replay the run :func:`request` describes (``run``) with the code of ``commit``."""
    kind = run["kind"]
    try:
        snapshot = snapshots.materialise(root, commit)
    except (snapshots.SnapshotError, gitrepo.GitError, OSError) as err:
        return Replay(
            False,
            "not replayed: the run's source commit cannot be written out",
            blockers=(f"the replay needs the code of commit {commit}, and: {err}",),
        )
    try:
        done = _run_boot(snapshot.folder, root, run)
    finally:
        snapshots.remove(snapshot.folder)
    code = f"the code of commit {commit[:12]}, prereg {_origin(done, snapshot.folder)}"
    if "unavailable" in done:
        return Replay(
            False,
            "not replayed: the stage kind is not available",
            blockers=(
                f"the stage kind {kind!r} cannot be loaded from {code}: {done['unavailable']}",
            ),
        )
    if done.get("findings") is None:
        return Replay(
            False,
            f"no replay: stage kind {kind!r} has none (hashes and records only)",
            defined=False,
        )
    note = f"replayed (stage kind {kind!r}) with {code}"
    findings = list(done["findings"])
    if "failed" in done:
        findings.append(f"the replay of stage kind {kind!r} failed: {done['failed']}")
    return Replay(True, note, findings=tuple(findings))


def _origin(done: dict, folder: Path) -> str:
    """Which prereg the replay imported: the snapshot's, or an installed one (its folder)."""
    package = Path(done.get("prereg") or "?")
    try:
        return f"of that commit ({package.relative_to(folder.resolve()).as_posix()})"
    except ValueError:
        return f"installed at {package}"


def _run_boot(folder: Path, root: Path, run: dict) -> dict:
    """The replay process's result; a process that wrote none gives a result saying so."""
    with tempfile.TemporaryDirectory(prefix="prereg-replay-") as scratch:
        asked, answer = Path(scratch, "request.json"), Path(scratch, "result.json")
        asked.write_text(json.dumps(run), encoding="utf-8")
        paths = os.pathsep.join(sys_path(folder, root))
        done = subprocess.run(
            [sys.executable, "-I", "-B", str(BOOT), paths, str(asked), str(answer)],
            cwd=folder,
            stdin=subprocess.DEVNULL,
            check=False,
        )  # its output (a kind's progress, a traceback) goes where the audit's goes
        if answer.is_file():
            return json.loads(answer.read_text(encoding="utf-8"))
    return {
        "prereg": None,
        "findings": [],
        "failed": f"the replay process ended with exit code {done.returncode} and wrote no "
        "result (its output is above)",
    }
