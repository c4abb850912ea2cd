"""The approval binds the interpreter and the installed distributions.

The attack: a ``pytest11`` plugin ``pip install``-ed after approval is autoloaded by pytest and
may rewrite any output, and nothing the approval bound had changed. The environment lock
(:mod:`prereg.evidence.envlock`) binds every installed distribution's name, version and RECORD
entries, so the added distribution is a difference naming it. A trap: a byte-identical reinstall
from another temporary copy of a package differs only in the installer's bookkeeping
(``direct_url.json`` names the copy), which neither the lock nor an extension's binding counts.
These checks install real wheels with pip into a scratch site folder.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prereg.base.hashing import canonical_json, sha256_file
from prereg.base.schema import validate
from prereg.evidence import envlock
from prereg.kinds import registry

pytestmark = [pytest.mark.software, pytest.mark.attack]

KIND = "from prereg.kinds.stages import StageKind\nKIND = StageKind(name='toy.locked')\n"
KIND_POINTS = "[prereg.stage_kinds]\ntoy.locked = toylocked_mod:KIND\n"
# A pytest plugin that would rewrite a run's outputs once autoloaded.
PLUGIN = "def pytest_runtest_teardown(item):\n    pass  # rewrites outputs\n"
PLUGIN_POINTS = "[pytest11]\ntoyplugin = toyplugin_mod\n"


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel(folder: Path, name: str, version: str, module: str, points: str) -> Path:
    """A pure-Python wheel of ``name`` holding ``<name>_mod.py`` and ``points``, in ``folder``."""
    meta = f"{name}-{version}.dist-info"
    files = {
        f"{name}_mod.py": module.encode(),
        f"{meta}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{meta}/WHEEL": b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
        f"{meta}/entry_points.txt": points.encode(),
    }
    record = "".join(f"{path},{_hash(data)},{len(data)}\n" for path, data in files.items())
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{meta}/RECORD", record + f"{meta}/RECORD,,\n")
    return wheel


def _pip_install(site: Path, wheel: Path) -> None:
    """``pip install --target site wheel``, replacing what is there (no index, no network)."""
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
         "--disable-pip-version-check", "--upgrade", "--target", str(site), str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip


def _install_copy(tmp_path: Path, site: Path, copy_name: str, name: str, version: str, module: str,
                  points: str) -> None:  # fmt: skip
    """Build a wheel in a fresh temporary copy ``copy_name`` and pip-install it from there."""
    _pip_install(site, _wheel(tmp_path / copy_name, name, version, module, points))


def _bound_extension() -> dict:
    origin = registry.current_origin(registry.STAGE_KINDS, "toy.locked")
    assert origin is not None and origin["distribution"] == "toylocked 1.0", origin
    return {registry.STAGE_KINDS: {"toy.locked": origin}}


def test_a_byte_identical_reinstall_from_another_copy_matches(tmp_path, site):
    _install_copy(tmp_path, site, "copy-a", "toylocked", "1.0", KIND, KIND_POINTS)
    bound_lock, bound_extension = envlock.lock(), _bound_extension()
    record = site / "toylocked-1.0.dist-info" / "RECORD"
    before = record.read_text()
    _install_copy(tmp_path, site, "copy-b", "toylocked", "1.0", KIND, KIND_POINTS)
    direct_url = (site / "toylocked-1.0.dist-info" / "direct_url.json").read_text()
    assert "copy-b" in direct_url and record.read_text() != before, "RECORD names the new copy"
    assert envlock.lock_problems(bound_lock, envlock.lock()) == []
    assert registry.binding_problems(bound_extension, bound_lock) == []
    assert registry.binding_problems(bound_extension) == []


def test_a_reading_kept_for_later_processes_is_taken_only_while_the_metadata_is_unchanged(
    tmp_path, site, monkeypatch
):
    """The installed distributions' reading is kept in prereg's user cache: a later process
    (here: this one with its own memory cleared) takes it instead of parsing every RECORD,
    and reads again when a metadata file changed, even rewritten in place with its size and
    modification time restored, or when the kept file is damaged."""
    from prereg.evidence import execution

    _install_copy(tmp_path, site, "copy-a", "toylocked", "1.0", KIND, KIND_POINTS)
    reads = []
    parse = envlock._distributions
    monkeypatch.setattr(envlock, "_distributions", lambda dirs: reads.append(1) or parse(dirs))

    def lock_in_a_new_process() -> dict:
        execution._READ_WHILE_UNCHANGED.clear()
        return envlock.lock()

    first = lock_in_a_new_process()
    assert lock_in_a_new_process() == first and len(reads) == 1  # taken, not parsed again
    record = site / "toylocked-1.0.dist-info" / "RECORD"
    status = record.stat()
    data = record.read_bytes()
    at = data.index(b"toylocked_mod.py,sha256=") + len(b"toylocked_mod.py,sha256=")
    other = b"A" if data[at : at + 1] != b"A" else b"B"
    record.write_bytes(data[:at] + other + data[at + 1 :])  # one hash character, same size
    os.utime(record, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert (record.stat().st_size, record.stat().st_mtime_ns) == (
        status.st_size, status.st_mtime_ns
    )  # fmt: skip
    changed = lock_in_a_new_process()
    assert len(reads) == 2 and changed != first  # the rewritten RECORD was read
    kept = [
        p
        for p in (tmp_path / "user-cache" / "prereg" / execution.METADATA_READINGS).rglob("*")
        if p.is_file()
    ]
    assert len(kept) == 1, kept  # the reading of the earlier RECORD was superseded
    kept[0].write_bytes(b"damaged")
    assert lock_in_a_new_process() == changed and len(reads) == 3  # damaged: read again


def test_a_reinstall_with_one_changed_file_names_the_distribution_and_the_file(tmp_path, site):
    _install_copy(tmp_path, site, "copy-a", "toylocked", "1.0", KIND, KIND_POINTS)
    bound_lock, bound_extension = envlock.lock(), _bound_extension()
    _install_copy(tmp_path, site, "copy-b", "toylocked", "1.0", KIND + "# patched\n", KIND_POINTS)
    (problem,) = envlock.lock_problems(bound_lock, envlock.lock())
    assert "distribution toylocked 1.0 has other files" in problem, problem
    assert "toylocked_mod.py (sha256=" in problem and "METADATA" not in problem, problem
    assert "reinstall the approved files of toylocked 1.0" in problem, problem
    (refusal,) = registry.binding_problems(bound_extension, bound_lock)
    assert "toylocked 1.0 is installed now with other files: toylocked_mod.py" in refusal, refusal
    assert "reinstall the approved version" not in refusal, refusal
    (unnamed,) = registry.binding_problems(bound_extension)
    assert "lists no files of it" in unnamed, unnamed


def test_a_pytest_plugin_installed_after_approval_is_named(tmp_path, site):
    _install_copy(tmp_path, site, "copy-a", "toylocked", "1.0", KIND, KIND_POINTS)
    bound_lock = envlock.lock()
    _install_copy(tmp_path, site, "plugin", "toyplugin", "0.1", PLUGIN, PLUGIN_POINTS)
    (problem,) = envlock.lock_problems(bound_lock, envlock.lock())
    assert "distribution toyplugin 0.1 is installed now but was not" in problem, problem
    assert "pip uninstall toyplugin, or approve again" in problem, problem


def test_a_removed_or_other_version_distribution_is_named(tmp_path, site):
    _install_copy(tmp_path, site, "copy-a", "toylocked", "1.0", KIND, KIND_POINTS)
    bound_lock = envlock.lock()
    shutil.rmtree(site / "toylocked-1.0.dist-info")
    _install_copy(tmp_path, site, "copy-b", "toylocked", "2.0", KIND, KIND_POINTS)
    (problem,) = envlock.lock_problems(bound_lock, envlock.lock())
    assert "toylocked is at version 2.0 now, the approval's environment_lock binds 1.0" in problem
    shutil.rmtree(site / "toylocked-2.0.dist-info")
    (problem,) = envlock.lock_problems(bound_lock, envlock.lock())
    assert (
        "distribution toylocked 1.0 was installed when the run was approved and is not" in problem
    )


def test_another_interpreter_is_a_problem():
    now = envlock.lock([])
    assert now["python"]["executable"] == str(Path(sys.executable).resolve())
    for field, value in (("executable", "/opt/other/python3"), ("version", "3.9.6")):
        bound = copy.deepcopy(now)
        bound["python"][field] = value
        (problem,) = envlock.lock_problems(bound, now)
        assert f"{field} {now['python'][field]!r} now, approved {value!r}" in problem, problem
        assert "Run with the approved interpreter" in problem, problem


def test_the_start_up_modules_site_runs_are_hashed_where_python_finds_them(tmp_path):
    first, second = tmp_path / "stdlib", tmp_path / "site"
    (second / "usercustomize").mkdir(parents=True)
    first.mkdir()
    (first / "sitecustomize.py").write_text("import os\n")
    (second / "sitecustomize.py").write_text("shadowed by the first folder\n")
    (second / "usercustomize" / "__init__.py").write_text("print('every start')\n")
    found = envlock.customize_hashes([str(first), str(second)])
    assert found == {
        "sitecustomize_sha256": sha256_file(first / "sitecustomize.py"),
        "usercustomize_sha256": sha256_file(second / "usercustomize" / "__init__.py"),
    }
    assert envlock.customize_hashes([str(tmp_path / "empty")]) == dict.fromkeys(found, "")


def test_a_sitecustomize_added_after_approval_is_a_problem_and_an_older_lock_compares_none():
    # A sitecustomize dropped into the interpreter's standard library runs at every start
    # and belongs to no distribution's RECORD: the lock binds it.
    now = envlock.lock([])
    bound = copy.deepcopy(now)
    now["python"]["sitecustomize_sha256"] = "ab" * 32
    (problem,) = envlock.lock_problems(bound, now)
    assert f"sitecustomize_sha256 {'ab' * 32!r} now, approved ''" in problem, problem
    older = copy.deepcopy(bound)  # made before the lock bound the start-up modules
    for field in envlock.CUSTOMIZE_FIELDS:
        del older["python"][field]
    validate(older, envlock.LOCK_SCHEMA, source="an older lock")
    assert envlock.lock_problems(older, now) == []


def test_an_approval_without_a_lock_is_a_problem():
    (problem,) = envlock.lock_problems(None, envlock.lock([]))
    assert "environment_lock field is missing" in problem and "approve again" in problem


def test_the_lock_of_this_interpreter_fits_the_schema_and_lists_only_small_distributions():
    found = envlock.lock()
    validate(found, envlock.LOCK_SCHEMA, source="the lock")
    assert found["distributions"], "this interpreter's site-packages hold distributions"
    for entry in found["distributions"].values():
        assert ("entries" in entry) == (entry["files"] <= envlock.ENTRY_LIMIT), entry
    assert envlock.lock_problems(found, copy.deepcopy(found)) == []
    assert len(canonical_json(found)) < 1_000_000, "the approval record stays small"


def test_large_distribution_with_other_files_is_named_without_its_files():
    bound = envlock.lock([])
    bound["distributions"]["bigpkg"] = {"version": "2.8.0", "record_sha256": "a" * 64, "files": 900}
    now = copy.deepcopy(bound)
    now["distributions"]["bigpkg"]["record_sha256"] = "b" * 64
    (problem,) = envlock.lock_problems(bound, now)
    assert "distribution bigpkg 2.8.0 lists other files in its RECORD" in problem, problem
    assert "bbbbbbbbbbbb" in problem and "aaaaaaaaaaaa" in problem, problem


@pytest.mark.parametrize(
    "path, counts",
    [
        ("toy-1.0.dist-info/direct_url.json", False),
        ("toy-1.0.dist-info/INSTALLER", False),
        ("toy-1.0.dist-info/REQUESTED", False),
        ("toy-1.0.dist-info/RECORD", False),
        ("toy-1.0.dist-info/METADATA", True),
        ("toy-1.0.dist-info/entry_points.txt", True),
        ("toy-1.0.dist-info/licenses/INSTALLER", True),  # not bookkeeping: a file it ships
        ("toy/direct_url.json", True),
        ("toy/data.dist-info/RECORD", True),
        ("../../../bin/toy", True),
        ("toy/__pycache__/mod.cpython-311.pyc", True),  # no hash: counted by its path
    ],
)
def test_counted_entries_leave_out_only_the_installers_bookkeeping(path, counts):
    text = f'{path},sha256=abc,3\n"toy/with,comma.py",sha256=def,3\n\n'
    assert (path in dict(envlock.counted_entries(text))) == counts
    assert ("toy/with,comma.py", "sha256=def") in envlock.counted_entries(text)


# -- properties of lock_problems on generated locks ------------------------------------------

LOWER = "abcdefghijklmnopqrstuvwxyz"
NAMES = st.builds(
    lambda head, tail: head + tail,
    st.sampled_from(LOWER),
    st.text(alphabet=LOWER + "0123456789-", max_size=6),
)
PATHS = st.lists(st.text(alphabet=LOWER, min_size=1, max_size=4), min_size=1, max_size=3).map(
    lambda parts: "/".join(parts) + ".py"
)
HASHES = st.one_of(
    st.just(""), st.text(alphabet=LOWER + "_-", min_size=6, max_size=6).map("sha256=".__add__)
)
VERSIONS = st.lists(st.integers(0, 20), min_size=1, max_size=3).map(
    lambda parts: ".".join(map(str, parts))
)


@st.composite
def distributions(draw):
    version = draw(VERSIONS)
    if draw(st.booleans()):
        entries = draw(st.dictionaries(PATHS, HASHES, max_size=6))
        return {
            "version": version,
            "record_sha256": envlock.entries_sha256(list(entries.items())),
            "files": len(entries),
            "entries": entries,
        }
    digest = format(draw(st.integers(0, 2**256 - 1)), "064x")
    files = draw(st.integers(min_value=envlock.ENTRY_LIMIT + 1, max_value=20_000))
    return {"version": version, "record_sha256": digest, "files": files}


@st.composite
def locks(draw):
    python = {field: draw(st.text(min_size=1, max_size=8)) for field in envlock.PYTHON_FIELDS}
    python |= draw(st.dictionaries(st.sampled_from(envlock.CUSTOMIZE_FIELDS), st.text(max_size=8)))
    return {"python": python, "distributions": draw(st.dictionaries(NAMES, distributions()))}


@settings(max_examples=100, deadline=None)
@given(locks())
def test_a_lock_has_no_problem_with_itself(lock):
    validate(lock, envlock.LOCK_SCHEMA, source="generated lock")
    assert envlock.lock_problems(lock, copy.deepcopy(lock)) == []


def _changed(entry: dict, how: str, data) -> tuple[dict, str | None]:
    """``entry`` with one change of kind ``how``, and the file a problem must name (if any)."""
    entry = copy.deepcopy(entry)
    if how == "version":
        entry["version"] += ".1"
        return entry, None
    if "entries" not in entry:
        entry["record_sha256"] = format(int(entry["record_sha256"], 16) ^ 1, "064x")
        return entry, None
    entries = entry["entries"]
    if how == "file" and entries:
        path = data.draw(st.sampled_from(sorted(entries)))
        entries[path] = "sha256=" + ("x" if entries[path] != "sha256=x" else "y")
    elif how == "remove" and entries:
        path = data.draw(st.sampled_from(sorted(entries)))
        del entries[path]
    else:
        path = data.draw(PATHS.filter(lambda p: p not in entries))
        entries[path] = "sha256=new"
    entry.update(record_sha256=envlock.entries_sha256(list(entries.items())), files=len(entries))
    return entry, path


@settings(max_examples=150, deadline=None)
@given(locks(), st.sampled_from(["add", "remove-dist", "version", "file", "remove"]), st.data())
def test_one_change_to_one_distribution_is_exactly_one_problem_naming_it(bound, how, data):
    now = copy.deepcopy(bound)
    dists = now["distributions"]
    if how == "add" or not dists:
        name = data.draw(NAMES.filter(lambda n: n not in dists))
        dists[name] = data.draw(distributions())
        file = None
    else:
        name = data.draw(st.sampled_from(sorted(dists)))
        if how == "remove-dist":
            del dists[name]
            file = None
        else:
            dists[name], file = _changed(dists[name], how, data)
    problems = envlock.lock_problems(bound, now)
    assert len(problems) == 1, problems
    assert f"distribution {name} " in problems[0], problems
    if file is not None:
        assert f"{file} (" in problems[0], problems


def test_the_header_fields_of_every_installed_distribution_are_importlib_metadatas():
    """The lock reads Name and Version from the header block only; for every distribution
    installed here they are what importlib.metadata reads from the whole file."""
    seen = 0
    for dist in importlib.metadata.distributions():
        headers = envlock.metadata_headers(dist)
        assert (headers.get("Name"), headers.get("Version")) == (
            dist.metadata["Name"],
            dist.version,
        ), getattr(dist, "_path", dist)
        seen += 1
    assert seen > 10, "this environment lists its installed distributions"


class _Metadata(importlib.metadata.Distribution):
    """A distribution whose METADATA is ``text``."""

    def __init__(self, text: str) -> None:
        self.text = text

    def read_text(self, filename):
        return self.text if filename == "METADATA" else None

    def locate_file(self, path):
        return Path(path)


_FIELD = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    name=_FIELD.filter(lambda s: ":" not in s),
    version=_FIELD.filter(lambda s: ":" not in s),
    extra=st.lists(st.sampled_from(["Summary: x", "License: MIT", "Requires-Dist: a>=1"])),
    body=st.text(max_size=200),
    newline=st.sampled_from(["\n", "\r\n"]),
)
def test_header_only_parsing_gives_the_whole_files_name_and_version(
    name, version, extra, body, newline
):
    """However long the description after the blank line, and whatever it holds (header-like
    lines, blank lines, Windows line ends), Name and Version are the whole parse's."""
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", *extra]
    text = newline.join(lines) + newline + newline + body.replace("\r", "")
    dist = _Metadata(text)
    headers = envlock.metadata_headers(dist)
    assert headers.get("Name") == dist.metadata["Name"] == name
    assert headers.get("Version") == dist.version == version


def test_the_lock_is_read_once_while_unchanged_and_again_after_a_forged_rewrite(
    tmp_path, site, monkeypatch
):
    """The gate's lock and the run's end share one reading of every RECORD; a RECORD rewritten
    in place with its size and modification time restored (an attacker hiding a change from
    a cheaper proof) is read again, and the lock names the change."""
    _install_copy(tmp_path, site, "copy-a", "toylocked", "1.0", KIND, KIND_POINTS)
    reads = []
    read = envlock._distributions
    monkeypatch.setattr(envlock, "_distributions", lambda dirs: reads.append(dirs) or read(dirs))
    first = envlock.lock()
    assert envlock.lock() == first and len(reads) == 1
    record = site / "toylocked-1.0.dist-info" / "RECORD"
    status = record.stat()
    data = record.read_bytes()
    forged = data.replace(b"toylocked_mod.py,sha256=", b"toylocked_mod.py,sha256=X", 1)[:-1]
    assert len(forged) == len(data) and forged != data
    record.write_bytes(forged)
    os.utime(record, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert record.stat().st_size == status.st_size
    again = envlock.lock()
    assert len(reads) == 2
    assert envlock.lock_problems(first, again), "the rewritten RECORD is a difference"
