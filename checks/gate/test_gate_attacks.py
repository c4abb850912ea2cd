"""The gate attacked as a hurried researcher or a careless machine would: each attack
performed for real in a scratch repository, plus the conditions as pure functions of
hand-made facts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prereg.base.hashing import canonical_json, sha256_file
from prereg.base.typed_settings import parse_as
from prereg.decisions import gate
from prereg.records import formats, ledger
from prereg.records.runs import (
    RunFolder,
    RunIdError,
    RunLayout,
    item_dir_name,
    run_dir,
    valid_run_id,
)
from prereg.runtime import collection
from support.toy import make_toy_repo, stage_spec

pytestmark = [pytest.mark.software, pytest.mark.attack]

RUN = "toy-20261130-001"
NEXT = "toy-20261130-002"
USAGE_ERROR = 4


def refused(toy, done, condition: str, *phrases: str) -> None:
    text = done.stdout + done.stderr
    assert done.returncode == USAGE_ERROR, text
    assert f"[{condition}]" in text, text
    for phrase in phrases:
        assert phrase in text, text
    assert not ledger.is_spent(toy.root, RUN) or condition == "run-id-unused"


# -- run ids never become paths outside runs/ ------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    ["../../plans/evil-20261130-001", "/tmp/evil-20261130-001", "..", "toy-20261130-001/../../x"],
)
def test_a_run_id_that_is_a_path_writes_nothing_outside_runs(approved_toy, bad):
    toy = approved_toy
    before = sorted(p.relative_to(toy.root) for p in toy.root.rglob("*") if ".git" not in p.parts)
    done = toy.pytest("--research-stage=toy", f"--run-id={bad}")
    assert done.returncode == USAGE_ERROR, done.stdout + done.stderr
    assert "does not have the form" in done.stdout + done.stderr
    approve = toy.prereg("approve", "--stage", "toy", "--run-id", bad, "--accept-deviations")
    assert approve.returncode == 2 and "does not have the form" in approve.stderr
    after = sorted(p.relative_to(toy.root) for p in toy.root.rglob("*") if ".git" not in p.parts)
    new = [p for p in after if p not in before]
    assert all(p.parts[0] == "runs" for p in new), new
    assert not Path("/tmp/evil-20261130-001").exists()


@given(st.text(max_size=40))
def test_run_dir_is_always_one_folder_below_runs(text):
    root = Path("/repo")
    if valid_run_id(text):
        assert run_dir(root, text).parent == root / "runs"
        assert "/" not in text and ".." not in text
    else:
        with pytest.raises(RunIdError):
            run_dir(root, text)


@given(st.text(max_size=40))
def test_every_path_beside_a_run_folder_is_built_from_a_valid_run_id_only(text):
    if valid_run_id(text):
        layout = RunLayout(Path("/repo"), text)
        for path in (layout.progress_log, layout.reserve, layout.verdict, layout.report):
            assert path.parent.parent == Path("/repo/runs") and path.name.startswith(text)
    else:
        with pytest.raises(RunIdError):
            RunLayout(Path("/repo"), text)


def test_the_run_layout_is_the_one_on_disk(tmp_path):
    """The file names a run leaves (README, the audit, other tools read them): one place."""
    layout = RunLayout(tmp_path, RUN)
    named = {
        "folder": layout.folder,
        "start": layout.start,
        "manifest": layout.manifest,
        "item_log": layout.item_log,
        "junit": layout.junit,
        "approval_copy": layout.approval_copy,
        "items_dir": layout.items_dir,
        "item_dir": layout.item_dir("test_cell[a]"),
        "summary_dir": layout.summary_dir,
        "progress_log": layout.progress_log,
        "reserve": layout.reserve,
        "verdict": layout.verdict,
        "report": layout.report,
    }
    assert {k: p.relative_to(tmp_path).as_posix() for k, p in named.items()} == {
        "folder": f"runs/{RUN}",
        "start": f"runs/{RUN}/start.json",
        "manifest": f"runs/{RUN}/manifest.json",
        "item_log": f"runs/{RUN}/items.jsonl",
        "junit": f"runs/{RUN}/junit.xml",
        "approval_copy": f"runs/{RUN}/approval.json",
        "items_dir": f"runs/{RUN}/items",
        "item_dir": f"runs/{RUN}/items/test_cell[a]",
        "summary_dir": f"runs/{RUN}/summary",
        "progress_log": f"runs/progress/{RUN}.log",
        "reserve": f"runs/progress/{RUN}.reserve",
        "verdict": f"runs/audits/{RUN}.json",
        "report": f"runs/reports/{RUN}.html",
    }
    assert RunLayout.of(layout.folder) == layout
    assert RunFolder.RUN_FILES == ("start.json", "approval.json", "items.jsonl", "junit.xml")
    assert RunFolder.item_file("test_cell[a]", "r.json") == "items/test_cell[a]/r.json"
    assert RunFolder.summary_file("s.json") == "summary/s.json"
    copied = RunFolder(tmp_path / "a copy, renamed")  # read by path: no run id needed
    assert copied.manifest == tmp_path / "a copy, renamed" / "manifest.json"
    assert item_dir_name("experiments/test_toy.py::test_cell[a b/c]") == "test_cell[a_b_c]"
    with pytest.raises(AttributeError):
        layout.run_id = NEXT


@given(
    st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
    st.from_regex(r"[0-9]{8}", fullmatch=True),
    st.from_regex(r"[0-9]{3}", fullmatch=True),
)
def test_every_well_formed_run_id_is_valid(stage, date, seq):
    assert valid_run_id(f"{stage}-{date}-{seq}")


def test_a_record_whose_run_id_is_not_its_file_name_is_refused(approved_toy):
    toy = approved_toy
    record = json.loads((toy.root / "plans" / "approvals" / f"{RUN}.json").read_text())
    record["run_id"] = "../../plans/evil"
    (toy.root / "plans" / "approvals" / f"{RUN}.json").write_text(json.dumps(record))
    toy.commit("a hand-edited record")
    done = toy.pytest("--research-stage=toy", f"--run-id={RUN}")
    assert done.returncode == USAGE_ERROR and "named after its run id" in done.stdout + done.stderr
    assert not (toy.root / "plans" / "evil").exists()


# -- the approval is the committed one -------------------------------------------------------


def test_an_approval_that_was_never_committed_is_refused_even_when_git_ignores_it(toy):
    (toy.root / ".git" / "info" / "exclude").write_text("plans/approvals/\n")
    done = toy.prereg("approve", "--stage", "toy", "--run-id", RUN, "--accept-deviations")
    assert done.returncode == 0, done.stderr
    assert toy.git("status", "--porcelain") == "", "the ignored record leaves the tree clean"
    refused(
        toy, toy.pytest("--research-stage=toy", f"--run-id={RUN}"), "clean-source", "not committed"
    )


# -- one approval, one run; one attempt -------------------------------------------------------


def test_two_approvals_of_one_run_id_at_once_keep_the_first_and_refuse_the_second(toy, monkeypatch):
    """Another ``prereg approve`` of the same run id writes its record once this one has
    passed its gate (stood in for here, since this process is no command line's): this one
    is refused and the other's record is kept byte for byte."""
    from prereg.decisions import approval

    theirs = toy.root / "plans" / "approvals" / f"{RUN}.json"

    def other_approve_meanwhile(*args, **kwargs):
        theirs.write_text('{"written": "by the other approve"}\n')
        return []

    monkeypatch.setattr(approval.gate, "check", other_approve_meanwhile)
    plan = Path("plans") / "TOY_PLAN.json"
    with pytest.raises(approval.ApprovalError, match="written by another prereg approve"):
        approval.create_approval(
            toy.root, stage="toy", run_id=RUN, plan_path=plan, inputs={}, use_runs={},
            accept_deviations=True,
        )  # fmt: skip
    assert theirs.read_text() == '{"written": "by the other approve"}\n'
    assert sorted(p.name for p in theirs.parent.iterdir()) == [theirs.name]


def test_moving_the_run_folder_away_does_not_buy_a_second_run(approved_toy, tmp_path):
    toy = approved_toy
    assert toy.pytest("--research-stage=toy").returncode == 0
    (toy.root / "runs" / RUN).rename(tmp_path / "moved")
    again = toy.pytest("--research-stage=toy", f"--run-id={RUN}")
    refused(toy, again, "run-id-unused", ledger.start_ref(RUN))
    approve = toy.prereg("approve", "--stage", "toy", "--run-id", RUN, "--accept-deviations")
    assert approve.returncode == 2


def test_a_removed_single_attempt_approval_does_not_buy_a_second_attempt(tmp_path):
    toy = make_toy_repo(
        tmp_path / "single", {"toy": stage_spec("toy", single_attempt=True, signing="optional")}
    )
    toy.approve("toy", RUN)
    assert toy.pytest("--research-stage=toy").returncode == 0
    record = (toy.root / "plans" / "approvals" / f"{RUN}.json").read_text()
    toy.git("rm", "-q", f"plans/approvals/{RUN}.json")
    toy.commit("Forget the first attempt")
    shutil_rmtree(toy.root / "runs" / RUN)
    approve = toy.prereg("approve", "--stage", "toy", "--run-id", NEXT, "--accept-deviations")
    assert approve.returncode == 2 and "[single-attempt]" in approve.stderr, approve.stderr
    # A record written by hand for the second attempt is refused by the gate as well.
    forged = json.loads(record)
    forged["run_id"] = NEXT
    forged["source_anchor"] = toy.git("rev-parse", "HEAD").strip()
    (toy.root / "plans" / "approvals").mkdir(exist_ok=True)
    (toy.root / "plans" / "approvals" / f"{NEXT}.json").write_text(json.dumps(forged))
    toy.commit("A hand-made approval")
    done = toy.pytest("--research-stage=toy", f"--run-id={NEXT}")
    assert done.returncode == USAGE_ERROR and "[single-attempt]" in done.stdout + done.stderr
    assert not ledger.is_spent(toy.root, NEXT)


def shutil_rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path)


