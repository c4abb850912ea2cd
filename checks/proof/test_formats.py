"""The formats under the signed chain: DSSE's pre-authentication encoding, OpenSSH
fingerprints and allowed-signers lines, the statements' times and numbers, and the order of
a run's trusted times."""

from __future__ import annotations

import json
import math
import subprocess
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prereg.base.hashing import canonical_json
from prereg.commands.signing import make_key
from prereg.proof import card as cards
from prereg.proof import dsse, keys, timestamp
from prereg.proof.statement import rfc3339
from prereg.testing import ScratchProject

pytestmark = pytest.mark.software

PRINCIPAL = st.text(
    alphabet=st.characters(whitelist_categories=("Ll", "Lu", "Nd"), whitelist_characters="@.-_"),
    min_size=1,
    max_size=30,
)
RAW_KEY = st.binary(min_size=32, max_size=32)


def test_pae_is_the_dsse_specifications_example():
    assert (
        dsse.pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


@given(st.text(max_size=20), st.binary(max_size=40), st.text(max_size=20), st.binary(max_size=40))
def test_no_two_type_and_body_pairs_share_an_encoding(kind, body, other_kind, other_body):
    """A signature over one (type, body) never verifies another: PAE is injective, however
    a type and a body share their bytes across the boundary."""
    if (kind, body) != (other_kind, other_body):
        assert dsse.pae(kind, body) != dsse.pae(other_kind, other_body)


def test_fingerprints_are_what_ssh_keygen_prints(tmp_path):
    for name in ("a", "b", "c"):
        path = make_key(tmp_path / name, f"{name}@lab")
        public = keys.PublicKey.from_line(path.with_suffix(".pub").read_text())
        shown = subprocess.run(
            ["ssh-keygen", "-lf", f"{path}.pub"], capture_output=True, text=True, check=True
        ).stdout.split()[1]
        assert public.fingerprint == shown


@given(PRINCIPAL, RAW_KEY, st.sampled_from(keys.ROLES))
def test_a_signer_line_reads_back_as_its_principal_key_and_namespaces(principal, raw, role):
    key = keys.PublicKey(keys.ed25519_blob(raw))
    line = keys.signer_line(principal, role, key)
    (signer,) = keys.parse_signers(f"# a comment\n\n{line}\n", ".prereg/x")
    assert signer.principals == (principal,) and signer.key == key
    assert signer.namespaces == keys.NAMESPACES[role] and signer.line == 3


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("a@lab cert-authority ssh-ed25519 {key}", "certificate authority"),
        ('a@lab namespaces="git",foo="x" ssh-ed25519 {key}', "unknown option"),
        ("a@lab ssh-rsa {key}", "ed25519 keys only"),
        ("a@lab ssh-ed25519 AAAA", "not an ssh-ed25519 key"),
        ("a@lab ssh-ed25519 !!!", "not base64"),
        ("a@lab", "not 'principal [options] keytype key'"),
    ],
)
def test_an_unreadable_signer_line_names_the_file_and_line(line, fragment):
    key = keys.PublicKey(keys.ed25519_blob(bytes(32))).text().split()[1]
    with pytest.raises(keys.KeyProblem) as err:
        keys.parse_signers("\n" + line.format(key=key), ".prereg/approvers")
    assert ".prereg/approvers:2" in str(err.value) and fragment in str(err.value)


@pytest.mark.parametrize("principal", ["", "a b", "a,b", 'a"b'])
def test_a_principal_that_would_break_the_line_is_refused(principal):
    key = keys.PublicKey(keys.ed25519_blob(bytes(32)))
    with pytest.raises(keys.KeyProblem):
        keys.signer_line(principal, keys.APPROVERS, key)


@given(
    st.datetimes(
        min_value=datetime(2000, 1, 1),
        max_value=datetime(2200, 1, 1),
        timezones=st.just(timezone.utc),
    ),
    st.integers(-12, 14),
)
def test_times_are_rfc3339_utc_with_z_to_the_millisecond(when, hours):
    local = when.astimezone(timezone(timedelta(hours=hours)))
    shown = rfc3339(local.isoformat(timespec="milliseconds"))
    assert shown.endswith("Z") and len(shown) == len("2026-12-06T10:00:00.000Z")
    back = datetime.strptime(shown, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    assert back == when.replace(microsecond=when.microsecond // 1000 * 1000)


@given(st.integers(), st.floats(allow_nan=False, allow_infinity=False))
def test_a_payload_keeps_integers_and_floats_apart(number, fraction):
    back = json.loads(canonical_json({"n": number, "x": fraction}))
    assert type(back["n"]) is int and back["n"] == number
    assert type(back["x"]) is float and back["x"] == fraction


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_number_never_reaches_a_payload(bad):
    with pytest.raises(ValueError):
        canonical_json({"x": bad})


def test_a_refused_key_leaves_no_role_file_and_a_missing_run_folder_is_named(tmp_path):
    project = ScratchProject(tmp_path / "p")
    project.root.mkdir()
    project.git("init", "-q")
    key = make_key(tmp_path / "keys" / "k", "k@lab")
    refused = project.prereg("keys", "add", "approvers", "a b", f"{key}.pub")
    assert refused.returncode == 2 and "one word" in refused.stderr, refused.stderr
    assert not (project.root / keys.ROLES_DIR).exists()
    added = project.prereg("keys", "add", "runners", "k@lab", f"{key}.pub")
    assert added.returncode == 0, added.stderr
    assert "made .prereg/approvers" in added.stdout and "made .prereg/runners" not in added.stdout
    missing = project.prereg("verify", "runs/nothing", "--card", str(tmp_path / "card.json"))
    assert missing.returncode == 3 and "is not a run folder" in missing.stdout, missing.stdout


UTC_TIMES = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(timezone.utc)
)
SHIFT = st.timedeltas(min_value=timedelta(days=-3650), max_value=timedelta(days=3650))


@given(st.lists(UTC_TIMES, min_size=4, max_size=4), SHIFT)
def test_times_in_their_order_pass_and_the_judgement_does_not_depend_on_the_epoch(times, shift):
    """record <= commit date <= start <= attestation always passes; moving all four by the
    same amount never changes what is found."""
    assert timestamp.order_problems(*sorted(times)) == []
    moved = [t + shift for t in times]
    assert len(timestamp.order_problems(*moved)) == len(timestamp.order_problems(*times))


@given(UTC_TIMES, st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(days=999)))
def test_a_commit_dated_earlier_than_its_record_by_more_than_the_skew_is_backdated(stamped, early):
    committed = stamped - timestamp.CLOCK_SKEW - early
    found = timestamp.order_problems(stamped, committed, stamped, stamped)
    assert any("backdated" in p for p in found), found
    within = timestamp.order_problems(stamped, stamped - timestamp.CLOCK_SKEW, stamped, stamped)
    assert within == []


