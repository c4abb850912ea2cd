"""The environment lock: the interpreter and the installed distributions an approval binds.

An approval records :func:`lock` (field ``environment_lock``); the gate refuses a run whose
:func:`lock` differs from it in anything (:func:`lock_problems`), and the manifest records the
lock the run saw, so the audit compares it with the approval's. A package installed after
approval (a ``pytest11`` plugin autoloaded at every pytest start, say) therefore never runs
under that approval.

What is bound, per distribution in the interpreter's site-packages folders
(:func:`prereg.evidence.execution.site_dirs`), keyed by its normalised name (PEP 503): its version,
and the SHA-256 of the RECORD entries that count (:func:`counted_entries`: every ``(path, hash)``
row of RECORD but the installer's bookkeeping, :data:`BOOKKEEPING` in the distribution's own
``.dist-info`` folder). Bookkeeping is left out because it says how and from where a package
was installed, not what it installed: ``direct_url.json`` names the source folder or wheel,
so a byte-identical reinstall from another temporary copy would otherwise differ. Entries
without a hash (pip's compiled ``__pycache__`` files) count by their path.

The interpreter is bound by its real executable and that file's SHA-256, its version,
implementation and prefixes (:func:`python`). Of the packages the lock reads RECORD files only
and hashes no installed file: the execution check (:mod:`prereg.evidence.execution`) already holds
every loaded file to its RECORD hash, so a file changed behind RECORD's back is refused there, and
a reinstall with other files changes RECORD, refused here. Reading RECORD files only keeps
the lock cheap (a fraction of a second for an environment holding torch).

Naming the file that differs. Each distribution with at most :data:`ENTRY_LIMIT` entries that
count keeps them in the lock (``entries``: path -> hash); larger ones keep the digest and the
count only. The lock then names the differing file(s) of small distributions, the ones a
plugin or an extension comes from, while the approval record stays small (listing every
file of every distribution would make it megabytes, most of it torch's). Keeping digests
only and fetching the current entries instead would name no file at all, having nothing
approved to compare them with. A difference in a large distribution is still refused, naming the
distribution, its version and both digests and counts; the execution check names any loaded file
that differs from RECORD. :func:`lock_problems` is a pure function of two locks, so the gate (the
lock now against the approval's), the audit (the manifest's against the approval's) and the tests
use it alike.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.machinery
import importlib.metadata
import json
import os
import platform
import sys
from pathlib import Path

from prereg import records
from prereg.base.hashing import sha256_file
from prereg.base.provenance import metadata_headers, normalised
from prereg.evidence import execution

# Files of a distribution's own .dist-info folder that record how it was installed: left out.
BOOKKEEPING = ("direct_url.json", "INSTALLER", "REQUESTED", "RECORD")
# A distribution with at most this many entries that count keeps them in the lock.
ENTRY_LIMIT = 32
# How many differing files a problem names before "and N more".
NAMED_FILES = 3
# The interpreter fields, as :func:`lock` records them, and the shape of a lock (the
# approval's ``environment_lock``, the manifest's record of it): :mod:`prereg.records`.
PYTHON_FIELDS = records.PYTHON_FIELDS
CUSTOMIZE_FIELDS = records.CUSTOMIZE_FIELDS
DISTRIBUTION = records.DISTRIBUTION
LOCK_SCHEMA = records.LOCK_SCHEMA
AGAIN = "approve again under a new run id"


# -- RECORD entries --------------------------------------------------------------------------


def counted_entries(record_text: str) -> list[tuple[str, str]]:
    """The ``(path, hash)`` rows of a RECORD file that count, sorted: every row but the
    installer's bookkeeping (:data:`BOOKKEEPING`) in a ``.dist-info`` folder at the top of the
    site folder. ``hash`` is RECORD's ``sha256=<urlsafe base64>``, or "" where it gives none."""
    rows = []
    for row in csv.reader(record_text.splitlines()):
        if not row or not row[0]:
            continue
        path = row[0]
        folder, _, name = path.rpartition("/")
        if name in BOOKKEEPING and folder.endswith(".dist-info") and "/" not in folder:
            continue
        rows.append((path, row[1] if len(row) > 1 else ""))
    return sorted(rows)


