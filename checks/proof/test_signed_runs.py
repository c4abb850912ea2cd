"""Signing at the gate and in the run: a signed run verifies from its registration card and
passes its audit; the gate refuses an approval no approver signed before it spends the run id,
whatever the repository's own configuration says; a runner's key cannot approve; a stage
cannot plant its own attestation. Each forgery a verifier must refuse afterwards is a case of
the conformance corpus (checks/support/corpus.py, checks/proof/test_corpus.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from prereg.commands.signing import make_key
from prereg.proof import keys
from support.toy import assert_finding, make_toy_repo, stage_spec

pytestmark = [pytest.mark.software, pytest.mark.attack]

RUN = "toy-20261206-001"


def test_an_honest_signed_run_verifies_says_who_signed_and_passes_its_audit(tmp_path):
    toy = make_toy_repo(tmp_path / "toy", {"toy": stage_spec("toy", single_attempt=True)})
    toy.set_up_signing(tmp_path / "keys")
    card = tmp_path / "card.json"
    card.write_text(toy.prereg("register", check=True).stdout)
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 0, done.stdout + done.stderr
    ours = toy.prereg("verify", f"runs/{RUN}", "--card", str(card))
    assert ours.returncode == 0, ours.stdout
    assert "signed by runner@lab" in ours.stdout and "signed by an approver" in ours.stdout
    assert toy.audit(RUN).returncode == 0


def test_a_runner_key_listed_as_an_approver_cannot_sign_an_approval(tmp_path):
    """A runner's line carries namespace prereg-run only: git refuses its signature on a
    commit even in the approvers file."""
    toy = make_toy_repo(tmp_path / "toy", {"toy": stage_spec("toy", single_attempt=True)})
    made = toy.set_up_signing(tmp_path / "keys")
    public = keys.PublicKey.from_line(Path(f"{made['runner']}.pub").read_text())
    line = keys.signer_line("runner@lab", keys.RUNNERS, public)
    approvers = toy.root / keys.role_path(keys.APPROVERS)
    approvers.write_text(approvers.read_text() + line + "\n")
    toy.commit("List the runner's line among the approvers")  # signed by the approver
    toy.git("config", "user.signingkey", str(made["runner"]))
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy")
    assert "[approval-signature]" in done.stdout + done.stderr, done.stdout
    assert "does not allow to sign commits" in done.stdout + done.stderr
    assert not toy.run_dir(RUN).exists()


def test_the_gate_refuses_an_unsigned_approval_commit_before_spending(tmp_path):
    toy = make_toy_repo(tmp_path / "toy", {"toy": stage_spec("toy", single_attempt=True)})
    toy.set_up_signing(tmp_path / "keys")
    toy.git("config", "commit.gpgsign", "false")
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy")
    assert done.returncode != 0
    assert "[approval-signature]" in done.stdout + done.stderr
    assert "no signature" in done.stdout + done.stderr
    assert not toy.run_dir(RUN).exists()  # nothing spent
    toy.git("commit", "--amend", "-q", "--no-edit", "-S")
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_single_attempt_stage_cannot_be_approved_without_an_approvers_file(tmp_path):
    toy = make_toy_repo(tmp_path / "toy", {"toy": stage_spec("toy", single_attempt=True)})
    done = toy.approve("toy", RUN, check=False)
    assert done.returncode != 0
    assert "[approval-signature]" in done.stdout + done.stderr
    assert "prereg keys add approvers" in done.stdout + done.stderr


def test_a_stage_whose_plan_says_optional_runs_unsigned_and_says_so(tmp_path):
    toy = make_toy_repo(tmp_path / "toy", {"toy": stage_spec("toy")})
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "attestation" in done.stdout and "unsigned" in done.stdout
    assert toy.audit(RUN).returncode == 0


def test_the_repositorys_own_configuration_cannot_answer_for_ssh_keygen(tmp_path):
    """The operator signs the approval with their own key, then points the repository's
    configuration at a program that calls every signature good and at an allowed-signers
    file of their own: git alone is fooled; the gate judges with ssh-keygen
    against .prereg/approvers, and refuse."""
    toy = make_toy_repo(tmp_path / "toy", {"toy": stage_spec("toy", single_attempt=True)})
    toy.set_up_signing(tmp_path / "keys")
    outsider = make_key(tmp_path / "keys" / "mallory", "mallory@lab")
    toy.git("config", "user.signingkey", str(outsider))
    toy.approve("toy", RUN)
    public = keys.PublicKey.from_line(Path(f"{outsider}.pub").read_text())
    mine = tmp_path / "mine"
    mine.write_text(keys.signer_line("approver@lab", keys.APPROVERS, public) + "\n")
    fake = tmp_path / "fake-ssh-keygen"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$*" in *find-principals*) echo approver@lab ;;\n'
        f"  *) echo 'Good \"git\" signature for approver@lab with ED25519 key {public.fingerprint}' ;;\n"
        "esac\nexit 0\n"
    )
    fake.chmod(0o755)
    toy.git("config", "gpg.ssh.program", str(fake))
    toy.git("config", "gpg.ssh.allowedSignersFile", str(mine))
    fooled = toy.git("log", "-1", "--format=%G?", "HEAD").strip()
    assert fooled == "G", fooled  # git with the repository's own settings calls it good
    done = toy.pytest("--research-stage=toy")
    output = done.stdout + done.stderr
    assert "[approval-signature]" in output and "does not hold" in output, output
    assert not toy.run_dir(RUN).exists()


def test_a_stage_that_plants_its_own_attestation_gets_no_attestation_of_the_run(tmp_path):
    """The approved stage writes attestation.intoto.jsonl into its run folder before the
    controller does: the controller never replaces it and says so, the audit finds a file
    git does not record, and verify refuses it."""
    toy = make_toy_repo(tmp_path / "toy", {"toy": stage_spec("toy", single_attempt=True)})
    toy.set_up_signing(tmp_path / "keys")
    card = tmp_path / "card.json"
    card.write_text(toy.prereg("register", check=True).stdout)
    module = toy.root / "experiments" / "test_toy.py"
    module.write_text(module.read_text().replace(
        "research.coords(cell=cell)\n",
        "research.coords(cell=cell)\n"
        '    (research.outputs.parents[1] / "attestation.intoto.jsonl").write_text("{}\\n")\n',
        1,
    ))  # fmt: skip
    toy.commit("A stage that plants an attestation")
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy")
    assert "attestation (attestation.intoto.jsonl) could not be written" in done.stdout
    assert_finding(toy.audit(RUN), "git records no attestation of the run")
    refused = toy.prereg("verify", f"runs/{RUN}", "--card", str(card))
    assert refused.returncode == 1, refused.stdout
