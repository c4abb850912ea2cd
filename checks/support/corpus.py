"""The verifiers' conformance corpus: each case a mutation of an honest run with the outcome
every verifier must reach (verified, refused) and the reason ``prereg verify`` gives.

Cases are generated, class by class, rather than picked:

- ``entries/<kind>/<place>``: every kind of entry a run folder can hold (a file, a hidden
  file, a writer's temporary, a hard link, an empty folder, a symbolic link to an attested
  file, out of the folder, to nothing or to a folder, a named pipe, a name holding a line
  feed, an attested file replaced by a link to a copy of itself), at the top of the run folder
  and inside an item's outputs;
- ``bytes/<file>/<variant>``: every byte-level variant of every JSON document a verifier reads
  (the start record, the approval record, the card, a statement, an envelope line): line
  endings, a byte order mark, UTF-16, a key repeated, NaN, two documents in one, extra
  whitespace and blank lines; and every framing of the attestation's lines. A run-folder
  file's variant is re-attested with the runner's key, a record's is committed again with the
  approver's (what the holder of those keys can do), so that only the reading decides;
- ``options/<field>``: an option-like or shell-special string in every field a verifier hands
  to a program (a commit, the witness url, a plan path, a subject's name);
- ``another-run/<record>``: each record and each of git's records of another run of the same
  project in place of this run's;
- ``signatures/<how>``: signatures by keys outside the role, over edited statements, with a
  changed payload type or key id, approval commits signed otherwise.

Two honest worlds are mutated (:func:`make_worlds`): ``full``, a project whose card registers a
witness and a timestamp authority, with two runs signed, witnessed, stamped and audited with
a signed audit (verified with ``--require-audit``), and ``signed``, a project whose card
registers neither, one run signed and not audited, where a holder of the runner's and the
approver's keys can re-make every record.

The role files' own line grammar has its corpus in checks/proof/test_role_file_reading.py.
``python checks/support/corpus.py OUT`` writes every case as a folder (``project/``,
``card.json``, ``case.json`` with the expected outcome and the verifier's arguments) for a
third verifier to run: docs/how-to/verify-a-run.md.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # run as a script: checks/ holds the support package
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

import base64
import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from prereg.base.hashing import MAX_JSON_DEPTH, sha256_file
from prereg.proof import attest, dsse, keys, timestamp
from prereg.proof.witness import init as make_witness
from prereg.records import ledger
from support.toy import ToyRepo, make_toy_repo, stage_spec

RUN = "toy-20261207-001"
OTHER = "toy-20261207-002"
VERIFIED, REFUSED, COULD_NOT = "verified", "refused", "could not verify"
EXIT = {VERIFIED: 0, REFUSED: 1, COULD_NOT: 3}  # each verifier's exit status
SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "verify-a-run.sh"


@dataclass
class World:
    """A private copy of an honest world: the project, its keys, its card, and the witness and
    timestamp authority it names (None in the ``signed`` world)."""

    name: str
    toy: ToyRepo
    keys: Path
    card: Path
    authority: str | None = None

    @property
    def run(self):
        return self.toy.layout(RUN)

    @property
    def require_audit(self) -> bool:
        return self.name == "full"


@dataclass(frozen=True)
class Case:
    """One mutation of an honest world and what every verifier must say of it."""

    name: str
    world: str  # "full" or "signed"
    mutate: Callable[[World], None]
    outcome: str  # VERIFIED, REFUSED or COULD_NOT
    reason: str = ""  # a fragment of prereg verify's reasons when refused
    signatures_hold: bool | None = None  # what securesystemslib's DSSE says, where it matters


# -- what the holders of keys can do ----------------------------------------------------------


def reattest(world: World, swap: dict[str, bytes] | None = None) -> None:
    """The holder of the runner key rebuilds the statements from the run folder as it is now,
    signs them, and records the start and the attestation in git to match. ``swap``: files
    of the run folder (by name) then replaced by these bytes, the statements' digests of them
    with them (prereg's own writer reads no file it could not read back)."""
    run = world.run
    key = dsse.PrivateKey.load(world.keys / "runner")
    run.attestation.unlink()
    attest.write(world.toy.root, run.folder, run.attestation, key)
    if swap:
        envelopes = dsse.read_lines(run.attestation)
        payload = dsse.payload_of(envelopes[0])
        for name, data in swap.items():
            payload = payload.replace(
                sha256_file(run.folder / name).encode(), hashlib.sha256(data).hexdigest().encode()
            )
            (run.folder / name).write_bytes(data)
        envelopes[0] = dsse.envelope(payload, key)
        run.attestation.write_bytes(attest.envelope_lines(envelopes))
    if world.authority:
        token = timestamp.request(world.authority, run.attestation.read_bytes())
        run.attestation_timestamp.write_bytes(token)
    _record(world, RUN)


def _record(world: World, run_id: str) -> None:
    run = world.toy.layout(run_id)
    for ref, path in (
        (ledger.start_ref(run_id), run.start),
        (ledger.attestation_ref(run_id), run.attestation),
        (ledger.attestation_timestamp_ref(run_id), run.attestation_timestamp),
    ):
        if path.is_file():
            blob = world.toy.git("hash-object", "-w", str(path)).strip()
            world.toy.git("update-ref", ref, blob)


def reapprove(
    world: World,
    record_bytes: Callable[[bytes], bytes] = lambda data: data,
    *,
    signer: str | None = "approver",
    add_signer: bool = False,
) -> None:
    """The holder of ``signer``'s key (None: signs nothing) and the runner's commits the
    approval record again on its anchor, as ``record_bytes`` makes it from the honest one
    (after ``add_signer``: a commit listing ``signer`` among the approvers), and re-makes the
    run's start, approval copy and statements to match (the ``signed`` world only)."""
    toy, key_dir = world.toy, world.keys
    record_rel = f"plans/approvals/{RUN}.json"
    honest = (toy.root / record_rel).read_bytes()
    toy.git("reset", "-q", "--hard", "HEAD^")
    sign = ["--no-gpg-sign"] if signer is None else [f"--gpg-sign={key_dir / signer}"]
    if add_signer:
        public = keys.PublicKey.from_line((key_dir / f"{signer}.pub").read_text())
        approvers = toy.root / keys.role_path(keys.APPROVERS)
        line = keys.signer_line(f"{signer}@lab", keys.APPROVERS, public)
        approvers.write_text(approvers.read_text() + line + "\n")
        toy.git("add", "-A")
        toy.git("commit", "-q", *sign, "-m", "Add an approver")
        record = json.loads(honest)
        record["source_anchor"] = toy.git("rev-parse", "HEAD").strip()
        honest = json.dumps(record, indent=2).encode()
    record = record_bytes(honest)
    (toy.root / record_rel).parent.mkdir(exist_ok=True)
    (toy.root / record_rel).write_bytes(record)
    toy.git("add", "-A")
    toy.git("commit", "-q", *sign, "-m", f"Approve {RUN}")
    run = world.run
    run.approval_copy.write_bytes(honest)
    start = json.loads(run.start.read_text())
    start["source_commit"] = toy.git("rev-parse", "HEAD").strip()
    start["approval_sha256"] = hashlib.sha256(record).hexdigest()
    run.start.write_text(json.dumps(start))
    reattest(world, {run.approval_copy.name: record})


def edit_record(change: Callable[[dict], None]) -> Callable[[bytes], bytes]:
    def edited(data: bytes) -> bytes:
        record = json.loads(data)
        change(record)
        return json.dumps(record, indent=2).encode()

    return edited


def resign_statements(world: World, payload: Callable[[int, bytes], bytes], key: str = "runner"):
    """The statements' payloads as ``payload(line number, honest payload)`` makes them,
    signed with ``key`` and framed as prereg frames them; git's record of the attestation
    removed (a verifier given the folder alone reads the file)."""
    path = world.run.attestation
    private = dsse.PrivateKey.load(world.keys / key)
    forged = [
        dsse.envelope(payload(number, dsse.payload_of(env)), private)
        for number, env in enumerate(dsse.read_lines(path), 1)
    ]
    path.write_bytes(attest.envelope_lines(forged))
    world.toy.git("update-ref", "-d", ledger.attestation_ref(RUN))


def source_commit(world: World) -> str:
    return json.loads(world.run.start.read_text())["source_commit"]


# -- entries of a run folder --------------------------------------------------------------------


def _attested_file(world: World, place: str) -> Path:
    """An attested file at ``place``: the top of the run folder or an item's outputs."""
    if place == "top":
        return world.run.folder / "items.jsonl"
    return min((world.run.folder / "items").rglob("result.json"))


def _folder(world: World, place: str) -> Path:
    return _attested_file(world, place).parent


def _relinked(world: World, place: str) -> None:
    target = _attested_file(world, place)
    copy = world.toy.root.parent / "outside-copy"
    shutil.copyfile(target, copy)
    target.unlink()
    target.symlink_to(copy)


ENTRY_KINDS: dict[str, tuple[Callable[[World, str], None], str, str]] = {
    # kind: (how it is made at a place, outcome, reason)
    "a-file": (lambda w, p: (_folder(w, p) / "late.json").write_text("{}\n"), REFUSED, "not attested"),
    "a-hidden-file": (lambda w, p: (_folder(w, p) / ".late").write_text("x"), REFUSED, "not attested"),
    "a-writers-temporary": (
        lambda w, p: (_folder(w, p) / ".result.json.tmp").write_text("{}"), REFUSED, "not attested"
    ),
    "a-hard-link": (
        lambda w, p: os.link(_attested_file(w, p), _folder(w, p) / "linked"), REFUSED, "not attested"
    ),
    "an-empty-folder": (lambda w, p: (_folder(w, p) / "empty").mkdir(), VERIFIED, ""),
    "a-symbolic-link-to-an-attested-file": (
        lambda w, p: (_folder(w, p) / "alias").symlink_to(_attested_file(w, p).name),
        REFUSED, "is not a regular file",
    ),
    "a-symbolic-link-out-of-the-folder": (
        lambda w, p: (_folder(w, p) / "out").symlink_to(w.toy.root / "plans" / "TOY_PLAN.json"),
        REFUSED, "is not a regular file",
    ),
    "a-dangling-symbolic-link": (
        lambda w, p: (_folder(w, p) / "nowhere").symlink_to("no-such-file"),
        REFUSED, "is not a regular file",
    ),
    "a-symbolic-link-to-a-folder": (
        lambda w, p: (_folder(w, p) / "folder").symlink_to(w.toy.root / "plans"),
        REFUSED, "is not a regular file",
    ),
    "a-named-pipe": (lambda w, p: os.mkfifo(_folder(w, p) / "pipe"), REFUSED, "is not a regular file"),
    "a-name-holding-a-line-feed": (
        lambda w, p: (_folder(w, p) / "two\nlines").write_text("x"), REFUSED, "not attested"
    ),
    "an-attested-file-replaced-by-a-link-to-its-copy": (_relinked, REFUSED, "is not a regular file"),
    "an-attested-file-changed": (
        lambda w, p: _attested_file(w, p).write_text('{"forged": true}\n'), REFUSED,
        "changed after it was attested",
    ),
    "an-attested-file-deleted": (
        lambda w, p: _attested_file(w, p).unlink(), REFUSED, "attested and missing"
    ),
}  # fmt: skip

# Every kind at the top of the run folder; these inside an item's outputs too (the folder is
# walked, not listed).
PLACES = {"top": tuple(ENTRY_KINDS), "item": ("a-file", "a-symbolic-link-to-an-attested-file",
          "a-named-pipe", "an-attested-file-deleted")}  # fmt: skip


def entry_cases() -> list[Case]:
    cases = [
        Case(
            f"entries/{kind}/{place}",
            "full",
            lambda w, make=ENTRY_KINDS[kind][0], place=place: make(w, place),
            *ENTRY_KINDS[kind][1:],
        )
        for place, kinds in PLACES.items()
        for kind in kinds
    ]
    cases.append(Case("entries/the-attestation-deleted", "full",
                      lambda w: w.run.attestation.unlink(), REFUSED, "wrote no attestation"))  # fmt: skip
    return cases


# -- byte-level variants of what a verifier reads ----------------------------------------------


def _first_key(data: bytes) -> bytes:
    return next(iter(json.loads(data))).encode()


JSON_VARIANTS: dict[str, tuple[Callable[[bytes], bytes], str, str]] = {
    # variant: (the honest document's bytes -> the variant, outcome, reason)
    "crlf": (lambda d: d.replace(b"\n", b"\r\n"), VERIFIED, ""),
    "extra-whitespace": (lambda d: d.replace(b"{", b"{ \t", 1) + b" \n", VERIFIED, ""),
    "a-byte-order-mark": (lambda d: b"\xef\xbb\xbf" + d, REFUSED, "not JSON as prereg reads it"),
    "utf-16": (lambda d: d.decode().encode("utf-16"), REFUSED, "not JSON as prereg reads it"),
    "a-key-given-twice": (
        lambda d: d.replace(b"{", b'{"' + _first_key(d) + b'": null, ', 1),
        REFUSED, "not JSON as prereg reads it",
    ),
    "nan": (lambda d: d.replace(b"{", b'{"extra": NaN, ', 1), REFUSED, "not JSON as prereg reads it"),
    "a-number-too-large": (
        lambda d: d.replace(b"{", b'{"extra": 1e999, ', 1), REFUSED, "not JSON as prereg reads it"
    ),
    "nested-too-deeply": (
        lambda d: d.replace(b"{", b'{"extra": ' + b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH + b", ", 1),
        REFUSED, "not JSON as prereg reads it",
    ),
    "two-documents": (lambda d: d + d, REFUSED, "not JSON as prereg reads it"),
}  # fmt: skip


def _deep(depth: int) -> bytes:
    """A JSON value whose arrays nest ``depth`` levels."""
    return b"[" * depth + b"]" * depth


def _start_nested_as_deep_as_allowed(world: World) -> None:
    """start.json is open: a field of its own, nested to the deepest a reader takes (the
    record itself is the first level)."""
    path = world.run.start
    reattest(
        world,
        {
            path.name: path.read_bytes().replace(
                b"{", b'{"extra": ' + _deep(MAX_JSON_DEPTH - 1) + b", ", 1
            )
        },
    )


def _record_nested_as_deep_as_allowed(world: World) -> None:
    """The approval record is closed: the nesting goes inside its open ``environment``."""
    reapprove(
        world,
        edit_record(lambda r: r["environment"].update(extra=json.loads(_deep(MAX_JSON_DEPTH - 2)))),
    )


def _lock_count_as_text(record: dict) -> None:
    """The first locked distribution's file count as a string."""
    distributions = record["environment_lock"]["distributions"]
    first = distributions[min(distributions)]
    first["files"] = str(first["files"])


def _rewrite_start(variant: Callable[[bytes], bytes]) -> Callable[[World], None]:
    def mutate(world: World) -> None:
        path = world.run.start
        reattest(world, {path.name: variant(path.read_bytes())})

    return mutate


def _rewrite_card(variant: Callable[[bytes], bytes]) -> Callable[[World], None]:
    def mutate(world: World) -> None:
        world.card.write_bytes(variant(world.card.read_bytes()))

    return mutate


def _rewrite_statement(variant: Callable[[bytes], bytes]) -> Callable[[World], None]:
    return lambda world: resign_statements(world, lambda n, data: variant(data) if n == 1 else data)


def _rewrite_envelope(variant: Callable[[bytes], bytes]) -> Callable[[World], None]:
    def mutate(world: World) -> None:
        path = world.run.attestation
        lines = path.read_bytes().split(b"\n")
        lines[0] = variant(lines[0]).replace(b"\r\n", b" ").replace(b"\n", b" ")
        path.write_bytes(b"\n".join(lines))
        world.toy.git("update-ref", "-d", ledger.attestation_ref(RUN))

    return mutate


def _dependencies_of_another_type(world: World) -> None:
    """Line 1's resolvedDependencies a string: read by a verifier that expects a list, it is
    no list to iterate."""

    def change(number: int, data: bytes) -> bytes:
        if number != 1:
            return data
        statement = json.loads(data)
        statement["predicate"]["buildDefinition"]["resolvedDependencies"] = "none"
        return json.dumps(statement).encode()

    resign_statements(world, change)


JSON_FILES: dict[str, Callable[[Callable[[bytes], bytes]], Callable[[World], None]]] = {
    "start.json": _rewrite_start,
    "the-approval-record": lambda variant: lambda world: reapprove(world, variant),
    "the-card": _rewrite_card,
    "a-statement": _rewrite_statement,
}

# A variant that a line of JSON cannot hold (a line feed) is no variant of an envelope line.
ENVELOPE_VARIANTS = (
    "extra-whitespace",
    "a-byte-order-mark",
    "a-key-given-twice",
    "nan",
    "a-number-too-large",
    "two-documents",
)

FRAMINGS: dict[str, Callable[[bytes], bytes]] = {
    # the honest attestation's bytes -> the same envelopes framed as prereg does not write them
    "crlf": lambda data: data.replace(b"\n", b"\r\n"),
    "no-final-line-feed": lambda data: data[:-1],
    "a-copy-of-line-2-without-its-line-feed": lambda data: data + data.splitlines()[1],
    "a-copy-of-line-2": lambda data: data + data.splitlines(keepends=True)[1],
    "a-blank-line-at-the-end": lambda data: data + b"\n",
    "a-blank-line-first": lambda data: b"\n" + data,
    "a-byte-order-mark": lambda data: b"\xef\xbb\xbf" + data,
}


def _reframe(framing: Callable[[bytes], bytes]) -> Callable[[World], None]:
    def mutate(world: World) -> None:
        path = world.run.attestation
        path.write_bytes(framing(path.read_bytes()))
        world.toy.git("update-ref", "-d", ledger.attestation_ref(RUN))

    return mutate


def byte_cases() -> list[Case]:
    cases = [
        Case(f"bytes/{name}/{variant}", "signed", rewrite(change), outcome, reason)
        for name, rewrite in JSON_FILES.items()
        for variant, (change, outcome, reason) in JSON_VARIANTS.items()
    ]
    cases += [
        Case(
            f"bytes/an-envelope-line/{variant}",
            "signed",
            _rewrite_envelope(JSON_VARIANTS[variant][0]),
            *JSON_VARIANTS[variant][1:],
        )
        for variant in ENVELOPE_VARIANTS
    ]
    cases += [
        Case(f"bytes/the-attestation/{framing}", "signed", _reframe(change), REFUSED, "")
        for framing, change in FRAMINGS.items()
    ]
    return cases


# -- option-like and shell-special strings -------------------------------------------------------

PWNED = "/tmp/prereg-corpus-pwned"


def _named(how: str, commit: str) -> str:
    return {"a-ref": "HEAD", "a-short-id": commit[:12], "an-option": f"--output={PWNED}"}[how]


def _card_commit(how: str) -> Callable[[World], None]:
    def mutate(world: World) -> None:
        card = json.loads(world.card.read_text())
        card["freeze_commit"] = _named(how, card["freeze_commit"])
        world.card.write_text(json.dumps(card))

    return mutate


def _statement_commit(how: str) -> Callable[[World], None]:
    def mutate(world: World) -> None:
        commit = source_commit(world).encode()
        resign_statements(
            world, lambda n, data: data.replace(commit, _named(how, commit.decode()).encode())
        )

    return mutate


def _with_file(name: str) -> Callable[[World], None]:
    def mutate(world: World) -> None:
        (world.run.folder / name).write_text("an honest output\n")
        reattest(world)

    return mutate


def option_cases() -> list[Case]:
    cases = [
        Case(
            f"options/the-cards-freeze-commit/{how}",
            "full",
            _card_commit(how),
            REFUSED,
            "is not a full commit id",
        )
        for how in ("a-ref", "a-short-id", "an-option")
    ]
    cases += [
        Case(
            f"options/the-statements-commit/{how}",
            "signed",
            _statement_commit(how),
            REFUSED,
            "not a full commit id",
        )
        for how in ("a-ref", "a-short-id", "an-option")
    ]
    cases += [
        Case("options/the-witness-url/an-option", "signed",
             lambda w: reapprove(w, edit_record(lambda r: r.update(witness={"url": f"--upload-pack=touch {PWNED}"}))),
             REFUSED, "looks like an option"),
        Case("options/the-cards-witness/an-option", "full",
             _rewrite_card(lambda d: json.dumps({**json.loads(d), "witness": f"--upload-pack=touch {PWNED}"}).encode()),
             REFUSED, "the witness was skipped"),
        Case("options/the-plan-path/an-option", "signed",
             lambda w: reapprove(w, edit_record(lambda r: r["plan"].update(path=f"--output={PWNED}"))),
             REFUSED, "is not the plan approved"),
        Case("options/the-stage/a-command", "signed",
             lambda w: reapprove(w, edit_record(lambda r: r.update(stage=f"$(touch {PWNED})"))),
             REFUSED, "the approval record is for stage"),
        Case("options/a-subject-named-dash", "signed", _with_file("-"), VERIFIED),
        Case("bytes/a-statement/dependencies-of-another-type", "signed",
             _dependencies_of_another_type, REFUSED, "names no source commit"),
        Case("bytes/start.json/nested-as-deep-as-allowed", "signed",
             _start_nested_as_deep_as_allowed, VERIFIED),
        Case("bytes/the-approval-record/nested-as-deep-as-allowed", "signed",
             _record_nested_as_deep_as_allowed, VERIFIED),
        Case("bytes/the-approval-record/a-field-prereg-does-not-write", "signed",
             lambda w: reapprove(w, edit_record(lambda r: r.update(note="added by hand"))),
             REFUSED, "is not a valid Approval record"),
        Case("bytes/the-approval-record/a-part-of-another-shape", "signed",
             lambda w: reapprove(w, edit_record(lambda r: r["plan"].update(plan_id=7))),
             REFUSED, "is not a valid Approval record"),
        Case("bytes/the-approval-record/a-lock-count-of-another-type", "signed",
             lambda w: reapprove(w, edit_record(_lock_count_as_text)),
             REFUSED, "is not a valid Approval record"),
        Case("bytes/the-card/a-field-prereg-does-not-write", "full",
             _rewrite_card(lambda d: json.dumps({**json.loads(d), "note": "added"}).encode()),
             REFUSED, "unknown field"),
        Case("options/a-subject-named-like-an-option", "signed", _with_file("--check"), VERIFIED),
        # Run by a shell, it would make a file the run folder does not attest.
        Case("options/a-subject-named-with-a-command", "signed", _with_file("$(touch made)"), VERIFIED),
        Case("options/a-subject-named-with-a-backslash", "signed", _with_file("back\\slash"), VERIFIED),
    ]  # fmt: skip
    return cases


# -- another run's records in place of this run's ---------------------------------------------


def _other_file(name: str) -> Callable[[World], None]:
    def mutate(world: World) -> None:
        shutil.copyfile(world.toy.layout(OTHER).folder / name, world.run.folder / name)

    return mutate


def _other_ref(ref: Callable[[str], str]) -> Callable[[World], None]:
    def mutate(world: World) -> None:
        world.toy.git("update-ref", ref(RUN), world.toy.git("rev-parse", ref(OTHER)).strip())

    return mutate


def _other_folder(world: World) -> None:
    shutil.rmtree(world.run.folder)
    shutil.copytree(world.toy.layout(OTHER).folder, world.run.folder)


OTHER_FILES = {
    "start.json": "changed after it was attested",
    "approval.json": "changed after it was attested",
    "manifest.json": "changed after it was attested",
    "attestation.intoto.jsonl": "an attestation of another run",
    "attestation.tsr": "does not hold",
}
OTHER_REFS = {
    "start": (ledger.start_ref, "records another start.json"),
    "attestation": (ledger.attestation_ref, "records another attestation.intoto.jsonl"),
    "attestation-timestamp": (ledger.attestation_timestamp_ref, "records another attestation.tsr"),
    "signed-audit": (ledger.signed_audit_ref, "does more than add audits/"),
}


def another_run_cases() -> list[Case]:
    cases = [
        Case(f"another-run/{name}", "full", _other_file(name), REFUSED, reason)
        for name, reason in OTHER_FILES.items()
    ]
    cases += [
        Case(f"another-run/git-records-{name}", "full", _other_ref(ref), REFUSED, reason)
        for name, (ref, reason) in OTHER_REFS.items()
    ]
    cases.append(
        Case("another-run/the-whole-folder", "full", _other_folder, REFUSED, "another run")
    )
    return cases


# -- signatures -----------------------------------------------------------------------------


def _edited_statement(world: World) -> None:
    path = world.run.attestation
    lines = path.read_text().splitlines()
    envelope = json.loads(lines[1])
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["result"] = "FAILED"
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    path.write_text(lines[0] + "\n" + json.dumps(envelope) + "\n")
    world.toy.git("update-ref", "-d", ledger.attestation_ref(RUN))


def _envelope_edit(change: Callable[[dict], None]) -> Callable[[World], None]:
    def mutate(world: World) -> None:
        path = world.run.attestation
        envelopes = dsse.read_lines(path)
        change(envelopes[0])
        path.write_bytes(attest.envelope_lines(envelopes))
        world.toy.git("update-ref", "-d", ledger.attestation_ref(RUN))

    return mutate


def _second_signature(world: World) -> None:
    outsider = dsse.envelope(b"{}", dsse.PrivateKey.load(world.keys / "outsider"))["signatures"][0]
    _envelope_edit(lambda env: env["signatures"].append(outsider))(world)


def _keyid(world: World) -> None:
    fingerprint = keys.PublicKey.from_line((world.keys / "outsider.pub").read_text()).fingerprint
    _envelope_edit(lambda env: env["signatures"][0].update(keyid=fingerprint))(world)


def signature_cases() -> list[Case]:
    return [
        Case("signatures/statements-signed-by-an-outsider", "signed",
             lambda w: resign_statements(w, lambda n, d: d, key="outsider"), REFUSED,
             "not a key of the file", signatures_hold=False),
        Case("signatures/a-statement-edited-under-its-signature", "signed", _edited_statement,
             REFUSED, "does not verify", signatures_hold=False),
        Case("signatures/the-payload-type-changed", "signed",
             _envelope_edit(lambda env: env.update(payloadType="application/json")), REFUSED,
             "payloadType", signatures_hold=False),
        Case("signatures/a-second-signature-by-an-outsider", "signed", _second_signature,
             REFUSED, "not a key of the file"),
        Case("signatures/the-key-id-of-another-key", "signed", _keyid, REFUSED,
             "not a key of the file"),
        Case("signatures/no-signature", "signed",
             _envelope_edit(lambda env: env.update(signatures=[])), REFUSED, "not signed",
             signatures_hold=False),
        Case("signatures/an-unsigned-approval-commit", "signed",
             lambda w: reapprove(w, signer=None), REFUSED, "no signature", signatures_hold=True),
        Case("signatures/an-approval-signed-by-an-outsider", "signed",
             lambda w: reapprove(w, signer="outsider"), REFUSED, "a key the file does not hold"),
        Case("signatures/an-approval-signed-with-the-runner-key", "signed",
             lambda w: reapprove(w, signer="runner"), REFUSED, "a key the file does not hold"),
        Case("signatures/an-approver-added-in-a-commit-no-approver-signed", "signed",
             lambda w: reapprove(w, signer="outsider", add_signer=True), REFUSED,
             "changes .prereg/ and is not signed by an approver"),
    ]  # fmt: skip


def evidence_cases() -> list[Case]:
    """Evidence that cannot be obtained: could not verify, never verified nor refused."""
    return [
        # A transport that runs a program: git refuses it, whatever the verifier's environment
        # and configuration allow (the check runs every case with both allowing it).
        Case("evidence/a-witness-url-that-would-run-a-program", "signed",
             lambda w: reapprove(w, edit_record(lambda r: r.update(
                 witness={"url": f"ext::sh -c touch% {PWNED}"}))),
             COULD_NOT, "cannot be asked"),
        Case("evidence/a-witness-that-cannot-be-asked", "signed",
             lambda w: reapprove(w, edit_record(lambda r: r.update(
                 witness={"url": str(w.toy.root.parent / "no-such-witness.git")}))),
             COULD_NOT, "cannot be asked"),
    ]  # fmt: skip


def honest_cases() -> list[Case]:
    return [
        Case("honest/full", "full", lambda w: None, VERIFIED, signatures_hold=True),
        Case("honest/signed", "signed", lambda w: None, VERIFIED, signatures_hold=True),
        Case("honest/signed-re-attested-by-its-runner", "signed", reattest, VERIFIED),
    ]


def cases() -> list[Case]:
    """Every case of the corpus, each name once."""
    made = [
        *honest_cases(), *entry_cases(), *byte_cases(), *option_cases(), *another_run_cases(),
        *signature_cases(), *evidence_cases(),
    ]  # fmt: skip
    names = [case.name for case in made]
    assert len(names) == len(set(names)), "a case name is given twice"
    return made


# -- the honest worlds ----------------------------------------------------------------------------


def _outsider(key_dir: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "outsider@lab", "-f",
         str(key_dir / "outsider")], check=True,
    )  # fmt: skip