def entries_sha256(entries: list[tuple[str, str]]) -> str:
    """SHA-256 of the canonical listing of ``entries``: compact JSON of the sorted pairs."""
    listing = json.dumps(sorted([p, h] for p, h in entries), separators=(",", ":"))
    return hashlib.sha256(listing.encode("utf-8")).hexdigest()


# -- the lock --------------------------------------------------------------------------------


def python() -> dict:
    """The running interpreter: its real executable and that file's SHA-256, version,
    implementation and prefixes, and the start-up modules its ``site`` runs
    (:func:`customize_hashes`)."""
    executable = os.path.realpath(sys.executable)
    return {
        "executable": executable,
        "executable_sha256": sha256_file(executable) if os.path.isfile(executable) else "",
        "version": platform.python_version(),
        "implementation": sys.implementation.name,
        "prefix": os.path.realpath(sys.prefix),
        "base_prefix": os.path.realpath(sys.base_prefix),
        **customize_hashes(execution.stdlib_dirs() + execution.site_dirs()),
    }


def customize_hashes(folders: list[str]) -> dict[str, str]:
    """The SHA-256 of ``sitecustomize`` and ``usercustomize`` as Python finds them in
    ``folders`` (a module file, or a package's ``__init__.py``), "" for one it does not find:
    code every start of the interpreter runs, which no distribution's RECORD need hold."""
    found = {}
    for module, field in zip(execution.CUSTOMIZE_MODULES, CUSTOMIZE_FIELDS):
        spec = importlib.machinery.PathFinder.find_spec(module, folders)
        origin = getattr(spec, "origin", None)
        found[field] = sha256_file(origin) if origin and os.path.isfile(origin) else ""
    return found


def _distribution(dist: importlib.metadata.Distribution) -> tuple[str, dict]:
    folder = getattr(dist, "_path", None)  # the .dist-info (or .egg-info) folder
    headers = metadata_headers(dist)
    name = headers.get("Name") or (
        folder.name.split("-")[0] if isinstance(folder, Path) else "unknown"
    )
    entries = counted_entries(dist.read_text("RECORD") or "")
    found = {
        "version": headers.get("Version") or "",
        "record_sha256": entries_sha256(entries),
        "files": len(entries),
    }
    if len(entries) <= ENTRY_LIMIT:
        found["entries"] = dict(entries)
    return normalised(name), found


def lock(dirs: list[str] | None = None) -> dict:
    """The interpreter and every distribution installed in ``dirs`` (the site-packages folders
    by default): ``{"python": {...}, "distributions": {name: {"version", "record_sha256",
    "files"[, "entries"]}}}``. Two metadata folders of one name (a stale ``.dist-info`` left
    beside the current one) are both kept, the later in sorted order keyed ``name (folder)``.
    The distributions are read once while their metadata is unchanged
    (:func:`prereg.evidence.execution.read_while_unchanged`, which keeps the reading in
    prereg's user cache for later processes): the gate's lock and the one the manifest records
    at the run's end are one reading unless something was installed, removed or rewritten in
    between."""
    folders = dirs if dirs is not None else execution.site_dirs()
    distributions = execution.read_while_unchanged(
        "environment-lock", folders, lambda: _distributions(folders), decode=_kept_distributions
    )
    return {"python": python(), "distributions": dict(distributions)}


def _kept_distributions(plain: object) -> dict[str, dict]:
    if not (isinstance(plain, dict) and all(isinstance(v, dict) for v in plain.values())):
        raise TypeError("not a kept reading of the distributions")
    return plain


def _distributions(folders: list[str]) -> dict[str, dict]:
    found = []
    for dist in importlib.metadata.distributions(path=list(folders)):
        folder = getattr(dist, "_path", None)
        found.append((os.fspath(folder) if folder is not None else "", dist))
    distributions: dict[str, dict] = {}
    for folder, dist in sorted(found, key=lambda pair: pair[0]):
        name, entry = _distribution(dist)
        key = name if name not in distributions else f"{name} ({folder})"
        distributions[key] = entry
    return distributions


# -- comparing two locks ---------------------------------------------------------------------


