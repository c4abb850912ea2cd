"""A run approved, run and attested with keys verifies from its registration card, and each
way an operator without the approver's key could fake one is refused by all three
verifiers: ``prereg verify``, the plain commands of docs/how-to/verify-a-run.sh (git,
ssh-keygen, openssl, jq, sha256sum) and, for the signatures, securesystemslib's DSSE.

One honest signed run is made once; each attack works on a private copy of its repository.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from prereg.base.hashing import sha256_file
from prereg.commands.signing import make_key
from prereg.proof import attest, dsse, keys
from prereg.records import ledger
from prereg.testing import outer_environment
from support.toy import ToyRepo, assert_finding, make_toy_repo, stage_spec

pytestmark = [pytest.mark.software, pytest.mark.attack]

RUN = "toy-20261206-001"
SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "verify-a-run.sh"


@pytest.fixture(scope="module")
def signed(tmp_path_factory) -> Path:
    """A folder with ``toy/`` (a signed single-attempt stage approved and run), ``keys/`` and
    ``card.json``."""
    base = tmp_path_factory.mktemp("signed")
    toy = make_toy_repo(base / "toy", {"toy": stage_spec("toy", single_attempt=True)})
    toy.set_up_signing(base / "keys")
    keys_dir = base / "keys"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys_dir / "outsider")],
        check=True,
    )
    (base / "card.json").write_text(toy.prereg("register", check=True).stdout)
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 0, done.stdout + done.stderr
    return base


@pytest.fixture
def world(signed, tmp_path) -> tuple[ToyRepo, Path, Path]:
    """A private copy: the project, its keys folder and the card."""
    shutil.copytree(signed, tmp_path / "w", symlinks=True)
    toy = ToyRepo(tmp_path / "w" / "toy")
    toy.git("config", "user.signingkey", str(tmp_path / "w" / "keys" / "approver"))
    return toy, tmp_path / "w" / "keys", tmp_path / "w" / "card.json"


def prereg_verify(toy: ToyRepo, card: Path, run_id: str = RUN) -> subprocess.CompletedProcess:
    return toy.prereg("verify", f"runs/{run_id}", "--card", str(card))


def script_verify(toy: ToyRepo, card: Path, run_id: str = RUN) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), str(toy.root), str(toy.run_dir(run_id)), str(card)],
        capture_output=True, text=True, env=outer_environment(), check=False,
    )  # fmt: skip


def sslib_verifies(toy: ToyRepo, runner_pub: Path, run_id: str = RUN) -> bool:
    """securesystemslib's DSSE verifies every line with the runner's public key."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError
    from securesystemslib.signer import SSlibKey

    public = keys.PublicKey.from_line(runner_pub.read_text())
    key = SSlibKey(
        keyid=public.fingerprint, keytype="ed25519", scheme="ed25519",
        keyval={"public": public.raw.hex()},
    )  # fmt: skip
    try:
        for envelope in dsse.read_lines(toy.layout(run_id).attestation):
            Envelope.from_dict(envelope).verify([key], 1)
    except (VerificationError, ValueError, KeyError):
        return False
    return True


def assert_refused(toy: ToyRepo, card: Path, fragment: str, run_id: str = RUN) -> None:
    """prereg verify and the plain commands both refuse; prereg names ``fragment``."""
    ours, theirs = prereg_verify(toy, card, run_id), script_verify(toy, card, run_id)
    assert ours.returncode == 1, ours.stdout + ours.stderr
    assert fragment in ours.stdout, ours.stdout
    assert theirs.returncode == 1, theirs.stdout + theirs.stderr
    assert "refused:" in theirs.stderr


def resign(toy: ToyRepo, key: Path, run_id: str = RUN) -> None:
    """The operator rebuilds the run's statements from the folder as it is now and signs
    them with ``key`` (what a holder of the runner key can always do)."""
    target = toy.layout(run_id).attestation
    target.unlink()
    attest.write(toy.root, toy.run_dir(run_id), target, dsse.PrivateKey.load(key))


