"""`prereg audit` stores its verdict bound to the manifest and the code; `prereg runs`
reuses it, a report page does not.

A stored verdict that matches (manifest SHA-256, prereg package code) spares a listing's
replay; one that does not is named stale and the replay runs again. A run's page and a
dependent stage's gate rely only on an auditor's signed audit (checks/proof and the RP002A
pipeline check that one).
"""

from __future__ import annotations

import json

import pytest

from prereg.decisions.audit import audit_run_cached
from prereg.records import ledger, verdicts
from support.toy import make_toy_repo

pytestmark = pytest.mark.software

RUN = "toy-20261130-001"


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    toy = make_toy_repo(tmp_path_factory.mktemp("verdict") / "toy")
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 0, done.stdout + done.stderr
    audit = toy.audit(RUN)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    return toy, audit


def test_audit_stores_its_verdict_bound_to_manifest_and_code(audited):
    toy, audit = audited
    assert "verdict stored in runs/audits/" in audit.stdout, audit.stdout
    assert f"git records its bytes, {ledger.verdict_ref(RUN)}" in audit.stdout, audit.stdout
    record = json.loads((toy.root / "runs" / "audits" / f"{RUN}.json").read_text())
    assert record["format"] == verdicts.FORMAT
    assert record["verdict"] == "clean"
    assert (
        record["replayed"] is False
    )  # the toy kind has no replay (E04's: test_usability_progress)
    manifest = toy.run_dir(RUN) / "manifest.json"
    import hashlib

    assert record["manifest_sha256"] == hashlib.sha256(manifest.read_bytes()).hexdigest()
    assert record["code"]["package_sha256"] == verdicts.code_identity()["package_sha256"]


def test_a_listing_after_audit_uses_the_stored_verdict_and_a_report_page_does_not(audited):
    toy, _ = audited
    store = toy.root / "runs" / "audits" / f"{RUN}.json"
    _forge(store, replayed=True)  # as a kind with a replay stores it (E04: the progress check)
    before = store.read_bytes()
    result = audit_run_cached(toy.root, toy.run_dir(RUN), listing=True)
    assert not result and not result.replayed
    assert "not run again" in result.replay_note and "runs/audits/" in result.replay_note
    assert store.read_bytes() == before  # nothing re-audited, nothing re-stored
    listed = toy.prereg("runs")
    assert listed.returncode == 0 and "clean" in listed.stdout, listed.stdout + listed.stderr
    assert store.read_bytes() == before
    page = toy.prereg("report", f"runs/{RUN}")
    assert page.returncode == 0, page.stdout + page.stderr
    html = (toy.root / page.stdout.strip().splitlines()[-1]).read_text()
    assert "not run again" not in html and "not relied on here" in html, html


def _forge(store, *, in_git: bool = True, **changes):
    """Change the stored verdict; ``in_git``: as prereg audit stores one (git records its
    bytes), else as a hand edit of the file."""
    record = json.loads(store.read_text())
    for key, value in changes.items():
        if key == "package_sha256":
            record["code"]["package_sha256"] = value
        else:
            record[key] = value
    store.write_text(json.dumps(record))
    if in_git:
        root = store.parents[2]
        ledger.record_verdict(root, record["run_id"], store.read_bytes())


def test_a_verdict_whose_git_record_was_deleted_is_not_trusted(audited):
    """``git update-ref -d`` of the verdict's ref: the file alone proves nothing."""
    toy, _ = audited
    store = toy.root / "runs" / "audits" / f"{RUN}.json"
    assert toy.audit(RUN).returncode == 0
    _forge(store, replayed=True)
    toy.git("update-ref", "-d", ledger.verdict_ref(RUN))
    reason = verdicts.staleness(toy.root, json.loads(store.read_text()), toy.run_dir(RUN))
    assert reason == f"git records no stored verdict for the run ({ledger.verdict_ref(RUN)})"
    result = audit_run_cached(toy.root, toy.run_dir(RUN), listing=True)
    assert "not run again" not in result.replay_note and "git records no" in result.replay_note


