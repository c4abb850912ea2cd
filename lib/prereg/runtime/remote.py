"""A research stage across hosts: xdist workers on other machines, each proving its own state.

pytest-xdist starts workers through execnet gateways (``--tx socket=HOST:PORT//chdir=DIR``,
``--tx ssh=HOST//python=PY//chdir=DIR``). A *remote* worker (any spec that is not a plain
``popen``) runs in its own checkout, with its own interpreter and packages, and shares no
file system with the controller. So:

* **Proof before spending.** When xdist opens a remote gateway, the controller runs
  :func:`prove` in that gateway's interpreter (the very process that then runs the worker)
  before the worker starts: its checkout (the gateway's folder) must hold the approval
  record byte-equal to the approved one and pass the gate's source and environment
  conditions (:data:`WORKER_CONDITIONS`: plan hash, baseline, clean tree, HEAD at the anchor
  or beyond it only by the approval record, the checkout's own ``prereg``, the committed
  record, deviations named in the approval, the loaded code of
  :func:`prereg.evidence.execution.problems`, and the bound inputs and required runs, which must
  be present on that host: copy ``runs/<run-id>/`` of each required run into its clone and
  fetch ``refs/prereg/*``); the ``prereg`` package it imports must be
  byte-equal to the controller's (:func:`package_files`) and the stage kind must come from
  the same file; ``PYTEST_ADDOPTS`` and ``PYTEST_PLUGINS`` must equal the controller's.
  The controller refuses the run with condition ``worker`` before the run id is spent,
  naming the worker, its spec and each difference.
* **Its own snapshot.** A worker whose checkout passes writes a snapshot of the commit the
  controller's session runs from its own git objects (each re-hashed), proves the
  snapshot's tree id equals the controller's, and moves into it (:func:`enter`) before
  xdist starts it: it collects and runs from the snapshot, so nothing done to its working
  tree after the proof reaches the run. The manifest records each worker's ``snapshot``
  (commit, tree, folder); the audit compares its tree with the source commit's. Once it has
  collected, the worker judges the code it loaded and reports it with its collection, before
  the run id is spent (:func:`prereg.runtime.items.judge_worker_collection`); it judges again
  before its first item (the research fixture), where a failure errors its items.
* **Outputs through xdist's channel.** A remote worker writes an item's outputs into a
  private temporary folder; the item report carries them back in ``user_properties``
  (:func:`pack`: chunks of :data:`CHUNK_BYTES`, at most :data:`MAX_ITEM_BYTES` per item;
  beyond it the item's record says so and the run is ``incomplete``). The controller
  writes them into ``runs/<run-id>/items/<item>/`` (:func:`unpack`) and hashes them there
  as for local workers, comparing with the worker's own hashes.
* **Records.** Each gateway's :func:`describe` (spec, host, checkout, Python, pinned
  package versions, thread variables) goes into the manifest's ``environment.workers``;
  each item names the worker that ran it.

xdist copies pytest itself into a remote worker's folder (its implicit rsync roots),
which would put untracked code into the checkout: the controller switches that off;
``--rsyncdir`` is refused by the gate (:mod:`prereg.evidence.execution`). Local ``popen`` workers
share the controller's checkout and environment and keep writing into the run folder
directly (an interrupted item's partial outputs stay visible there).
"""

from __future__ import annotations

import atexit
import base64
import dataclasses
import hashlib
import json
import os
import platform
import shutil
import socket
import sys
import tempfile
from pathlib import Path, PurePosixPath

import prereg
from prereg.base import gitrepo, provenance
from prereg.base.hashing import read_json
from prereg.decisions import gate
from prereg.evidence import execution, hermetic
from prereg.kinds.stages import kind_origin, load_kind
from prereg.records import snapshot as snapshots