def test_two_simultaneous_starts_give_one_run_and_one_recorded_refusal(approved_toy):
    toy = approved_toy
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("PYTEST_")}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--research-stage=toy"]
    runs = [
        subprocess.Popen(
            command,
            cwd=toy.root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [(p.wait(), p.communicate()[0]) for p in runs]
    codes = sorted(code for code, _ in outputs)
    assert codes == [0, USAGE_ERROR], outputs
    assert toy.manifest(RUN)["status"] == "complete"
    assert [r["run_id"] for r in toy.refusals()] == [RUN]
    assert not any("FileExistsError" in out for _, out in outputs), outputs


# -- the whole stage or nothing ---------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        ["--ignore=experiments/test_toy.py"],
        ["-o", "python_functions=nothing"],
        ["--sw-skip"],
        ["--deselect", "experiments/test_toy.py::test_cell[cell0]"],
        ["--confcutdir=/"],
        ["-n", "2", "--dist", "each"],
        ["--junitxml=elsewhere.xml"],
    ],
)
def test_options_that_drop_repeat_or_redirect_items_are_refused_before_spending(
    approved_toy, options
):
    toy = approved_toy
    cache = toy.root / ".pytest_cache" / "v" / "cache"  # a planted stepwise cache
    cache.mkdir(parents=True)
    (cache / "stepwise").write_text(json.dumps("experiments/test_toy.py::test_cell[cell2]"))
    (toy.root / ".pytest_cache" / ".gitignore").write_text("*\n")
    done = toy.run(sys.executable, "-m", "pytest", "--research-stage=toy", *options)
    assert done.returncode == USAGE_ERROR, done.stdout + done.stderr
    assert "runs whole" in done.stdout + done.stderr
    assert not ledger.is_spent(toy.root, RUN) and not (toy.root / "runs" / RUN).exists()


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_a_committed_plugin_that_drops_items_is_refused_before_spending(toy, workers):
    """``-p`` of a committed module the stage's configuration does not load: refused as an
    option; were it let through, the comparison with the clean listing would refuse it."""
    (toy.root / "experiments" / "dropper.py").write_text(
        "def pytest_collection_modifyitems(config, items):\n    del items[-1:]\n"
    )
    toy.commit("A plugin that drops the last item")
    toy.approve("toy", RUN)
    done = toy.run(
        "env", "PYTHONPATH=.", sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
        "-p", "experiments.dropper", "--research-stage=toy", *workers,
    )  # fmt: skip
    text = done.stdout + done.stderr
    assert done.returncode == USAGE_ERROR, text
    assert "-p experiments.dropper loads a plugin that is not an installed pytest plugin" in text
    assert not ledger.is_spent(toy.root, RUN) and not (toy.root / "runs" / RUN).exists()
    assert toy.pytest("--research-stage=toy", *workers).returncode == 0, "the honest run passes"


