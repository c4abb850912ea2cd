"""Hermetic runs: a research run executes a verified snapshot of the approved commit.

Each check performs the attack for real in a scratch repository: the run must execute the
committed bytes whatever the working tree does, a session not started from a snapshot is
refused, a snapshot changed during the run is named, and a gate switched off from inside
the run is still found by the audit, which re-judges the recorded conditions.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import prereg
from prereg.base import gitrepo
from prereg.evidence import hermetic
from prereg.records import ledger
from prereg.records import snapshot as snapshots
from prereg.runtime import option_policy, roles
from prereg.testing import terminal_signals
from support.toy import left_behind, make_toy_repo, private_tmp, stage_spec

pytestmark = [pytest.mark.software, pytest.mark.attack]

RUN = "toy-20261201-001"
# A stage module that records where its code and environment come from.
PROBE = """
import json, os, sys
from pathlib import Path
import pytest
from prereg.plugin import project_root, stage_plan

pytestmark = pytest.mark.research_stage("toy")


def pytest_generate_tests(metafunc):
    if "cell" in metafunc.fixturenames:
        params = stage_plan(metafunc.config).stage("toy")["parameters"]
        metafunc.parametrize("cell", range(params["cells"]), ids=lambda c: f"cell{c}")


def test_cell(cell, research, pytestconfig):
    research.coords(cell=cell)
    import prereg
    (research.outputs / "probe.json").write_text(json.dumps({
        "module": str(Path(__file__).resolve()),
        "prereg": str(Path(prereg.__file__).resolve()),
        "rootpath": str(pytestconfig.rootpath),
        "project": str(project_root(pytestconfig)),
        "environ": sorted(os.environ),
        "sys_path": sys.path,
        "home": str(Path.home()),
        "tmp": __import__("tempfile").gettempdir(),
    }))
    how = research.parameters["misbehave"].get(str(cell))
    if how == "edit-snapshot":
        mine = Path(__file__)
        mine.chmod(0o644)
        with mine.open("a") as handle:
            handle.write("# appended during the run\\n")
    if how == "breakpoint":
        breakpoint()
    if how == "pdb":
        import pdb
        pdb.set_trace()
    if how == "Pdb":
        import pdb
        pdb.Pdb().runcall(print, "typed at a prompt")
"""


def _probe_repo(root: Path, misbehave: dict[int, str] | None = None, cells: int = 2):
    """The probe stage of ``cells`` items; item ``c`` misbehaves as ``misbehave[c]`` says."""
    hows = {str(cell): how for cell, how in (misbehave or {}).items()}
    spec = stage_spec("toy", parameters={"cells": cells, "misbehave": hows})
    toy = make_toy_repo(root, {"toy": spec})
    (root / spec["module"]).write_text(PROBE)
    toy.commit("Probe stage")
    toy.approve("toy", RUN)
    return toy


def _probe(toy, cell: int = 0) -> dict:
    return json.loads(
        (toy.run_dir(RUN) / "items" / f"test_cell[cell{cell}]" / "probe.json").read_text()
    )


def test_a_run_executes_the_committed_snapshot_in_an_allow_listed_environment(tmp_path):
    toy = _probe_repo(tmp_path / "p")
    done = toy.pytest(
        "--research-stage=toy",
        env={"SECRET_TOKEN": "x", "GIT_AUTHOR_NAME": "y", "PYTEST_ADDOPTS": "-v"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = toy.manifest(RUN)
    head = toy.git("rev-parse", "HEAD").strip()
    tree = toy.git("rev-parse", "HEAD^{tree}").strip()
    ran = manifest["environment"]["snapshot"]
    assert (ran["commit"], ran["tree"], ran["tree_at_end"]) == (head, tree, tree)
    probe = _probe(toy)
    folder = Path(ran["folder"])
    assert folder.name.startswith(snapshots.PREFIX)
    assert Path(probe["module"]).is_relative_to(folder)
    assert Path(probe["rootpath"]) == folder and Path(probe["project"]) == toy.root
    assert not folder.exists(), "the snapshot is deleted when the session ends"
    leaked = {"SECRET_TOKEN", "PYTEST_ADDOPTS", "PYTHONPATH", "GIT_AUTHOR_NAME"}
    assert leaked.isdisjoint(probe["environ"]), probe["environ"]
    # A home and a temporary folder of its own, beside the snapshot and deleted with it.
    scratch = snapshots.scratch(folder)
    assert (Path(probe["home"]), Path(probe["tmp"])) == (scratch / "home", scratch / "tmp")
    assert not scratch.exists()
    assert manifest["environment"]["execution"]["PYTEST_ADDOPTS"] is None
    assert manifest["environment"]["execution"]["verified_import_folders"] == [str(folder)]
    audit = toy.audit(RUN)
    assert audit.returncode == 0, audit.stdout


def test_an_edit_hidden_from_git_status_does_not_run(tmp_path):
    """``git update-index --assume-unchanged`` on an edited stage module: the gate refuses the
    dirty tree, and whatever the working tree holds, the snapshot is the committed blob."""
    toy = _probe_repo(tmp_path / "p")
    module = toy.root / "experiments" / "test_toy.py"
    module.write_text(module.read_text() + "\nraise SystemExit('the edited module ran')\n")
    toy.git("update-index", "--assume-unchanged", "experiments/test_toy.py")
    assert toy.git("status", "--porcelain") == "", "git itself is fooled"
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "[clean-source]" in done.stderr and "experiments/test_toy.py" in done.stderr
    assert not ledger.is_spent(toy.root, RUN)
    folder = snapshots.materialise(toy.root, toy.git("rev-parse", "HEAD").strip())
    try:
        assert (
            "the edited module ran" not in (folder.folder / "experiments/test_toy.py").read_text()
        )
    finally:
        snapshots.remove(folder.folder)


def test_a_session_not_started_from_a_snapshot_is_refused(tmp_path):
    """The session's internal option typed by hand, in the working tree: no snapshot, refused."""
    toy = _probe_repo(tmp_path / "p")
    done = toy.pytest("--research-stage=toy", f"{roles.CHECKOUT_OPTION}={toy.root}")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "[hermetic]" in done.stderr and snapshots.NOT_A_SNAPSHOT in done.stderr
    assert not ledger.is_spent(toy.root, RUN)


