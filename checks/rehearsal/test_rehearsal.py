"""``pytest --research-stage=S --rehearse``: the stage's items run through the run's code
path without an approval, with any selection, into ``runs/rehearsals/<name>/``; nothing is
spent, and nothing takes a rehearsal for a run (the audit, ``--use-run``, a dependent
stage, ``prereg runs``, the report)."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from prereg import records
from prereg.base import seeds
from prereg.base.hashing import sha256_file
from prereg.records import runs
from prereg.records import snapshot as snapshots
from support.toy import ToyRepo, left_behind, make_toy_repo, private_tmp, stage_spec

pytestmark = pytest.mark.software

RUN_ID = "toy-20261202-001"


def _prereg_refs(toy: ToyRepo) -> str:
    """The refs prereg keeps in git but the rehearsals' disclosures: the ledger of runs."""
    refs = toy.git("for-each-ref", "--format=%(refname)", "refs/prereg").split()
    return " ".join(r for r in refs if not r.startswith("refs/prereg/rehearsals/"))


def _disclosure(toy: ToyRepo, name: str) -> dict:
    return json.loads(toy.git("cat-file", "blob", f"refs/prereg/rehearsals/toy/{name}"))


def _only_rehearsal(toy: ToyRepo) -> tuple[runs.RehearsalLayout, dict]:
    found = runs.all_rehearsals(toy.root)
    assert len(found) == 1, found
    layout = runs.RehearsalLayout(toy.root, found[0]["name"])
    return layout, json.loads(layout.record.read_text())


@pytest.fixture(scope="module")
def rehearsed(tmp_path_factory) -> tuple[ToyRepo, object, object]:
    """A toy project with a dependent stage, an uncommitted edit, and one rehearsal of one
    item chosen with -k (no approval exists)."""
    toy = make_toy_repo(
        tmp_path_factory.mktemp("rehearsal") / "toy",
        stages={"toy": stage_spec("toy"), "after": stage_spec("after", requires=["toy"])},
    )
    module = toy.root / "experiments" / "test_toy.py"
    module.write_text(module.read_text() + "\n# an edit not committed yet\n")
    done = toy.pytest("--research-stage=toy", "--rehearse", "-k", "cell1")
    return toy, done, _only_rehearsal(toy)


def test_a_rehearsal_runs_a_selection_without_an_approval_and_spends_nothing(rehearsed):
    toy, done, (layout, record) = rehearsed
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert "1 passed" in said and runs.REHEARSAL_NOTE in said, said
    assert record["rehearsal"] == runs.REHEARSAL_NOTE and record["status"] == "passed"
    assert [i["nodeid"] for i in record["items"]] == ["experiments/test_toy.py::test_cell[cell1]"]
    assert record["items"][0]["outcome"] == "passed" and record["items"][0]["outputs"]
    assert record["uncommitted_paths"] == ["experiments/test_toy.py"]
    assert (layout.item_dir("test_cell[cell1]") / "result.json").is_file()
    assert layout.junit.is_file() and layout.progress_log.is_file()
    # Nothing spent: no approval, no git record, no run folder, no start or manifest.
    assert not list((toy.root / "plans" / "approvals").glob("*.json"))
    assert _prereg_refs(toy) == ""
    assert runs.all_runs(toy.root) == []
    assert not layout.start.exists() and not layout.manifest.exists()
    # Disclosed: git keeps what was rehearsed, from which tree, and how it went.
    disclosure = _disclosure(toy, record["name"])
    assert disclosure == records.rehearsal_disclosure(record)
    assert disclosure["status"] == "passed" and disclosure["selection"] == record["selection"]
    assert disclosure["tree"] != toy.git("rev-parse", "HEAD^{tree}").strip()  # an edit was there


def test_a_rehearsed_item_derives_its_seeds_from_the_rehearsal_namespace(rehearsed):
    """The item's context is a run's, but its seeds are never the run's: they derive from
    the plan's seed namespace made a rehearsal's."""
    _, _, (_, record) = rehearsed
    assert record["items"][0]["seeds"] == [f"toy-1.0{seeds.REHEARSAL_SUFFIX}/cell/1"]


