"""Extension points: what a user's installed package may add to prereg, found by entry point.

An extension point is an :class:`ExtensionPoint`: an entry-point group, the owner's built-in
table (tracked code, never taken from package metadata), and a check of what an entry must
be. Its owner declares it once, at import, in its own module; ``load(name)`` gives the
built-in entry of that name, else the entry a recorded installed distribution declares under
the group (a package's ``pyproject.toml`` declares them under
``[project.entry-points."<group>"]``). prereg's own points:

=========================  =====================================================  ==========
group                      the entry point names                                  its name
=========================  =====================================================  ==========
``prereg.stage_kinds``     a :class:`prereg.kinds.stages.StageKind` (settings, items,   kind name
                           summary, replay, report section)
``prereg.law_families``    ``build(spec) -> HiddenMarkovLaw`` (RP002A worlds)      ``family``
``prereg.harness_kinds``   a :class:`prereg.e04.harness.HarnessKind` (E04)         ``kind``
=========================  =====================================================  ==========

A user's stage kind declares a point of its own the same way (``api.ExtensionPoint``), under
any well-formed group (:func:`group_problem`): the approval binds, the manifest records and
the audit checks every group a loaded entry came from, as they do prereg's.

A run must be able to say exactly which code it ran, so an entry is read only from a
distribution installed in site-packages whose module is a file listed, with a matching
SHA-256, in the distribution's RECORD: a recorded package version (an editable install does
not qualify, nor does metadata lying inside the checkout). An entry's origin binds the SHA-256
of the RECORD entries that count (:func:`prereg.evidence.envlock.counted_entries`: the installer's
bookkeeping such as ``direct_url.json`` left out), so a byte-identical reinstall from another
copy of the source matches it. The project's own entries are tracked code and never come from
metadata (each point's built-in table); an installed entry under a built-in name is ignored,
and package metadata inside the checkout that names a built-in entry otherwise is refused
(:func:`prereg.evidence.execution.declare_built_in`). :func:`origin` says where a loaded entry came
from, and the manifest records it.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import importlib.metadata
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Callable

from prereg import records
from prereg.evidence import envlock, execution

STAGE_KINDS = "prereg.stage_kinds"
LAW_FAMILIES = "prereg.law_families"
HARNESS_KINDS = "prereg.harness_kinds"
# Where an installed entry came from (approval records, manifests): field -> type.
EXTENSION_ORIGIN = records.EXTENSION_ORIGIN
# An extension point's group: two or more dot-separated lowercase words (``owner.what``), so
# it names no group an installer or pytest reads (``console_scripts``, ``pytest11``).
GROUP_PATTERN = re.compile(r"[a-z][a-z0-9_-]*(?:\.[a-z][a-z0-9_-]*)+")
GROUP_MAX_LENGTH = 100

# group -> name -> where it came from ({"distribution", "entry_point", "file", "record_sha256"})
_origins: dict[str, dict[str, dict]] = {}
# group -> the ExtensionPoint declared for it in this process
_points: dict[str, ExtensionPoint] = {}


def group_problem(group: object) -> str | None:
    """Why ``group`` is not a well-formed extension-point group, or None when it is."""
    if not isinstance(group, str):
        return f"group {group!r} is a {type(group).__name__}, not a str"
    if len(group) > GROUP_MAX_LENGTH:
        return f"group {group[:40]!r}... is longer than {GROUP_MAX_LENGTH} characters"
    if not GROUP_PATTERN.fullmatch(group):
        return (
            f"group {group!r} is not two or more dot-separated lowercase words "
            "(letters, digits, '_' or '-', each word starting with a letter; e.g. "
            "'acme.sweep_variants')"
        )
    return None


class ExtensionError(LookupError):
    """An extension point's entry cannot be used (the message says why and what to do)."""


class NotInstalled(ExtensionError):
    """No recorded installed distribution provides the entry; ``reasons`` says why not."""

    def __init__(self, group: str, name: str, reasons: list[str]):
        self.group, self.name, self.reasons = group, name, reasons
        why = f" ({'; '.join(reasons)})" if reasons else ""
        super().__init__(f"no installed package provides {name!r} in {group!r}{why}")


def _module_of(value: str) -> str:
    return value.split(":", 1)[0].strip()


def _recorded_points(group: str):
    """(entry point, origin or None, reason) of every entry of ``group`` installed."""
    for point, found, reason, _ in _recorded(group):
        yield point, found, reason