def test_a_snapshot_changed_during_the_run_ends_it_incomplete_and_is_an_audit_finding(tmp_path):
    toy = _probe_repo(tmp_path / "p", {1: "edit-snapshot"})
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 1, done.stdout + done.stderr
    manifest = toy.manifest(RUN)
    assert manifest["status"] == "incomplete"
    assert any("changed during the run" in r for r in manifest["incomplete_reasons"])
    audit = toy.audit(RUN)
    assert audit.returncode == 1, audit.stdout
    assert "environment.snapshot.tree_at_end: the snapshot the run executed changed" in audit.stdout


# Stands in for a hand outside the run (root, another process): once the session has proved
# its snapshot, the stage module there is swapped for a forged one, and the committed bytes
# are put back as soon as collection has imported it, so every later look at the file (the
# execution check at collection and at the end, the tree at the end) sees the committed file.
SWAP_AFTER_PROOF = """
import pytest

MODULE = "experiments/test_toy.py"


def _collects_and_swaps(config):
    # The process that collects from the snapshot: the session when serial, else the first
    # worker (each worker proves the snapshot itself once it has collected).
    if not config.rootpath.name.startswith("prereg-snapshot-"):
        return False
    worker = getattr(config, "workerinput", None)
    if worker is not None:
        return worker["workerid"] == "gw0"
    return not config.getoption("numprocesses", None)


@pytest.hookimpl(trylast=True)  # after the controller's gate proved the snapshot
def pytest_sessionstart(session):
    config = session.config
    if _collects_and_swaps(config):
        path = config.rootpath / MODULE
        config.committed_bytes = path.read_bytes()
        path.chmod(0o644)
        path.write_bytes(config.committed_bytes.replace(b'{"x":', b'{"forged": 1, "x":'))


@pytest.hookimpl(tryfirst=True)  # before prereg judges what collection loaded
def pytest_collection_modifyitems(config, items):
    if hasattr(config, "committed_bytes"):
        (config.rootpath / MODULE).write_bytes(config.committed_bytes)
        (config.rootpath / MODULE).chmod(0o444)
"""


@pytest.mark.parametrize(
    "workers, condition",
    [([], "[execution]"), (["-n", "2"], "[worker] worker gw0")],
    ids=["serial", "two-workers"],
)
def test_a_module_swapped_in_the_snapshot_between_its_proof_and_its_import_is_refused(
    tmp_path, workers, condition
):
    # What the loader compiled is compared with the commit, not the file as it is later:
    # the swapped module ran forged code while every later look saw the committed bytes.
    toy = make_toy_repo(tmp_path / "toy")
    (toy.root / "conftest.py").write_text(SWAP_AFTER_PROOF)
    toy.commit("A conftest that swaps the stage module after the snapshot's proof")
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy", *workers)
    said = done.stdout + done.stderr
    assert done.returncode == 4, said
    assert condition in said and "experiments/test_toy.py" in said, said
    assert "was compiled from bytes that are not the committed file's" in said, said
    assert not ledger.is_spent(toy.root, RUN)


