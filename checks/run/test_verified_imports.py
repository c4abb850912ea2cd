"""What a research run's loaders compiled from its snapshot is recorded as they read it
(:mod:`prereg.evidence.imports`), so the execution check compares the bytes that ran with
the commit, not the file as it is later.

Each scenario runs in a fresh interpreter: watching replaces the process's path hook.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prereg.base import gitrepo
from prereg.evidence import imports

pytestmark = [pytest.mark.software, pytest.mark.attack]

COMMITTED = b"VALUE = 'committed'\n"


def run_scenario(folder: Path, body: str) -> dict:
    """Run ``body`` in a fresh interpreter with ``folder`` on sys.path and watched; it sets
    ``out`` (a dict), printed back as JSON."""
    script = (
        textwrap.dedent(
            """
        import importlib, json, sys
        from prereg.evidence import imports
        from prereg.base import gitrepo
        FOLDER = sys.argv[1]
        sys.path.insert(0, FOLDER)
        out = {}
        """
        )
        + textwrap.dedent(body)
        + "\nprint(json.dumps(out))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(folder)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def committed_blob() -> str:
    return gitrepo.object_id("blob", COMMITTED, "sha1")


@given(st.binary(max_size=2048))
def test_blob_ids_are_gits_object_ids_in_both_formats(data):
    ids = imports.blob_ids(data)
    assert ids == {alg: gitrepo.object_id("blob", data, alg) for alg in ("sha1", "sha256")}


def test_a_module_swapped_before_its_import_and_restored_after_is_named(tmp_path):
    (tmp_path / "stage.py").write_bytes(COMMITTED)
    out = run_scenario(
        tmp_path,
        f"""
        from pathlib import Path
        imports.watch(FOLDER)
        path = Path(FOLDER, "stage.py")
        path.write_bytes(b"VALUE = 'forged'\\n")
        import stage
        path.write_bytes({COMMITTED!r})  # every later look sees the committed bytes
        out["ran"] = stage.VALUE
        out["verdict"] = imports.verdict(path, {committed_blob()!r}, "sha1")
        """,
    )
    assert out["ran"] == "forged"
    assert "compiled from bytes that are not the committed file's" in out["verdict"]


def test_a_module_compiled_from_the_committed_bytes_and_changed_later_is_not_blamed_here(tmp_path):
    # A later change is the snapshot's proof's concern (the tree at the end); what ran was
    # the committed bytes.
    (tmp_path / "stage.py").write_bytes(COMMITTED)
    out = run_scenario(
        tmp_path,
        f"""
        from pathlib import Path
        imports.watch(FOLDER)
        import stage
        Path(FOLDER, "stage.py").write_bytes(b"VALUE = 'later'\\n")
        out["verdict"] = imports.verdict(Path(FOLDER, "stage.py"), {committed_blob()!r}, "sha1")
        """,
    )
    assert out["verdict"] is None


def test_cached_bytecode_in_the_snapshot_is_never_run(tmp_path):
    # A committed __pycache__ entry whose header matches the source (mtime and size) would be
    # run instead of the source by Python's own loader.
    (tmp_path / "stage.py").write_bytes(COMMITTED)
    out = run_scenario(
        tmp_path,
        """
        import importlib.util, marshal, os
        from pathlib import Path
        source = Path(FOLDER, "stage.py")
        forged = compile("VALUE = 'from a planted pyc'", str(source), "exec")
        pyc = Path(importlib.util.cache_from_source(str(source)))
        pyc.parent.mkdir()
        stat = source.stat()
        header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
        header += int(stat.st_mtime).to_bytes(4, "little") + stat.st_size.to_bytes(4, "little")
        pyc.write_bytes(header + marshal.dumps(forged))
        imports.watch(FOLDER)
        import stage
        out["ran"] = stage.VALUE
        """,
    )
    assert out["ran"] == "committed"


def test_a_module_no_covered_loader_read_is_named_and_one_loaded_before_the_watch_is_not(
    tmp_path,
):
    (tmp_path / "early.py").write_bytes(COMMITTED)
    (tmp_path / "stage.py").write_bytes(COMMITTED)
    out = run_scenario(
        tmp_path,
        f"""
        import importlib.util
        from pathlib import Path
        import early  # before the watch: judged by its file as it is, not here
        imports.watch(FOLDER)
        spec = importlib.util.spec_from_file_location("stage", Path(FOLDER, "stage.py"))
        module = importlib.util.module_from_spec(spec)  # Python's plain loader: no record
        spec.loader.exec_module(module)
        blob = {committed_blob()!r}
        out["early"] = imports.verdict(Path(FOLDER, "early.py"), blob, "sha1")
        out["stage"] = imports.verdict(Path(FOLDER, "stage.py"), blob, "sha1")
        out["outside"] = imports.verdict(Path(FOLDER).parent / "elsewhere.py", blob, "sha1")
        """,
    )
    assert out["early"] is None and out["outside"] is None
    assert "loaded by a loader that does not show prereg the bytes it compiled" in out["stage"]