# Bytes of one output file carried by one user property (base64 adds a third).
CHUNK_BYTES = 1 << 20
# Total bytes of one item's outputs a remote worker sends back; beyond it the item's record
# names the size and the run ends incomplete (write less, or run that stage on one host).
MAX_ITEM_BYTES = 256 << 20
OUTPUT_PROPERTY = "prereg-output"
# The gate's conditions a remote worker's checkout and environment must pass.
WORKER_CONDITIONS = (
    gate.plan_hash,
    gate.baseline,
    gate.clean_tree,
    gate.approved_source,
    gate.own_package,
    gate.record_committed,
    gate.stage_and_run_id,
    gate.environment,
    gate.executed_code,
    gate.inputs,  # bound inputs and required runs, as this host sees them
)
# How long the controller waits for a remote worker's proof (it hashes its checkout).
PROOF_TIMEOUT_SECONDS = 600
# Variables that change what a worker's pytest loads: equal to the controller's.
LOADING_VARIABLES = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")

PROVE_SOURCE = """
import json, sys
served_before = getattr(sys, "_prereg_proved", False)
sys._prereg_proved = True
from prereg.runtime import remote
state = remote.prove(**json.loads(channel.receive()))
if served_before:
    state["problems"].append(remote.SERVED_BEFORE)
channel.send(json.dumps(state, sort_keys=True))
"""
SERVED_BEFORE = (
    "its interpreter already served a run (a socket server that serves connections in a loop "
    "keeps the modules of earlier runs loaded): start a fresh one for each run, e.g. "
    "python -m prereg.runtime.remote HOST:PORT, which serves one connection and exits"
)
# A local worker's interpreter imports prereg from where the controller does (a hermetic
# session's snapshot), so its sys.path is the controller's before anything is imported;
# xdist then sets the same sys.path for the worker itself.
DESCRIBE_SOURCE = """
import json, sys
sys.path[:] = json.loads(channel.receive())
from prereg.runtime import remote
channel.send(json.dumps(remote.describe(), sort_keys=True))
"""


def is_remote(spec: object) -> bool:
    """A gateway spec (``execnet.XSpec``) whose worker does not share this checkout."""
    return not getattr(spec, "popen", False) or bool(getattr(spec, "chdir", None))


def spec_text(spec: object) -> str:
    """The spec as the user gave it (xdist prefixes ``execmodel=...//``)."""
    text = str(getattr(spec, "_spec", spec))
    parts = [p for p in text.split("//") if not p.startswith("execmodel=")]
    return "//".join(parts)