def forge_approval(
    toy: ToyRepo, keys_dir: Path, signer: str | None, *, add: bool = False, change=None
) -> None:
    """A history rewritten consistently by an operator who holds the runner key and
    ``signer``'s key (None: signs nothing), not an approver's: from the approved anchor,
    optionally a commit adding ``signer`` to .prereg/approvers, then the approval record
    (its anchor updated) committed again, the run's start.json and approval.json to match,
    git's records of them re-created and the statements rebuilt and signed with the runner key.
    ``change``: called with the approval record before it is committed again."""
    record_rel = f"plans/approvals/{RUN}.json"
    record = json.loads((toy.root / record_rel).read_text())
    if change is not None:
        change(record)
    toy.git("reset", "-q", "--hard", "HEAD^")
    sign = ["--no-gpg-sign"] if signer is None else [f"--gpg-sign={keys_dir / signer}"]
    if add:
        public = keys.PublicKey.from_line((keys_dir / f"{signer}.pub").read_text())
        approvers = toy.root / keys.role_path(keys.APPROVERS)
        line = keys.signer_line(f"{signer}@lab", keys.APPROVERS, public)
        approvers.write_text(approvers.read_text() + line + "\n")
        toy.git("add", "-A")
        toy.git("commit", "-q", *sign, "-m", "Add an approver")
    record["source_anchor"] = toy.git("rev-parse", "HEAD").strip()
    (toy.root / record_rel).parent.mkdir(exist_ok=True)
    (toy.root / record_rel).write_text(json.dumps(record, indent=2))
    toy.git("add", "-A")
    toy.git("commit", "-q", *sign, "-m", f"Approve {RUN}")
    run = toy.layout(RUN)
    shutil.copyfile(toy.root / record_rel, run.approval_copy)
    start = json.loads(run.start.read_text())
    start["source_commit"] = toy.git("rev-parse", "HEAD").strip()
    start["approval_sha256"] = sha256_file(run.approval_copy)
    run.start.write_text(json.dumps(start))
    resign(toy, keys_dir / "runner")
    for ref, path in (
        (ledger.start_ref(RUN), run.start),
        (ledger.attestation_ref(RUN), run.attestation),
    ):
        blob = toy.git("hash-object", "-w", str(path)).strip()
        toy.git("update-ref", ref, blob)


def test_a_witness_url_that_looks_like_an_option_reaches_no_git_of_either_verifier(world, tmp_path):
    """Someone holding the approver's and the runner's keys makes a consistent run whose
    record names the witness ``--upload-pack=PROGRAM``: handed to git as an option it would run
    PROGRAM on the verifier's machine. Both verifiers refuse it by its form."""
    toy, keys_dir, card = world
    ran = tmp_path / "program-ran"

    def name_the_witness(record: dict) -> None:
        record["witness"] = {"url": f"--upload-pack=touch {ran}"}

    forge_approval(toy, keys_dir, "approver", change=name_the_witness)
    assert_refused(toy, card, "looks like an option")
    assert "looks like an option" in script_verify(toy, card).stderr  # not refused earlier
    assert not ran.exists()


def test_an_honest_signed_run_verifies_with_all_three(world):
    toy, keys_dir, card = world
    ours = prereg_verify(toy, card)
    assert ours.returncode == 0, ours.stdout
    assert "signed by runner@lab" in ours.stdout and "signed by an approver" in ours.stdout
    theirs = script_verify(toy, card)
    assert theirs.returncode == 0, theirs.stderr
    assert sslib_verifies(toy, keys_dir / "runner.pub")
    assert toy.audit(RUN).returncode == 0


def test_a_statement_resigned_by_a_key_outside_the_runners_file_is_refused(world):
    toy, keys_dir, card = world
    resign(toy, keys_dir / "outsider")
    assert_refused(toy, card, "not a key of the file")
    assert not sslib_verifies(toy, keys_dir / "runner.pub")


def test_a_statement_edited_with_its_signature_kept_is_refused(world):
    toy, keys_dir, card = world
    path = toy.layout(RUN).attestation
    lines = path.read_text().splitlines()
    envelope = json.loads(lines[1])
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["failedTests"] = []
    statement["predicate"]["result"] = "PASSED"
    statement["predicate"]["passedTests"] = ["experiments/test_toy.py::test_cell[cell9]"]
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    path.write_text(lines[0] + "\n" + json.dumps(envelope) + "\n")
    assert_refused(toy, card, "does not verify")
    assert not sslib_verifies(toy, keys_dir / "runner.pub")


def test_an_envelope_whose_payload_type_changed_is_refused(world):
    """PAE binds the type: a changed payloadType breaks the signature."""
    toy, keys_dir, card = world
    path = toy.layout(RUN).attestation
    lines = path.read_text().splitlines()
    envelope = json.loads(lines[0])
    envelope["payloadType"] = "application/json"
    path.write_text(json.dumps(envelope) + "\n" + lines[1] + "\n")
    assert_refused(toy, card, "payloadType")
    assert not sslib_verifies(toy, keys_dir / "runner.pub")


FRAMINGS = {  # the honest attestation's bytes -> the same envelopes framed otherwise
    "crlf": lambda data: data.replace(b"\n", b"\r\n"),
    "no-final-line-feed": lambda data: data[:-1],
    "a-copy-of-line-2-without-its-line-feed": lambda data: data + data.splitlines()[1],
    "a-copy-of-line-2": lambda data: data + data.splitlines(keepends=True)[1],
    "a-blank-line": lambda data: data + b"\n",
}


