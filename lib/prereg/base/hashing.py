"""SHA-256 of files and canonical JSON, and deterministic JSON writing.

Files are opened without blocking and read only when they are regular files, so a named
pipe where a record or an output should be is an error naming it, never a hang; a folder
is listed without following any symbolic link (:func:`list_folder`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import json.decoder
import json.scanner
import math
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

_CHUNK = 1 << 20

# The deepest nesting of arrays and objects a JSON text read here may have. prereg's plans
# and records nest fewer than ten levels; far below Python's recursion limit, so neither
# the parser nor a reader walking the value recursively ever meets a RecursionError.
MAX_JSON_DEPTH = 100


class NotARegularFile(OSError):
    """A path that should hold a regular file holds a named pipe, a socket, a device or (for
    the folder hashing) a symbolic link: prereg neither reads nor follows it."""


def entry_kind(mode: int, path: Path | str) -> str:
    """What a non-regular entry is, in words (``mode``: its ``lstat`` mode)."""
    if stat.S_ISLNK(mode):
        try:
            target = os.readlink(path)
        except OSError as err:
            target = f"? ({err.strerror})"
        return f"a symbolic link to {str(target)!r}"
    for test, words in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return words
    return f"an entry of file type {stat.S_IFMT(mode):#o}"


def _open_regular(path: Path, *, follow: bool = True) -> tuple[int, os.stat_result]:
    """A descriptor on the regular file ``path`` and its status, opened without blocking (a
    named pipe opened so returns at once and is refused); ``follow=False``: a symbolic link
    is refused too."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        if not follow and os.path.islink(path):
            raise NotARegularFile(
                f"{path} is {entry_kind(os.lstat(path).st_mode, path)}, not a regular file"
            ) from err
        raise
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
        os.close(fd)
        raise NotARegularFile(f"{path} is {entry_kind(status.st_mode, path)}, not a regular file")
    return fd, status