def _recorded(group: str):
    """(entry point, origin or None, reason, distribution) of every entry of ``group`` installed.

    The origin (see :func:`origin`) is None, and the reason says why, when the entry's
    module is not a file its distribution's RECORD lists with a matching SHA-256.
    """
    for dist in importlib.metadata.distributions(path=execution.site_dirs()):
        for point in dist.entry_points:
            if point.group != group:
                continue
            label = f"{dist.metadata['Name']} {dist.version}"
            module = _module_of(point.value).replace(".", "/")
            wanted = {f"{module}.py", f"{module}/__init__.py"}
            files = [f for f in dist.files or () if f.as_posix() in wanted]
            if not files:
                yield (
                    point,
                    None,
                    (
                        f"{label} declares it as {point.value}, but its RECORD does not list module "
                        f"{_module_of(point.value)} (an editable install? install the package "
                        "normally: pip install PATH, not pip install -e PATH)"
                    ),
                    dist,
                )
                continue
            path = os.path.realpath(dist.locate_file(files[0]))
            recorded = files[0].hash
            if recorded is None or recorded.mode != "sha256":
                yield point, None, f"{label}: RECORD gives no SHA-256 of {path}; reinstall", dist
                continue
            digest = hashlib.sha256(Path(path).read_bytes()).digest()
            if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != recorded.value:
                yield (
                    point,
                    None,
                    (f"{label}: {path} differs from the RECORD of {label}; reinstall it"),
                    dist,
                )
                continue
            entries = envlock.counted_entries(dist.read_text("RECORD") or "")
            yield (
                point,
                {
                    "distribution": label,
                    "entry_point": point.value,
                    "file": path,
                    # RECORD lists every file of the distribution with its hash: binding the
                    # entries that count binds the whole installed package (the execution check
                    # holds loaded files to it), and not where it was installed from
                    "record_sha256": envlock.entries_sha256(entries),
                },
                "",
                dist,
            )


def installed_names(group: str) -> list[str]:
    """Names that recorded installed distributions provide in ``group`` (sorted)."""
    return sorted({p.name for p, found, _ in _recorded_points(group) if found is not None})


def _candidates(group: str, name: str) -> tuple[list[tuple[object, dict, object]], list[str]]:
    """The recorded installed providers of ``name`` in ``group`` (entry point, origin,
    distribution), and why others are not."""
    valid, reasons = [], []
    for point, found, reason, dist in _recorded(group):
        if point.name != name:
            continue
        if found is None:
            reasons.append(reason)
        elif found not in [f for _, f, _ in valid]:
            valid.append((point, found, dist))
    return valid, reasons


def _ambiguity(name: str, valid: list[tuple[object, dict, object]]) -> str:
    return (
        f"{name!r} is provided by {len(valid)} installed distributions "
        f"({', '.join(f['distribution'] for _, f, _ in valid)}): which code runs would depend on "
        "the order of site-packages; uninstall all but one"
    )


def load_installed(group: str, name: str, accept: Callable[[object], bool]) -> object:
    """The object entry ``name`` of ``group`` names, from a recorded installed distribution.

    ``accept(obj)`` says whether the loaded object is what the group promises (for example a
    StageKind of that name). Raises :class:`NotInstalled` with every reason found otherwise,
    and when two distributions provide the name.
    """
    valid, reasons = _candidates(group, name)
    if len(valid) > 1:
        raise NotInstalled(group, name, [*reasons, _ambiguity(name, valid)])
    for point, found, _ in valid:
        loaded_object = point.load()
        module = sys.modules.get(_module_of(point.value))
        loaded = os.path.realpath(getattr(module, "__file__", "") or "")
        if loaded != found["file"]:
            reasons.append(
                f"{found['distribution']}: {point.value} loaded from {loaded}, not the recorded "
                f"{found['file']} (another copy of the module is first on sys.path)"
            )
        elif not accept(loaded_object):
            reasons.append(
                f"{found['distribution']}: {point.value} is {loaded_object!r}, not a valid "
                f"{group} entry"
            )
        else:
            _origins.setdefault(group, {})[name] = found
            return loaded_object
    raise NotInstalled(group, name, reasons)


def current_origin(group: str, name: str) -> dict | None:
    """Where entry ``name`` of ``group`` would load from now (read from metadata, nothing
    imported), or None when no recorded installed distribution, or more than one, provides it."""
    valid, _ = _candidates(group, name)
    return valid[0][1] if len(valid) == 1 else None


