"""Trusted time: a run whose approval names the card's RFC 3161 authority holds its token
over the record (the approval came after it), over the approval commit (asked before the run
id is spent: the approval came before it) and over the attestation (the outputs existed by
it). ``prereg verify`` and the plain commands check each under the card's root certificates
and their order with the approval commit's date; the local authority is ``openssl ts``."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from prereg.proof import timestamp
from prereg.records import ledger
from support import tsa
from support.toy import make_toy_repo, stage_spec

pytestmark = [pytest.mark.software, pytest.mark.attack]

RUN = "toy-20261207-001"
LATER = "toy-20261207-002"
SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "verify-a-run.sh"


def write_card(toy, path: Path, authority: tsa.Authority, url: str | None = None) -> Path:
    root = authority.folder / "root.pem"
    extra = ["--timestamp-authority", url or authority.url, "--timestamp-root", str(root)]
    path.write_text(toy.prereg("register", *extra, check=True).stdout)
    return path


@pytest.fixture(scope="module")
def authority(tmp_path_factory):
    made = tsa.start(tmp_path_factory.mktemp("tsa") / "authority")
    yield made
    made.stop()


@pytest.fixture(scope="module")
def once(tmp_path_factory, authority):
    """A signed toy project registered with the authority, run RUN approved and run under it."""
    base = tmp_path_factory.mktemp("stamped")
    toy = make_toy_repo(base / "toy", {"toy": stage_spec("toy")})
    keys = toy.set_up_signing(base / "keys")
    card = write_card(toy, base / "card.json", authority)
    toy.approve("toy", RUN, "--timestamp-authority", authority.url)
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 0, done.stdout + done.stderr
    toy.prereg("audit", f"runs/{RUN}", "--sign", "--signing-key", str(keys["auditor"]), check=True)
    return toy, card


@pytest.fixture
def world(once, tmp_path):
    toy, card = once
    shutil.copytree(toy.root, tmp_path / "toy", symlinks=True)
    copy = type(toy)(tmp_path / "toy")
    copy.env.update(toy.env)
    return copy, card


def both(toy, card: Path, run_id: str = RUN):
    ours = toy.prereg("verify", f"runs/{run_id}", "--card", str(card))
    theirs = subprocess.run(
        ["bash", str(SCRIPT), str(toy.root), str(toy.run_dir(run_id)), str(card)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return ours, theirs


def test_a_stamped_run_verifies_with_its_three_times_in_order(once, authority):
    toy, card = once
    run = toy.layout(RUN)
    record = json.loads(run.approval_copy.read_text())
    assert record["timestamp"]["url"] == authority.url
    assert json.loads(run.start.read_text())["approval_timestamp"]
    recorded = ledger.read(toy.root, ledger.attestation_timestamp_ref(RUN))
    assert recorded == run.attestation_timestamp.read_bytes()
    ours, theirs = both(toy, card)
    assert ours.returncode == 0 and "approved between" in ours.stdout, ours.stdout + ours.stderr
    assert theirs.returncode == 0, theirs.stderr
    assert toy.audit(RUN).returncode == 0  # the token beside the attestation is no extra file
    toy.prereg("report", f"runs/{RUN}", check=True)
    page = toy.layout(RUN).report.read_text()
    assert f"by {authority.url}: record 20" in page and ", attestation 20" in page, page


def test_a_backdated_approval_is_refused_by_both_verifiers(world, authority):
    """The record is stamped now; the operator dates its commit a day earlier."""
    toy, card = world
    toy.prereg(
        "approve", "--stage", "toy", "--run-id", LATER, "--accept-deviations",
        "--timestamp-authority", authority.url, check=True,
    )  # fmt: skip
    toy.git("add", "-A")
    day_before = "2026-01-01T00:00:00+00:00"
    toy.run("git", "commit", "-q", "-m", "Approve", env={"GIT_COMMITTER_DATE": day_before,
            "GIT_AUTHOR_DATE": day_before}, check=True)  # fmt: skip
    assert toy.pytest("--research-stage=toy").returncode == 0
    ours, theirs = both(toy, card, LATER)
    assert ours.returncode == 1 and "backdated" in ours.stdout, ours.stdout
    assert theirs.returncode == 1 and "backdated" in theirs.stderr, theirs.stderr


@pytest.mark.parametrize("forged", ["another authority", "another attestation"])
def test_an_attestation_timestamp_not_of_the_card_authority_or_not_of_this_attestation(
    world, tmp_path, authority, forged
):
    """The operator replaces attestation.tsr and git's record of it consistently: with a
    token of an authority they run themselves, or a genuine token over other bytes."""
    toy, card = world
    run = toy.layout(RUN)
    if forged == "another authority":
        own = tsa.start(tmp_path / "own", "the operator's authority")
        token = timestamp.request(own.url, run.attestation.read_bytes())
        own.stop()
    else:
        token = timestamp.request(authority.url, b"another attestation")
    run.attestation_timestamp.chmod(0o644)
    run.attestation_timestamp.write_bytes(token)
    ref = ledger.attestation_timestamp_ref(RUN)
    toy.git("update-ref", "-d", ref)
    ledger.record_attestation_timestamp(toy.root, RUN, token)
    ours, theirs = both(toy, card)
    assert ours.returncode == 1 and "attestation's timestamp does not hold" in ours.stdout, (
        ours.stdout
    )
    assert theirs.returncode == 1 and "timestamp" in theirs.stderr, theirs.stderr


def test_an_approval_that_skips_the_card_authority_and_a_missing_token_are_refused(
    world, tmp_path, authority
):
    toy, card = world
    other = write_card(toy, tmp_path / "other.json", authority, "https://tsa.example.org/")
    ours, theirs = both(toy, other)
    assert ours.returncode == 1 and "the timestamps were skipped" in ours.stdout, ours.stdout
    assert theirs.returncode == 1 and "timestamp authority" in theirs.stderr, theirs.stderr
    toy.layout(RUN).attestation_timestamp.unlink()
    ours, theirs = both(toy, card)
    assert ours.returncode == 1 and "not timestamped" in ours.stdout, ours.stdout
    assert theirs.returncode == 1 and "not timestamped" in theirs.stderr, theirs.stderr


def test_an_authority_that_does_not_answer_refuses_the_approval_and_the_run(tmp_path):
    """Nothing is written at approval, nothing spent at the run."""
    toy = make_toy_repo(tmp_path / "toy", {"toy": stage_spec("toy")})
    gone = tsa.start(tmp_path / "authority")
    gone.stop()
    refused = toy.approve("toy", RUN, "--timestamp-authority", gone.url, check=False)
    assert refused.returncode == 2 and "cannot be asked" in refused.stderr, refused.stderr
    assert not (toy.root / "plans" / "approvals" / f"{RUN}.json").exists()
    later = tsa.start(tmp_path / "later")
    toy.approve("toy", RUN, "--timestamp-authority", later.url)
    later.stop()  # gone after approval
    done = toy.pytest("--research-stage=toy")
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "[timestamp]" in output and "cannot be asked" in output, output
    assert not toy.run_dir(RUN).exists() and not ledger.is_spent(toy.root, RUN)


def test_a_reviewer_verifies_from_the_pushed_refs_and_the_run_folder_alone(once, tmp_path):
    """What the operator publishes (the branch and refs/prereg/* pushed to a remote) and the
    run folder they hand over: a reviewer's fresh clone, without prereg on its PATH for the
    plain commands, verifies the signed, timestamped and signed-audited run; prereg verify
    agrees from the same clone."""
    toy, card = once
    public = tmp_path / "public.git"
    subprocess.run(["git", "init", "-q", "--bare", str(public)], check=True)
    toy.git("push", "-q", str(public), "HEAD:refs/heads/main", "refs/prereg/*:refs/prereg/*")
    clone = tmp_path / "reviewer" / "clone"
    subprocess.run(["git", "clone", "-q", str(public), str(clone)], check=True)
    subprocess.run(
        ["git", "-C", str(clone), "fetch", "-q", "origin", "refs/prereg/*:refs/prereg/*"],
        check=True,
    )
    handed = tmp_path / "reviewer" / "handed" / RUN
    shutil.copytree(toy.run_dir(RUN), handed)
    bare_path = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "reviewer")}
    theirs = subprocess.run(
        ["bash", str(SCRIPT), str(clone), str(handed), str(card), "--require-audit"],
        capture_output=True, text=True, check=False, env=bare_path,
    )  # fmt: skip
    assert theirs.returncode == 0 and f"verified: {RUN}" in theirs.stdout, theirs.stderr
    ours = toy.prereg(
        "verify", str(handed), "--card", str(card), "--repo", str(clone), "--require-audit"
    )
    assert ours.returncode == 0 and "approved between" in ours.stdout, ours.stdout + ours.stderr


def test_a_stage_that_plants_its_own_attestation_timestamp_gets_no_trusted_time(
    tmp_path, authority
):
    """The approved stage writes attestation.tsr into its run folder before the controller
    does: the controller never replaces it and says so, and both verifiers refuse the run's
    time (the planted bytes are no token over the attestation written after them)."""
    toy = make_toy_repo(tmp_path / "toy", {"toy": stage_spec("toy")})
    toy.set_up_signing(tmp_path / "keys")
    card = write_card(toy, tmp_path / "card.json", authority)
    module = toy.root / "experiments" / "test_toy.py"
    module.write_text(module.read_text().replace(
        "research.coords(cell=cell)\n",
        "research.coords(cell=cell)\n"
        '    (research.outputs.parents[1] / "attestation.tsr").write_bytes(b"planted")\n',
        1,
    ))  # fmt: skip
    toy.commit("A stage that plants an attestation timestamp")
    toy.approve("toy", RUN, "--timestamp-authority", authority.url)
    done = toy.pytest("--research-stage=toy")
    assert "could not be timestamped" in done.stdout, done.stdout
    assert ledger.read(toy.root, ledger.attestation_timestamp_ref(RUN)) is None
    ours, theirs = both(toy, card)
    assert ours.returncode == 1 and "attestation's timestamp" in ours.stdout, ours.stdout
    assert theirs.returncode == 1 and "timestamp 3" in theirs.stderr, theirs.stderr