@given(
    st.from_regex(r"\A[a-z][a-z0-9-]{0,12}-[0-9]{8}-[0-9]{3}\Z"),
    st.from_regex(r"\A[0-9a-f]{40}\Z"),
    st.from_regex(r"\A[a-z][a-z0-9-]{0,12}-[0-9]{8}-[0-9]{3}\Z"),
    st.from_regex(r"\A[0-9a-f]{40}\Z"),
)
def test_an_approval_token_is_over_its_own_run_and_anchor_only(run, anchor, other_run, other):
    same = timestamp.approval_data(run, anchor) == timestamp.approval_data(other_run, other)
    assert same == ((run, anchor) == (other_run, other))


@given(st.binary(min_size=1, max_size=200))
def test_a_token_survives_its_text_form(token):
    assert timestamp.decode(timestamp.encode(token), "here") == token


@pytest.mark.parametrize("text", ["not base64!", "YQ", None])
def test_a_token_that_is_not_base64_names_where_it_was(text):
    with pytest.raises(timestamp.TimestampProblem, match="start.json's timestamp"):
        timestamp.decode(text, "start.json's timestamp")


GOOD_CARD = {
    "format": cards.FORMAT,
    "repository": "a" * 40,
    "freeze_commit": "b" * 40,
    "plans": {"plans/PLAN.json": "c" * 64},
    "roles": {"approvers": "d" * 64},
    "timestamp_authority": {"url": "https://tsa.example.org/", "roots": ["PEM"]},
}


@pytest.mark.parametrize(
    "change, named",
    [
        ({"timestamp_authority": {"url": "https://tsa.example.org/"}}, "roots"),
        ({"timestamp_authority": {"url": "https://tsa.example.org/", "roots": []}}, "no root"),
        ({"timestamp_authority": "https://tsa.example.org/"}, "timestamp_authority"),
        ({"witness": 7}, "witness"),
        ({"plans": ["plans/PLAN.json"]}, "plans"),
        ({"signed_by": "me"}, "signed_by"),
    ],
)
def test_a_card_of_another_shape_is_refused_naming_the_field(tmp_path, change, named):
    """verify reads the card it is given before anything else: a field missing or of
    another shape is refused by name, never a traceback halfway through the chain."""
    path = tmp_path / "card.json"
    cards.load(_write(path, GOOD_CARD))
    with pytest.raises(cards.CardProblem, match=named):
        cards.load(_write(path, {**GOOD_CARD, **change}))


@settings(deadline=None)  # each example writes a file: a busy machine is slow, not wrong
@given(st.sampled_from(sorted(cards.FIELDS)))
def test_every_card_field_is_checked(field):
    """A number where the card's schema wants a string, a map or an object."""
    value = {**GOOD_CARD, field: 12345}
    with pytest.raises(cards.CardProblem, match=field):
        _load_value(value)


def _write(path, card):
    path.write_text(json.dumps(card))
    return path


def _load_value(card):
    with tempfile.TemporaryDirectory() as folder:
        return cards.load(_write(Path(folder) / "card.json", card))


JSON_OBJECTS = st.lists(
    st.dictionaries(
        st.text(max_size=8),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=12),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
            max_leaves=6,
        ),
        max_size=4,
    ),
    max_size=4,
)


@given(JSON_OBJECTS)
def test_the_attestation_lines_prereg_writes_read_back_as_its_envelopes(envelopes):
    from prereg.proof import attest

    assert dsse.parse_lines(attest.envelope_lines(envelopes), "a") == envelopes


@given(JSON_OBJECTS.filter(bool), st.sampled_from(["\r\n", "\r", "\n\n", ""]))
def test_attestation_lines_framed_otherwise_are_refused(envelopes, ending):
    """A carriage return, a blank line or a last line without its line feed is refused: the
    plain verifier counts lines by line feeds, so a file two readers could count differently
    is refused by both (checks/proof/test_signed_runs.py runs both verifiers on them)."""
    from prereg.proof import attest

    framed = attest.envelope_lines(envelopes)[:-1] + ending.encode()
    with pytest.raises(dsse.SignatureProblem):
        dsse.parse_lines(framed, "a")


@given(st.binary(max_size=60))
def test_any_bytes_give_envelopes_or_a_signature_problem(data):
    try:
        envelopes = dsse.parse_lines(data, "a")
    except dsse.SignatureProblem:
        return
    assert all(isinstance(e, dict) for e in envelopes)
    assert data.count(b"\n") == len(envelopes) and b"\r" not in data