MODIFY_ITEMS = "def pytest_collection_modifyitems(config, items):\n    {}\n"


@pytest.mark.parametrize(
    "conftest, hook",
    [
        # An initial conftest: checks/ is in testpaths.
        ("checks/conftest.py", MODIFY_ITEMS.format("del items[-1:]")),
        # A conftest above the stage's module, repeating an item.
        ("experiments/conftest.py", MODIFY_ITEMS.format("items.append(items[0])")),
    ],
    ids=["initial-conftest-drops", "folder-conftest-repeats"],
)
@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_a_committed_conftest_that_changes_the_stages_items_is_refused_before_spending(
    toy, conftest, hook, workers
):
    """The stage's items are what its module alone collects: a conftest.py that drops or
    repeats them is committed code an auditor reading the module would not see."""
    path = toy.root / conftest
    path.parent.mkdir(exist_ok=True)
    path.write_text(hook)
    toy.commit("A conftest that changes the stage's items")
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy", *workers)
    refused(toy, done, "whole-stage", "its module alone collects", conftest)
    assert not (toy.root / "runs" / RUN).exists()


# A conftest.py with no hook at all: on import it patches pytest so that a module collects
# one item fewer. Only a listing in a clean process (which loads no conftest) can see it.
HOOKLESS_DROPPER = """pytest_plugins = ("prereg.plugin",)
import _pytest.python

_collect = _pytest.python.Module.collect


def _fewer(self):
    return list(_collect(self))[:-1]


_pytest.python.Module.collect = _fewer
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_a_conftest_without_hooks_that_patches_collection_is_refused_before_spending(toy, workers):
    """The session lists the stage in a clean process whenever a conftest.py is more than
    prereg's plugin declaration; a hook-less one that patches pytest on import is no
    exception."""
    (toy.root / "conftest.py").write_text(HOOKLESS_DROPPER)
    toy.commit("A conftest that patches collection")
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy", *workers)
    refused(toy, done, "whole-stage", "its module alone collects", "missing (1)")
    assert not (toy.root / "runs" / RUN).exists()


# A conftest.py that takes prereg's data out of every xdist worker's input: each worker would
# judge itself a software run and deselect the stage's items.
STRIP_WORKER_ROLE = """pytest_plugins = ("prereg.plugin",)


