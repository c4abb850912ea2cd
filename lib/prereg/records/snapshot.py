"""A verified snapshot of a commit: the code a hermetic research run executes.

:func:`materialise` writes a commit's tree into a fresh folder outside the working
tree, reading every object from git's object store through the verified reader of
:mod:`prereg.base.gitrepo` (each object's bytes re-hashed to its id), and makes the folder
read-only. Nothing the working tree holds or does (index flags, filters, hooks,
ignored folders, edits) reaches it. :func:`read_folder` recomputes the git tree id from
the bytes on disk, so a run can say which tree ran and the audit can compare it with
the source commit's tree.

Beside each snapshot, its scratch folder (:func:`scratch`) holds :data:`OWNER`, the process
that made it; :func:`sweep`, run by every :func:`materialise`, deletes the snapshots whose
owner has ended without deleting its own (SIGKILL, a crash during a launch).

Only regular files (modes 100644 and 100755) are materialised. A committed symbolic
link or submodule is refused: a link could lead out of the snapshot, and a submodule's
content is not part of the commit's bytes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from prereg.base import gitrepo
from prereg.base.hashing import entry_kind

FILE_MODES = dict(zip(gitrepo.REGULAR_FILE_MODES, (0o444, 0o555)))
TREE_MODE = "40000"
NOT_A_SNAPSHOT = "(not a snapshot folder)"
PREFIX = "prereg-snapshot-"
SCRATCH_SUFFIX = "-scratch"
OWNER = "owner"  # in the scratch folder: "<pid> <start time>" of the process that made it


class SnapshotError(RuntimeError):
    """The commit cannot be materialised (an object fails its hash, a link, a submodule)."""


@dataclass(frozen=True)
class Snapshot:
    folder: Path
    commit: str
    tree: str  # the commit's tree id, equal to read_folder(folder)[0] when written
    blobs: dict[str, str] = field(default_factory=dict)  # relative posix path -> blob id
    algorithm: str = "sha1"  # the object format of the ids


def materialise(root: Path, commit: str, parent: Path | None = None) -> Snapshot:
    """Write ``commit``'s tree of the repository at ``root`` into a new read-only folder
    (after sweeping the snapshots of ended processes from the same parent folder)."""
    folder = _new_folder(f"{PREFIX}{commit[:12]}-", parent)
    blobs: dict[str, str] = {}
    folders: list[Path] = []
    try:
        with gitrepo.ObjectReader(root) as objects:
            algorithm = objects.algorithm
            tree = objects.commit_tree(commit)
            pending = [(tree, folder, "")]
            while pending:
                oid, target, prefix = pending.pop()
                folders.append(target)
                for mode, kind, entry_oid, name in objects.tree_entries(oid):
                    rel = f"{prefix}{name}"
                    if kind == "tree":
                        (target / name).mkdir()
                        pending.append((entry_oid, target / name, rel + "/"))
                    elif mode in FILE_MODES:
                        path = target / name
                        path.write_bytes(objects.read_kind(entry_oid, "blob"))
                        path.chmod(FILE_MODES[mode])
                        blobs[rel] = entry_oid
                    else:
                        raise SnapshotError(irregular_entry(rel, mode, commit))
        for path in reversed(folders):
            path.chmod(0o555)
    except BaseException:
        remove(folder)
        raise
    return Snapshot(folder=folder, commit=commit, tree=tree, blobs=blobs, algorithm=algorithm)


def _new_folder(prefix: str, parent: Path | None) -> Path:
    """A new empty folder named ``prefix...`` and its scratch folder naming this process as
    its owner (after sweeping the folders of ended processes from ``parent``)."""
    sweep(parent)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        scratch(folder).mkdir()
        (scratch(folder) / OWNER).write_text(process_identity(os.getpid()) or str(os.getpid()))
    except BaseException:
        remove(folder)
        raise
    return folder


WORKING_TREE = "working-tree-"  # after PREFIX: a copy of a working tree, not of a commit


def working_copy(root: Path, parent: Path | None = None) -> Path:
    """The checkout at ``root`` as a commit of everything would hold it: each file git tracks
    or would add (``git ls-files --cached --others --exclude-standard``), as it is on disk,
    copied into a new read-only folder laid out as a snapshot (its scratch folder beside it);
    a git-ignored file is not there, as it is in no commit. What a rehearsal runs from, so
    that it reads what the run will read. Raises :class:`SnapshotError` for an entry a run
    would refuse (a symbolic link, a submodule)."""
    listed = gitrepo.run(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    names = sorted({n for n in listed.stdout.decode("utf-8", "surrogateescape").split("\0") if n})
    folder = _new_folder(f"{PREFIX}{WORKING_TREE}", parent)
    folders = {folder}
    try:
        for rel in names:
            source = Path(root, rel)
            try:
                mode = os.lstat(source).st_mode
            except FileNotFoundError:
                continue  # deleted from the working tree: no commit of it would hold it
            if not stat.S_ISREG(mode):
                kind = "a submodule" if stat.S_ISDIR(mode) else entry_kind(mode, source)
                raise SnapshotError(
                    f"{rel} in the working tree is {kind}; a run executes regular committed "
                    "files only: commit the file itself instead"
                )
            target = folder / rel
            for above in reversed(list(Path(rel).parents)[:-1]):  # its folders, outermost first
                if folder / above not in folders:
                    (folder / above).mkdir()
                    folders.add(folder / above)
            shutil.copyfile(source, target)
            target.chmod(0o555 if mode & 0o111 else 0o444)
        for path in sorted(folders, key=lambda p: len(p.parts), reverse=True):
            path.chmod(0o555)
    except BaseException:
        remove(folder)
        raise
    return folder


def irregular_entry(rel: str, mode: str, commit: str) -> str:
    """Why a commit holding ``rel`` with git mode ``mode`` cannot be a snapshot."""
    what = {"120000": "a symbolic link", "160000": "a submodule"}.get(mode, f"mode {mode}")
    return (
        f"{rel} at commit {commit[:12]} is {what}; a hermetic run executes regular committed "
        "files only: commit the file itself instead"
    )


def tree_mismatch(folder_tree: str, commit_tree: str | None) -> str | None:
    """Why code run from a folder whose tree (:func:`read_folder`) is ``folder_tree`` is not a
    snapshot of the approved commit, whose tree is ``commit_tree``; None when the trees are
    equal. The gate judges this before a run (:func:`prereg.decisions.gate.hermetic`), the audit
    again from the manifest."""
    if folder_tree == commit_tree:
        return None
    return (
        f"the code of this run does not come from a snapshot of the approved commit: its "
        f"folder's tree is {folder_tree}, the commit's tree is {commit_tree}. Start "
        "the run with `pytest --research-stage=NAME` in the checkout (it runs from a fresh "
        "snapshot), and leave the snapshot folder alone while it runs"
    )


def read_folder(folder: Path, algorithm: str = "sha1") -> tuple[str, dict[str, str]]:
    """The git tree id of ``folder`` as it is on disk, and the blob id of each regular file
    (relative posix path -> id). A file is 100755 when its owner may execute it, else
    100644; a symbolic link or any other entry makes the tree differ from every committed
    tree. Nothing is left out: a bytecode cache written into a snapshot changes its tree."""
    blobs: dict[str, str] = {}

    def tree_of(path: Path, prefix: str) -> bytes:
        entries = []
        for entry in os.scandir(path):
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                data = tree_of(Path(entry.path), f"{prefix}{entry.name}/")
                mode, oid, key = (
                    TREE_MODE,
                    gitrepo.object_id("tree", data, algorithm),
                    entry.name + "/",
                )
            elif stat.S_ISREG(info.st_mode):
                mode = "100755" if info.st_mode & stat.S_IXUSR else "100644"
                data = Path(entry.path).read_bytes()
                oid, key = gitrepo.object_id("blob", data, algorithm), entry.name
                blobs[f"{prefix}{entry.name}"] = oid
            else:
                mode, oid, key = "120000", "00" * digest, entry.name  # never a snapshot's entry
            entries.append((key.encode("utf-8", "surrogateescape"), mode, entry.name, oid))
        entries.sort(key=lambda e: e[0])
        return b"".join(
            b"%s %s\0" % (mode.encode(), name.encode("utf-8", "surrogateescape"))
            + bytes.fromhex(oid)
            for _, mode, name, oid in entries
        )

    digest = hashlib.new(algorithm).digest_size
    tree = gitrepo.object_id("tree", tree_of(Path(folder), ""), algorithm)
    return tree, blobs


def prove(folder: Path, commit: str, algorithm: str = "sha1") -> Snapshot:
    """``folder`` as it is now, claimed to be a snapshot of ``commit``: its tree recomputed
    from its bytes (a folder that is a git checkout is never a snapshot)."""
    folder = Path(folder)
    if (folder / ".git").exists() or not folder.name.startswith(PREFIX):
        return Snapshot(folder=folder, commit=commit, tree=NOT_A_SNAPSHOT)
    tree, blobs = read_folder(folder, algorithm)
    return Snapshot(folder=folder, commit=commit, tree=tree, blobs=blobs, algorithm=algorithm)


def differences(folder: Path, root: Path, commit: str) -> list[str]:
    """The paths where ``folder`` differs from ``commit``'s tree in the repository at
    ``root`` (added, changed or missing), for messages that say what changed."""
    _tree, blobs = read_folder(folder, gitrepo.object_format(root))
    with gitrepo.ObjectReader(root) as objects:
        committed = {
            rel: oid
            for rel, (_mode, oid) in objects.tree_files(objects.commit_tree(commit)).items()
        }
    return sorted(
        f"{rel} ({'added' if rel not in committed else 'missing' if rel not in blobs else 'changed'})"
        for rel in set(blobs) | set(committed)
        if blobs.get(rel) != committed.get(rel)
    )


def scratch(folder: Path) -> Path:
    """The writable folder beside a snapshot: its :data:`OWNER`, and the session's home,
    temporary folder and the caches its libraries keep."""
    return Path(folder).with_name(Path(folder).name + SCRATCH_SUFFIX)


def remove(folder: Path) -> None:
    """Delete a snapshot folder (its read-only modes first made writable again), then its
    scratch folder (whose :data:`OWNER` lets :func:`sweep` finish a removal cut short)."""
    folder = Path(folder)
    if folder.exists():
        for top, dirs, _files in os.walk(folder):
            for name in dirs:
                os.chmod(os.path.join(top, name), 0o755)
        folder.chmod(0o755)
        shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(scratch(folder), ignore_errors=True)


def process_identity(pid: int) -> str | None:
    """``"<pid> <start time>"`` of a running process (Linux: its start in clock ticks since
    boot, so a reused pid is another process), ``"<pid>"`` where the start time cannot be
    read, None when no process has that pid."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:  # another user's process: it runs
            pass
        return str(pid)
    return f"{pid} {fields[19]}"  # field 22 of /proc/<pid>/stat, starttime


