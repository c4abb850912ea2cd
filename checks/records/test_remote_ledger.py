"""Spent run ids survive a clone: ``git clone`` does not fetch ``refs/prereg/*``, so the gate
asks every remote of the repository whether it records the run id (or the stage's single
attempt) before a run spends it, and a run pushes its spend to the remotes it consulted.
A remote that cannot be reached refuses nothing, and the start record says so."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prereg.records import ledger
from prereg.testing import ScratchProject
from support.toy import make_toy_repo, stage_spec

pytestmark = [pytest.mark.software, pytest.mark.attack]

RUN = "toy-20261130-001"
NEXT = "toy-20261130-002"
USAGE_ERROR = 4


def _bare_origin(toy, folder: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", str(folder)], check=True)
    toy.git("remote", "add", "origin", str(folder))
    toy.git("push", "-q", "origin", "HEAD:refs/heads/main")
    return folder


def _clone(origin: Path, folder: Path) -> ScratchProject:
    subprocess.run(["git", "clone", "-q", "-b", "main", str(origin), str(folder)], check=True)
    clone = ScratchProject(folder)
    clone.git("config", "user.email", "c@example.org")
    clone.git("config", "user.name", "Collaborator")
    return clone


def _remote_refs(origin: Path) -> list[str]:
    done = subprocess.run(
        ["git", "-C", str(origin), "for-each-ref", "--format=%(refname)", "refs/prereg/"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


def _git(folder: Path, *args: str, data: str | None = None) -> str:
    done = subprocess.run(
        ["git", "-C", str(folder), *args], input=data, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


# What a remote holds, as (ref, the record's text); the same text is the same blob.
START, OTHER_START = ledger.start_ref(RUN), ledger.start_ref(NEXT)
ATTEMPT = ledger.attempt_ref("toy")


@pytest.mark.parametrize(
    ("held", "spent", "attempt_used"),
    [
        ((), False, False),
        (((START, "run"),), True, False),
        (((START, "run"), (ATTEMPT, "run")), True, False),
        (((OTHER_START, "next"), (ATTEMPT, "next")), False, True),
        (((OTHER_START, "next"),), False, False),
    ],
)
def test_each_remote_is_asked_for_the_run_ids_start_and_the_stages_attempt(
    tmp_path, held, spent, attempt_used
):
    here, origin, other = tmp_path / "here", tmp_path / "origin.git", tmp_path / "other.git"
    _git(tmp_path, "init", "-q", str(here))
    for remote in (origin, other):
        _git(tmp_path, "init", "-q", "--bare", str(remote))
        _git(here, "remote", "add", remote.stem, str(remote))
    for ref, text in held:
        _git(origin, "update-ref", ref, _git(origin, "hash-object", "-w", "--stdin", data=text))
    _git(here, "remote", "add", "gone", str(tmp_path / "gone.git"))
    found = {r.remote: r for r in ledger.consult_remotes(here, RUN, "toy")}
    assert set(found) == {"origin", "other", "gone"}
    assert (found["origin"].spent, found["origin"].attempt_used) == (spent, attempt_used)
    assert found["origin"].problem is None and found["origin"].url == str(origin)
    assert found["other"] == ledger.RemoteLedger("other", str(other))
    assert found["gone"].problem and not found["gone"].spent
    assert found["gone"].record() == {
        "remote": "gone",
        "url": str(tmp_path / "gone.git"),
        "consulted": False,
        "problem": found["gone"].problem,
    }


def _spent_and_pushed(tmp_path, **spec) -> tuple:
    """A toy project with a bare remote ``origin``, its stage rehearsed and run once (spent,
    pushed)."""
    toy = make_toy_repo(tmp_path / "study", {"toy": stage_spec("toy", **spec)})
    origin = _bare_origin(toy, tmp_path / "origin.git")
    assert toy.pytest("--research-stage=toy", "--rehearse").returncode == 0
    toy.approve("toy", RUN)
    toy.git("push", "-q", "origin", "HEAD:refs/heads/main")
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 0, done.stdout + done.stderr
    return toy, origin


def test_a_run_pushes_its_spend_and_a_clone_cannot_rerun_the_spent_id(tmp_path):
    toy, origin = _spent_and_pushed(tmp_path)
    start = json.loads(toy.layout(RUN).start.read_text())
    assert start["remote_ledgers"] == [
        {"remote": "origin", "url": str(origin), "consulted": True, "problem": None}
    ]
    assert {ledger.start_ref(RUN), ledger.manifest_ref(RUN)} <= set(_remote_refs(origin))
    [disclosed] = json.loads(toy.layout(RUN).approval_copy.read_text())["rehearsals"]
    assert ledger.rehearsal_ref("toy", disclosed["name"]) in _remote_refs(origin)  # shared too
    clone = _clone(origin, tmp_path / "clone")
    assert ledger.spent_run_ids(clone.root) == []  # git clone does not copy refs/prereg/*
    again = clone.pytest("--research-stage=toy")
    output = again.stdout + again.stderr
    assert again.returncode == USAGE_ERROR, output
    assert "[run-id-unused]" in output and "remote origin records its start" in output, output
    assert not ledger.is_spent(clone.root, RUN) and not clone.run_dir(RUN).exists()
    status = json.loads(clone.prereg("status", "--json", check=True).stdout)
    (stage,) = status["stages"]
    assert stage["unspent_approvals"] == [], stage
    assert any(f"{RUN} is spent: remote origin records its start" in p for p in status["problems"])
    assert toy.audit(RUN).returncode == 0


def test_status_says_how_git_fetch_brings_the_records_and_then_the_clone_holds_them(tmp_path):
    """A collaborator's clone fetches only branches and tags; status names the refspec that
    makes git fetch bring the spent run ids too, and once it is set the clone holds them."""
    _, origin = _spent_and_pushed(tmp_path)
    clone = _clone(origin, tmp_path / "clone")
    before = json.loads(clone.prereg("status", "--json", check=True).stdout)["problems"]
    advice = f"git config --add remote.origin.fetch '{ledger.FETCH_REFSPEC}'"
    assert any(advice in p for p in before), before
    assert ledger.fetch_records(clone.root) == ["origin"]
    assert ledger.fetch_records(clone.root) == []  # set once, never twice
    clone.git("fetch", "-q", "origin")
    assert ledger.is_spent(clone.root, RUN)
    after = json.loads(clone.prereg("status", "--json", check=True).stdout)["problems"]
    assert not any(advice in p or "is spent: remote" in p for p in after), after


def test_prereg_init_in_a_checkout_with_a_remote_lets_git_fetch_bring_the_records(tmp_path):
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", str(origin)], check=True)
    checkout = tmp_path / "study"
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    _git(checkout, "remote", "add", "origin", str(origin))
    _git(checkout, "remote", "add", "mirror", str(origin))
    _git(checkout, "config", "--add", "remote.mirror.fetch", "+" + ledger.FETCH_REFSPEC)
    _git(checkout, "remote", "add", "--mirror=fetch", "everything", str(origin))
    done = ScratchProject(checkout).prereg("init", ".", check=True)
    assert ledger.FETCH_REFSPEC in done.stdout
    assert _git(checkout, "config", "--get-all", "remote.origin.fetch").split() == [
        "+refs/heads/*:refs/remotes/origin/*",
        ledger.FETCH_REFSPEC,
    ]
    assert ledger.remotes_not_fetching_records(checkout) == []
    assert _git(checkout, "config", "--get-all", "remote.everything.fetch") == "+refs/*:refs/*"
    mirror = _git(checkout, "config", "--get-all", "remote.mirror.fetch").splitlines()
    assert sum("refs/prereg" in spec for spec in mirror) == 1  # not added twice


def test_status_warns_of_a_copy_that_holds_approvals_but_no_records(tmp_path):
    """A copy of the project without its remote (an archive, a clone whose remote was
    removed): no record says which approvals ran, and status says so instead of listing
    every approval as unspent without a word."""
    toy, origin = _spent_and_pushed(tmp_path)
    copy = _clone(origin, tmp_path / "copy")
    copy.git("remote", "remove", "origin")
    status = json.loads(copy.prereg("status", "--json", check=True).stdout)
    assert any("holds no refs/prereg/* record and has no remote" in p for p in status["problems"])
    mine = json.loads(toy.prereg("status", "--json", check=True).stdout)
    assert not any("holds no refs/prereg/*" in p for p in mine["problems"]), mine


def test_a_clone_cannot_take_a_single_attempt_its_remote_records(tmp_path):
    _, origin = _spent_and_pushed(tmp_path, single_attempt=True, signing="optional")
    assert ledger.attempt_ref("toy") in _remote_refs(origin)
    clone = _clone(origin, tmp_path / "clone")
    clone.git("rm", "-q", f"plans/approvals/{RUN}.json")
    clone.commit("Forget the first attempt")
    approve = clone.prereg("approve", "--stage", "toy", "--run-id", NEXT, "--accept-deviations")
    assert approve.returncode == 2, approve.stdout + approve.stderr
    assert "[single-attempt]" in approve.stderr and "remote origin records" in approve.stderr
    assert not (clone.root / "plans" / "approvals" / f"{NEXT}.json").exists()


def test_an_unreachable_remote_refuses_nothing_and_the_run_says_so(tmp_path):
    toy = make_toy_repo(tmp_path / "study")
    toy.git("remote", "add", "origin", str(tmp_path / "gone.git"))
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 0, done.stdout + done.stderr
    (asked,) = json.loads(toy.layout(RUN).start.read_text())["remote_ledgers"]
    assert asked["remote"] == "origin" and not asked["consulted"] and asked["problem"], asked
    assert "remote origin does not record" in done.stdout, done.stdout
    assert "git push origin 'refs/prereg/*:refs/prereg/*'" in done.stdout
    assert toy.audit(RUN).returncode == 0


def test_a_remotes_own_program_settings_run_nothing(tmp_path):
    toy = make_toy_repo(tmp_path / "study")
    origin = _bare_origin(toy, tmp_path / "origin.git")
    marker = tmp_path / "ran"
    for setting in ("uploadpack", "receivepack"):
        toy.git("config", f"remote.origin.{setting}", f"touch {marker}; git-{setting[:-4]}-pack")
    toy.approve("toy", RUN)
    done = toy.pytest("--research-stage=toy")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not marker.exists()
    assert ledger.start_ref(RUN) in _remote_refs(origin)


def test_the_demos_clone_has_no_remote_so_its_runs_stay_out_of_the_projects_ledger(tmp_path):
    """prereg demo clones the project and runs its stages there under the run ids a real
    run of the day takes: with the project as its remote, they would be refused for ids the
    project spent, or push their spends into the project's ledger."""
    from prereg.commands.demo import run_demo

    toy = make_toy_repo(tmp_path / "study")
    assert run_demo(toy.root, steps=[]) == 0
    (clone,) = (toy.root / "demo-output").glob("*/repo")
    assert _git(clone, "remote") == ""


@given(
    scheme=st.sampled_from(["https", "http", "ssh", "git+ssh"]),
    user=st.text(alphabet="abcXYZ019._-", min_size=1, max_size=8),
    secret=st.text(alphabet="abcXYZ019._-~!$", min_size=1, max_size=12),
    path=st.text(alphabet="abc/._-", max_size=12),
)
def test_a_recorded_url_never_holds_the_userinfo_it_was_given(scheme, user, secret, path):
    url = f"{scheme}://{user}:{secret}@example.org/{path}"
    assert ledger.shown_url(url) == f"{scheme}://example.org/{path}"
    plain = f"{scheme}://example.org/{path}"
    assert ledger.shown_url(plain) == plain  # nothing to remove
    assert ledger.shown_url(f"git@example.org:{path}") == f"git@example.org:{path}"  # scp-like