def package_files() -> dict[str, str]:
    """SHA-256 of every Python file of the imported ``prereg`` package, by relative path."""
    top = Path(prereg.__file__).resolve().parent
    return {
        p.relative_to(top).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(top.rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def kind_file(kind: str) -> dict:
    """Where stage kind ``kind`` comes from here, and the SHA-256 of that file."""
    load_kind(kind)
    origin = dict(kind_origin(kind))
    path = origin.get("file")
    if path and os.path.isfile(path):
        origin["sha256"] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        origin.pop("file")  # the path differs between hosts; the bytes may not
    return origin


def describe() -> dict:
    """This interpreter's host, folder, Python, pinned packages and thread variables."""
    return {
        "host": socket.gethostname(),
        "checkout": os.getcwd(),
        "python": platform.python_version(),
        "executable": sys.executable,
        "packages": provenance.pinned_environment(),
        "prereg_package": str(Path(prereg.__file__).resolve().parent),
        "thread_variables": {n: os.environ.get(n) for n in provenance.THREAD_VARIABLES},
        "cpu_count": os.cpu_count(),
    }


def prove(
    *,
    approval_rel: str,
    approval_sha256: str,
    stage: str,
    package: dict[str, str],
    kind: dict,
    variables: dict[str, str | None],
    threads: int,
    commit: str | None = None,
    tree: str | None = None,
) -> dict:
    """Run in a remote worker's interpreter, in its checkout: its description and every
    way it differs from the approved state the controller passed (``problems``). The
    stage's thread variables are set first, as the controller sets them for local workers.

    With the controller's snapshot ``commit`` and ``tree`` (a hermetic session), a worker
    whose checkout passes writes its own snapshot of ``commit`` from its git objects,
    proves its tree id equals ``tree`` and moves into it (:func:`enter`): the worker then
    collects and runs from the snapshot, never from its working tree."""
    provenance.set_thread_environment(threads)
    state = describe()
    problems: list[str] = []
    root = Path(os.getcwd())
    checkout = execution.Checkout.read(root, strict=True)
    if checkout is None:
        state["problems"] = [f"its folder {root} is not a git checkout: clone the project there"]
        return state
    top = Path(checkout.top)
    state["checkout"] = str(top)
    record_path = top / approval_rel
    if not record_path.is_file():
        problems.append(f"its checkout has no approval record {approval_rel}: pull the approval")
    elif hashlib.sha256(record_path.read_bytes()).hexdigest() != approval_sha256:
        problems.append(
            f"its {approval_rel} differs from the approved record: check out the approved commit"
        )
    else:
        record = read_json(record_path, what="approval record")
        facts = gate.gather(top, record, record_path, stage=stage, consult_remotes=False).facts
        # The gateway's __main__ is execnet's bootstrap (ssh, popen: code on the command line).
        bootstrap = set(execution._main_problems())
        found = [p for p in facts.execution_problems if p not in bootstrap]
        facts = dataclasses.replace(facts, execution_problems=tuple(found))
        problems += [str(r) for r in gate.check(facts, WORKER_CONDITIONS)]
    mine = package_files()
    differ = sorted(
        f for f in set(mine) | set(package) if mine.get(f) != package.get(f)
    )  # fmt: skip
    if differ:
        problems.append(
            f"the prereg package it imports ({state['prereg_package']}) differs from the "
            f"controller's in {', '.join(differ[:8])}: install the approved prereg there"
        )
    try:
        here = kind_file(kind["name"])
    except Exception as err:  # noqa: BLE001 -- a kind that does not load is a difference
        here = {"error": f"{type(err).__name__}: {err}"}
    if {k: v for k, v in here.items() if k != "name"} != {
        k: v for k, v in kind.items() if k != "name"
    }:
        problems.append(f"its stage kind {kind['name']!r} is {here}, the controller's {kind}")
    for name, value in sorted(variables.items()):
        if os.environ.get(name) != value:
            problems.append(
                f"{name} is {os.environ.get(name)!r} there, {value!r} on the controller: start "
                "the worker with the controller's value"
            )
    if commit is not None and not problems:
        problems += _own_snapshot(top, commit, tree, state)
    state["problems"] = problems
    return state


def _own_snapshot(top: Path, commit: str, tree: str | None, state: dict) -> list[str]:
    """Write and prove this host's snapshot of ``commit``, record it in ``state`` and move
    into it; the problems that stop that."""
    try:
        written = snapshots.materialise(top, commit)
    except (snapshots.SnapshotError, gitrepo.GitError, OSError) as err:
        problem = (
            f"its snapshot of the approved commit {commit} could not be written from its "
            f"repository ({err}): fetch that commit there (git fetch), or free space in "
            f"{tempfile.gettempdir()}"
        )
        return [problem]
    if written.tree != tree:  # each object it wrote was re-hashed to its id as it was read
        snapshots.remove(written.folder)
        problem = (
            f"its snapshot of {commit} has tree {written.tree}, the controller's {tree}: its "
            "repository's objects differ from the controller's (git fsck there)"
        )
        return [problem]
    state["snapshot"] = {"commit": commit, "tree": written.tree, "folder": str(written.folder)}
    enter(top, written.folder)
    return []


def enter(top: Path, folder: Path) -> None:
    """Make this interpreter run from the snapshot ``folder`` of the checkout ``top``: the
    current folder, every ``sys.path`` entry inside the checkout (translated to the same
    place in the snapshot, dropped when the snapshot has none), and the modules already
    loaded from the checkout (forgotten, so they load again from the snapshot). Caches
    libraries keep in the current folder go beside it, as in a session. The snapshot is
    deleted when the interpreter exits."""
    top, folder = Path(top).resolve(), Path(folder)

    def inside(path: str) -> Path | None:
        try:
            return Path(os.path.realpath(path or os.getcwd())).relative_to(top)
        except ValueError:
            return None

    entries = []
    for entry in sys.path:
        rel = inside(entry)
        if rel is None:
            entries.append(entry)
        elif (folder / rel).is_dir():
            entries.append(str(folder / rel))
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None)
        rel = inside(origin) if origin else None
        if rel is None:
            continue
        del sys.modules[name]
        if "." not in name:  # a top-level module found by a finder that is not sys.path's
            home = str(folder / rel.parent.parent if rel.name == "__init__.py" else rel.parent)
            if home not in entries:
                entries.insert(0, home)
    sys.path[:] = entries
    os.environ.update(hermetic.cache_variables(folder))  # hypothesis: never into the snapshot
    sys.dont_write_bytecode = True  # nor __pycache__ (a session runs with python -B)
    os.chdir(folder)
    atexit.register(snapshots.remove, folder)


def run_on_gateway(gateway: object, source: str, payload: dict | None) -> dict:
    """Execute ``source`` in the gateway's interpreter and return the JSON it sends."""
    channel = gateway.remote_exec(source)
    try:
        if payload is not None:
            channel.send(json.dumps(payload))
        result = json.loads(channel.receive(timeout=PROOF_TIMEOUT_SECONDS))
        channel.waitclose(timeout=PROOF_TIMEOUT_SECONDS)
        return result
    finally:
        if not channel.isclosed():
            channel.close()


# -- outputs through the item report -----------------------------------------------------------


class TooLarge(ValueError):
    """An item's outputs exceed :data:`MAX_ITEM_BYTES`."""


def pack(folder: Path, limit: int = MAX_ITEM_BYTES) -> list[str]:
    """The files below ``folder`` as JSON chunks (``path``, ``part``, ``parts``, ``data``)."""
    files = sorted(p for p in Path(folder).rglob("*") if p.is_file()) if folder.exists() else []
    total = sum(p.stat().st_size for p in files)
    if total > limit:
        raise TooLarge(
            f"the item's outputs total {total} bytes, beyond the {limit} bytes a remote worker "
            "sends back per item (prereg.runtime.remote.MAX_ITEM_BYTES): write less per item, or run "
            "this stage on one host"
        )
    chunks = []
    for path in files:
        data = path.read_bytes()
        rel = path.relative_to(folder).as_posix()
        parts = max(1, -(-len(data) // CHUNK_BYTES))
        for part in range(parts):
            piece = data[part * CHUNK_BYTES : (part + 1) * CHUNK_BYTES]
            chunks.append(
                json.dumps(
                    {
                        "path": rel,
                        "part": part,
                        "parts": parts,
                        "data": base64.b64encode(piece).decode("ascii"),
                    },
                    sort_keys=True,
                )
            )
    return chunks


def unpack(chunks: list[str], folder: Path) -> list[str]:
    """Write the chunks of :func:`pack` below ``folder``; return the problems found."""
    problems = []
    files: dict[str, dict[int, bytes]] = {}
    counts: dict[str, int] = {}
    for text in chunks:
        chunk = json.loads(text)
        rel = PurePosixPath(chunk["path"])
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            problems.append(f"an output path {chunk['path']!r} leaves the item folder: not written")
            continue
        files.setdefault(str(rel), {})[chunk["part"]] = base64.b64decode(chunk["data"])
        counts[str(rel)] = chunk["parts"]
    for rel, parts in sorted(files.items()):
        if sorted(parts) != list(range(counts[rel])):
            problems.append(f"output {rel} arrived in {len(parts)} of {counts[rel]} parts")
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"".join(parts[i] for i in sorted(parts)))
    return problems


def discard(folder: Path | None) -> None:
    """Remove a remote worker's private output folder once its files are packed."""
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def serve(hostport: str) -> None:
    """execnet's socket server, serving one connection (one run's worker) and exiting."""
    # execnet: only in a remote worker's socket server (import prereg.plugin does not load it)
    from execnet.gateway_base import get_execmodel
    from execnet.script import socketserver

    socketserver.execmodel = get_execmodel("thread")  # as its own __main__ block sets it
    socketserver.startserver(
        socketserver.bind_and_listen(hostport, socketserver.execmodel), loop=False
    )


if __name__ == "__main__":
    if len(sys.argv) != 2 or ":" not in sys.argv[1]:
        sys.exit(
            "usage: python -m prereg.runtime.remote HOST:PORT  (run it in the host's checkout)"
        )
    serve(sys.argv[1])