def _files_named(lock: dict | None, dist: object) -> str | None:
    """The files of installed ``dist`` that differ from the listing of it in ``lock`` (an
    approval's environment_lock, :mod:`prereg.evidence.envlock`), or None when it lists none."""
    bound = lock.get("distributions") if isinstance(lock, dict) else None
    name = envlock.normalised(dist.metadata["Name"] or "")
    entry = bound.get(name) if isinstance(bound, dict) else None
    now = dict(envlock.counted_entries(dist.read_text("RECORD") or ""))
    return envlock.file_differences(entry.get("entries") if isinstance(entry, dict) else None, now)


def _differs(approved: dict, now: dict, dist: object, lock: dict | None) -> str:
    """What differs between an approved origin and the one installed now, and what to do."""
    again = "or approve the installed code under a new run id"
    label = approved.get("distribution")
    if now["distribution"] != label:
        return (
            f"now comes from {now['distribution']} (RECORD {now['record_sha256'][:12]}, "
            f"{now['file']}): reinstall {label} as approved, {again}"
        )
    if now["record_sha256"] != approved.get("record_sha256"):
        files = _files_named(lock, dist)
        which = (
            f": {files}"
            if files is not None
            else (
                f" (RECORD {now['record_sha256'][:12]}; the approval's environment_lock lists no "
                "files of it, so the one that differs is not named)"
            )
        )
        return (
            f"{label} is installed now with other files{which}: reinstall the approved files, "
            + again
        )
    moved = [
        f"{field} {now[field]} (approved {approved.get(field)})"
        for field in ("entry_point", "file")
        if now[field] != approved.get(field)
    ]
    return (
        f"{label} now declares it otherwise: {'; '.join(moved)}: reinstall it as approved, {again}"
    )


def binding_problems(bound: dict, lock: dict | None = None) -> list[str]:
    """How the installed extensions differ from ``bound`` (group -> name -> origin, what an
    approval recorded): each must still come from the same distribution, entry point, file
    and RECORD entries, or the code that would run is not the code approved. ``lock`` is the
    approval's environment_lock (:mod:`prereg.evidence.envlock`): where it lists the distribution's
    files, a refusal names the files that differ."""
    problems = []
    for group, entries in sorted(bound.items()):
        for name, approved in sorted(entries.items()):
            valid, _ = _candidates(group, name)
            now = valid[0][1] if len(valid) == 1 else None
            if now == approved:
                continue
            was = (
                f"{approved.get('distribution')} (RECORD {str(approved.get('record_sha256'))[:12]})"
            )
            if len(valid) > 1:
                problems.append(
                    f"{group} {name!r} was approved from {was}, but {_ambiguity(name, valid)}"
                )
            elif now is None:
                problems.append(
                    f"{group} {name!r} was approved from {was} and is not installed now: "
                    "reinstall that version (pip install PATH, not -e)"
                )
            else:
                problems.append(
                    f"{group} {name!r} was approved from {was}, and "
                    + _differs(approved, now, valid[0][2], lock)
                )
    return problems


def unbound_problems(bound: dict, group: str, name: str) -> list[str]:
    """Entry ``name`` of ``group`` comes from an installed package now, yet ``bound`` (what an
    approval recorded) binds none for it: an approval whose ``extensions`` field was removed or
    emptied by hand would otherwise let any installed version run unchecked."""
    now = current_origin(group, name)
    entries = bound.get(group) if isinstance(bound, dict) else None
    if now is None or (isinstance(entries, dict) and name in entries):
        return []
    return [
        (
            f"{group} {name!r} comes from the installed {now['distribution']} (RECORD "
            f"{now['record_sha256'][:12]}, {now['file']}), but the approval binds no installed "
            "package for it (its extensions field lacks it): approve again under a new run id"
        )
    ]


def origin(group: str, name: str) -> dict | None:
    """Where installed entry ``name`` of ``group`` was loaded from, or None if it was not."""
    return _origins.get(group, {}).get(name)


def loaded_origins() -> dict[str, dict[str, dict]]:
    """Every installed entry loaded in this process: group -> name -> origin (a copy)."""
    return {group: dict(entries) for group, entries in _origins.items() if entries}


def _reference(value: object) -> str | None:
    """The ``module:attribute`` a built-in entry is: the string itself, or the defining module
    and qualified name of a function or class; None for an instance (no entry point names it)."""
    if isinstance(value, str):
        return value.replace(" ", "")
    module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if isinstance(module, str) and isinstance(name, str) and "<" not in name:
        return f"{module}:{name}"
    return None


