"""Reports of real runs (complete, incomplete, refused, killed) and the runs index."""

from __future__ import annotations

import base64
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from reportruns import COMPLETE, FAILING_CELL, FAILURE_MESSAGE, INCOMPLETE, KILLED

from prereg.commands.report.render import every_run, render_report
from prereg.kinds.report.model import load_run

pytestmark = pytest.mark.software

STAGE_SECTION = 'id="stage"'
FAILURE_SECTION = 'id="failure"'


class _Images(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attrs = dict(attrs)
        if tag == "img":
            self.sources.append(attrs.get("src", ""))
        for name in ("href", "src"):
            if attrs.get(name):
                self.links.append(attrs[name])


def parse(page: str) -> _Images:
    parser = _Images()
    parser.feed(page)
    return parser


@pytest.fixture(scope="module")
def complete_page(toy_runs) -> str:
    done = toy_runs.prereg("report", f"runs/{COMPLETE}", "--full-audit")
    path = toy_runs.root / "runs" / "reports" / f"{COMPLETE}.html"
    assert done.stdout.strip() == str(path), "prereg report prints the page's path"
    return path.read_text(encoding="utf-8")


def test_complete_report_header_states_the_provenance(toy_runs, complete_page):
    manifest = json.loads((toy_runs.run_dir(COMPLETE) / "manifest.json").read_text())
    for value in (
        manifest["stage"],
        manifest["run_id"],
        manifest["source_commit"],
        manifest["plan"]["sha256"],
        manifest["approval"]["sha256"],
        manifest["baseline_sha256"],
        manifest["environment"]["python"],
        manifest["environment"]["platform"],
    ):
        assert value in complete_page, value
    assert 'class="status status-complete">complete<' in complete_page
    assert manifest["deviations"], "the toy plan pins macOS: this machine deviates"
    for deviation in manifest["deviations"]:
        row = f"<td>{deviation['field']}</td><td>{deviation['pinned']}</td><td>{deviation['actual']}</td>"
        assert row in complete_page, deviation
    budget = manifest["budget"]["seconds"]
    assert f"of a {budget:g} s budget" in complete_page
    peak = max(i["peak_rss_bytes"] for i in manifest["items"])
    top = next(i for i in manifest["items"] if i["peak_rss_bytes"] == peak)
    assert f"({peak} bytes) in {top['nodeid']}" in complete_page
    assert top["peak_rss_scope"] in complete_page


def test_complete_report_shows_the_calibration_results(toy_runs, complete_page):
    summary = json.loads(
        (toy_runs.run_dir(COMPLETE) / "summary" / "calibration_summary.json").read_text()
    )
    assert STAGE_SECTION in complete_page and FAILURE_SECTION not in complete_page
    assert "Calibration results" in complete_page
    for row in summary["eligibility_by_n"]:
        assert f'<td class="num" data-sort="{row["max_cp_upper_inflated"]}">' in complete_page
    # the caveat and scope come from the plan (via the summary), escaped once
    assert summary["bootstrap_caveat"] in complete_page
    assert summary["scope"] in complete_page
    assert complete_page.count("<td>nested</td>") == len(summary["bootstrap_benchmark"])
    assert complete_page.count("<td>whole-cluster</td>") == len(summary["bootstrap_benchmark"])
    assert "CPU seconds (not reproducible)" in complete_page


def test_every_image_is_an_embedded_png_and_nothing_is_fetched(complete_page):
    found = parse(complete_page)
    assert found.sources, "the calibration report has a heat map"
    for src in found.sources:
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix)
        assert base64.b64decode(src[len(prefix) :]).startswith(b"\x89PNG\r\n\x1a\n")
    external = [link for link in found.links if re.match(r"^[a-z]+://", link)]
    assert not external, external


def test_complete_report_audit_is_clean_and_writing_it_adds_nothing_to_the_run(
    toy_runs, complete_page
):
    assert '<dt>verdict</dt><dd><span class="">clean</span></dd>' in complete_page
    assert "all checked now" in complete_page
    audit = toy_runs.prereg("audit", f"runs/{COMPLETE}", check=False)
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_incomplete_report_shows_traceback_and_missing_items_but_no_aggregate(toy_runs, tmp_path):
    # Plant the complete run's summary in a copy of the incomplete run: still no aggregate.
    copy = tmp_path / "runs" / INCOMPLETE
    shutil.copytree(toy_runs.run_dir(INCOMPLETE), copy)
    shutil.copytree(toy_runs.run_dir(COMPLETE) / "summary", copy / "summary")
    page = render_report(toy_runs.root, load_run(copy), audit="none")
    assert 'class="status status-incomplete">incomplete<' in page
    assert STAGE_SECTION not in page and "Calibration results" not in page
    assert "Eligibility" not in page and "<img" not in page
    assert FAILURE_SECTION in page
    assert f"RuntimeError: {FAILURE_MESSAGE}" in page, "the item's traceback is shown"
    manifest = json.loads((copy / "manifest.json").read_text())
    assert f"<dt>items expected</dt><dd>{manifest['expected_items']}</dd>" in page
    assert f"<dt>items passed</dt><dd>{manifest['expected_items'] - 1}</dd>" in page
    assert f"test_simulation_cell[{FAILING_CELL}]</td><td>failed</td>" in page
    for reason in manifest["incomplete_reasons"]:
        assert reason in page