def _hash_open(fd: int) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with os.fdopen(fd, "rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def sha256_file(path: Path) -> str:
    """The SHA-256 of a regular file (a symbolic link is followed); anything else, a named
    pipe included, raises :class:`NotARegularFile` without blocking."""
    fd, _ = _open_regular(path)
    return _hash_open(fd)[0]


def read_regular(path: Path) -> bytes:
    """The bytes of a regular file (a symbolic link is followed); anything else raises
    :class:`NotARegularFile` without blocking."""
    fd, _ = _open_regular(path)
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_json(value: Any) -> str:
    """Sorted keys, two-space indent, no NaN, trailing newline: the same value, the same bytes."""
    return json.dumps(value, sort_keys=True, indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def write_json(path: Path, value: Any, *, exclusive: bool = False) -> None:
    """Write canonical JSON atomically (temporary file, then rename): a crash leaves the old file.

    ``exclusive``: the file must not exist; it is linked into place, which fails with
    :class:`FileExistsError` (and writes nothing) when another writer made it first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(canonical_json(value), encoding="utf-8")
    if not exclusive:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    finally:
        tmp.unlink()


class _JsonRefusal(ValueError):
    """Raised by the parser hooks of :func:`read_json`; re-raised naming the file."""

    def __init__(self, message: str, lines: Callable[[str], list[int]]) -> None:
        super().__init__(message)
        self.lines = lines  # the text -> the lines where the problem is


def _line(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _JsonRefusal(
                f"key {key!r} appears twice in one object (a JSON reader would silently keep "
                "the last one); delete one of them so the file says one thing",
                functools.partial(_duplicate_key_lines, key=key),
            )
        seen[key] = value
    return seen


class _Located(Exception):
    pass


def _duplicate_key_lines(text: str, key: str) -> list[int]:
    """The lines of ``key`` in the first object that repeats it (the refusal path only: this
    re-parses with the pure-Python scanner, which tells where each object starts and ends)."""
    written = re.compile(re.escape(json.dumps(key, ensure_ascii=False)) + r"\s*:")
    done: list[tuple[int, int]] = []  # spans of completed objects not yet inside a parent
    lines: list[int] = []

    def parse_object(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo=None):
        s, after_brace = s_and_end
        pairs, end = json.decoder.JSONObject(s_and_end, strict, scan_once, None, list, memo)
        start = after_brace - 1
        inner = [span for span in done if start <= span[0] and span[1] <= end]
        keys = [k for k, _ in pairs]
        if keys.count(key) > 1:
            for match in written.finditer(s, start, end):
                if not any(a <= match.start() < b for a, b in inner):
                    lines.append(_line(s, match.start()))
            raise _Located
        done[:] = [span for span in done if span not in inner] + [(start, end)]
        return dict(pairs), end

    decoder = json.JSONDecoder(parse_constant=float)
    decoder.parse_object = parse_object
    decoder.scan_once = json.scanner.py_make_scanner(decoder)
    try:
        decoder.decode(text)
    except (_Located, ValueError, RecursionError):
        pass
    return lines


def _refuse_constant(name: str) -> float:
    pattern = re.compile(r"[:,\[]\s*(" + re.escape(name) + r")\b")
    raise _JsonRefusal(
        f"the non-standard constant {name} appears; JSON has no NaN or Infinity: write a "
        "finite number (or null where the schema allows it)",
        lambda text: [_line(text, m.start(1)) for m in pattern.finditer(text)],
    )


def _finite_float(number: str) -> float:
    value = float(number)
    if not math.isfinite(value):
        pattern = re.compile(r"(?<![\w.+-])" + re.escape(number) + r"(?![\w.])")
        raise _JsonRefusal(
            f"the number {number} overflows to {value}; write a finite number",
            lambda text: [_line(text, m.start()) for m in pattern.finditer(text)],
        )
    return value


def read_json(path: Path, *, what: str) -> Any:
    """Read a JSON file; a missing or malformed file is a ValueError naming it and ``what`` it is.

    Stricter than :func:`json.loads` (see :func:`parse_json`): a key repeated within one
    object, the constants ``NaN``, ``Infinity`` and ``-Infinity``, and numbers too large to
    be finite are refused, so every plan, approval, manifest and record read here says
    exactly one finite thing.
    """
    try:
        data = read_regular(Path(path))
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} {path} does not exist") from None
    except NotARegularFile as err:
        raise ValueError(
            f"{what} {path} is refused: {err}; a JSON file must be a regular file (replace it "
            "with the file itself)"
        ) from None
    # Universal newlines, as text mode reads them.
    text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    return parse_json(text, what=what, source=str(path))


def parse_json(text: str | bytes, *, what: str, source: str) -> Any:
    """Parse JSON text as strictly as :func:`read_json` reads a file (for example a blob from
    ``git show``); errors are ValueErrors naming ``what``, ``source`` (where the text came
    from), the repeated key or constant, and its lines. Arrays and objects nested more than
    :data:`MAX_JSON_DEPTH` deep are refused too."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    too_deep = ValueError(
        f"{what} {source} is refused: it nests too deeply (arrays and objects more than "
        f"{MAX_JSON_DEPTH} levels inside each other; prereg's plans and records nest fewer "
        "than ten): restore the file as it was, or write it with less nesting"
    )
    try:
        value = json.loads(
            text,
            object_pairs_hook=_refuse_duplicate_keys,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
        )
    except RecursionError:
        raise too_deep from None
    except _JsonRefusal as err:
        lines = sorted(set(err.lines(text)))
        where = f" (line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))})" * bool(lines)
        raise ValueError(f"{what} {source} is refused{where}: {err}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{what} {source} is not valid JSON: {err}") from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise too_deep
    return value


def _depth(value: Any) -> int:
    """How deeply arrays and objects nest in ``value`` (a scalar: 0), without recursion."""
    deepest, pending = 0, [(value, 1)] if isinstance(value, (dict, list)) else []
    while pending:
        node, level = pending.pop()
        deepest = max(deepest, level)
        children = node.values() if isinstance(node, dict) else node
        pending.extend((c, level + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


@dataclass(frozen=True)
class FolderListing:
    """What a folder holds, listed without following a symbolic link or opening a file.

    ``files``: the regular files below it (relative POSIX paths, sorted as paths sort);
    ``irregular``: every other entry that is not a folder (a symbolic link, a named pipe, a
    socket, a device, a folder that cannot be listed) and every entry whose name is not UTF-8
    (which no JSON record can hold: shown with ``\\x`` escapes, never descended into), each
    ``{"path", "kind"}``.
    """

    files: tuple[str, ...]
    irregular: tuple[dict, ...]


NOT_UTF8 = "whose name is not UTF-8 (shown with \\x escapes)"


def utf8_name(name: str) -> bool:
    """Whether a file name from the file system (undecodable bytes held as surrogates) is
    UTF-8 text, which a JSON record can hold."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _path_key(rel: str) -> tuple[str, ...]:
    return tuple(rel.split("/"))


def list_folder(root: Path) -> FolderListing:
    """The entries below ``root`` (:class:`FolderListing`); a missing ``root`` holds nothing.

    Symbolic links are never followed (one to a folder is not descended into), and nothing
    is opened, so a named pipe cannot block the listing."""
    files: list[str] = []
    irregular: list[dict] = []
    pending: list[tuple[str, str]] = [(os.fspath(root), "")]
    while pending:
        folder, prefix = pending.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except FileNotFoundError:
            if prefix:  # removed while listed
                continue
            return FolderListing((), ())
        except OSError as err:
            if not prefix:
                raise
            kind = f"a folder that cannot be listed ({err.strerror})"
            irregular.append({"path": prefix.rstrip("/"), "kind": kind})
            continue
        for entry in entries:
            rel = prefix + entry.name
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except FileNotFoundError:
                continue  # removed while listed
            if not utf8_name(entry.name):  # no record can name it: never hashed nor descended
                shown = prefix + os.fsencode(entry.name).decode("utf-8", "backslashreplace")
                what = "a regular file" if stat.S_ISREG(mode) else entry_kind(mode, entry.path)
                irregular.append({"path": shown, "kind": f"{what} {NOT_UTF8}"})
            elif stat.S_ISDIR(mode):
                pending.append((entry.path, rel + "/"))
            elif stat.S_ISREG(mode):
                files.append(rel)
            else:
                irregular.append({"path": rel, "kind": entry_kind(mode, entry.path)})
    files.sort(key=_path_key)
    irregular.sort(key=lambda e: _path_key(e["path"]))
    return FolderListing(tuple(files), tuple(irregular))


def hash_entry(root: Path, rel: str) -> dict:
    """``{"path", "sha256", "bytes"}`` of the regular file ``rel`` below ``root``, read through
    one descriptor that follows no symbolic link (:class:`NotARegularFile` otherwise)."""
    path = Path(root) / rel
    fd, status = _open_regular(path, follow=False)
    digest, size = _hash_open(fd)
    if status_proof(os.lstat(path)) == status_proof(status):  # unchanged while it was read
        _HASHED[os.path.abspath(path)] = (status_proof(status), digest, size)
    return {"path": rel, "sha256": digest, "bytes": size}


# The digest of each file :func:`hash_entry` read in this process, with the status the file
# had then (:func:`status_proof`): a run's end hashes its outputs for the manifest, and the
# attestation's subjects take the same digests while each file's status is unchanged.
_HASHED: dict[str, tuple[tuple, str, int]] = {}


def status_proof(status: os.stat_result) -> tuple:
    """Device, inode, size, modification and change time: the change time is the kernel's,
    which no user sets, so a file rewritten in place with its old size and modification time
    restored differs."""
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


def hashed_entry(root: Path, rel: str) -> dict:
    """:func:`hash_entry` of ``rel`` below ``root``, taken from this process's earlier reading
    of the file while its status is the one it had then, else read again."""
    path = Path(root) / rel
    known = _HASHED.get(os.path.abspath(path))
    if known is not None:
        try:
            status = os.lstat(path)
        except OSError:
            status = None
        if status is not None and stat.S_ISREG(status.st_mode) and status_proof(status) == known[0]:
            return {"path": rel, "sha256": known[1], "bytes": known[2]}
    return hash_entry(root, rel)


def file_entries(
    root: Path, *, exclude: frozenset[str] = frozenset(), temporaries: bool = False
) -> list[dict]:
    """Every regular file below ``root``: relative POSIX path, SHA-256 and size, sorted by path.

    No symbolic link is followed and no other entry is opened (see :func:`list_folder` for
    what else a folder holds). A writer's temporary file (``.<name>.tmp``) is left out
    unless ``temporaries``."""
    entries = []
    for rel in list_folder(root).files:
        name = rel.rsplit("/", 1)[-1]
        if rel in exclude or not temporaries and name.startswith(".") and name.endswith(".tmp"):
            continue
        entries.append(hash_entry(root, rel))
    return entries


def irregular_entries(root: Path) -> list[dict]:
    """Every entry below ``root`` that is neither a regular file nor a folder
    (``{"path", "kind"}``, see :func:`list_folder`)."""
    return list(list_folder(root).irregular)
