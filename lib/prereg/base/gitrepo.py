"""The git questions the gate, the ledger and the audit ask, answered by one sanitised runner.

Every git command goes through :func:`run`: it drops every ``GIT_*`` variable (so
``GIT_DIR``, ``GIT_WORK_TREE``, ``GIT_INDEX_FILE`` or ``GIT_OBJECT_DIRECTORY`` cannot
point git elsewhere), reads neither the system nor the global configuration, ignores
replace refs, and overrides the settings of the repository's own configuration that run
programs or change what git reports (fsmonitor, hooks, the untracked cache, the commit
graph; diff commands get ``--no-ext-diff --no-textconv``). Objects are read through
:class:`ObjectReader`, which checks that each object's bytes hash to its name, so a rewritten file
in ``.git/objects`` is an error, not an answer. What a file *is* comes from comparing its bytes
with the committed blob (:func:`dirty_paths`), never from the index's flags, filters or fsmonitor.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

# Settings of the repository's own configuration that would run a program or change what
# git reports; the command line overrides them.
SAFE_CONFIG = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.untrackedCache=false",
    "core.commitGraph=false",
    "core.attributesFile=/dev/null",
    "core.askPass=",
    "color.ui=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "protocol.ext.allow=never",
    "advice.graftFileDeprecated=false",
)

# Commands that would run an external diff or a textconv filter unless told not to.
DIFF_COMMANDS = ("diff", "log", "show", "whatchanged")

TREE_MODES = {
    b"40000": ("040000", "tree"),
    b"100644": ("100644", "blob"),
    b"100755": ("100755", "blob"),
    b"120000": ("120000", "blob"),
    b"160000": ("160000", "commit"),
}


class GitError(RuntimeError):
    """git could not answer (not a repository, unknown commit, corrupt object, git missing)."""


class MissingObject(GitError):
    """An object the repository does not have (a shallow history's boundary, a bad id)."""


# The user's home, set in a process whose HOME is a private one (a hermetic session): git
# reads the user's own configuration (credential helpers) from there.
USER_HOME = "PREREG_USER_HOME"


def environment(*, user_config: bool = False) -> dict[str, str]:
    """This process's environment without any ``GIT_*`` variable, plus the sanitising ones;
    ``user_config`` keeps the user's global configuration (their name, their credential
    helpers for a remote), read from the user's home (:data:`USER_HOME`, else ``HOME``)."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("GIT_")}
    env["GIT_CONFIG_GLOBAL"] = os.devnull
    if user_config:
        env.pop("GIT_CONFIG_GLOBAL")
        if "GIT_CONFIG_GLOBAL" in os.environ:
            env["GIT_CONFIG_GLOBAL"] = os.environ["GIT_CONFIG_GLOBAL"]
        if os.environ.get(USER_HOME):
            env["HOME"] = os.environ[USER_HOME]
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_NO_REPLACE_OBJECTS="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_OPTIONAL_LOCKS="0",
        LC_ALL="C",
    )
    return env


def command(root: Path | str, *args: str) -> list[str]:
    """The argument list that runs ``git args`` in ``root`` with the safe settings."""
    safe = [part for setting in SAFE_CONFIG for part in ("-c", setting)]
    if args and args[0] in DIFF_COMMANDS:
        args = (args[0], "--no-ext-diff", "--no-textconv", *args[1:])
    return ["git", "--no-replace-objects", "-C", os.fspath(root), *safe, *args]


def run(
    root: Path | str,
    *args: str,
    data: bytes | None = None,
    check: bool = True,
    user_config: bool = False,
    index: Path | None = None,
) -> subprocess.CompletedProcess:
    """Run ``git args`` in ``root`` sanitised; stdout and stderr are bytes.

    ``check`` raises :class:`GitError` (naming the command and git's message) when git fails;
    ``index`` is an index file git uses instead of the repository's own."""
    env = environment(user_config=user_config)
    if index is not None:
        env["GIT_INDEX_FILE"] = os.fspath(index)
    try:
        done = subprocess.run(
            command(root, *args), input=data, capture_output=True, env=env, check=False
        )
    except FileNotFoundError:
        raise GitError("git is not installed; install it (apt-get install git)") from None
    if check and done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip()
        raise GitError(f"git {' '.join(args)} failed in {root}: {message}")
    return done


def git(root: Path, *args: str, check: bool = True) -> str:
    """``git args`` in ``root`` (through :func:`run`), its output as text."""
    return run(root, *args, check=check).stdout.decode("utf-8", "surrogateescape")


def toplevel(path: Path) -> Path:
    return Path(git(path, "rev-parse", "--show-toplevel").strip())


def user_name(root: Path) -> str:
    """``user.name`` from the repository's or the user's global configuration ('' if unset)."""
    return (
        run(root, "config", "--get", "user.name", check=False, user_config=True)
        .stdout.decode("utf-8", "replace")
        .strip()
    )


def working_tree_id(root: Path) -> str:
    """The id of the tree a commit of everything would hold now (``git add -A``: every file
    tracked or not ignored, as it is on disk), made with an index of its own, so the
    repository's index and refs are untouched. Equal to ``HEAD^{tree}`` in a clean checkout.

    Only tracked files' changes are written into git's object store (as ``git add -u``
    would); a file git does not track yet is hashed here and never stored, so an untracked
    data file does not grow the repository at every rehearsal."""
    with tempfile.TemporaryDirectory(prefix="prereg-index-") as scratch:
        index = Path(scratch, "index")
        own = Path(root, git(root, "rev-parse", "--git-path", "index").strip())
        if own.is_file():  # its stat cache: only files changed since are read again
            shutil.copyfile(own, index)
        run(root, "add", "-u", index=index)
        listed = run(root, "ls-files", "-z", "--others", "--exclude-standard", index=index)
        algorithm = object_format(root)
        entries = [
            _untracked_entry(Path(root), rel, algorithm)
            for rel in listed.stdout.decode("utf-8", "surrogateescape").split("\0")
            if rel
        ]
        if entries:
            lines = "".join(f"{mode} {oid}\t{rel}\0" for mode, oid, rel in entries if oid)
            run(root, "update-index", "-z", "--index-info", data=lines.encode(), index=index)
        return run(root, "write-tree", "--missing-ok", index=index).stdout.decode().strip()


def _untracked_entry(root: Path, rel: str, algorithm: str) -> tuple[str, str | None, str]:
    """(mode, blob id, path) of an untracked file as git would add it, hashed in chunks."""
    path = root / rel
    if path.is_symlink():
        return "120000", object_id("blob", os.fsencode(os.readlink(path)), algorithm), rel
    try:
        size = path.stat().st_size
        mode = "100755" if path.stat().st_mode & stat.S_IXUSR else "100644"
        digest = hashlib.new(algorithm, b"blob %d\0" % size)
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:  # gone since it was listed
        return "100644", None, rel
    return mode, digest.hexdigest(), rel


def head_commit(root: Path) -> str:
    return git(root, "rev-parse", "--verify", "HEAD").strip()


# A full object id as git writes it: SHA-1 (40 hex digits) or SHA-256 (64).
OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def is_object_id(text: object) -> bool:
    """Whether ``text`` is a full object id (not a ref, a short id or an option)."""
    return isinstance(text, str) and OBJECT_ID.fullmatch(text) is not None


def resolve(root: Path, name: str) -> str | None:
    """The object id ``name`` (a ref, a commit id, ``rev^{commit}``) stands for, or None."""
    if name.startswith("-"):
        return None
    done = run(root, "rev-parse", "--verify", "--quiet", name, check=False)
    return done.stdout.decode().strip() if done.returncode == 0 else None


_OBJECT_FORMATS: dict[tuple, str] = {}


def object_format(root: Path) -> str:
    """The repository's hash function: ``sha1`` or ``sha256``. Asked of git once per folder
    in a process (a run asks it of every record it reads): the answer is kept by the real path
    inode and change time of the folder and of its ``.git``, so a repository made anew there is
    asked again."""
    places = [Path(root), Path(root, ".git")]
    key = tuple(
        (str(p.resolve()), p.stat().st_ino, p.stat().st_ctime_ns) for p in places if p.exists()
    )
    if key not in _OBJECT_FORMATS:
        _OBJECT_FORMATS[key] = git(root, "rev-parse", "--show-object-format").strip() or "sha1"
    return _OBJECT_FORMATS[key]


def object_id(kind: str, data: bytes, algorithm: str = "sha1") -> str:
    """The id git gives an object of type ``kind`` with content ``data``."""
    return hashlib.new(algorithm, b"%s %d\0" % (kind.encode(), len(data)) + data).hexdigest()


# -- verified objects ------------------------------------------------------------------------


def parse_tree(data: bytes, id_length: int = 20) -> list[tuple[str, str, str, str]]:
    """The entries ``(mode, type, id, name)`` of a raw tree object, in stored order.

    Modes are given as ``git ls-tree`` prints them (``040000`` for a folder). A malformed
    tree, an unknown mode, or a name that could leave or shadow a folder when written
    out (empty, ``.``, ``..``, ``.git``, containing ``/`` or NUL, given twice) is a GitError."""
    entries, seen, at = [], set(), 0
    while at < len(data):
        space = data.find(b" ", at)
        nul = data.find(b"\0", space + 1) if space >= 0 else -1
        if space < 0 or nul < 0 or nul + 1 + id_length > len(data):
            raise GitError(f"malformed tree object: entry at byte {at} is cut short")
        raw_mode, raw_name = data[at:space], data[space + 1 : nul]
        if raw_mode not in TREE_MODES:
            raise GitError(f"malformed tree object: unknown mode {raw_mode!r} of {raw_name!r}")
        if (
            raw_name in (b"", b".", b"..")
            or b"/" in raw_name
            or raw_name.lower() == b".git"
            or raw_name in seen
        ):
            raise GitError(f"tree object has an unsafe or repeated entry name {raw_name!r}")
        seen.add(raw_name)
        mode, kind = TREE_MODES[raw_mode]
        oid = data[nul + 1 : nul + 1 + id_length].hex()
        entries.append((mode, kind, oid, raw_name.decode("utf-8", "surrogateescape")))
        at = nul + 1 + id_length
    return entries


class ObjectReader:
    """One ``git cat-file --batch`` process; every object read is checked against its id.

    Use as a context manager: ``with ObjectReader(root) as objects: objects.read(oid)``."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.algorithm = object_format(self.root)
        self.id_length = hashlib.new(self.algorithm).digest_size
        self._id = re.compile(f"[0-9a-f]{{{2 * self.id_length}}}")
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> ObjectReader:  # noqa: PYI034 - typing.Self needs Python 3.11
        try:
            self._process = subprocess.Popen(
                command(self.root, "cat-file", "--batch"),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=environment(),
            )
        except FileNotFoundError:
            raise GitError("git is not installed; install it (apt-get install git)") from None
        return self

    def __exit__(self, *exc: object) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.stdin.close()
            process.stdout.close()
            process.wait()

    def read(self, oid: str) -> tuple[str, bytes]:
        """The type and bytes of object ``oid`` (a full id); MissingObject when absent,
        GitError when its bytes do not hash to ``oid``."""
        if self._process is None:
            raise RuntimeError("ObjectReader.read outside its with block")
        oid = oid.lower()
        if not self._id.fullmatch(oid):
            raise GitError(f"{oid!r} is not a full {self.algorithm} object id")
        process = self._process
        try:
            process.stdin.write(oid.encode() + b"\n")
            process.stdin.flush()
            header = process.stdout.readline().split()
        except BrokenPipeError:
            header = []
        if header[1:] == [b"missing"]:
            raise MissingObject(f"object {oid} is missing from {self.root}")
        if len(header) != 3 or header[0].decode() != oid:
            raise GitError(f"git cat-file --batch gave no answer for object {oid} in {self.root}")
        kind, size = header[1].decode(), int(header[2])
        data = process.stdout.read(size + 1)[:size]
        actual = object_id(kind, data, self.algorithm)
        if len(data) != size or actual != oid:
            raise GitError(
                f"object {oid} in {self.root} is corrupt: its content hashes to {actual}. "
                "Its file in .git/objects was changed; `git fsck` lists the damaged objects, "
                "restore them from a good clone"
            )
        return kind, data

    def read_kind(self, oid: str, kind: str) -> bytes:
        found, data = self.read(oid)
        if found != kind:
            raise GitError(f"object {oid} in {self.root} is a {found}, not a {kind}")
        return data

    def commit_headers(self, oid: str) -> list[tuple[str, str]]:
        """The header lines of commit ``oid`` as (key, value), in order."""
        head = self.read_kind(oid, "commit").split(b"\n\n", 1)[0]
        return [
            (key.decode(), value.decode("utf-8", "replace"))
            for key, _, value in (line.partition(b" ") for line in head.split(b"\n"))
            if not line_is_continuation(key)
        ]

    def commit_tree(self, oid: str) -> str:
        """The id of the tree commit ``oid`` records."""
        headers = self.commit_headers(oid)
        if not headers or headers[0][0] != "tree" or not self._id.fullmatch(headers[0][1]):
            raise GitError(f"commit {oid} in {self.root} has no valid tree line")
        return headers[0][1]

    def commit_parents(self, oid: str) -> list[str]:
        return [value for key, value in self.commit_headers(oid) if key == "parent"]

    def tree_entries(self, tree_oid: str) -> list[tuple[str, str, str, str]]:
        """``(mode, type, id, name)`` of each entry of tree ``tree_oid`` (see
        :func:`parse_tree`)."""
        try:
            return parse_tree(self.read_kind(tree_oid, "tree"), self.id_length)
        except GitError as err:
            raise GitError(f"tree {tree_oid} in {self.root}: {err}") from None

    def tree_files(self, tree_oid: str, prefix: str = "") -> dict[str, tuple[str, str]]:
        """Every non-folder entry under tree ``tree_oid``: relative posix path -> (mode, id)."""
        files: dict[str, tuple[str, str]] = {}
        for mode, kind, oid, name in self.tree_entries(tree_oid):
            if kind == "tree":
                files.update(self.tree_files(oid, f"{prefix}{name}/"))
            else:
                files[prefix + name] = (mode, oid)
        return files


def line_is_continuation(key: bytes) -> bool:
    """A commit header line continuing the previous one (a signature) starts with a space."""
    return key == b""


def commit_tree(root: Path, commit: str) -> str:
    """The tree id commit ``commit`` records, read through the verified reader."""
    with ObjectReader(root) as objects:
        return objects.commit_tree(commit)


def read_object(root: Path, oid: str) -> tuple[str, bytes]:
    """The type and bytes of object ``oid``, checked against its id (see :class:`ObjectReader`)."""
    with ObjectReader(root) as objects:
        return objects.read(oid)


def _commit(root: Path, name: str) -> str:
    oid = resolve(root, f"{name}^{{commit}}")
    if oid is None:
        raise GitError(f"{name} is not a commit in {root}")
    return oid


# -- history ---------------------------------------------------------------------------------


def history_problems(root: Path) -> list[str]:
    """What makes git show a history other than the recorded objects, one sentence each:
    replace refs, a grafts file, a shallow clone."""
    root = Path(root)
    problems = []
    refs = git(root, "for-each-ref", "--format=%(refname)%00%(objectname)", "refs/replace/")
    for line in refs.splitlines():
        ref, _, target = line.partition("\0")
        replaced = ref.removeprefix("refs/replace/")
        problems.append(
            f"{ref} makes git show object {target} in place of {replaced}; remove it with "
            f"`git replace -d {replaced}` (and from every remote it was pushed to)"
        )
    grafts = Path(git(root, "rev-parse", "--git-path", "info/grafts").strip())
    grafts = grafts if grafts.is_absolute() else root / grafts
    if grafts.exists():
        problems.append(
            f"{grafts} exists: grafts give commits other parents than they record; delete the file"
        )
    if git(root, "rev-parse", "--is-shallow-repository").strip() == "true":
        problems.append(
            f"{root} is a shallow clone: the history before its boundary is missing, so ancestry "
            "cannot be checked; fetch it whole with `git fetch --unshallow`"
        )
    return problems


def is_ancestor(root: Path, old: str, new: str) -> bool:
    """Whether commit ``old`` is ``new`` or one of its ancestors, following the parents the
    (verified) commit objects record; a missing object ends that line of the walk."""
    old_id, new_id = resolve(root, f"{old}^{{commit}}"), resolve(root, f"{new}^{{commit}}")
    if old_id is None or new_id is None:
        return False
    seen, todo = {new_id}, [new_id]
    with ObjectReader(root) as objects:
        while todo:
            oid = todo.pop()
            if oid == old_id:
                return True
            try:
                parents = objects.commit_parents(oid)
            except MissingObject:
                continue
            for parent in parents:
                if parent not in seen:
                    seen.add(parent)
                    todo.append(parent)
    return False


def commit_exists(root: Path, commit: str) -> bool:
    oid = resolve(root, f"{commit}^{{commit}}")
    if oid is None:
        return False
    try:
        read_object(root, oid)
    except MissingObject:
        return False
    return True


def changed_between(root: Path, old: str, new: str) -> list[str]:
    """Paths whose file differs (content, mode, presence) between two commits' trees."""
    old_id, new_id = _commit(root, old), _commit(root, new)
    with ObjectReader(root) as objects:
        changed = _tree_diff(objects, objects.commit_tree(old_id), objects.commit_tree(new_id))
    return sorted(changed)


def trees_differ(root: Path, old_tree: str, new_tree: str) -> list[str]:
    """Paths whose file differs (content, mode, presence) between two trees, by tree id."""
    with ObjectReader(root) as objects:
        return sorted(_tree_diff(objects, old_tree, new_tree))


def _tree_diff(objects: ObjectReader, a: str | None, b: str | None, prefix: str = "") -> set[str]:
    if a == b:
        return set()
    left = {e[3]: e for e in objects.tree_entries(a)} if a else {}
    right = {e[3]: e for e in objects.tree_entries(b)} if b else {}
    changed: set[str] = set()
    for name in left.keys() | right.keys():
        one, other = left.get(name), right.get(name)
        if one == other:
            continue
        subtrees = [e[2] if e is not None and e[1] == "tree" else None for e in (one, other)]
        changed |= _tree_diff(objects, *subtrees, prefix=f"{prefix}{name}/")
        if any(e is not None and e[1] != "tree" for e in (one, other)):
            changed.add(prefix + name)
    return changed


def show_bytes(root: Path, commit: str, path: str) -> bytes:
    """The bytes of file ``path`` at ``commit``, read through verified trees and blob."""
    missing = GitError(f"{path} does not exist at commit {commit[:12]} in {root}")
    oid = resolve(root, f"{commit}^{{commit}}")
    if oid is None:
        raise missing
    with ObjectReader(root) as objects:
        kind, current = "tree", objects.commit_tree(oid)
        for name in [p for p in path.split("/") if p]:
            if kind != "tree":
                raise missing
            found = [e for e in objects.tree_entries(current) if e[3] == name]
            if not found:
                raise missing
            _, kind, current, _ = found[0]
        if kind != "blob":
            raise missing
        return objects.read_kind(current, "blob")


# -- the working tree ------------------------------------------------------------------------


def _lines(root: Path, *args: str) -> list[str]:
    out = run(root, *args).stdout.decode("utf-8", "surrogateescape")
    return [p for p in out.split("\0") if p]


def _worktree_entry(path: Path, algorithm: str) -> tuple[str, str] | None:
    """(mode, blob id) of a file or symlink as git would commit it; None for anything else."""
    try:
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            return "120000", object_id("blob", os.fsencode(os.readlink(path)), algorithm)
        if stat.S_ISREG(info.st_mode):
            mode = "100755" if info.st_mode & stat.S_IXUSR else "100644"
            return mode, object_id("blob", path.read_bytes(), algorithm)
    except OSError:
        return None
    return None


def _submodule_changed(folder: Path, recorded: str) -> bool:
    if not (folder / ".git").exists():
        return False  # not checked out: nothing of it is in the working tree
    return resolve(folder, "HEAD") != recorded or bool(dirty_paths(folder))


REGULAR_FILE_MODES = ("100644", "100755")


def irregular_entries(root: Path, commit: str) -> list[tuple[str, str]]:
    """``commit``'s entries that are not regular files (symbolic links ``120000``,
    submodules ``160000``): path and mode, read through the verified object reader."""
    with ObjectReader(root) as objects:
        files = objects.tree_files(objects.commit_tree(commit))
    return sorted(
        (rel, mode) for rel, (mode, _oid) in files.items() if mode not in REGULAR_FILE_MODES
    )


def dirty_paths(root: Path) -> list[str]:
    """Paths where the working tree or the index differs from HEAD, and untracked files
    git does not ignore.

    Each file HEAD records is compared by its bytes' blob id and its mode with HEAD's
    (verified) tree, so the index's assume-unchanged and skip-worktree flags, clean filters
    and fsmonitor cannot hide an edit. With no commit yet, every file is untracked."""
    root = Path(root)
    head = resolve(root, "HEAD")
    committed: dict[str, tuple[str, str]] = {}
    algorithm = object_format(root)
    if head is not None:
        with ObjectReader(root) as objects:
            committed = objects.tree_files(objects.commit_tree(head))
    dirty = set()
    real_dirs: dict[str, bool] = {}
    for rel, (mode, oid) in committed.items():
        parents = rel.split("/")[:-1]
        folders = ["/".join(parents[: i + 1]) for i in range(len(parents))]
        for folder in folders:
            if folder not in real_dirs:
                real_dirs[folder] = stat.S_ISDIR(_lstat_mode(root / folder))
        if not all(real_dirs[f] for f in folders):
            dirty.add(rel)  # a folder on its way was replaced by a link or a file
        elif mode == "160000":
            if _submodule_changed(root / rel, oid):
                dirty.add(rel)
        elif _worktree_entry(root / rel, algorithm) != (mode, oid):
            dirty.add(rel)
    index: dict[str, tuple[str, str]] = {}
    for entry in _lines(root, "ls-files", "-z", "--stage"):
        meta, _, rel = entry.partition("\t")
        mode, oid, stage = meta.split()
        index[rel] = (mode, oid) if stage == "0" else ("conflict", stage)
    dirty |= {
        rel for rel in committed.keys() | index.keys() if committed.get(rel) != index.get(rel)
    }
    dirty |= set(_lines(root, "ls-files", "-z", "--others", "--exclude-standard"))
    return sorted(dirty)


def _lstat_mode(path: Path) -> int:
    try:
        return path.lstat().st_mode
    except OSError:
        return 0