def test_the_audit_never_takes_a_rehearsal_for_evidence(rehearsed, tmp_path):
    toy, _, (layout, _) = rehearsed
    audit = toy.prereg("audit", str(layout.folder.relative_to(toy.root)))
    assert audit.returncode == 1, audit.stdout + audit.stderr
    assert "rehearsal is never evidence" in audit.stdout, audit.stdout
    # Copied where a run's folder would be, it is still no run.
    fake = tmp_path / "runs" / RUN_ID
    shutil.copytree(layout.folder, fake)
    (fake / records.START_RECORD).write_text("{}")
    audit = toy.prereg("audit", str(fake), "--repo", str(toy.root))
    assert audit.returncode == 1 and "rehearsal is never evidence" in audit.stdout, audit.stdout


def test_prereg_runs_lists_rehearsals_apart_from_runs(rehearsed):
    toy, _, (layout, _) = rehearsed
    listed = toy.prereg("runs", "--no-audit", check=True).stdout
    assert listed.startswith("no runs under runs/"), listed
    assert f"rehearsals under runs/rehearsals/ ({runs.REHEARSAL_NOTE})" in listed, listed
    assert layout.name in listed.split("rehearsals under", 1)[1]
    assert json.loads(toy.prereg("runs", "--json", "--no-audit", check=True).stdout) == []


def test_a_rehearsal_is_never_a_required_run(rehearsed):
    """A dependent stage's rehearsal may read a passing rehearsal of the whole required
    stage (checked elsewhere), never one of a selection; an approval never binds one."""
    toy, _, (layout, _) = rehearsed
    dependent = toy.pytest("--research-stage=after", "--rehearse")
    said = dependent.stdout + dependent.stderr
    assert dependent.returncode == 4, said
    assert "requires a run of stage toy, and there is none, nor a passing rehearsal" in said
    named = toy.pytest(
        "--research-stage=after", "--rehearse", f"--rehearse-use-run=toy={layout.name}"
    )
    assert named.returncode == 4, named.stdout + named.stderr
    assert "nor a passing rehearsal of the whole stage toy" in named.stderr, named.stderr
    toy.git("stash", "-q")  # approve wants a clean tree
    try:
        refused = toy.prereg(
            "approve", "--stage", "after", "--run-id", "after-20261202-001",
            "--use-run", f"toy={layout.name}", "--accept-deviations",
        )  # fmt: skip
    finally:
        toy.git("stash", "pop", "-q")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert layout.name in refused.stderr, refused.stderr
    assert "a rehearsal is never a run" in refused.stderr, refused.stderr
    assert len(runs.all_rehearsals(toy.root)) == 1, "no refused rehearsal left a folder"


def test_a_rehearsal_takes_the_plans_rehearsal_scale_by_default_and_a_run_never(tmp_path):
    """A plan's rehearsal_parameters (2 cells of 4): the rehearsal runs 2 items and says so,
    its record and disclosure name the scale and the plan itself; --rehearse-full-scale
    runs 4; the approved run always takes the plan's parameters."""
    spec = stage_spec("toy", rehearsal_parameters={"cells": 2})
    toy = make_toy_repo(tmp_path / "toy", stages={"toy": spec})
    done = toy.pytest("--research-stage=toy", "--rehearse", env=private_tmp(tmp_path / "tmp"))
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "2 passed" in said, said
    assert left_behind(tmp_path / "tmp") == []  # its scaled plan and its world are removed
    assert "at the plan's rehearsal scale {'cells': 2}" in said, said
    _, record = _only_rehearsal(toy)
    plan = toy.root / "plans" / "TOY_PLAN.json"
    assert record["plan"] == {"path": "plans/TOY_PLAN.json", "sha256": sha256_file(plan)}
    assert record["scale"]["parameters"] == {"cells": 2}
    assert _disclosure(toy, record["name"])["scale"] == {"cells": 2}
    full = toy.pytest("--research-stage=toy", "--rehearse", "--rehearse-full-scale")
    assert full.returncode == 0 and "4 passed" in full.stdout, full.stdout + full.stderr
    toy.approve("toy", RUN_ID)
    ran = toy.pytest("--research-stage=toy")
    assert ran.returncode == 0 and len(toy.manifest(RUN_ID)["items"]) == 4, ran.stdout


