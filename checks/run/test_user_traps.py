"""Traps a new user meets, each performed for real in a scratch project.

A refusal of a spent run id never also calls it unspent; refused options are named as typed;
``prereg runs | head`` ends quietly; the runs index shows the items' outcome beside the audit
of the records; a ``-n 2`` research run prints no assertion-rewrite warning; install.sh goes
on when apt is locked, since Chromium is optional.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prereg.cli import CLOSED_PIPE_EXIT
from prereg.kinds.report.model import RunRecord, outcome_summary
from prereg.testing import outer_environment, terminal_signals
from support.toy import make_toy_repo, stage_spec

pytestmark = pytest.mark.software

ROOT = Path(__file__).resolve().parents[2]
RUN_ID = "toy-20260101-001"
CELLS = 4


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """A toy project whose stage ran once with one of its four items failing, then was
    started again under the same (spent) approval."""
    spec = stage_spec("toy", parameters={"cells": CELLS, "misbehave": {"cell": 1, "how": "raise"}})
    repo = make_toy_repo(tmp_path_factory.mktemp("traps") / "repo", {"toy": spec})
    repo.approve("toy", RUN_ID)
    first = repo.pytest("--research-stage=toy")
    assert f"run {RUN_ID} incomplete" in first.stdout, first.stdout + first.stderr
    again = repo.pytest("--research-stage=toy", f"--run-id={RUN_ID}")
    return repo, again


def test_a_spent_run_id_is_never_also_called_unspent(ran):
    _, again = ran
    said = again.stdout + again.stderr
    assert again.returncode == 4 and "[run-id-unused]" in said, said
    assert "has been spent" in said, said
    assert "is not spent" not in said and "was not spent" not in said, said
    assert f"run id {RUN_ID} was spent by an earlier run" in said, said


def test_the_refusal_page_of_a_spent_run_id_says_to_approve_a_new_one(ran):
    repo, _ = ran
    repo.prereg("report", "--all", "--no-audit", check=True)
    (page,) = (repo.root / "runs" / "reports").glob("refused-*.html")
    text = page.read_text()
    assert "has been spent" in text and "approve a new run id" in text, text
    assert "was not spent" not in text and "run again under the same approval" not in text


def test_refused_options_are_named_as_typed(ran):
    repo, _ = ran
    # Without -p no:cacheprovider, so that --lf is an option pytest knows.
    done = repo.run(
        sys.executable, "-m", "pytest", "--research-stage=toy",
        "-k", "x", "--collect-only", "--lf", "-m", "foo", "-x",
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 4, said
    for typed in ("-k selects", "--collect-only collects", "--lf runs only", "-m selects"):
        assert f"\n  {typed}" in said, said
    assert "\n  -x" not in said, "-x only stops at the first failure: it is not refused"
    for internal in ("keyword", "collectonly", "markexpr", "last_failed", "drop"):
        assert internal not in said, (internal, said)
    assert "this refusal spent no run id" in said, said


@pytest.mark.slow
def test_a_two_worker_run_prints_no_assertion_rewrite_warning(toy):
    """No module pytest marks for rewriting (the ``-p`` plugins, conftest.py files, the stage
    module) is imported before pytest registers it, in the session or in either worker."""
    toy.approve("toy", RUN_ID)
    done = toy.pytest("--research-stage=toy", "-n", "2")
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "2 workers [4 items]" in said, said
    assert "PytestAssertRewriteWarning" not in said and "cannot be rewritten" not in said, said


def test_the_runs_index_shows_the_outcome_beside_a_clean_audit(ran):
    repo, _ = ran
    listing = repo.prereg("runs", check=True).stdout
    (line,) = [row for row in listing.splitlines() if RUN_ID in row and "incomplete" in row]
    assert re.search(r"3 of 4 passed; 1 failed\s+clean$", line), listing
    assert "audit of the records" in listing.splitlines()[0], listing
    rows = json.loads(repo.prereg("runs", "--json", check=True).stdout)
    by_status = {row["status"]: row for row in rows}
    assert by_status["incomplete"]["outcome"] == "3 of 4 passed; 1 failed", rows
    assert by_status["refused"]["outcome"] == "no item ran", rows
    repo.prereg("report", "--all", "--no-audit", check=True)
    index = (repo.root / "runs" / "reports" / "index.html").read_text()
    assert "3 of 4 passed; 1 failed" in index and "audit of the records" in index, index


@pytest.mark.parametrize(
    "command",
    [["runs"], ["runs", "--json"], ["audit", f"runs/{RUN_ID}"], ["report", "--all"]],
    ids=" ".join,
)
def test_a_closed_pipe_ends_a_command_quietly(ran, command):
    """``prereg runs | head``: the reader has gone before anything is written."""
    repo, _ = ran
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = outer_environment()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "prereg.cli", *command],
            cwd=repo.root,
            env=env,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
            preexec_fn=terminal_signals,
        )
    finally:
        os.close(write_end)
    assert done.returncode == CLOSED_PIPE_EXIT == 141, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr


@given(
    st.lists(st.sampled_from(["passed", "failed", "error", "skipped", "not run"]), max_size=12),
    st.integers(min_value=0, max_value=5),
)
def test_the_outcome_counts_every_expected_item_once(outcomes, unrecorded):
    items = tuple({"nodeid": f"t[{n}]", "outcome": o} for n, o in enumerate(outcomes))
    expected = len(items) + unrecorded
    record = RunRecord(
        run_id=RUN_ID,
        path=Path("runs") / RUN_ID,
        stage="toy",
        status="incomplete",
        start={},
        manifest={"expected_items": expected},
        items=items,
    )
    text = outcome_summary(record)
    head, _, rest = text.partition("; ")
    assert head == f"{outcomes.count('passed')} of {expected} passed", text
    counted = {}
    for part in filter(None, rest.split(", ")):
        number, _, outcome = part.partition(" ")
        counted[outcome] = int(number)
    wanted = {o: outcomes.count(o) for o in set(outcomes) - {"passed"}}
    if unrecorded:
        wanted["no record"] = unrecorded
    assert counted == wanted, text


# -- install.sh: Chromium is optional ---------------------------------------------------------

LOCKED_APT = """#!/bin/sh
echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)" >&2
echo "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another process using it?" >&2
exit 100
"""


def _function(script: str, name: str) -> str:
    """The definition of the shell function ``name`` in ``script`` (one line, or up to ``}``)."""
    match = re.search(rf"^{name}\(\) {{.*?(?:}}$|\n}}$)", script, re.MULTILINE | re.DOTALL)
    assert match, f"install.sh defines no function {name}"
    return match.group(0)


def test_install_goes_on_when_apt_is_locked(tmp_path):
    """install.sh's Chromium step with an apt-get that fails as a locked apt does (and an
    ``id`` that says root): it warns, naming the lock and the command, and the install goes
    on under ``set -euo pipefail``. apt itself never runs."""
    script = (ROOT / "install.sh").read_text()
    assert subprocess.run(["bash", "-n", str(ROOT / "install.sh")], check=False).returncode == 0
    assert "\ninstall_chromium /usr/bin/chromium\n" in script
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "apt-get").write_text(LOCKED_APT)
    (fake / "id").write_text("#!/bin/sh\necho 0\n")
    for tool in fake.iterdir():
        tool.chmod(0o755)
    functions = "\n".join(_function(script, n) for n in ("as_root_with_apt", "install_chromium"))
    program = f'set -euo pipefail\n{functions}\ninstall_chromium "$1"\necho "the install went on"\n'
    done = subprocess.run(
        ["bash", "-c", program, "install.sh", str(tmp_path / "no-chromium")],
        env={**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and "the install went on" in done.stdout, done.stdout + done.stderr
    assert "could not install chromium" in done.stderr, done.stderr
    assert "/var/lib/dpkg/lock-frontend" in done.stderr, done.stderr
    assert "apt-get install -y chromium" in done.stderr, done.stderr
