"""A witness for spent run ids: a bare repository whose hook only creates refs/prereg/*. A
run whose approval names it pushes its start record there before any item runs; a rerun
under the spent approval is refused by the gate and by the witness, and a run made by hand
under it is refused by ``prereg verify`` and the plain commands."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from prereg.proof import attest, dsse, verify
from prereg.proof.witness import init
from prereg.records import ledger
from support.toy import make_toy_repo, stage_spec

pytestmark = [pytest.mark.software, pytest.mark.attack]

RUN = "toy-20261206-001"
SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "verify-a-run.sh"


def witnessed(base: Path, *, card_witness: bool = True, approve_witness: bool = True):
    """A signed toy project in ``base`` whose approval of RUN names a fresh witness, run once."""
    witness = init(base / "witness.git")
    toy = make_toy_repo(base / "toy", {"toy": stage_spec("toy", single_attempt=True)})
    keys = toy.set_up_signing(base / "keys")
    card = base / "card.json"
    extra = ["--witness", str(witness)] * card_witness
    card.write_text(toy.prereg("register", *extra, check=True).stdout)
    toy.approve("toy", RUN, *(["--witness", str(witness)] * approve_witness))
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 0, done.stdout + done.stderr
    return toy, witness, card, keys


@pytest.fixture(scope="module")
def once(tmp_path_factory):
    """One witnessed run, made once; the checks that change it take a copy (:func:`world`)."""
    return witnessed(tmp_path_factory.mktemp("witnessed"))


@pytest.fixture
def world(once, tmp_path):
    """A private copy of the witnessed run's project (the witness itself is shared: a check
    that pushes to it is refused by its hook)."""
    toy, witness, card, keys = once
    shutil.copytree(toy.root, tmp_path / "toy", symlinks=True)
    copy = type(toy)(tmp_path / "toy")
    copy.env.update(toy.env)
    return copy, witness, card, keys


def both(toy, card) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    ours = toy.prereg("verify", f"runs/{RUN}", "--card", str(card))
    theirs = subprocess.run(
        ["bash", str(SCRIPT), str(toy.root), str(toy.run_dir(RUN)), str(card)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return ours, theirs


def witness_refs(witness: Path) -> dict[str, str]:
    out = subprocess.run(
        ["git", "-C", str(witness), "for-each-ref", "--format=%(refname) %(objectname)"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return dict(line.split() for line in out.splitlines())


def test_a_witnessed_run_verifies_and_the_witness_holds_its_start(once):
    toy, witness, card, _ = once
    held = witness_refs(witness)[ledger.start_ref(RUN)]
    assert held == toy.git("hash-object", str(toy.layout(RUN).start)).strip()
    ours, theirs = both(toy, card)
    assert ours.returncode == 0 and "the witness" in ours.stdout, ours.stdout
    assert theirs.returncode == 0, theirs.stderr
    assert toy.audit(RUN).returncode == 0


def test_the_witness_refuses_a_moved_or_deleted_record_and_any_other_ref(world):
    toy, witness, _, _ = world
    ref = ledger.start_ref(RUN)
    blob = subprocess.run(
        ["git", "-C", str(toy.root), "hash-object", "-w", "--stdin"],
        input=b"another start", capture_output=True, check=True,
    ).stdout.decode().strip()  # fmt: skip
    toy.git("update-ref", ref, blob)
    for args in (
        ["push", str(witness), f"{ref}:{ref}"],
        ["push", "--force", str(witness), f"{ref}:{ref}"],
        ["push", str(witness), f":{ref}"],
        ["push", str(witness), "HEAD:refs/heads/main"],
    ):
        done = toy.run("git", *args)
        assert done.returncode != 0, args
    assert witness_refs(witness) == {
        ref: toy.git("hash-object", str(toy.layout(RUN).start)).strip()
    }


def test_a_rerun_under_a_spent_approval_is_refused_before_anything_runs(world):
    """The local records and the run folder deleted: git here no longer knows the run id
    is spent, and the witness does."""
    toy, _, _, _ = world
    for ref in toy.git("for-each-ref", "--format=%(refname)", "refs/prereg/").split():
        toy.git("update-ref", "-d", ref)
    shutil.rmtree(toy.run_dir(RUN))
    done = toy.pytest("--research-stage=toy")
    assert done.returncode != 0
    assert "[witness]" in done.stdout + done.stderr, done.stdout + done.stderr
    assert "records a start of run" in done.stdout + done.stderr
    assert not toy.run_dir(RUN).exists()


def test_a_run_made_by_hand_under_a_spent_approval_is_refused_by_the_verifiers(world):
    """The operator fabricates a second start of the spent run id and re-signs the
    statements with the runner key: the witness holds the first start."""
    toy, _, card, keys = world
    run = toy.layout(RUN)
    start = json.loads(run.start.read_text())
    start["started_at"] = "2026-12-06T23:59:59.000+00:00"
    run.start.write_text(json.dumps(start))
    run.attestation.unlink()
    attest.write(toy.root, run.folder, run.attestation, dsse.PrivateKey.load(keys["runner"]))
    ours, theirs = both(toy, card)
    assert ours.returncode == 1 and "holds another start" in ours.stdout, ours.stdout
    assert theirs.returncode == 1 and "another start" in theirs.stderr, theirs.stderr


def test_an_approval_that_skips_the_witness_the_card_registers_is_refused(tmp_path):
    toy, _, card, _ = witnessed(tmp_path, approve_witness=False)
    ours, theirs = both(toy, card)
    assert ours.returncode == 1 and "the witness was skipped" in ours.stdout, ours.stdout
    assert theirs.returncode == 1 and "registers the witness" in theirs.stderr, theirs.stderr


def test_a_witness_that_cannot_be_asked_refuses_the_approval_and_the_run(tmp_path):
    toy = make_toy_repo(tmp_path / "toy", {"toy": stage_spec("toy")})
    refused = toy.approve("toy", RUN, "--witness", str(tmp_path / "nowhere.git"), check=False)
    assert refused.returncode == 2 and "[witness]" in refused.stderr, refused.stderr
    witness = init(tmp_path / "witness.git")
    toy.approve("toy", RUN, "--witness", str(witness))
    witness.rename(tmp_path / "moved.git")  # gone after approval
    done = toy.pytest("--research-stage=toy")
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "[witness]" in output and "cannot be asked" in output, output
    assert not toy.run_dir(RUN).exists() and not ledger.is_spent(toy.root, RUN)


def test_a_witness_that_refuses_the_start_stops_the_run_before_any_item(tmp_path):
    """The witness answers at the gate and then refuses the push (another run took the id
    first, or its hook refuses): the run id is spent here, and no item runs."""
    witness = init(tmp_path / "witness.git")
    (witness / "hooks" / "update").write_text("#!/bin/sh\necho refused by policy >&2\nexit 1\n")
    toy = make_toy_repo(tmp_path / "toy", {"toy": stage_spec("toy")})
    toy.approve("toy", RUN, "--witness", str(witness))
    done = toy.pytest("--research-stage=toy")
    assert done.returncode != 0
    assert "did not take the start record" in done.stdout + done.stderr, done.stdout + done.stderr
    assert ledger.is_spent(toy.root, RUN)
    items = toy.run_dir(RUN) / "items"
    assert not items.exists() or not any(items.iterdir())


def test_a_symbolic_link_added_to_the_run_folder_is_refused_by_both_verifiers(world, tmp_path):
    """The plain commands list the run folder as prereg verify does: an entry that is not a
    regular file or folder (a link to a forged summary) is refused, never passed over."""
    toy, _, card, _ = world
    forged = tmp_path / "forged-summary.json"
    forged.write_text('{"forged": true}\n')
    folder = toy.run_dir(RUN)
    folder.chmod(0o755)
    (folder / "summary.json").symlink_to(forged)
    ours, theirs = both(toy, card)
    assert ours.returncode == 1, ours.stdout + ours.stderr
    assert theirs.returncode == 1, theirs.stderr
    assert "summary.json in the run folder is not a regular file or folder" in theirs.stderr


def test_a_witness_url_that_looks_like_an_option_is_refused_and_never_run(world, tmp_path):
    """An approver's record naming the witness ``--upload-pack=PROGRAM``: git would run
    PROGRAM on the verifier's machine if the url reached it as an option. The judgement prereg
    verify and the audit share refuses it by its form, as the plain commands do
    (``case "$url" in -*)``), and asks no git: no program runs, and it is a refusal, not "could
    not verify" (None). The whole chain is a case of the corpus
    (options/the-witness-url/an-option)."""
    toy, _, _, _ = world
    ran = tmp_path / "program-ran"
    found = verify.witness_disagrees(toy.root, f"--upload-pack=touch {ran}", RUN, b"{}")
    assert found is not None and "looks like an option" in found[0], found
    assert not ran.exists()