def test_a_verdict_file_edited_by_hand_is_not_trusted_and_the_run_is_audited_again(audited):
    """A clean replayed verdict written into runs/audits/ by hand (or left by another clone)
    is not the one git records: report and runs audit again instead of showing it."""
    toy, _ = audited
    store = toy.root / "runs" / "audits" / f"{RUN}.json"
    assert toy.audit(RUN).returncode == 0
    _forge(store, in_git=False, replayed=True, audited_at="2026-01-01T00:00:00+00:00")
    reason = verdicts.staleness(toy.root, json.loads(store.read_text()), toy.run_dir(RUN))
    assert reason == (
        f"the stored verdict file is not the one git records ({ledger.verdict_ref(RUN)}): "
        "edited since"
    )
    result = audit_run_cached(toy.root, toy.run_dir(RUN), listing=True)
    assert "not run again" not in result.replay_note
    assert "the stored verdict was stale: the stored verdict file is not" in result.replay_note
    assert verdicts.staleness(toy.root, json.loads(store.read_text()), toy.run_dir(RUN)) is None
    assert json.loads(store.read_text())["replayed"] is False  # the toy kind has no replay


def test_a_verdict_of_other_code_is_stale_and_the_replay_runs_again(audited):
    toy, _ = audited
    store = toy.root / "runs" / "audits" / f"{RUN}.json"
    _forge(store, package_sha256="0" * 64, replayed=True)
    result = audit_run_cached(toy.root, toy.run_dir(RUN), listing=True)
    assert "stale" in result.replay_note and "audit code changed" in result.replay_note
    refreshed = json.loads(store.read_text())
    assert refreshed["code"]["package_sha256"] == verdicts.code_identity()["package_sha256"]


def test_a_verdict_of_another_manifest_is_stale(audited):
    toy, _ = audited
    store = toy.root / "runs" / "audits" / f"{RUN}.json"
    _forge(store, manifest_sha256="f" * 64, replayed=True)
    result = audit_run_cached(toy.root, toy.run_dir(RUN), listing=True)
    assert "manifest.json changed since that audit" in result.replay_note


def test_a_stored_verdict_never_hides_a_changed_run(audited, tmp_path):
    """A matching clean verdict spares only the replay: a tampered item file is found now."""
    import shutil

    toy, _ = audited
    store = toy.root / "runs" / "audits" / f"{RUN}.json"
    assert toy.audit(RUN).returncode == 0  # a fresh matching verdict
    _forge(store, replayed=True)
    item = next(p for p in (toy.run_dir(RUN) / "items").rglob("*") if p.is_file())
    saved = tmp_path / "saved"
    shutil.copy(item, saved)
    try:
        item.write_bytes(item.read_bytes() + b" ")
        result = audit_run_cached(toy.root, toy.run_dir(RUN), listing=True)
        assert result.findings, "a changed output must be a finding despite the stored verdict"
        assert verdicts.staleness(toy.root, json.loads(store.read_text()), toy.run_dir(RUN)) is None
    finally:
        shutil.copy(saved, item)


def test_staleness_names_missing_and_foreign_records(tmp_path):
    assert verdicts.staleness(tmp_path, None, tmp_path) == "no stored verdict"
    assert "format" in verdicts.staleness(tmp_path, {"format": "other"}, tmp_path)
    assert "no manifest" in verdicts.staleness(tmp_path, {"format": verdicts.FORMAT}, tmp_path)


def test_the_audit_code_is_named_by_package_hash_and_commit_or_as_installed():
    in_checkout = {"package_sha256": "a" * 64, "source_commit": "b" * 40}
    assert verdicts.code_label(in_checkout) == f"prereg package {'a' * 12} at commit {'b' * 12}"
    wheel = {"package_sha256": "c" * 64, "source_commit": None}
    assert verdicts.code_label(wheel) == f"prereg package {'c' * 12} (installed, no git commit)"