def test_a_hand_made_disclosure_is_refused_at_approve_naming_its_ref(tmp_path):
    toy = make_toy_repo(tmp_path / "toy", stages={"toy": stage_spec("toy")})
    ref = "refs/prereg/rehearsals/toy/toy-20261206T000000Z"
    (tmp_path / "junk").write_text("not a disclosure\n")
    blob = toy.git("hash-object", "-w", str(tmp_path / "junk")).strip()
    toy.git("update-ref", ref, blob)
    done = toy.approve("toy", RUN_ID, check=False)
    assert done.returncode == 2 and f"{ref} holds no rehearsal disclosure" in done.stderr


HOME_PROBE = """
import json, os, tempfile
from pathlib import Path
import pytest

pytestmark = pytest.mark.research_stage("toy")


@pytest.mark.parametrize("cell", [0, 1])
def test_cell(cell, research):
    research.coords(cell=cell)
    seen = {"home": str(Path.home()), "tmp": tempfile.gettempdir(), "pid": os.getpid()}
    (research.outputs / "seen.json").write_text(json.dumps(seen))
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "two-workers"])
def test_a_rehearsal_has_a_home_and_temporary_folder_of_its_own_as_a_run_has(tmp_path, workers):
    """What an item reads from the user's home fails in a rehearsal as in the run; the
    folders are gone afterwards and the user's environment is as it was."""
    toy = make_toy_repo(tmp_path / "toy", stages={"toy": stage_spec("toy")})
    (toy.root / "experiments" / "test_toy.py").write_text(HOME_PROBE)
    home = tmp_path / "home"
    home.mkdir()
    done = toy.pytest("--research-stage=toy", "--rehearse", *workers, env={"HOME": str(home)})
    assert done.returncode == 0, done.stdout + done.stderr
    layout, _ = _only_rehearsal(toy)
    seen = [json.loads(p.read_text()) for p in layout.folder.glob("items/*/seen.json")]
    assert len(seen) == 2
    for one in seen:  # the scratch folder beside the session's copy of the working tree
        world = Path(one["home"]).parent
        assert Path(one["home"]) != home
        assert world.name.startswith(snapshots.PREFIX + snapshots.WORKING_TREE), world
        assert world.name.endswith(snapshots.SCRATCH_SUFFIX), world
        assert Path(one["tmp"]) == world / "tmp"
        assert not world.exists()


def test_a_failing_item_fails_the_rehearsal_and_two_workers_run_the_whole_stage(tmp_path):
    toy = make_toy_repo(
        tmp_path / "toy",
        stages={"toy": stage_spec("toy", parameters={
            "cells": 3, "misbehave": {"cell": 2, "how": "raise"}
        })},
    )  # fmt: skip
    done = toy.pytest("--research-stage=toy", "--rehearse", "-n", "2")
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "PytestAssertRewriteWarning" not in said, said
    _, record = _only_rehearsal(toy)
    assert record["status"] == "failed" and record["workers"] == 2
    assert sorted(i["outcome"] for i in record["items"]) == ["failed", "passed", "passed"]
    assert (
        "1 item(s) did not pass: experiments/test_toy.py::test_cell[cell2]" in record["reasons"][0]
    )
    assert _prereg_refs(toy) == "" and runs.all_runs(toy.root) == []
    assert _disclosure(toy, record["name"])["status"] == "failed"


