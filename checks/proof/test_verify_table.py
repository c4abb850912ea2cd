"""``prereg verify`` as a table: :func:`prereg.proof.verify.gather` reads the chain once, each
check of :data:`~prereg.proof.verify.CHECKS` is a function of that value alone, and each
names the gate condition and the audit checks that judge the same fact. The verifiers'
outcomes on real runs are the corpus's (test_corpus.py); here the table itself, on chains
made by hand."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from prereg.base.typed_settings import parse_as
from prereg.decisions import gate
from prereg.decisions.audit.checks import CHECKS as AUDIT_CHECKS
from prereg.proof import verify
from prereg.records import formats

pytestmark = pytest.mark.software

RUN = "toy-20261207-001"
COMMIT = "a" * 40
CARD = parse_as(formats.Card, {
    "format": "prereg-registration/1", "repository": "r" * 40, "freeze_commit": "f" * 40,
    "plans": {"plans/P.json": "p" * 64}, "roles": {},
})  # fmt: skip
APPROVAL = {
    "format": "prereg-approval-1", "stage": "toy", "run_id": RUN,
    "plan": {"path": "plans/P.json", "sha256": "p" * 64, "plan_id": "p-1"},
    "baseline": {"path": "plans/BASELINE.json", "sha256": "b" * 64}, "source_anchor": "c" * 40,
    "seed_namespace": None, "environment": {}, "deviations": [], "requires": {}, "inputs": {},
    "approved_at": "2026-12-07T00:00:00Z", "approved_by": "someone",
}  # fmt: skip
START = {
    "stage": "toy", "run_id": RUN, "started_at": "2026-12-07T00:00:01Z", "source_commit": COMMIT,
    "plan_sha256": "p" * 64, "approval_sha256": "d" * 64,
}  # fmt: skip


def read(kind, value: dict) -> formats.Read:
    return formats.loads(json.dumps(value).encode(), kind, kind.__name__)


def chain(**facts) -> verify.Chain:
    return verify.Chain(RUN, CARD, (), **facts)


def test_every_check_names_a_gate_condition_and_audit_checks_that_exist():
    conditions = {
        condition.audited.refusal
        for condition in (*gate.RUN_CONDITIONS, *gate.APPROVE_CONDITIONS)
        if hasattr(condition, "audited")
    }
    audit_checks = {check.__name__ for check in AUDIT_CHECKS}
    names = [check.judges.check for check in verify.CHECKS]
    assert len(names) == len(set(names))
    for check in verify.CHECKS:
        said = check.judges
        assert said.gate is None or said.gate in conditions, (said.check, said.gate)
        assert set(said.audit) <= audit_checks, (said.check, said.audit)


def test_a_card_that_does_not_match_is_the_only_reason_given():
    """Nothing past a broken link is judged: no reason that only repeats it."""
    verdict = verify.judge(verify.Chain(RUN, CARD, ("the plans are not the card's",)))
    assert verdict.code == verify.REFUSED
    assert verdict.problems == ["the plans are not the card's"]


def test_a_missing_attestation_is_refused_not_could_not_verify():
    verdict = verify.judge(chain(attestation=None))
    assert verdict.code == verify.REFUSED and not verdict.could_not
    assert "wrote no attestation" in verdict.problems[0]


def _signed_chain(**facts) -> verify.Chain:
    provenance = {
        "_type": verify.STATEMENT_TYPE,
        "predicateType": verify.PROVENANCE,
        "subject": [{"name": "a.json", "digest": {"sha256": "1" * 64}}],
        "predicate": {
            "buildDefinition": {
                "buildType": verify.BUILD_TYPE,
                "externalParameters": {
                    name: (RUN if name == "runId" else "toy" if name == "stage" else None)
                    for name in verify.EXTERNAL_PARAMETERS
                },
                "resolvedDependencies": [],
            },
            "runDetails": {"metadata": {"invocationId": RUN}},
        },
    }
    result = {
        "_type": verify.STATEMENT_TYPE,
        "predicateType": verify.TEST_RESULT,
        "subject": [{"name": "source", "digest": {"gitCommit": COMMIT}}],
    }
    signed = (
        verify.Signed(parse_as(formats.Provenance, provenance), said="line 1"),
        verify.Signed(parse_as(formats.Statement, result), said="line 2"),
    )
    present = ({"name": "a.json", "digest": {"sha256": "1" * 64}},)
    return chain(**{"attestation": b"two\n", "commit": COMMIT, "signed": signed,
                    "present": present, **facts})  # fmt: skip


def test_a_witness_that_does_not_answer_is_could_not_verify_and_one_that_disagrees_refused():
    record = read(formats.Approval, {**APPROVAL, "witness": {"url": "/w.git"}})
    start = read(formats.Start, START)
    silent = verify.check_witness(_signed_chain(record=record, start=start, witness_found=None))
    assert silent.could_not and not silent.problems
    rerun = verify.check_witness(
        _signed_chain(record=record, start=start, witness_found=("holds another start",))
    )
    assert rerun.problems == ("holds another start",) and not rerun.could_not


def test_every_reason_is_given_not_the_first():
    """A statement for another run whose files changed: both reasons, from two checks."""
    signed = _signed_chain(present=({"name": "a.json", "digest": {"sha256": "2" * 64}},))
    run = dataclasses.replace(signed.provenance.predicate.run.metadata, invocation_id="other")
    predicate = dataclasses.replace(
        signed.provenance.predicate, run=formats.RunDetails(metadata=run)
    )
    other = dataclasses.replace(signed.provenance, predicate=predicate)
    broken = dataclasses.replace(signed, signed=(verify.Signed(other), signed.signed[1]))
    verdict = verify.judge(broken)
    assert any("another run" in p for p in verdict.problems), verdict.problems
    assert any("changed after it was attested" in p for p in verdict.problems), verdict.problems


def test_a_git_record_of_another_file_is_refused():
    found = verify.check_refs(
        chain(recorded=(("refs/prereg/runs/x/start", "start.json", b"one", b"two"),))
    )
    assert found.problems and "records another start.json" in found.problems[0]
    assert not verify.check_refs(
        chain(recorded=(("refs/prereg/runs/x/start", "start.json", None, b"two"),))
    ).problems


def _closed_fields(script: str, refusal: str) -> set[str]:
    """The field names of the plain commands' ``need(keys - [...] == []; ...)`` whose reason
    contains ``refusal``."""
    for match in re.finditer(r'need\(keys - \[(.*?)\] == \[\]; \\"(.*?)\\"\)', script, re.DOTALL):
        if refusal in match.group(2):
            return set(re.findall(r'\\"([a-z_]+)\\"', match.group(1)))
    raise AssertionError(f"verify-a-run.sh has no field list for {refusal!r}")


@pytest.mark.parametrize(
    "kind, refusal",
    [(formats.Approval, "at C holds a field"), (formats.Card, "the card holds a field")],
)
def test_the_plain_commands_name_the_fields_of_the_records_classes(kind, refusal):
    """A closed record's fields are its class's (adding one touches the class, its writer and
    this list, which this check holds to the class)."""
    script = (Path(__file__).resolve().parents[2] / "docs/how-to/verify-a-run.sh").read_text()
    assert _closed_fields(script, refusal) == {f.name for f in dataclasses.fields(kind)}