DEBUGGERS = {1: "breakpoint", 2: "pdb", 3: "Pdb"}  # item -> the debugger entry it calls


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "two-workers"])
def test_every_debugger_entry_in_an_item_refuses_and_reads_no_pdbrc(tmp_path, workers):
    """breakpoint(), pdb.set_trace() and a Pdb run by hand refuse, in the session and in
    the workers, each in an item of its own; the user's ~/.pdbrc, whose commands would have
    replaced the results, is never read (the run has a home of its own)."""
    toy = _probe_repo(tmp_path / "p", DEBUGGERS, cells=1 + len(DEBUGGERS))
    home = tmp_path / "home"
    home.mkdir()
    marker = tmp_path / "pdbrc-ran"
    (home / ".pdbrc").write_text(
        f"import pathlib; pathlib.Path({str(marker)!r}).touch()\ncontinue\n"
    )
    done = toy.pytest("--research-stage=toy", *workers, env={"HOME": str(home)})
    assert done.returncode == 1, done.stdout + done.stderr
    failed = [i for i in toy.manifest(RUN)["items"] if i["outcome"] != "passed"]
    assert sorted(i["nodeid"] for i in failed) == [
        f"experiments/test_toy.py::test_cell[cell{cell}]" for cell in sorted(DEBUGGERS)
    ]
    # pytest's report of each failed item, up to the next one's header
    reports = done.stdout.split(" test_cell[cell")[1:]
    for cell in DEBUGGERS:
        (report,) = [r for r in reports if r.startswith(f"{cell}] _")]
        assert hermetic.DEBUGGER_REFUSED in report, report
    assert not marker.exists()


EVIL = """
import prereg.evidence.execution, prereg.decisions.gate, prereg.runtime.option_policy
prereg.decisions.gate.check = lambda *args, **kwargs: []
prereg.runtime.option_policy.refused_options = lambda *args, **kwargs: []
prereg.evidence.execution.problems = lambda *args, **kwargs: []
"""