def test_a_listing_writes_nothing_and_a_run_refused_for_its_options_points_at_rehearsal(
    rehearsed,
):
    toy = rehearsed[0]
    listed = toy.pytest("--research-stage=toy", "--rehearse", "--collect-only", "-q")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "test_cell[cell3]" in listed.stdout and runs.REHEARSAL_NOTE in listed.stdout
    assert len(runs.all_rehearsals(toy.root)) == 1
    alone = toy.pytest("--rehearse", "-m", "software")
    assert alone.returncode == 4 and "give --research-stage=NAME --rehearse" in alone.stderr
    refused = toy.pytest("--research-stage=toy", "-k", "cell1")
    assert refused.returncode == 4
    assert "--rehearse" in refused.stderr and "nothing spent" in refused.stderr, refused.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rehearse-input", "corpus=x.txt"], "--rehearse-input corpus: stage toy binds no such"),
        (["--rehearse-input", "corpus"], "--rehearse-input takes NAME=VALUE, got 'corpus'"),
        (["--rehearse-use-run", "other=toy-20261202-001"], "requires no stage ['other']"),
        (["--dist", "load", "--tx", "socket=127.0.0.1:9"], "a rehearsal runs on this host only"),
        (["--research-stage=nope"], "unknown research stage 'nope'"),
        (["--run-id", RUN_ID], "--rehearse rehearses one stage, which has no run id"),
    ],
)
def test_a_rehearsal_asked_for_wrongly_is_refused_and_writes_nothing(rehearsed, args, message):
    toy = rehearsed[0]
    done = toy.pytest("--research-stage=toy", "--rehearse", *args)
    assert done.returncode == 4, done.stdout + done.stderr
    assert message in done.stdout + done.stderr, done.stdout + done.stderr
    assert len(runs.all_rehearsals(toy.root)) == 1


def _toy_with_project_kind(tmp_path, functions: str, fields: str) -> ToyRepo:
    """A toy project whose stage kind ``toykind:KIND`` (uncommitted, in the checkout's top)
    defines ``functions`` and passes them as the StageKind ``fields``."""
    toy = make_toy_repo(tmp_path / "toy")
    (toy.root / "toykind.py").write_text(
        f"from prereg.kinds.stages import StageKind\n\n\n{functions}\n\n"
        f"KIND = StageKind(name='toykind:KIND', {fields})\n"
    )
    plan = toy.root / "plans" / "TOY_PLAN.json"
    plan.write_text(plan.read_text().replace('"kind": "plain"', '"kind": "toykind:KIND"'))
    return toy


def test_a_summary_that_needs_the_whole_stage_is_a_note_for_a_selection(tmp_path):
    """A kind whose summary needs every item: rehearsing one item passes, the summary's
    failure a note naming the selection; the whole stage rehearsed writes its summary."""
    toy = _toy_with_project_kind(
        tmp_path,
        "def summarise(view):\n"
        "    if len(view.items) != 4:\n"
        "        raise ValueError(f'the summary needs 4 items, got {len(view.items)}')\n",
        "summarise=summarise",
    )
    one = toy.pytest("--research-stage=toy", "--rehearse", "-k", "cell2")
    assert one.returncode == 0, one.stdout + one.stderr
    assert "note: the stage summary failed" in one.stdout and "-k 'cell2'" in one.stdout
    whole = toy.pytest("--research-stage=toy", "--rehearse")
    assert whole.returncode == 0, whole.stdout + whole.stderr
    records = sorted(runs.all_rehearsals(toy.root), key=lambda r: r["started_at"])
    assert [r["status"] for r in records] == ["passed", "passed"]
    assert records[0]["selection"] == "-k 'cell2'" and records[0]["summary_note"]
    assert records[1]["selection"] is None and records[1]["summary_note"] is None


def test_a_plan_its_kind_refuses_is_refused_before_a_rehearsal_writes_anything(tmp_path):
    toy = _toy_with_project_kind(
        tmp_path,
        "def settings(plan_data, stage):\n"
        "    raise ValueError(f'stages.{stage}.parameters.cells: must be at least 5')\n",
        "settings=settings",
    )
    done = toy.pytest("--research-stage=toy", "--rehearse")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "the plan is refused" in done.stderr, done.stderr
    assert "stages.toy.parameters.cells: must be at least 5" in done.stderr, done.stderr
    assert runs.all_rehearsals(toy.root) == []