def pytest_configure_node(node):
    node.workerinput.pop("prereg", None)
"""


def test_a_conftest_that_takes_the_research_role_from_the_workers_is_refused_before_spending(
    toy,
):
    """A worker's role comes from its input alone (prereg.runtime.roles); workers stripped of
    it collect no item of the stage, which the comparison with the stage's item set refuses
    before anything is spent."""
    (toy.root / "conftest.py").write_text(STRIP_WORKER_ROLE)
    toy.commit("A conftest that strips the workers' research role")
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy", "-n", "2")
    refused(toy, done, "whole-stage", "missing (4)")
    assert not (toy.root / "runs" / RUN).exists()


INERT = [
    'pytest_plugins = ("prereg.plugin",)\n',
    "pytest_plugins = ['prereg.plugin']\n",
    'pytest_plugins = "prereg.plugin"\n',
    '"""The project\'s plugin."""\n# prereg: loaded anyway\npytest_plugins = ("prereg.plugin",)\n',
    "",
    "# nothing\n",
]
NOT_INERT = [
    'pytest_plugins = ("prereg.plugin", "experiments.dropper")\n',
    'pytest_plugins = ("experiments.dropper",)\n',
    "def pytest_collection_modifyitems(items):\n    pass\n",
    HOOKLESS_DROPPER,
    'import os\npytest_plugins = ("prereg.plugin",)\n',
    'pytest_plugins = ("prereg.plugin",)\nx = 1\n',
    'pytest_plugins: tuple = ("prereg.plugin",)\n',
    'pytest_plugins = PLUGINS = ("prereg.plugin",)\n',
    "this is not Python(\n",
]