def test_a_gate_switched_off_from_inside_the_run_is_found_by_the_audit(tmp_path):
    """A plugin from outside the checkout that replaces ``prereg.decisions.gate.check`` runs a
    session in the working tree: nothing refuses, but the audit re-judges the recorded
    conditions."""
    toy = _probe_repo(tmp_path / "p")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "evil.py").write_text(EVIL)
    done = toy.pytest(
        "--research-stage=toy",
        f"{roles.CHECKOUT_OPTION}={toy.root}",
        env={"PYTHONPATH": str(outside), "PYTEST_ADDOPTS": "-p evil"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    audit = toy.audit(RUN)
    assert audit.returncode == 1, audit.stdout
    for expected in (
        "environment.snapshot.tree:",
        "PYTHONPATH was",
        "PYTEST_ADDOPTS was",
        f"ran from {outside / 'evil.py'}",
        "the session's environment held",
    ):
        assert expected in audit.stdout, (expected, audit.stdout)
    held = next(line for line in audit.stdout.splitlines() if "environment held" in line)
    assert "PYTEST_ADDOPTS" in held and "PYTHONPATH" in held


def test_a_foreign_plugin_forwarded_to_the_session_cannot_load(tmp_path):
    """The launcher's own gate refuses a plugin from PYTHONPATH; were it switched off there,
    the session (no PYTHONPATH) could not even import the plugin: nothing is spent."""
    toy = _probe_repo(tmp_path / "p")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "evil.py").write_text(EVIL)
    done = toy.pytest(
        "--research-stage=toy", env={"PYTHONPATH": str(outside), "PYTEST_ADDOPTS": "-p evil"}
    )
    assert done.returncode != 0, done.stdout + done.stderr
    assert not ledger.is_spent(toy.root, RUN)


# -- the snapshot itself -----------------------------------------------------------------------


def _repo(root: Path) -> Path:
    root.mkdir()
    gitrepo.git(root, "init", "-q")
    gitrepo.git(root, "config", "user.email", "r@example.org")
    gitrepo.git(root, "config", "user.name", "R")
    return root


def _commit(root: Path) -> str:
    gitrepo.git(root, "add", "-A")
    gitrepo.git(root, "commit", "-q", "--allow-empty", "-m", "c")
    return gitrepo.head_commit(root)


names = st.text(alphabet="abcdefgh_.-", min_size=1, max_size=6).filter(
    lambda n: n not in (".", "..", ".git")
)
trees = st.dictionaries(
    st.lists(names, min_size=1, max_size=3).map("/".join),
    st.tuples(st.binary(max_size=64), st.booleans()),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(files=trees)
def test_a_materialised_snapshot_recomputes_to_the_commits_tree(tmp_path_factory, files):
    root = _repo(tmp_path_factory.mktemp("repo") / "r")
    written = {}
    for rel, (data, executable) in files.items():
        path = root / rel
        if any(p.is_file() for p in path.parents if p != root) or path.is_dir():
            continue  # a file where a folder is needed, or the reverse: not a tree
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(0o755 if executable else 0o644)
        written[rel] = data
    commit = _commit(root)
    made = snapshots.materialise(root, commit)
    try:
        assert made.tree == gitrepo.git(root, "rev-parse", "HEAD^{tree}").strip()
        assert snapshots.prove(made.folder, commit).tree == made.tree
        assert {rel: (made.folder / rel).read_bytes() for rel in written} == written
        target = made.folder / min(written)
        target.chmod(0o644)
        target.write_bytes(target.read_bytes() + b"!")
        assert snapshots.prove(made.folder, commit).tree != made.tree
    finally:
        snapshots.remove(made.folder)
    assert not made.folder.exists()


def test_committed_files_of_a_sha256_repository_are_accounted_for(tmp_path):
    """The execution check compares a loaded file with its blob id in the repository's own
    object format (a SHA-1 id would call every file of a sha256 repository changed), in a
    checkout and in a snapshot of it alike."""
    from prereg.evidence import execution

    root = tmp_path / "r"
    root.mkdir()
    gitrepo.git(root, "init", "-q", "--object-format=sha256")
    gitrepo.git(root, "config", "user.email", "r@example.org")
    gitrepo.git(root, "config", "user.name", "R")
    (root / "stage.py").write_text("x = 1\n")
    commit = _commit(root)
    checkout = execution.Checkout.read(root, strict=True)
    assert checkout.algorithm == "sha256"
    assert checkout.check(str((root / "stage.py").resolve())) is None
    made = snapshots.materialise(root, commit)
    try:
        proved = snapshots.prove(made.folder, commit, "sha256")
        env = execution.Environment.read(made.folder, proved)
        assert env.account(str((made.folder / "stage.py").resolve())) is None
    finally:
        snapshots.remove(made.folder)
    (root / "stage.py").write_text("x = 2\n")
    assert "differs from the committed file" in checkout.check(str((root / "stage.py").resolve()))


def test_a_committed_symbolic_link_is_refused_and_nothing_is_left(tmp_path):
    root = _repo(tmp_path / "r")
    (root / "real.py").write_text("x = 1\n")
    (root / "link.py").symlink_to("/etc/hostname")
    commit = _commit(root)
    before = set(Path(snapshots.tempfile.gettempdir()).glob(f"{snapshots.PREFIX}{commit[:12]}*"))
    with pytest.raises(snapshots.SnapshotError, match="link.py .* is a symbolic link"):
        snapshots.materialise(root, commit)
    after = set(Path(snapshots.tempfile.gettempdir()).glob(f"{snapshots.PREFIX}{commit[:12]}*"))
    assert after == before


def test_approving_a_commit_that_holds_a_symbolic_link_is_refused(tmp_path):
    """No run of such a commit could start (its snapshot holds regular files only), so
    ``prereg approve`` refuses it, naming the link, before any record exists."""
    toy = make_toy_repo(tmp_path / "p")
    (toy.root / "experiments" / "shared.py").symlink_to("test_toy.py")
    toy.commit("A link to the stage module")
    done = toy.approve("toy", RUN, check=False)
    assert done.returncode != 0, done.stdout + done.stderr
    assert "[hermetic]" in done.stderr and "experiments/shared.py" in done.stderr, done.stderr
    assert "is a symbolic link" in done.stderr
    assert not (toy.root / "plans" / "approvals" / f"{RUN}.json").exists()


def test_the_snapshots_of_ended_processes_are_swept_by_the_next_materialise(tmp_path):
    """A launcher or an audit killed by SIGKILL leaves its snapshot behind: the next
    snapshot made in the same folder deletes it, and deletes no snapshot whose maker still
    runs, one whose maker's pid now belongs to another process, or one with no owner."""
    root = _repo(tmp_path / "r")
    (root / "stage.py").write_text("x = 1\n")
    commit = _commit(root)
    parent = tmp_path / "tmp"
    parent.mkdir()
    mine = snapshots.materialise(root, commit, parent)
    owner = snapshots.scratch(mine.folder) / snapshots.OWNER
    assert owner.read_text() == snapshots.process_identity(os.getpid())
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    killed, reused, unowned = (snapshots.materialise(root, commit, parent) for _ in range(3))
    (snapshots.scratch(killed.folder) / snapshots.OWNER).write_text(f"{ended.pid} 1")
    (snapshots.scratch(reused.folder) / snapshots.OWNER).write_text(f"{os.getpid()} 1")
    (snapshots.scratch(unowned.folder) / snapshots.OWNER).unlink()
    swept = snapshots.sweep(parent)
    assert sorted(swept) == sorted([killed.folder, reused.folder])
    for gone in (killed, reused):
        assert not gone.folder.exists() and not snapshots.scratch(gone.folder).exists()
    assert mine.folder.is_dir() and unowned.folder.is_dir()
    assert snapshots.read_folder(mine.folder)[0] == mine.tree  # the owner is not in the tree
    for made in (mine, unowned):
        snapshots.remove(made.folder)
    assert list(parent.iterdir()) == []


def test_a_corrupt_object_stops_the_snapshot(tmp_path):
    """A blob's object file rewritten in place with other content under the same id."""
    import zlib

    root = _repo(tmp_path / "r")
    (root / "stage.py").write_text("honest = True\n")
    commit = _commit(root)
    blob = gitrepo.git(root, "rev-parse", "HEAD:stage.py").strip()
    path = root / ".git" / "objects" / blob[:2] / blob[2:]
    forged = b"honest = False\n"
    path.chmod(0o644)
    path.write_bytes(zlib.compress(b"blob %d\0" % len(forged) + forged))
    assert (
        subprocess.run(
            ["git", "-C", str(root), "cat-file", "blob", blob], capture_output=True, check=False
        ).stdout
        == forged
    ), "git itself serves the forged bytes"
    with pytest.raises(gitrepo.GitError, match="corrupt"):
        snapshots.materialise(root, commit)


variable_names = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ_", min_size=1, max_size=12)


@given(
    environ=st.dictionaries(
        st.one_of(
            variable_names,
            variable_names.map(lambda n: "PYTHON" + n),
            variable_names.map(lambda n: "PYTEST_" + n),
            variable_names.map(lambda n: "GIT_" + n),
            st.sampled_from(hermetic.PASSED_VARIABLES),
            st.sampled_from(["HOME", "TMPDIR", hermetic.CACHE_HOME, gitrepo.USER_HOME]),
        ),
        st.text(max_size=8),
    )
)
def test_a_session_environment_passes_only_the_allow_list_and_its_own(environ):
    folder = Path("/tmp/prereg-snapshot-x")
    env = hermetic.session_environment(folder, environ)
    own = {**hermetic.SESSION_VARIABLES, **hermetic.CACHE_VARIABLES, **hermetic.PRIVATE_FOLDERS}
    own |= {hermetic.CACHE_HOME: "", gitrepo.USER_HOME: ""}
    assert set(env) <= set(hermetic.PASSED_VARIABLES) | set(own)
    for name in set(env) & set(hermetic.PASSED_VARIABLES):
        assert env[name] == environ[name]
    assert env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"
    assert not Path(env["HYPOTHESIS_STORAGE_DIRECTORY"]).is_relative_to(folder)
    for name, sub in hermetic.PRIVATE_FOLDERS.items():  # never the user's
        assert env[name] == str(snapshots.scratch(folder) / sub)
    home = environ.get("HOME") or None
    assert env.get(gitrepo.USER_HOME) == home
    cache = environ.get(hermetic.CACHE_HOME) or (home and str(Path(home, ".cache")))
    assert env.get(hermetic.CACHE_HOME) == (cache or None)


def test_the_session_command_runs_the_snapshot_isolated_with_checkout_paths_translated(tmp_path):
    checkout, folder = tmp_path / "checkout", tmp_path / "snap"
    (checkout / "extra").mkdir(parents=True)
    argv = hermetic.command(
        checkout=checkout,
        folder=folder,
        args=["--research-stage=toy", "-n", "2", roles.checkout_argument(checkout)],
        plugins=["-p", "xdist"],
        addopts="-v",
        pythonpath=f"{checkout / 'extra'}:/elsewhere",
    )
    assert argv[1:3] == ["-I", "-B"]
    paths = argv[4].split(":")
    assert str(folder / "extra") in paths and "/elsewhere" not in paths
    assert argv[5:] == ["-v", "--research-stage=toy", "-n", "2",
                        f"{roles.CHECKOUT_OPTION}={checkout}", "-p", "xdist"]  # fmt: skip


def _snapshots(commit: str) -> set[Path]:
    return set(Path(snapshots.tempfile.gettempdir()).glob(f"{snapshots.PREFIX}{commit[:12]}-*"))


def test_a_session_started_by_hand_from_a_real_snapshot_is_refused(tmp_path):
    """A snapshot materialised by hand and a session typed in it, not isolated and with a
    variable the launcher never passes: the session's own gate judges its recorded
    execution (isolated mode, the environment's names) and refuses."""
    toy = _probe_repo(tmp_path / "p")
    made = snapshots.materialise(toy.root, toy.git("rev-parse", "HEAD").strip())
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--research-stage=toy",
             f"{roles.CHECKOUT_OPTION}={toy.root}"],
            cwd=made.folder, capture_output=True, text=True, check=False,
            env={**os.environ, "LD_PRELOAD": "", "PYTHONWARNINGS": "ignore"},
        )  # fmt: skip
    finally:
        snapshots.remove(made.folder)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "not run in isolated mode" in done.stderr and "LD_PRELOAD" in done.stderr
    assert not ledger.is_spent(toy.root, RUN)


