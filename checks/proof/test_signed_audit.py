"""A signed audit: ``prereg audit --sign`` commits the run's SLSA verification summary on top
of the run's source commit, signed by an auditor, as refs/prereg/runs/<id>/signed-audit;
``prereg verify --require-audit`` and the plain commands accept only that, and refuse a
summary signed by another key, edited, about another attestation or failing."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from prereg.proof import vsa
from prereg.records import ledger, signed_audit_record
from support.toy import make_toy_repo, stage_spec

pytestmark = [pytest.mark.software, pytest.mark.attack]

RUN = "toy-20261206-001"
SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "verify-a-run.sh"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A signed toy run, its keys and its card; not audited. Made once; see :func:`run`."""
    base = tmp_path_factory.mktemp("audited")
    toy = make_toy_repo(base / "toy", {"toy": stage_spec("toy", single_attempt=True)})
    keys = toy.set_up_signing(base / "keys")
    card = base / "card.json"
    card.write_text(toy.prereg("register", check=True).stdout)
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 0, done.stdout + done.stderr
    return toy, keys, card


@pytest.fixture
def run(made, tmp_path):
    """A private copy of the signed run's project, its keys and its card."""
    toy, keys, card = made
    shutil.copytree(toy.root, tmp_path / "toy", symlinks=True)
    copy = type(toy)(tmp_path / "toy")
    copy.env.update(toy.env)
    return copy, keys, card