@pytest.mark.parametrize("source", INERT)
def test_a_conftest_that_only_declares_prerags_plugin_is_inert(source):
    assert collection.inert_conftest(source)


@pytest.mark.parametrize("source", NOT_INERT)
def test_any_other_conftest_is_not_inert(source):
    assert not collection.inert_conftest(source)


@given(
    inert=st.sampled_from(INERT),
    statement=st.sampled_from(
        ["import sys", "x = 1", "def pytest_configure(config): pass", "print()", "del x", "pass"]
    ),
    before=st.booleans(),
)
def test_any_statement_added_to_an_inert_conftest_makes_it_not_inert(inert, statement, before):
    source = f"{statement}\n{inert}" if before else f"{inert}\n{statement}\n"
    assert not collection.inert_conftest(source)


class _Plugins:
    """The two questions clean_listing_reasons asks of pytest's plugin manager."""

    def __init__(self, named, installed=()):
        self.named, self.installed = named, installed

    def list_name_plugin(self):
        return self.named

    def list_plugin_distinfo(self):
        return [(plugin, None) for plugin in self.installed]


def _module(name: str, file: Path):
    return type("Module", (), {"__name__": name, "__file__": str(file)})()


def test_the_session_is_its_own_listing_only_when_no_conftest_or_plugin_could_differ(tmp_path):
    root = tmp_path / "snapshot"
    (root / "experiments").mkdir(parents=True)
    (root / "conftest.py").write_text(INERT[0])
    module = "experiments/test_toy.py"
    installed = _module("xdist.plugin", tmp_path / "site" / "xdist" / "plugin.py")
    conftest = _module("conftest", root / "conftest.py")
    own = _module("prereg.plugin", tmp_path / "site" / "prereg" / "plugin.py")
    config = type("Config", (), {})()
    config.pluginmanager = _Plugins(
        [("conftest", conftest), ("xdist", installed), ("prereg.plugin", own), ("x", object())],
        installed=[installed],
    )
    assert collection.clean_listing_reasons(config, root, module) == ()

    (root / "experiments" / "conftest.py").write_text(MODIFY_ITEMS.format("pass"))
    assert collection.clean_listing_reasons(config, root, module) == ("experiments/conftest.py",)
    (root / "experiments" / "conftest.py").unlink()

    extra = _module("experiments.dropper", root / "experiments" / "dropper.py")
    config.pluginmanager.named.append(("experiments.dropper", extra))
    assert collection.clean_listing_reasons(config, root, module) == ("experiments/dropper.py",)


def test_a_committed_plugin_the_root_conftest_loads_that_drops_items_is_refused_and_named(toy):
    """``pytest_plugins`` in the root conftest.py loads a committed module that drops an
    item: the listing loads no conftest, so neither the module; the refusal names it."""
    (toy.root / "experiments" / "dropper.py").write_text(MODIFY_ITEMS.format("del items[-1:]"))
    (toy.root / "conftest.py").write_text(
        'pytest_plugins = ("prereg.plugin", "experiments.dropper")\n'
    )
    toy.commit("The root conftest loads a committed dropper")
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy")
    refused(toy, done, "whole-stage", "missing (1)", "experiments/dropper.py")
    assert not (toy.root / "runs" / RUN).exists()