def sweep(parent: Path | None = None) -> list[Path]:
    """Delete every snapshot in ``parent`` (default: the temporary folder) whose scratch
    folder names an owner that no longer runs; return the snapshot folders. A snapshot
    with no owner recorded (an older prereg's, or one being made) is left alone."""
    removed = []
    for place in Path(parent or tempfile.gettempdir()).glob(f"{PREFIX}*{SCRATCH_SUFFIX}"):
        try:
            owner = (place / OWNER).read_text().strip()
        except OSError:
            continue
        pid = owner.split(" ")[0]
        if not pid.isdigit() or process_identity(int(pid)) == owner:
            continue
        folder = place.with_name(place.name[: -len(SCRATCH_SUFFIX)])
        remove(folder)
        removed.append(folder)
    return removed


# -- a git input at its bound commit ---------------------------------------------------------


_CHECKED_OUT: dict[Path, str] = {}  # input clone folder -> its commit, in this process


def input_checkout(repository: Path, commit: str, folder: Path) -> Path:
    """The git repository bound as an input, as the run reads it: a clone in ``folder`` whose
    HEAD is ``commit`` (detached) and whose working tree is that commit's, whatever the
    repository's own working tree, index or branch hold now (an uncommitted edit, a pull
    since the approval). Its objects are the repository's (``git clone --shared``), so its
    history reads as the repository's. Made once, in a private folder renamed into place (a
    run's workers share it); the working tree is proved against the commit's tree from the
    bytes on disk before it is used. Raises :class:`SnapshotError` when it cannot be made."""
    folder = Path(folder)
    if _CHECKED_OUT.get(folder) == commit and folder.is_dir():
        return folder  # made or checked by this process already: each item asks again
    if folder.is_dir():
        head = gitrepo.resolve(folder, "HEAD")
        if head != commit:
            raise SnapshotError(f"{folder} holds commit {head}, not the bound {commit}")
        _CHECKED_OUT[folder] = commit
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        gitrepo.run(work, "clone", "--quiet", "--shared", "--no-checkout", str(repository), ".")
        gitrepo.run(work, "checkout", "--quiet", "--detach", commit)
        tree = gitrepo.working_tree_id(work)
        expected = gitrepo.resolve(work, f"{commit}^{{tree}}")
        if tree != expected:
            raise SnapshotError(
                f"the checkout of {repository} at {commit} holds tree {tree}, not the commit's "
                f"tree {expected}"
            )
        try:
            os.rename(work, folder)
        except OSError:  # another worker put its own in place first
            if not folder.is_dir():
                raise
    except gitrepo.GitError as err:
        raise SnapshotError(f"the bound input {repository} cannot be read at {commit}: {err}")
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    _CHECKED_OUT[folder] = commit
    return folder