def verifiers(toy, card) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    ours = toy.prereg("verify", f"runs/{RUN}", "--card", str(card), "--require-audit")
    theirs = subprocess.run(
        ["bash", str(SCRIPT), str(toy.root), str(toy.run_dir(RUN)), str(card), "--require-audit"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return ours, theirs


def forge(toy, key: Path, edit=None, *, run_id: str = RUN, replay_defined: bool = False) -> str:
    """The signed-audit ref of ``run_id`` moved to a summary of RUN committed with ``key``
    (``edit`` applied to the summary first; by default the toy kind's: it has no replay);
    the commit."""
    source = json.loads(toy.layout(RUN).start.read_text())["source_commit"]
    statement = vsa.summary(
        toy.root,
        toy.run_dir(RUN),
        clean=True,
        replayed=False,
        package_sha256="0" * 64,
        replay_defined=replay_defined,
    )
    if edit is not None:
        edit(statement)
    toy.git("update-ref", "-d", ledger.signed_audit_ref(run_id))
    return vsa.commit(toy.root, run_id, source, statement, key)


def refused(toy, card, fragment: str) -> None:
    ours, theirs = verifiers(toy, card)
    assert ours.returncode == 1 and fragment in ours.stdout, ours.stdout
    assert theirs.returncode == 1 and "refused:" in theirs.stderr, theirs.stderr


def test_a_signed_passing_audit_verifies_with_both(run):
    toy, keys, card = run
    unaudited = toy.prereg("verify", f"runs/{RUN}", "--card", str(card), "--require-audit")
    assert unaudited.returncode == 1 and "no signed audit" in unaudited.stdout
    done = toy.prereg("audit", f"runs/{RUN}", "--sign", "--signing-key", str(keys["auditor"]))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "signed audit" in done.stdout and "(PASSED)" in done.stdout
    head = toy.git("rev-parse", "HEAD").strip()
    assert toy.git("rev-parse", ledger.signed_audit_ref(RUN)).strip() != head  # no branch moved
    ours, theirs = verifiers(toy, card)
    assert ours.returncode == 0 and "audit passed, signed by auditor@lab" in ours.stdout, (
        ours.stdout
    )
    assert theirs.returncode == 0, theirs.stderr
    toy.prereg("report", f"runs/{RUN}", check=True)
    page = toy.layout(RUN).report.read_text()
    signatures = page[page.index('id="signatures"') :]
    for who in ("approver@lab", "runner@lab", "auditor@lab", "PASSED"):
        assert who in signatures, who
    again = toy.prereg("audit", f"runs/{RUN}", "--sign", "--signing-key", str(keys["auditor"]))
    assert again.returncode == 2 and "recorded once" in again.stderr, again.stderr


def test_a_summary_signed_by_a_key_outside_the_auditors_file_is_refused(run):
    toy, keys, card = run
    forge(toy, keys["approver"])
    refused(toy, card, "is not signed by an auditor")


def test_a_summary_of_another_attestation_is_refused(run):
    toy, keys, card = run
    forge(toy, keys["auditor"], lambda s: s["predicate"]["inputAttestations"][0].update(
        digest={"sha256": "1" * 64}
    ))  # fmt: skip
    refused(toy, card, "summarises another attestation")


def test_a_failing_summary_is_not_a_passed_audit(run):
    toy, keys, card = run
    forge(toy, keys["auditor"], lambda s: s["predicate"].update(verificationResult="FAILED"))
    refused(toy, card, "did not pass the run")


def test_a_summary_edited_after_signing_is_refused(run):
    """The auditor signed a passing summary; the operator re-commits it edited (another
    result) over the same parent, keeping the signature block: git's signature fails."""
    toy, keys, card = run
    toy.prereg("audit", f"runs/{RUN}", "--sign", "--signing-key", str(keys["auditor"]), check=True)
    ref = ledger.signed_audit_ref(RUN)
    raw = toy.git("cat-file", "commit", ref)
    rel = signed_audit_record(RUN)
    summary = json.loads(toy.git("show", f"{ref}:{rel}"))
    summary["predicate"]["verifiedLevels"] = ["PREREG_AUDIT_CLEAN", "PREREG_REPLAYED", "EXTRA"]
    blob = subprocess.run(
        ["git", "-C", str(toy.root), "hash-object", "-w", "--stdin"],
        input=json.dumps(summary).encode(), capture_output=True, check=True,
    ).stdout.decode().strip()  # fmt: skip
    listing = toy.git("ls-tree", "-r", ref).replace(
        toy.git("rev-parse", f"{ref}:{rel}").strip(), blob
    )
    index = toy.root / ".git" / "forged-index"
    env = {"GIT_INDEX_FILE": str(index)}
    subprocess.run(
        ["git", "-C", str(toy.root), "update-index", "--index-info"],
        input=listing.encode(), env={**env, "PATH": "/usr/bin:/bin"}, check=True,
    )  # fmt: skip
    new_tree = subprocess.run(
        ["git", "-C", str(toy.root), "write-tree"], env={**env, "PATH": "/usr/bin:/bin"},
        capture_output=True, check=True,
    ).stdout.decode().strip()  # fmt: skip
    old_tree = toy.git("rev-parse", f"{ref}^{{tree}}").strip()
    forged = raw.replace(f"tree {old_tree}", f"tree {new_tree}", 1)
    made = subprocess.run(
        ["git", "-C", str(toy.root), "hash-object", "-t", "commit", "-w", "--stdin"],
        input=forged.encode(), capture_output=True, check=True,
    ).stdout.decode().strip()  # fmt: skip
    toy.git("update-ref", ref, made)
    refused(toy, card, "is not signed by an auditor")


def test_a_summary_that_skipped_the_replay_is_refused_by_both(run):
    """A hashes-only summary (what an audit with --no-replay found), signed by an auditor:
    a dependent stage's gate and the report never take it as a replay, and neither does
    --require-audit. The toy kind's own summary says its kind has no replay, and passes."""
    toy, keys, card = run
    forge(toy, keys["auditor"], replay_defined=True)
    refused(toy, card, "an audit without its replay attests hashes only")
    forge(toy, keys["auditor"])
    ours, theirs = verifiers(toy, card)
    assert ours.returncode == 0 and theirs.returncode == 0, ours.stdout + theirs.stderr


def test_audit_no_replay_sign_is_refused_before_anything_is_signed(run):
    toy, keys, _ = run
    done = toy.prereg(
        "audit", f"runs/{RUN}", "--no-replay", "--sign", "--signing-key", str(keys["auditor"])
    )
    assert done.returncode == 2 and "drop --no-replay" in done.stderr, done.stderr
    assert "audit of" not in done.stdout  # refused before auditing
    assert vsa.signed_audit(toy.root, RUN) is None


def test_a_signed_audit_ref_at_another_runs_audit_commit_is_refused_not_an_error(run):
    """The run's signed-audit ref moved to an auditor's commit that adds another run's
    summary file: both verifiers refuse it (prereg verify exits 1, naming the file it
    lacks), neither stops on git's error."""
    toy, keys, card = run
    other = forge(toy, keys["auditor"], run_id="toy-20261206-002")
    toy.git("update-ref", ledger.signed_audit_ref(RUN), other)
    refused(toy, card, f"{signed_audit_record(RUN)} at {other[:12]} is not a verification summary")