def test_a_bound_input_edited_after_the_gate_is_not_used(tmp_path):
    toy = make_toy_repo(tmp_path / "inputs", {"toy": stage_spec("toy", inputs=["data"])})
    data = tmp_path / "data.txt"
    data.write_text("approved\n")
    # A committed conftest edits the input once the gate has passed (at collection).
    (toy.root / "experiments" / "conftest.py").write_text(
        f"def pytest_collection_finish(session):\n    open({str(data)!r}, 'w').write('edited')\n"
    )
    toy.commit("A conftest that edits the input after the gate")
    toy.approve("toy", RUN, "--input", f"data={data}")
    done = toy.pytest("--research-stage=toy")
    assert done.returncode != 0, done.stdout + done.stderr
    manifest = toy.manifest(RUN)
    assert manifest["status"] == "incomplete"
    assert "changed since approval" in json.dumps(manifest["items"])


READS_THE_GIT_INPUT = """
import json, subprocess
import pytest

pytestmark = pytest.mark.research_stage("toy")


@pytest.mark.parametrize("cell", range(2), ids=lambda c: f"cell{c}")
def test_cell(cell, research):
    research.coords(cell=cell)
    repo = research.inputs["corpus"]
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    (research.outputs / "read.json").write_text(
        json.dumps({"text": (repo / "values.txt").read_text(), "head": head})
    )
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "two-workers"])
def test_a_git_input_is_read_at_its_bound_commit_whatever_its_working_tree_holds(tmp_path, workers):
    # A git input was bound by its commit but handed over as its working tree: an
    # uncommitted edit, or a pull since the approval, fed the run and it audited clean.
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for args in (["init", "-q"], ["config", "user.email", "a@b"], ["config", "user.name", "a"]):
        subprocess.run(["git", "-C", str(corpus), *args], check=True)
    (corpus / "values.txt").write_text("approved\n")
    subprocess.run(["git", "-C", str(corpus), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(corpus), "commit", "-qm", "approved"], check=True)
    bound = subprocess.run(
        ["git", "-C", str(corpus), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    toy = make_toy_repo(tmp_path / "toy", {"toy": stage_spec("toy", inputs=["corpus"])})
    (toy.root / "experiments" / "test_toy.py").write_text(READS_THE_GIT_INPUT)
    toy.commit("A stage that reads its git input's files")
    toy.approve("toy", RUN, "--input", f"corpus={corpus}")
    (corpus / "values.txt").write_text("pulled\n")  # a pull since the approval...
    subprocess.run(["git", "-C", str(corpus), "commit", "-qam", "pulled"], check=True)
    (corpus / "values.txt").write_text("edited, not committed\n")  # ...and an edit on top
    done = toy.pytest("--research-stage=toy", *workers)
    assert done.returncode == 0, done.stdout + done.stderr
    for cell in range(2):
        read = json.loads(
            (toy.run_dir(RUN) / "items" / f"test_cell[cell{cell}]" / "read.json").read_text()
        )
        assert read == {"text": "approved\n", "head": bound}
    assert (corpus / "values.txt").read_text() == "edited, not committed\n"  # left as it was
    assert toy.audit(RUN).returncode == 0


# -- the conditions, as functions of facts -------------------------------------------------------


def facts(**changes) -> gate.Facts:
    record = parse_as(formats.Approval, {
        "format": "prereg-approval-1",
        "stage": "toy",
        "run_id": RUN,
        "plan": {"path": "plans/P.json", "sha256": "p" * 64, "plan_id": "p"},
        "baseline": {"path": "plans/BASELINE.json", "sha256": "b" * 64},
        "source_anchor": "a" * 40,
        "seed_namespace": "toy-1.0",
        "environment": {},
        "deviations": [{"field": "python", "pinned": "3.9.6", "actual": "3.11.7"}],
        "requires": {},
        "inputs": {},
        "approved_at": "2026-12-07T00:00:00+00:00",
        "approved_by": "checks",
    }, path="")  # fmt: skip
    base = {
        "stage": "toy",
        "record": record,
        "record_rel": f"plans/approvals/{RUN}.json",
        "record_bytes": b"{}",
        "committed_record": b"{}",
        "plan_sha256": "p" * 64,
        "baseline_sha256": "b" * 64,
        "head": "c" * 40,
        "changed_since_anchor": (f"plans/approvals/{RUN}.json",),
        "package_in_use": "/repo/lib/prereg",
        "package_of_checkout": "/repo/lib/prereg",
        "deviations_now": ({"field": "python", "pinned": "3.9.6", "actual": "3.11.7"},),
    }
    base.update(changes)
    return gate.Facts(**base)


def test_honest_facts_pass_every_condition():
    assert gate.check(facts()) == []
    assert gate.check(facts(), gate.APPROVE_CONDITIONS) == []


@pytest.mark.parametrize(
    "changes, condition, phrase",
    [
        ({"plan_sha256": "x" * 64}, "plan-hash", "binds"),
        ({"plan_sha256": None}, "plan-hash", "does not exist"),
        ({"plan_problem": "field x"}, "plan-hash", "field x"),
        ({"baseline_sha256": "x" * 64}, "baseline", "BASELINE.json"),
        ({"baseline_problems": ("plans/C.json is missing",)}, "baseline", "C.json"),
        ({"dirty": ("notes.txt",)}, "clean-source", "notes.txt"),
        ({"anchor_is_ancestor": False}, "clean-source", "not an ancestor"),
        ({"changed_since_anchor": ("lib/x.py",)}, "clean-source", "lib/x.py"),
        ({"package_in_use": "/elsewhere/prereg"}, "clean-source", "/elsewhere/prereg"),
        ({"committed_record": None}, "clean-source", "not committed"),
        ({"committed_record": b"[]"}, "clean-source", "differs from its committed blob"),
        ({"stage": "other"}, "stage-and-run-id", "'other'"),
        ({"run_id_asked": NEXT}, "stage-and-run-id", NEXT),
        ({"spent_in_git": True}, "run-id-unused", ledger.start_ref(RUN)),
        ({"spent_folder": True}, "run-id-unused", "start.json exists"),
        ({"single_attempt": True, "attempt_used_by": NEXT}, "single-attempt", NEXT),
        (
            {"remote_ledgers": (ledger.RemoteLedger("origin", spent=True),)},
            "run-id-unused",
            "remote origin records its start",
        ),
        (
            {
                "single_attempt": True,
                "remote_ledgers": (ledger.RemoteLedger("up", attempt_used=True),),
            },
            "single-attempt",
            "remote up records that another run used it",
        ),
        (
            {"deviations_now": ({"field": "numpy", "pinned": "2.0.2", "actual": "2.4.6"},)},
            "environment",
            "numpy",
        ),
        ({"execution_problems": ("plugin evil from /tmp/evil.py",)}, "execution", "/tmp/evil.py"),
        ({"input_problems": ("input data: /d changed since approval",)}, "inputs", "/d"),
    ],
)
def test_each_condition_refuses_its_fact(changes, condition, phrase):
    found = gate.check(facts(**changes))
    assert [r.condition for r in found] == [condition], found
    assert phrase in found[0].message


def test_approval_conditions_refuse_a_second_approval_and_a_shared_namespace():
    found = gate.check(
        facts(
            single_attempt=True,
            other_approvals_of_stage=(NEXT,),
            namespace_clash=("x-20261130-001",),
        ),
        gate.APPROVE_CONDITIONS,
    )
    assert [r.condition for r in found] == ["single-attempt", "seed-namespace"]


@given(
    st.lists(st.text(min_size=1, max_size=8), max_size=6, unique=True),
    st.lists(st.text(min_size=1, max_size=8), max_size=6),
)
def test_the_item_set_passes_exactly_when_it_equals_a_stage_of_items(expected, about):
    """A stage with no items is refused too: its run would spend the run id for nothing."""
    found = gate.item_set(expected, about)
    same = sorted(expected) == sorted(about)
    assert (found == []) == (same and bool(expected))
    if found:
        assert found[0].condition == "whole-stage"


def test_strictness_overrides_are_not_a_partial_run(approved_toy):
    """pytest spells --strict-markers as -o strict_markers=true: that selects nothing."""
    toy = approved_toy
    done = toy.pytest(
        "--research-stage=toy", "--strict-markers", "-o", "console_output_style=count"
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_approve_prints_next_steps_that_name_this_environment(toy):
    done = toy.prereg("approve", "--stage", "toy", "--run-id", RUN, "--accept-deviations")
    lines = done.stdout.splitlines()
    command = next(line.split()[0] for line in lines if "--research-stage=toy" in line)
    assert Path(toy.root, command).is_file(), lines
    assert any(f"audit runs/{RUN}" in line for line in lines), lines


def test_the_manifest_records_the_execution_environment_without_installed_files(approved_toy):
    toy = approved_toy
    assert toy.pytest("--research-stage=toy").returncode == 0
    execution = toy.manifest(RUN)["environment"]["execution"]
    assert {"PYTEST_ADDOPTS", "PYTHONPATH", "plugins"} <= set(execution)
    assert all(p["sha256"] for p in execution["plugins"] if p["file"])
    changed = [c["file"] for e in execution["editable"] for c in e["changed"]]
    assert not [f for f in changed if "site-packages" in f], changed


def test_a_forged_run_is_not_accepted_by_a_dependent_stage(tmp_path):
    stages = {"toy": stage_spec("toy"), "later": stage_spec("later", requires=["toy"])}
    toy = make_toy_repo(tmp_path / "forged", stages)
    toy.approve("toy", RUN)
    assert toy.pytest("--research-stage=toy").returncode == 0
    # The forgery: a run folder made by hand from the honest one, every hash made to match.
    import shutil

    forged = toy.run_dir(NEXT)
    shutil.copytree(toy.run_dir(RUN), forged)
    start = json.loads((forged / "start.json").read_text())
    start["run_id"] = NEXT
    (forged / "start.json").write_text(canonical_json(start))
    manifest = json.loads((forged / "manifest.json").read_text())
    manifest["run_id"] = NEXT
    for entry in manifest["run_files"]:
        entry["sha256"] = sha256_file(forged / entry["path"])
        entry["bytes"] = (forged / entry["path"]).stat().st_size
    (forged / "manifest.json").write_text(canonical_json(manifest))
    done = toy.prereg(
        "approve", "--stage", "later", "--run-id", "later-20261130-001",
        "--use-run", f"toy={NEXT}", "--accept-deviations",
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"run {NEXT} does not audit clean" in done.stderr, done.stderr
    audit = toy.audit(NEXT)
    assert audit.returncode == 1 and ledger.start_ref(NEXT) in audit.stdout, audit.stdout
    honest = toy.prereg(
        "approve", "--stage", "later", "--run-id", "later-20261130-001", "--accept-deviations"
    )
    assert honest.returncode == 0, honest.stderr
    assert (
        json.loads((toy.root / "plans" / "approvals" / "later-20261130-001.json").read_text())[
            "requires"
        ]["toy"]["run_id"]
        == RUN
    )


def test_a_damaged_run_folder_does_not_break_choosing_a_required_run(tmp_path):
    stages = {"toy": stage_spec("toy"), "later": stage_spec("later", requires=["toy"])}
    toy = make_toy_repo(tmp_path / "damaged", stages)
    toy.approve("toy", RUN)
    assert toy.pytest("--research-stage=toy").returncode == 0
    damaged = toy.run_dir(NEXT)
    damaged.mkdir()
    (damaged / "start.json").write_text("{not json")
    (damaged / "manifest.json").write_text('{"status": "complete", "status": "complete"}')
    done = toy.prereg(
        "approve", "--stage", "later", "--run-id", "later-20261130-001", "--accept-deviations"
    )
    assert done.returncode == 0, done.stderr
    listed = toy.prereg("runs", "--no-audit")
    assert listed.returncode == 0 and "unreadable" in listed.stdout, listed.stdout + listed.stderr
    assert toy.prereg("report", "--all", "--no-audit").returncode == 0
    assert toy.audit(NEXT).returncode in (1, 3)