def make_full(base: Path, authority) -> Path:
    """``base``/full: a project whose card registers a witness and ``authority``; runs RUN
    and OTHER approved, run and audited with a signed audit."""
    folder = base / "full"
    folder.mkdir(parents=True)
    witness = make_witness(folder / "witness.git")
    toy = make_toy_repo(folder / "project", {"toy": stage_spec("toy")})
    made = toy.set_up_signing(folder / "keys")
    _outsider(folder / "keys")
    stamp = ["--timestamp-authority", authority.url]
    card = toy.prereg("register", "--witness", str(witness), *stamp, "--timestamp-root",
                      str(authority.folder / "root.pem"), check=True).stdout  # fmt: skip
    (folder / "card.json").write_text(card)
    for run_id in (RUN, OTHER):
        toy.approve("toy", run_id, "--witness", str(witness), *stamp)
        done = toy.pytest("--research-stage=toy", f"--run-id={run_id}")
        assert done.returncode == 0, done.stdout + done.stderr
        toy.prereg("audit", f"runs/{run_id}", "--sign", "--signing-key", str(made["auditor"]),
                   check=True)  # fmt: skip
    (folder / "authority").write_text(authority.url)
    return folder


def make_signed(base: Path) -> Path:
    """``base``/signed: a signed project whose card registers no witness nor authority; run
    RUN approved and run, not audited."""
    folder = base / "signed"
    folder.mkdir(parents=True)
    toy = make_toy_repo(folder / "project", {"toy": stage_spec("toy", single_attempt=True)})
    toy.set_up_signing(folder / "keys")
    _outsider(folder / "keys")
    (folder / "card.json").write_text(toy.prereg("register", check=True).stdout)
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 0, done.stdout + done.stderr
    return folder