def test_a_rehearsal_refuses_output_paths_over_the_projects_records(tmp_path):
    """A rehearsal takes pytest's selection and debugging options, but not an output path
    that would destroy records: pytest empties its --basetemp before use, so
    --basetemp=runs erased every run folder; --log-file=.git/HEAD broke the repository."""
    toy = make_toy_repo(tmp_path / "toy")
    toy.approve("toy", RUN_ID)
    assert toy.pytest("--research-stage=toy").returncode == 0
    run_files = sorted(p for p in toy.run_dir(RUN_ID).rglob("*") if p.is_file())
    head = (toy.root / ".git" / "HEAD").read_bytes()
    for option, shown in (
        ("--basetemp=runs", "--basetemp=runs names"),
        ("--log-file=.git/HEAD", "--log-file=.git/HEAD names"),
        (f"--debug=runs/{RUN_ID}/manifest.json", "--debug=runs/"),
    ):
        done = toy.pytest("--research-stage=toy", "--rehearse", option)
        output = done.stdout + done.stderr
        assert done.returncode == 4, (option, output)
        assert shown in output and "would destroy records" in output, (option, output)
    assert sorted(p for p in toy.run_dir(RUN_ID).rglob("*") if p.is_file()) == run_files
    assert (toy.root / ".git" / "HEAD").read_bytes() == head
    audit = toy.audit(RUN_ID)
    assert audit.returncode == 0, audit.stdout
    outside = toy.pytest("--research-stage=toy", "--rehearse", f"--basetemp={tmp_path / 'bt'}")
    assert outside.returncode == 0, outside.stdout + outside.stderr


READS_AN_IGNORED_FILE = """
import json
from pathlib import Path
import pytest

pytestmark = pytest.mark.research_stage("toy")


@pytest.mark.parametrize("cell", range(2), ids=lambda c: f"cell{c}")
def test_cell(cell, research, pytestconfig):
    research.coords(cell=cell)
    data = json.loads((pytestconfig.rootpath / "data" / "local.json").read_text())
    (research.outputs / "result.json").write_text(json.dumps(data))
"""


def test_a_rehearsal_reads_what_the_run_reads_so_a_git_ignored_file_fails_it_as_a_run(tmp_path):
    # A stage that reads a git-ignored data file by a path in the project passed its
    # rehearsal (the working tree has the file) and failed every item of its run (the
    # snapshot of the commit has none), its run id spent. A rehearsal now runs from the
    # working tree as a commit of everything would hold it: uncommitted edits and new files,
    # no git-ignored file.
    toy = make_toy_repo(tmp_path / "toy")
    (toy.root / "experiments" / "test_toy.py").write_text(READS_AN_IGNORED_FILE)
    (toy.root / "data").mkdir()
    (toy.root / "data" / "local.json").write_text('{"from": "a git-ignored file"}')
    with open(toy.root / ".gitignore", "a") as handle:
        handle.write("data/\n")
    toy.commit("A stage that reads data/local.json, which git ignores")
    done = toy.pytest("--research-stage=toy", "--rehearse")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "local.json" in done.stdout and "No such file" in done.stdout, done.stdout
    _, record = _only_rehearsal(toy)
    assert record["status"] == "failed"
    # Not ignored, not yet committed: a rehearsal reads it, as the run will once committed.
    (toy.root / ".gitignore").write_text(
        (toy.root / ".gitignore").read_text().replace("data/\n", "")
    )
    again = toy.pytest("--research-stage=toy", "--rehearse")
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_rehearsal_with_options_a_run_refuses_passes_but_counts_for_no_approval(tmp_path):
    # A rehearsal takes options a run refuses (for debugging); one that passed with them
    # said "it passed: approve" although the run's world differs: it predicts nothing.
    toy = make_toy_repo(tmp_path / "toy")
    done = toy.pytest("--research-stage=toy", "--rehearse", "-W", "ignore")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "it passed, but a run would be refused for what follows" in done.stdout, done.stdout
    assert "-W ignore changes pytest.ini's warning filters" in done.stdout, done.stdout
    _, record = _only_rehearsal(toy)
    assert record["status"] == "passed" and record["selection"] is None
    assert record["run_would_refuse"] and not records.passed_whole_stage(record)
    disclosed = _disclosure(toy, record["name"])
    assert disclosed["run_would_refuse"] == record["run_would_refuse"]
    approved = toy.approve("toy", RUN_ID)
    assert "no passing rehearsal of the whole stage toy ran this commit's tree" in (
        approved.stdout + approved.stderr
    )
    plain = toy.pytest("--research-stage=toy", "--rehearse")
    assert "it passed: commit, then approve" in plain.stdout, plain.stdout
    assert records.passed_whole_stage(
        json.loads(
            runs.RehearsalLayout(
                toy.root, runs.all_rehearsals(toy.root)[-1]["name"]
            ).record.read_text()
        )
    )


