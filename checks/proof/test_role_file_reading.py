"""prereg and the plain verifier read a role file (an allowed-signers file of .prereg/) alike:
a corpus of byte-level variants of its lines, and a property over generated lines, each read
by ``prereg.proof.keys.parse_signers`` and by the ``signers`` function of
docs/how-to/verify-a-run.sh, must give the same refusal or the same keys and namespaces. The
script reads every role file it trusts through that function, so a line the two would read
differently (an option matched by a substring, a key inside a quoted value, a last line
without its line feed, a NUL byte) cannot make one verifier trust a key the other refuses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prereg.commands.signing import make_key
from prereg.proof import keys

pytestmark = pytest.mark.software

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "verify-a-run.sh"


def _function(name: str) -> str:
    """The shell function ``name`` of the script, as it stands there."""
    lines = SCRIPT.read_text().splitlines()
    start = lines.index(f"{name}() {{  # FILE NAME")
    end = lines.index("}", start)
    return "\n".join(lines[start : end + 1])


SHELL = 'set -euo pipefail\nrefuse() { echo "refused: $*" >&2; exit 1; }\n' + _function("signers")


@pytest.fixture(scope="module")
def key(tmp_path_factory) -> str:
    private = tmp_path_factory.mktemp("key") / "k"
    make_key(private, "k@lab")
    return private.with_name("k.pub").read_text().split()[1]


def by_prereg(data: bytes) -> list[str] | None:
    """Each line's "any KEY" or "only:NAMESPACES KEY", or None when prereg refuses the file."""
    try:
        found = keys.parse_signers(data.decode("utf-8"), "f")
    except (keys.KeyProblem, UnicodeDecodeError):
        return None
    spaces = ["any" if s.namespaces is None else "only:" + ",".join(s.namespaces) for s in found]
    return [f"{space} {signer.key.text().split()[1]}" for space, signer in zip(spaces, found)]


def by_script(data: bytes, folder: Path) -> list[str] | None:
    path = folder / "role-file"
    path.write_bytes(data)
    done = subprocess.run(
        ["bash", "-c", SHELL + '\nsigners "$1" f', "-", str(path)],
        capture_output=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        assert done.stderr.startswith(b"refused: "), done.stderr
        return None
    return done.stdout.decode().splitlines()


def corpus(k: str) -> dict[str, bytes]:
    """Variants of a runners file, each a way two readers of it could differ."""
    line = f'runner@lab namespaces="prereg-run" ssh-ed25519 {k}'
    cases = {
        "as prereg writes it": line + "\n",
        "no namespaces option": f"runner@lab ssh-ed25519 {k}\n",
        "namespaces listing two": line.replace('"prereg-run"', '"git,prereg-run"') + "\n",
        "a namespace prereg-run is a prefix of": line.replace("prereg-run", "prereg-runner") + "\n",
        "a namespace that is a wildcard": line.replace('"prereg-run"', '"*"') + "\n",
        "namespaces empty": line.replace('"prereg-run"', '""') + "\n",
        "namespaces without a value": line.replace('="prereg-run"', "") + "\n",
        "namespaces unquoted": line.replace('"prereg-run"', "prereg-run") + "\n",
        "namespaces given twice": line.replace(
            'namespaces="prereg-run"', 'namespaces="git",namespaces="prereg-run"'
        )
        + "\n",
        "an option name in capitals": line.replace("namespaces", "NameSpaces") + "\n",
        "an unknown option": line.replace('"prereg-run"', '"prereg-run",no-touch-required') + "\n",
        "a certificate authority": line.replace('="prereg-run"', '="prereg-run",cert-authority')
        + "\n",
        "valid-before with a value": line.replace(
            '"prereg-run"', '"prereg-run",valid-before="2030"'
        )
        + "\n",
        "a trailing comma in the options": line.replace('"prereg-run"', '"prereg-run",') + "\n",
        "junk after an option value": line.replace('"prereg-run"', '"prereg-run"x') + "\n",
        "a key inside a quoted value with blanks": (
            f'runner@lab namespaces="prereg-run ssh-ed25519 {k}" ssh-ed25519 {k}\n'
        ),
        "an unpaired quote": line.replace('="prereg-run"', '="prereg-run') + "\n",
        "a quoted principal": f'"runner@lab" ssh-ed25519 {k}\n',
        "tabs between fields": line.replace(" ", "\t") + "\n",
        "blanks around the line": "  \t" + line + " \t\n",
        "a comment and blank lines": "# the runner\n\n" + line + "\n\n",
        "an indented comment": "   # not a key\n" + line + "\n",
        "the last line without its line feed": line,
        "a carriage return ending the line": line + "\r\n",
        "a line that is only a carriage return": "\r\n" + line + "\n",
        "a NUL byte in a namespace": line.replace("prereg-run", "prereg-run\0") + "\n",
        "a NUL byte at the end": line + "\n\0",
        "a form feed between fields": line.replace(" ssh-ed25519", "\fssh-ed25519") + "\n",
        "a no-break space between fields": line.replace(" ssh-ed25519", "\u00a0ssh-ed25519") + "\n",
        "a line separator after the key": line + "\u2028\n",
        "an RSA key type": line.replace("ssh-ed25519", "ssh-rsa") + "\n",
        "a security key type": line.replace("ssh-ed25519", "sk-ssh-ed25519@openssh.com") + "\n",
        "a key with one character more": line + "A\n",
        "a key with padding added": line + "=\n",
        "a key one character short": line[:-1] + "\n",
        "a comment after the key": line + " runner's laptop\n",
        "no key after the options": 'runner@lab namespaces="prereg-run" ssh-ed25519\n',
        "two principals": line.replace("runner@lab", "a@lab,b@lab") + "\n",
        "only a principal": "runner@lab\n",
    }
    return {name: text.encode("utf-8") for name, text in cases.items()} | {
        "not UTF-8": (line + "\n").encode() + b"# \xff\n",
    }


CASES = sorted(corpus("K" * 68))  # the names; the bytes are built with a real key below


@pytest.mark.parametrize("case", CASES)
def test_each_variant_of_a_role_file_reads_alike_in_both_verifiers(case, key, tmp_path):
    data = corpus(key)[case]
    assert by_script(data, tmp_path) == by_prereg(data), data


def test_the_corpus_holds_accepted_and_refused_files(key, tmp_path):
    outcomes = {name: by_prereg(data) for name, data in corpus(key).items()}
    assert outcomes["as prereg writes it"] == [f"only:prereg-run {key}"]
    assert outcomes["no namespaces option"] == [f"any {key}"]
    assert outcomes["the last line without its line feed"] == [f"only:prereg-run {key}"]
    refused = {name for name, found in outcomes.items() if found is None}
    assert {"a NUL byte in a namespace", "a key inside a quoted value with blanks",
            "namespaces without a value", "not UTF-8"} <= refused  # fmt: skip
    assert len(refused) >= len(outcomes) // 2


TOKENS = st.sampled_from(
    ["runner@lab", "a,b", "ssh-ed25519", "KEY", 'namespaces="prereg-run"', 'namespaces="git"',
     "namespaces", "cert-authority", 'valid-after="1"', ",", '"', "=", "#", " ", "\t", "\r",
     "\n", "\0", "\u00a0", "x"]
)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(tokens=st.lists(TOKENS, max_size=12))
def test_generated_role_file_lines_read_alike_in_both_verifiers(tokens, key, tmp_path_factory):
    data = "".join(key if t == "KEY" else t for t in tokens).encode()
    assert by_script(data, tmp_path_factory.mktemp("g")) == by_prereg(data), data