def make_worlds(base: Path, authority) -> dict[str, Path]:
    return {"full": make_full(base, authority), "signed": make_signed(base)}


def copy_world(made: Path, target: Path) -> World:
    """A private copy of the world made in ``made`` (its witness stays shared: no case
    writes to it)."""
    shutil.copytree(made, target, symlinks=True, ignore=shutil.ignore_patterns("witness.git"))
    toy = ToyRepo(target / "project")
    toy.git("config", "user.signingkey", str(target / "keys" / "approver"))
    authority = target / "authority"
    return World(made.name, toy, target / "keys", target / "card.json",
                 authority.read_text() if authority.is_file() else None)  # fmt: skip


def script_arguments(world: World) -> list[str]:
    return [str(world.toy.root), str(world.run.folder), str(world.card)] + (
        ["--require-audit"] if world.require_audit else []
    )


def main(argv: list[str]) -> int:
    """Write every case, mutated, below the folder ``argv[0]``."""
    from support import tsa

    out = Path(argv[0]).absolute()
    authority = tsa.start(out / "authority")
    try:
        worlds = make_worlds(out / "worlds", authority)
        for case in cases():
            world = copy_world(worlds[case.world], out / "cases" / case.name)
            case.mutate(world)
            expected = {
                "outcome": case.outcome,
                "exit": EXIT[case.outcome],
                "reason": case.reason,
                "arguments": script_arguments(world),
            }
            (out / "cases" / case.name / "case.json").write_text(json.dumps(expected, indent=2))
    finally:
        authority.stop()
    print(f"{len(cases())} cases in {out / 'cases'}: each case.json names the arguments of "
          "verify-a-run.sh and the outcome every verifier must reach")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