class ExtensionPoint:
    """An entry-point group and what it holds: the owner's built-in entries, then entries a
    recorded installed distribution declares under the group.

    ``built_in`` maps a name to its entry, or to the ``"module:attribute"`` string naming it
    (imported on first use); ``check(name, obj)`` says whether a loaded object is a valid entry
    of that name (None: any object is); ``what`` names an entry in messages ("stage kind").
    Declare a point once, at import of its owner's module, and load through it::

        VARIANTS = api.ExtensionPoint("acme.variants", {"plain": plain}, callable_check, "variant")
        build = VARIANTS.load(settings.variant)

    Declaring ``group`` again with the same built-in names replaces the point (a module
    reloaded); with others it is refused, as two owners would then disagree about the group.
    An entry loaded from an installed distribution is kept for the rest of the process, as
    is one added in-process with :meth:`register`.
    """

    def __init__(
        self,
        group: str,
        built_in: Mapping[str, object],
        check: Callable[[str, object], bool] | None = None,
        what: str = "entry",
    ) -> None:
        problem = group_problem(group)
        if problem is not None:
            raise ValueError(f"extension point: {problem}")
        declared = _points.get(group)
        if declared is not None and set(declared.built_in) != set(built_in):
            raise ValueError(
                f"extension point {group!r} is already declared (as {declared.what}s, built in: "
                f"{sorted(declared.built_in)}); declare yours under another group"
            )
        self.group, self.what = group, what
        self.built_in: dict[str, object] = dict(built_in)
        self._check = check
        # Entries loaded from installed distributions, and those registered in-process.
        self._loaded: dict[str, object] = {}
        _points[group] = self
        execution.declare_built_in(
            group, what, {name: _reference(value) for name, value in self.built_in.items()}
        )

    def __repr__(self) -> str:
        return f"ExtensionPoint({self.group!r}, built in: {sorted(self.built_in)})"

    def accepts(self, name: str, obj: object) -> bool:
        """Whether ``obj`` is a valid entry ``name`` of this point."""
        return self._check is None or bool(self._check(name, obj))

    def _built_in_entry(self, name: str) -> object:
        value = self.built_in[name]
        if isinstance(value, str):
            module, _, attribute = value.partition(":")
            value = getattr(importlib.import_module(module.strip()), attribute.strip(), None)
        if not self.accepts(name, value):
            raise ExtensionError(
                f"built-in {self.what} {name!r}: {self.built_in[name]!r} is {value!r}, not a "
                f"valid {self.what} {name!r} of {self.group!r}; fix the owner's built-in table"
            )
        return value

    def load(self, name: str) -> object:
        """Entry ``name``: the built-in one, else one :meth:`register` added, else the one a
        recorded installed distribution declares (:func:`load_installed`, once per process:
        what it loaded is kept). Raises :class:`NotInstalled` with every reason found
        otherwise (:class:`ExtensionError` for a broken built-in)."""
        if name in self.built_in:
            return self._built_in_entry(name)
        if name not in self._loaded:
            self._loaded[name] = load_installed(
                self.group, name, lambda obj: self.accepts(name, obj)
            )
        return self._loaded[name]

    def register(self, name: str, obj: object) -> None:
        """Add entry ``name`` in this process (a kind defined in a script, say); a built-in
        name, or an object this point does not accept as ``name``, is refused."""
        if name in self.built_in:
            raise ValueError(f"{self.what} {name!r} is built in; register another name")
        if not self.accepts(name, obj):
            raise ValueError(f"{obj!r} is not a valid {self.what} {name!r} of {self.group!r}")
        self._loaded[name] = obj

    def registered(self) -> list[str]:
        """The names loaded or registered in this process, beside the built-in ones (sorted)."""
        return sorted(self._loaded)

    def origin(self, name: str) -> dict | None:
        """Where entry ``name`` comes from: ``{"built_in": "module:attribute"}`` for a built-in
        entry (``{"built_in": name}`` when no such string names it), the installed
        distribution's origin (:func:`origin`) once loaded, else None."""
        if name in self.built_in:
            return {"built_in": _reference(self.built_in[name]) or name}
        return origin(self.group, name)

    def names(self) -> list[str]:
        """The built-in names and those recorded installed distributions provide (sorted)."""
        return sorted(set(self.built_in) | set(installed_names(self.group)))


def declared_points() -> dict[str, ExtensionPoint]:
    """Every extension point declared in this process: group -> point (a copy)."""
    return dict(_points)