def test_killed_run_renders_from_its_item_log(toy_runs):
    page = render_report(toy_runs.root, load_run(toy_runs.run_dir(KILLED)), audit="cached")
    assert 'status-no-manifest">no manifest<' in page
    assert "no manifest" in page and "items.jsonl" in page and STAGE_SECTION not in page
    first = json.loads((toy_runs.run_dir(KILLED) / "items.jsonl").read_text().splitlines()[0])
    assert first["nodeid"].split("::")[-1] in page
    assert "<dt>items expected</dt><dd>unknown (no manifest)</dd>" in page


def test_refusal_renders_its_conditions(toy_runs):
    done = toy_runs.prereg(
        "report", *map(str, sorted((toy_runs.root / "runs" / "refusals").glob("*.json")))
    )
    page_path = done.stdout.strip().splitlines()[0]
    assert "/runs/reports/refused-" in page_path
    page = Path(page_path).read_text(encoding="utf-8")
    assert 'status-refused">refused<' in page and "clean-source" in page
    assert "untracked-notes.txt" in page


def test_the_same_run_renders_to_the_same_bytes(toy_runs):
    record = load_run(toy_runs.run_dir(COMPLETE))
    first = render_report(toy_runs.root, record, audit="none", now="T")
    assert first == render_report(toy_runs.root, record, audit="none", now="T")


def test_runs_lists_every_run_and_refusal_with_its_audit_verdict(toy_runs):
    rows = json.loads(toy_runs.prereg("runs", "--json").stdout)
    by = {(r["run_id"], r["status"]): r for r in rows}
    assert set(by) == {
        (COMPLETE, "complete"),
        (INCOMPLETE, "incomplete"),
        (KILLED, "no manifest"),
        (INCOMPLETE, "refused"),
    }
    assert by[(COMPLETE, "complete")]["audit"] == "clean"
    assert by[(COMPLETE, "complete")]["elapsed_seconds"] > 0
    assert by[(COMPLETE, "complete")]["when"].startswith("20")
    assert by[(KILLED, "no manifest")]["audit"] == "not auditable (no manifest)"
    assert by[(INCOMPLETE, "refused")]["audit"] == "nothing to audit"
    skipped = json.loads(toy_runs.prereg("runs", "--json", "--no-audit").stdout)
    assert {r["audit"] for r in skipped if r["status"] in ("complete", "incomplete")} == {
        "not audited"
    }
    text = toy_runs.prereg("runs").stdout
    assert re.search(
        rf"calibration\s+{COMPLETE}\s+complete\s+[0-9a-f]{{12}}\s+\S+\s+[0-9.]+\s+(\d+) of \1 "
        r"passed\s+clean",
        text,
    ), text


def test_a_tampered_run_shows_its_audit_findings(toy_runs, tmp_path):
    copy_root = tmp_path / "repo"
    shutil.copytree(toy_runs.root, copy_root, ignore=shutil.ignore_patterns("reports", "audits"))
    figures = next((copy_root / "runs" / COMPLETE / "items").glob("*/figures.json"))
    figures.write_text(figures.read_text().replace("0", "1", 1))
    page = render_report(copy_root, load_run(copy_root / "runs" / COMPLETE), audit="full")
    assert "1 finding(s)" in page
    assert f"changed file: items/{figures.parent.name}/figures.json" in page


def test_report_all_writes_every_page_and_the_index(toy_runs):
    done = toy_runs.prereg("report", "--all", "--no-audit")
    paths = done.stdout.split()
    assert paths[-1].endswith("runs/reports/index.html")
    assert len(paths) == len(every_run(toy_runs.root)) + 1
    index = Path(paths[-1]).read_text(encoding="utf-8")
    for path in paths[:-1]:
        assert f'href="{path.rsplit("/", 1)[-1]}"' in index


def test_every_page_and_the_index_read_each_runs_plan_from_git_once(toy_runs, monkeypatch):
    from prereg.base import gitrepo
    from prereg.commands.report.render import index_rows
    from prereg.kinds.report import model

    shown = []
    real = gitrepo.show_bytes
    monkeypatch.setattr(gitrepo, "show_bytes", lambda *a: shown.append(a[1:]) or real(*a))
    model._committed_file.cache_clear()
    records = [r for r in every_run(toy_runs.root) if r.manifest]
    pages = [render_report(toy_runs.root, r, audit="none") for r in records]
    rows = index_rows(toy_runs.root, records, audit="none")
    assert len(pages) == len(rows) == len(records) and shown
    assert len(shown) == len(set(shown)), f"a plan was read from git twice: {shown}"


def test_report_of_a_folder_that_is_not_a_run_is_refused_with_its_name(toy_runs):
    done = toy_runs.prereg("report", "plans", check=False)
    assert done.returncode == 2
    assert "plans holds no start.json" in done.stderr


def test_a_broken_summary_still_renders_the_page_with_the_error_and_the_audit_finding(
    toy_runs, tmp_path
):
    copy_root = tmp_path / "repo"
    shutil.copytree(toy_runs.root, copy_root, ignore=shutil.ignore_patterns("reports", "audits"))
    (copy_root / "runs" / COMPLETE / "summary" / "calibration_summary.json").write_text("{}")
    page = render_report(copy_root, load_run(copy_root / "runs" / COMPLETE), audit="full")
    assert "Stage results could not be rendered" in page and "KeyError" in page
    assert "changed file: summary/calibration_summary.json" in page
    assert 'id="header"' in page and 'id="items"' in page