def test_a_refused_session_and_one_stopped_before_the_spend_leave_no_snapshot(tmp_path):
    toy = _probe_repo(tmp_path / "p")
    head = toy.git("rev-parse", "HEAD").strip()
    before = _snapshots(head)
    refused = toy.pytest("--research-stage=toy", "--rootdir", str(toy.root))
    assert refused.returncode == 4, refused.stdout + refused.stderr
    assert _snapshots(head) == before
    started = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--research-stage=toy"],
        cwd=toy.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        preexec_fn=terminal_signals,  # noqa: PLW1509 -- no threads here
    )  # fmt: skip
    for _ in range(600):  # until the session exists, then SIGTERM before the items run
        if _snapshots(head) - before:
            break
        time.sleep(0.05)
    started.send_signal(signal.SIGTERM)
    out = started.communicate(timeout=300)[0]
    assert _snapshots(head) == before, (started.returncode, out.decode()[-3000:])
    assert not ledger.is_spent(toy.root, RUN) or toy.layout(RUN).manifest.exists()


def test_a_checkout_owned_by_another_user_is_a_clear_refusal(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("giving the checkout to another user needs root")
    toy = _probe_repo(tmp_path / "p")
    subprocess.run(["chown", "-R", "nobody", str(toy.root)], check=True)
    try:
        done = toy.pytest("--research-stage=toy")
    finally:
        subprocess.run(["chown", "-R", "root", str(toy.root)], check=True)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "safe.directory" in done.stderr, done.stderr


VENDORED_AT_COLLECTION = """
import sys
import pytest

pytestmark = pytest.mark.research_stage("toy")
sys.path.insert(0, {vendor!r})
import vend  # noqa: E402,F401  (imported while the module is collected, after the gate)


@pytest.mark.parametrize("cell", [0, 1])
def test_cell(cell, research):
    research.coords(cell=cell)
"""


@pytest.mark.parametrize(
    "workers, refusal",
    [([], "[execution] at collection"), (["-n", "2"], "[worker] worker gw1")],
    ids=["serial", "two-workers"],
)
def test_code_a_stage_module_imports_from_outside_the_snapshot_at_collection_is_refused(
    tmp_path, workers, refusal
):
    """An ignored vendor/ folder of the checkout, imported when the stage module is collected
    (under -n 2 by the workers only): the execution check runs again after collection, in
    every process that collected, before the run id is spent."""
    spec = stage_spec("toy")
    toy = make_toy_repo(tmp_path / "p", {"toy": spec})
    vendor = toy.root / "vendor"
    vendor.mkdir()
    (vendor / "vend.py").write_text("VALUE = 'changed after approval'\n")
    (toy.root / ".gitignore").write_text((toy.root / ".gitignore").read_text() + "vendor/\n")
    (toy.root / spec["module"]).write_text(VENDORED_AT_COLLECTION.format(vendor=str(vendor)))
    toy.commit("A stage that imports vendored code")
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy", *workers, env=private_tmp(tmp_path / "tmp"))
    said = done.stdout + done.stderr
    assert done.returncode == 4, said
    assert refusal in done.stderr and "vend.py lies outside" in done.stderr, said
    assert not ledger.is_spent(toy.root, RUN)
    assert left_behind(tmp_path / "tmp") == []  # neither its snapshot nor its item listing


WORKER_ORDER = """
import os
import pytest

pytestmark = pytest.mark.research_stage("toy")
CELLS = [0, 1] if os.environ.get("PYTEST_XDIST_WORKER") != "gw1" else [1, 0]


@pytest.mark.parametrize("cell", CELLS)
def test_cell(cell, research):
    research.coords(cell=cell)
"""


def test_workers_that_collect_one_stage_in_other_orders_are_refused_before_spending(tmp_path):
    """Every worker reports its ordered collection before the spend; xdist schedules by
    index, so a worker whose order differs would run other items than it was sent."""
    spec = stage_spec("toy")
    toy = make_toy_repo(tmp_path / "p", {"toy": spec})
    (toy.root / spec["module"]).write_text(WORKER_ORDER)
    toy.commit("A stage whose order depends on the worker")
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy", "-n", "2")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "worker gw1" in done.stderr and "the same items in another order" in done.stderr
    assert not ledger.is_spent(toy.root, RUN)


def test_a_worker_that_dies_before_it_lists_its_items_is_a_refusal_not_a_spent_id(tmp_path):
    spec = stage_spec("toy")
    toy = make_toy_repo(tmp_path / "p", {"toy": spec})
    module = toy.root / spec["module"]
    dies = 'import os\nif os.environ.get("PYTEST_XDIST_WORKER") == "gw1":\n    os._exit(3)\n'
    module.write_text(dies + module.read_text())
    toy.commit("A stage module that ends worker gw1 while it is collected")
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy", "-n", "2")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "[worker] worker gw1 went down before it listed its items" in done.stderr
    assert not ledger.is_spent(toy.root, RUN)


def test_a_relative_output_file_in_pytest_ini_is_written_beside_the_checkout_not_in_the_snapshot(
    tmp_path,
):
    """``log_file = ../run.log`` in pytest.ini: pytest resolves it against the current
    folder; in the session that is the snapshot (the file would land inside it and end the
    run incomplete), so the launcher passes it resolved against its own folder. The clean
    listing of the stage's items writes it nowhere (not beside the snapshot, in the
    temporary folder)."""
    written = "run.log"
    toy = _probe_repo(tmp_path / "p")
    ini = toy.root / "pytest.ini"
    ini.write_text(ini.read_text().replace("[pytest]\n", "[pytest]\nlog_file = ../run.log\n", 1))
    toy.commit("Write a pytest output file")
    toy.approve("toy", "toy-20261201-002")
    done = toy.pytest(
        "--research-stage=toy", "--run-id=toy-20261201-002", env=private_tmp(tmp_path / "tmp")
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert toy.manifest("toy-20261201-002")["status"] == "complete"
    assert (tmp_path / written).is_file()
    assert left_behind(tmp_path / "tmp") == []


def test_a_report_file_in_pytest_ini_addopts_is_refused_and_written_nowhere(tmp_path):
    """``--junitxml=../junit.xml`` in pytest.ini's addopts would be a second report written
    beside the snapshot: refused like the command line's, before spending, with no file
    beside the checkout and nothing left in the temporary folder."""
    toy = _probe_repo(tmp_path / "p")
    ini = toy.root / "pytest.ini"
    ini.write_text(ini.read_text().replace("addopts = ", "addopts = --junitxml=../junit.xml ", 1))
    toy.commit("Write a second report")
    toy.approve("toy", "toy-20261201-002")
    done = toy.pytest(
        "--research-stage=toy", "--run-id=toy-20261201-002", env=private_tmp(tmp_path / "tmp")
    )
    assert done.returncode == 4, done.stdout + done.stderr
    assert "--junitxml writes a report of its own" in done.stdout + done.stderr
    assert not ledger.is_spent(toy.root, "toy-20261201-002")
    assert not (tmp_path / "junit.xml").exists()
    assert left_behind(tmp_path / "tmp") == []


NEXT = "toy-20261201-002"


# (arguments, the option named): what each would do if a run took it.
OPTIONS_NOT_TAKEN = [
    (["--basetemp=runs"], "--basetemp"),  # pytest empties its basetemp: every run folder
    ([f"--log-file=runs/{RUN}/items.jsonl"], "--log-file"),  # empties a run's record
    (["--doctest-modules"], "--doctest-modules"),  # collects more items than the stage's
    (["--rootdir=experiments"], "--rootdir"),  # moves the plan out of reach
    (["--assert=plain"], "--assert"),  # changes what a failing assert reports
    (["-n", "2", "--max-warnings=0"], "--max-warnings"),  # fails a run that warns
    ([f"--debug=runs/{RUN}/manifest.json"], "--debug"),  # written as pytest parses, refused first
]


def test_an_option_a_run_does_not_take_is_refused_by_name_and_touches_no_run(tmp_path):
    """A research run takes only the options of the allow-list (what it shows, its workers,
    prereg's own): one that writes where it names, adds items or changes how they fail is
    refused before the run id is spent, naming it as typed, and an earlier run's folder is
    left as it was."""
    toy = _probe_repo(tmp_path / "p")
    assert toy.pytest("--research-stage=toy").returncode == 0
    earlier = {p: p.read_bytes() for p in sorted(toy.run_dir(RUN).rglob("*")) if p.is_file()}
    toy.approve("toy", NEXT)
    for args, named in OPTIONS_NOT_TAKEN:
        done = toy.pytest("--research-stage=toy", f"--run-id={NEXT}", *args)
        output = done.stdout + done.stderr
        assert done.returncode == 4, (args, output)
        assert f"{named} {option_policy.NOT_TAKEN}" in output, (args, output)
        assert not ledger.is_spent(toy.root, NEXT) and not toy.run_dir(NEXT).exists(), args
    assert {
        p: p.read_bytes() for p in sorted(toy.run_dir(RUN).rglob("*")) if p.is_file()
    } == earlier
    assert toy.audit(RUN).returncode == 0


@given(
    value=st.one_of(
        st.none(),
        st.booleans(),
        st.lists(st.text("ab.", min_size=1, max_size=3), min_size=1, max_size=3).map("/".join),
    ),
    absolute=st.booleans(),
)
def test_only_relative_output_paths_are_resolved_against_the_launchers_folder(value, absolute):
    if isinstance(value, str) and absolute:
        value = "/" + value
    args = hermetic.output_arguments(
        {"basetemp": value, "log_file": None, "debug": None}, Path("/launcher")
    )
    if isinstance(value, str) and not absolute:
        assert args == [f"--basetemp={Path('/launcher', value)}"]
    else:
        assert args == []


BOOT_PROBE = """
import json, os
from prereg.evidence import execution, hermetic

def test_probe():
    os.environ["SET_AFTER_START"] = "by-code"  # as a conftest could
    os.environ["KMP_INIT_AT_FORK"] = "FALSE"  # as scikit-learn does when it loads
    del os.environ["STARTED_WITH_ME"]  # a foreign variable removed before the gate records
    names, since = hermetic.environment_at_start()
    record = {"environment_names": list(names), "environment_set_in_session": since, "isolated": 1}
    problems = execution.recorded_problems(record, lambda rel: None)
    print("PROBE" + json.dumps({"names": list(names), "since": since, "problems": problems}))
"""


def test_the_boot_records_the_environment_a_session_started_with_and_what_its_code_set_later(
    tmp_path,
):
    """A session started through the boot is judged on the variables it was started with: a
    foreign one is found even when the session's code removes it before the gate records.
    What its code set later is recorded beside them: a variable a library sets when it loads
    passes, any other is refused (the session's xdist workers would inherit it)."""
    (tmp_path / "test_boot.py").write_text(BOOT_PROBE)
    boot = hermetic.boot_script(Path(prereg.__file__).parent)
    lib = Path(hermetic.__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-I", str(boot), str(lib), "-p", "no:cacheprovider", "-q", "-s",
         "test_boot.py"],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"], "STARTED_WITH_ME": "1"},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("PROBE"))
    probe = json.loads(line[len("PROBE") :])
    assert "STARTED_WITH_ME" in probe["names"] and "SET_AFTER_START" not in probe["names"]
    assert probe["since"]["SET_AFTER_START"] == "by-code"
    held = [p for p in probe["problems"] if "environment held" in p]
    assert len(held) == 1 and "STARTED_WITH_ME" in held[0] and "SET_AFTER_START" not in held[0]
    (code,) = [p for p in probe["problems"] if "code set" in p]
    assert code.startswith("the session's code set SET_AFTER_START in its environment")


def test_a_variable_a_committed_conftest_sets_before_the_gate_is_refused_before_spending(
    tmp_path,
):
    """A conftest's ``os.environ`` reaches every xdist worker the session starts (an
    ``LD_PRELOAD`` there loads a library outside the snapshot and the lock): the session's
    gate refuses the variable, names it, and spends nothing."""
    toy = make_toy_repo(tmp_path / "p")
    conftest = toy.root / "conftest.py"
    conftest.write_text(conftest.read_text() + 'import os\nos.environ["SET_BY_CONFTEST"] = "1"\n')
    toy.commit("A conftest that sets a variable")
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy", "-n", "2")
    assert done.returncode != 0
    assert "the session's code set SET_BY_CONFTEST" in done.stdout + done.stderr
    assert not ledger.is_spent(toy.root, RUN) and not toy.run_dir(RUN).exists()


@settings(max_examples=50, deadline=None)
@given(
    names=st.lists(
        st.one_of(
            st.sampled_from([*hermetic.PASSED_VARIABLES, *hermetic.SESSION_VARIABLES]),
            st.from_regex(r"[A-Z][A-Z0-9_]{0,12}", fullmatch=True),
        ),
        unique=True,
    )
)
def test_the_recorded_environment_names_exactly_the_variables_outside_the_allow_list(names):
    from prereg.evidence import execution

    found = execution.recorded_problems({"environment_names": names, "isolated": 1}, None)
    held = [p for p in found if "environment held" in p]
    foreign = hermetic.foreign_variables(names)
    assert bool(held) == bool(foreign)
    own = {*hermetic.PASSED_VARIABLES, *hermetic.SESSION_VARIABLES}
    assert not own & set(foreign)
    if held:
        assert held[0].split(" held ")[1].startswith(", ".join(foreign))