IMPORTS_FROM_AN_ARCHIVE = """
import sys, zipfile
from pathlib import Path
import pytest

sys.path.insert(0, str(Path(__file__).with_name("lib.zip")))
import zipmod  # noqa: E402  -- code from an archive, whose bytes no loader shows prereg

pytestmark = pytest.mark.research_stage("toy")


@pytest.mark.parametrize("cell", range(2), ids=lambda c: f"cell{c}")
def test_cell(cell, research):
    research.coords(cell=cell)
    (research.outputs / "result.txt").write_text(str(zipmod.VALUE))
"""


def test_a_rehearsal_loading_code_a_run_refuses_passes_but_counts_for_no_approval(tmp_path):
    # Code imported from a committed zip archive: the run refuses it before the spend (no
    # covered loader showed its bytes), but its rehearsal said "it passed: approve".
    toy = make_toy_repo(tmp_path / "toy")
    experiments = toy.root / "experiments"
    (experiments / "test_toy.py").write_text(IMPORTS_FROM_AN_ARCHIVE)
    with zipfile.ZipFile(experiments / "lib.zip", "w") as archive:
        archive.writestr("zipmod.py", "VALUE = 1\n")
    toy.commit("A stage importing code from an archive")
    done = toy.pytest("--research-stage=toy", "--rehearse")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "it passed, but a run would be refused for what follows" in done.stdout, done.stdout
    _, record = _only_rehearsal(toy)
    assert any(
        why.startswith("[execution]") and "zipmod" in why and "does not show prereg" in why
        for why in record["run_would_refuse"]
    ), record["run_would_refuse"]
    assert not records.passed_whole_stage(record)
    toy.approve("toy", RUN_ID)
    run = toy.pytest("--research-stage=toy")
    assert run.returncode == 4 and "loaded code zipmod" in run.stderr, run.stdout + run.stderr
    assert "lib.zip is a file, an archive Python imports code from" in run.stderr, run.stderr
    assert "lies outside" not in run.stderr, run.stderr


def test_a_rehearsal_started_with_pythonpath_outside_the_project_counts_for_no_approval(tmp_path):
    # A run started with PYTHONPATH naming a folder outside the project is refused before the
    # spend; its rehearsal's session never received the entry and said "it passed: approve".
    toy = make_toy_repo(tmp_path / "toy")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = toy.pytest("--research-stage=toy", "--rehearse", env={"PYTHONPATH": str(elsewhere)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "it passed, but a run would be refused for what follows" in done.stdout, done.stdout
    _, record = _only_rehearsal(toy)
    assert any(
        why.startswith("[execution] sys.path entry") and str(elsewhere) in why
        for why in record["run_would_refuse"]
    ), record["run_would_refuse"]
    assert not records.passed_whole_stage(record)