@pytest.mark.parametrize("framing", sorted(FRAMINGS))
def test_an_attestation_framed_otherwise_is_refused_by_both_verifiers(world, framing):
    """The signed envelopes unchanged, their lines framed as prereg does not write them:
    both verifiers count lines alike, so neither reads a file the other reads otherwise."""
    toy, _, card = world
    path = toy.layout(RUN).attestation
    path.write_bytes(FRAMINGS[framing](path.read_bytes()))
    # A verifier given the folder without git's record of the attestation (refs/prereg/* not
    # fetched) reads the file itself.
    toy.git("update-ref", "-d", ledger.attestation_ref(RUN))
    ours, theirs = prereg_verify(toy, card), script_verify(toy, card)
    assert ours.returncode == 1, ours.stdout + ours.stderr
    assert theirs.returncode == 1 and "refused:" in theirs.stderr, theirs.stdout + theirs.stderr


def _named_otherwise(commit: str, how: str) -> str:
    return {"ref": "HEAD", "short": commit[:12], "option": "--output=/tmp/prereg-pwned"}[how]


@pytest.mark.parametrize("how", ["ref", "short", "option"])
def test_a_card_naming_its_freeze_commit_otherwise_than_by_its_id_is_refused(world, how):
    """A ref moves and a short id can come to name two commits; an option-like string would
    reach git as an option: both verifiers refuse before asking git anything of it."""
    toy, _, card = world
    data = json.loads(card.read_text())
    data["freeze_commit"] = _named_otherwise(data["freeze_commit"], how)
    card.write_text(json.dumps(data))
    assert_refused(toy, card, "is not a full commit id")
    assert not Path("/tmp/prereg-pwned").exists()


@pytest.mark.parametrize("how", ["ref", "short", "option"])
def test_a_statement_naming_its_commit_otherwise_than_by_its_id_is_refused(world, how):
    """The holder of the runner key signs statements naming the approval commit by a ref, a
    short id or an option-like string (which the verifiers read before the signature)."""
    toy, keys_dir, card = world
    path = toy.layout(RUN).attestation
    envelopes = dsse.read_lines(path)
    first = json.loads(dsse.payload_of(envelopes[0]))
    deps = first["predicate"]["buildDefinition"]["resolvedDependencies"]
    commit = next(d for d in deps if d["name"] == "source")["digest"]["gitCommit"]
    key = dsse.PrivateKey.load(keys_dir / "runner")
    forged = [
        dsse.envelope(
            dsse.payload_of(e).replace(commit.encode(), _named_otherwise(commit, how).encode()), key
        )
        for e in envelopes
    ]
    path.write_bytes(attest.envelope_lines(forged))
    toy.git("update-ref", "-d", ledger.attestation_ref(RUN))
    assert_refused(toy, card, "not a full commit id")
    assert not Path("/tmp/prereg-pwned").exists()


@pytest.mark.parametrize("name", ["items.jsonl", "manifest.json", "start.json", "junit.xml"])
def test_a_run_file_changed_after_attestation_is_refused(world, name):
    toy, keys_dir, card = world
    path = toy.run_dir(RUN) / name
    path.write_bytes(path.read_bytes() + b"\n")
    assert_refused(toy, card, "changed after it was attested")
    assert sslib_verifies(toy, keys_dir / "runner.pub")  # the signature itself still holds
    assert toy.audit(RUN).returncode == 1


def test_an_output_changed_added_or_deleted_after_attestation_is_refused(world):
    toy, _, card = world
    outputs = sorted((toy.run_dir(RUN) / "items").rglob("*.json"))
    outputs[0].write_text('{"forged": true}\n')
    assert_refused(toy, card, "changed after it was attested")
    (toy.run_dir(RUN) / "items" / "late.json").write_text("{}\n")
    assert_refused(toy, card, "not attested")
    outputs[1].unlink()
    assert_refused(toy, card, "attested and missing")


def test_an_attestation_copied_to_another_run_id_is_refused(world):
    toy, _, card = world
    other = "toy-20261206-002"
    shutil.copytree(toy.run_dir(RUN), toy.run_dir(other))
    assert_refused(toy, card, "an attestation of another run", run_id=other)


def test_a_run_without_an_attestation_is_refused(world):
    toy, _, card = world
    toy.layout(RUN).attestation.unlink()
    assert_refused(toy, card, "wrote no attestation")
    assert toy.audit(RUN).returncode == 1  # git records an attestation for the run


@pytest.mark.parametrize(
    "signer, fragment",
    [(None, "no signature"), ("outsider", "a key the file does not hold"),
     ("runner", "a key the file does not hold")],
    ids=["unsigned", "outsider", "runner-key"],
)  # fmt: skip
def test_an_approval_commit_not_signed_by_an_approver_is_refused(world, signer, fragment):
    toy, keys_dir, card = world
    forge_approval(toy, keys_dir, signer)
    assert_refused(toy, card, fragment)
    assert sslib_verifies(toy, keys_dir / "runner.pub")  # the runner's signature holds


def test_an_approver_the_operator_added_in_a_commit_no_approver_signed_is_refused(world):
    """The operator adds their own key to .prereg/approvers and signs the approval with it:
    the card's freeze commit does not hold that key, and no approver signed the change."""
    toy, keys_dir, card = world
    forge_approval(toy, keys_dir, "outsider", add=True)
    assert_refused(toy, card, "changes .prereg/ and is not signed by an approver")


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