def _files_differing(bound: dict, now: dict) -> list[str]:
    """Each file whose entry differs: changed hash, added, or removed (sorted by path)."""
    out = []
    for path in sorted(set(bound) | set(now)):
        if path not in now:
            out.append(f"{path} (removed; approved {bound[path] or 'no hash'})")
        elif path not in bound:
            out.append(f"{path} (added; {now[path] or 'no hash'})")
        elif bound[path] != now[path]:
            out.append(f"{path} ({now[path] or 'no hash'}, approved {bound[path] or 'no hash'})")
    return out


def file_differences(bound_entries: dict | None, now_entries: dict | None) -> str | None:
    """The first differing files of two ``entries`` listings (path -> hash), in words, or
    None when either listing is missing (a distribution over :data:`ENTRY_LIMIT` files)."""
    if not isinstance(bound_entries, dict) or not isinstance(now_entries, dict):
        return None
    differing = _files_differing(bound_entries, now_entries)
    if not differing:
        return None
    more = len(differing) - NAMED_FILES
    return ", ".join(differing[:NAMED_FILES]) + (f" and {more} more" if more > 0 else "")


def _python_problem(bound: dict, now: dict, when: str) -> list[str]:
    compared = set(PYTHON_FIELDS) | set(bound)  # a start-up module field an older lock lacks
    fields = [f for f in sorted(compared) if bound.get(f) != now.get(f)]
    if not fields:
        return []
    listed = "; ".join(f"{f} {now.get(f)!r} {when}, approved {bound.get(f)!r}" for f in fields)
    return [
        (
            f"the interpreter differs from the one the approval's environment_lock binds: "
            f"{listed}. Run with the approved interpreter ({bound.get('executable')}), or {AGAIN} "
            "with this one"
        )
    ]


def _distribution_problem(name: str, bound: dict | None, now: dict | None, when: str) -> str:
    if bound is None:
        return (
            f"distribution {name} {now['version']} is installed {when} but was not when the run "
            f"was approved (the approval's environment_lock lacks it): pip uninstall {name}, "
            f"or {AGAIN}"
        )
    if now is None:
        return (
            f"distribution {name} {bound['version']} was installed when the run was approved and "
            f"is not {when}: reinstall {name} {bound['version']} as approved, or {AGAIN}"
        )
    if now["version"] != bound["version"]:
        return (
            f"distribution {name} is at version {now['version']} {when}, the approval's "
            f"environment_lock binds {bound['version']}: reinstall {name} {bound['version']} as "
            f"approved (pip install '{name}=={bound['version']}'), or {AGAIN}"
        )
    files = file_differences(bound.get("entries"), now.get("entries"))
    label = f"distribution {name} {now['version']}"
    fix = f"reinstall the approved files of {name} {bound['version']}, or {AGAIN}"
    if files is not None:
        return f"{label} has other files {when} than when the run was approved: {files}: {fix}"
    return (
        f"{label} lists other files in its RECORD {when} than when the run was approved "
        f"({now['files']} entries, SHA-256 {now['record_sha256'][:12]}; approved "
        f"{bound['files']} entries, SHA-256 {bound['record_sha256'][:12]}); the approval lists "
        f"the files only of distributions with at most {ENTRY_LIMIT} entries, so the one that "
        f"differs is not named: {fix}"
    )


def lock_problems(bound: dict | None, now: dict, *, when: str = "now") -> list[str]:
    """How lock ``now`` differs from ``bound`` (the approval's ``environment_lock``): one
    problem for the interpreter, then one per distribution added, removed, at another version
    or with other files (naming the first differing files when both locks list them), sorted
    by name. ``when`` says where ``now`` is from in the messages ("now": the gate; "in the
    run": the audit). Both must fit :data:`LOCK_SCHEMA`; a missing ``bound`` (None) is one
    problem."""
    if bound is None:
        return [
            (
                "the approval binds no environment lock (its environment_lock field is missing), "
                f"so nothing shows which interpreter and installed packages were approved: {AGAIN}"
            )
        ]
    problems = _python_problem(bound["python"], now["python"], when)
    was, have = bound["distributions"], now["distributions"]
    for name in sorted(set(was) | set(have)):
        old, new = was.get(name), have.get(name)
        if old is None or new is None or _comparable(old) != _comparable(new):
            problems.append(_distribution_problem(name, old, new, when))
    return problems


def _comparable(entry: dict) -> tuple:
    # Whether a listing of entries is kept follows from the count: it is not a difference.
    return entry["version"], entry["record_sha256"], entry["files"]
