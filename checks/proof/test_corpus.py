"""The conformance corpus (checks/support/corpus.py): every case through ``prereg verify``,
the plain commands of docs/how-to/verify-a-run.sh and, where a case turns on a signature,
securesystemslib's DSSE; each must reach the case's outcome, and ``prereg verify`` name its
reason. No string a verifier reads runs anything."""

from __future__ import annotations

import contextlib
import io
import subprocess
from pathlib import Path

import pytest

from prereg import cli
from prereg.proof import dsse, keys
from prereg.testing import outer_environment
from support import corpus, tsa

pytestmark = [pytest.mark.software, pytest.mark.attack]

CASES = corpus.cases()


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    authority = tsa.start(tmp_path_factory.mktemp("corpus-tsa") / "authority")
    try:
        yield corpus.make_worlds(tmp_path_factory.mktemp("corpus"), authority)
    finally:
        authority.stop()


def prereg_verify(world: corpus.World) -> tuple[int, str]:
    """``prereg verify`` as its command line runs it, in this process."""
    args = ["verify", str(world.run.folder), "--card", str(world.card)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(args + ["--require-audit"] * world.require_audit)
    return code, out.getvalue()


def script_verify(world: corpus.World) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(corpus.SCRIPT), *corpus.script_arguments(world)],
        capture_output=True, text=True, env=outer_environment(**HOSTILE), stdin=subprocess.DEVNULL,
        timeout=120, check=False,
    )  # fmt: skip


# A verifier's environment and git configuration that allow every transport, ext:: (which runs
# a program the url names) included: neither verifier may take what they allow.
HOSTILE = {"GIT_ALLOW_PROTOCOL": "ext:file:git:http:https:ssh"}


@pytest.fixture
def hostile_git(tmp_path, monkeypatch):
    config = tmp_path / "user.gitconfig"
    config.write_text('[protocol "ext"]\n\tallow = always\n[protocol]\n\tallow = always\n')
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    for name, value in HOSTILE.items():
        monkeypatch.setenv(name, value)


def sslib_verifies(world: corpus.World) -> bool:
    """securesystemslib's DSSE verifies every line of the attestation with the runner's key."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError
    from securesystemslib.signer import SSlibKey

    public = keys.PublicKey.from_line((world.keys / "runner.pub").read_text())
    key = SSlibKey(
        keyid=public.fingerprint, keytype="ed25519", scheme="ed25519",
        keyval={"public": public.raw.hex()},
    )  # fmt: skip
    try:
        for envelope in dsse.read_lines(world.run.attestation):
            Envelope.from_dict(envelope).verify([key], 1)
    except (VerificationError, ValueError, KeyError, dsse.SignatureProblem):
        return False
    return True


def test_the_corpus_covers_every_class_with_sixty_cases_or_more():
    classes = {case.name.split("/")[0] for case in CASES}
    assert classes == {
        "honest", "entries", "bytes", "options", "another-run", "signatures", "evidence"
    }  # fmt: skip
    assert len(CASES) >= 60
    assert {case.outcome for case in CASES} == set(corpus.EXIT)
    assert all(case.reason for case in CASES if case.outcome == corpus.REFUSED and
               not case.name.startswith("bytes/the-attestation/"))  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_every_verifier_reaches_the_cases_outcome(case, worlds, tmp_path, hostile_git):
    Path(corpus.PWNED).unlink(missing_ok=True)
    world = corpus.copy_world(worlds[case.world], tmp_path / "world")
    case.mutate(world)
    code, said = prereg_verify(world)
    theirs = script_verify(world)
    expected = corpus.EXIT[case.outcome]
    assert code == expected, said
    assert case.reason in said, said
    assert theirs.returncode == expected, theirs.stdout + theirs.stderr
    if case.outcome != corpus.VERIFIED:
        assert f"{'refused' if expected == 1 else 'could not verify'}:" in theirs.stderr
    if case.signatures_hold is not None:
        assert sslib_verifies(world) is case.signatures_hold
    assert not Path(corpus.PWNED).exists(), "a string a verifier read ran a program"


def test_both_verifiers_read_the_repository_named_whatever_git_variables_say(
    worlds, tmp_path, monkeypatch
):
    """GIT_DIR and GIT_WORK_TREE left in the reviewer's environment name another repository:
    both verifiers read the repository they are given."""
    world = corpus.copy_world(worlds["signed"], tmp_path / "world")
    other = corpus.copy_world(worlds["full"], tmp_path / "other")
    elsewhere = {"GIT_DIR": str(other.toy.root / ".git"), "GIT_WORK_TREE": str(other.toy.root)}
    for name, value in elsewhere.items():
        monkeypatch.setenv(name, value)
    assert prereg_verify(world)[0] == 0
    done = subprocess.run(
        ["bash", str(corpus.SCRIPT), *corpus.script_arguments(world)],
        capture_output=True, text=True, stdin=subprocess.DEVNULL,
        env=outer_environment(**elsewhere), timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_the_plain_commands_verify_the_folders_named_whatever_cdpath_says(worlds, tmp_path):
    """Relative arguments, and CDPATH in the reviewer's environment naming a folder that holds
    another runs/<run-id>: the plain commands read the folders named here, not the decoy."""
    world = corpus.copy_world(worlds["signed"], tmp_path / "world")
    decoy = tmp_path / "decoy"
    (decoy / "runs" / corpus.RUN).mkdir(parents=True)
    done = subprocess.run(
        ["bash", str(corpus.SCRIPT), ".", f"runs/{corpus.RUN}", "../card.json"],
        capture_output=True, text=True, cwd=world.toy.root, stdin=subprocess.DEVNULL,
        env=outer_environment(CDPATH=str(decoy)), timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and f"verified: {corpus.RUN}" in done.stdout, done.stderr
