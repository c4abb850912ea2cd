"""Reports of the other stage kinds, each from a small real run made here.

E04: the E04 checks' throw-away project (token-hash backend, two synthetic tasks).
RP002A stages 2-4: the pipeline checks' tiny plan run end to end through the demo path
(slow: about a minute on two cores). Both use the scratch projects of support.e04_project and
support.rp002a_clone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from browser_probe import CHROMIUM_PATH, check_in_browser

from prereg.commands.report.render import every_run, index_rows, render_report
from prereg.kinds.report.model import load_run
from support import (
    e04_project,
    rp002a_clone,  # noqa: F401 - tiny_pipeline needs it
)

pytestmark = pytest.mark.software


def _browser(page: Path, tmp_path: Path, capsys) -> None:
    if not CHROMIUM_PATH.exists():
        return  # the browser checks of test_report_browser.py say why they are skipped
    png = check_in_browser(page, tmp_path)
    with capsys.disabled():
        print(f"\nscreenshot of {page.name}: {png}")


@pytest.fixture(scope="module")
def e04_run(tmp_path_factory, e04_fixture) -> Path:
    base = tmp_path_factory.mktemp("e04report")
    project = e04_project.make_project(base / "project", e04_fixture, e04_project.check_plan())
    project.approve("e04-20261130-001")
    done = project.pytest("--research-stage=e04")
    assert done.returncode == 0, done.stdout + done.stderr
    return project.run_dir("e04-20261130-001")


def test_e04_report_per_harness_tables_s001_once_and_dose_plots(e04_run, tmp_path, capsys):
    root = e04_run.parents[1]
    page = render_report(root, load_run(e04_run), audit="none")
    summary = json.loads((e04_run / "summary" / "e04_summary.json").read_text())
    assert "E04 robustness results" in page and "SYNTHETIC data" in page
    for row in summary["baseline"]:
        harness = row["harness"]
        assert f"{harness}: means over tasks" in page
        assert f"{harness}: paired outcomes" in page
    doses = [
        r["dose"] for r in summary["S002"] if r["harness"] == summary["baseline"][0]["harness"]
    ]
    for dose in doses:
        assert page.count(f"<td>S002 dose {dose}</td>") == 2 * len(summary["baseline"])
    # S001: one row per shared_key (task x harness) in the per-task table, not one per cell
    units = summary["units"]["S001_task_harness"]
    assert f"S001 per task and harness ({units} units, one per shared_key)" in page
    assert units * 3 == summary["cells"], "three composite cells share each S001 unit"
    assert page.count("<img ") == 2, "rank displacement and retention by dose"
    path = tmp_path / "e04.html"
    path.write_text(page, encoding="utf-8")
    _browser(path, tmp_path, capsys)


@pytest.fixture(scope="module")
def rp002a_runs(tiny_pipeline: Path) -> Path:
    """The runs of the pipeline checks' tiny plan (every RP002A stage), read only here."""
    return tiny_pipeline / "runs"


def _page(runs: Path, stage: str) -> str:
    (run,) = [p for p in runs.iterdir() if p.name.startswith(f"{stage}-2")]
    return render_report(runs.parent, load_run(run), audit="none"), run


@pytest.mark.slow
def test_confirmatory_report_has_forest_plot_decisions_in_protocol_order_and_caveats(
    rp002a_runs, tmp_path, capsys
):
    page, run = _page(rp002a_runs, "confirmatory")
    result = json.loads((run / "summary" / "decisions.json").read_text())
    assert "Confirmatory results" in page
    positions = [page.index(f"<td>{r['contrast']}</td>") for r in result["contrasts"]]
    assert positions == sorted(positions), "decision table in the protocol's order"
    for r in result["contrasts"]:
        assert f"<strong>{r['decision']}</strong>" in page
    for text in (result["assumptions"], result["limitations"], result["rationale"]):
        assert text.replace("'", "&#x27;") in page
    assert f"dashed lines at ±{result['margin_nats']:g}" in page
    # forest plot, per-replicate strip plot, training curves, reliability diagrams
    assert page.count("<img ") == 4
    path = tmp_path / "confirmatory.html"
    path.write_text(page, encoding="utf-8")
    _browser(path, tmp_path, capsys)


@pytest.mark.slow
def test_target_variance_and_config_reports(rp002a_runs, tmp_path, capsys):
    page, run = _page(rp002a_runs, "target-variance")
    summary = json.loads((run / "summary" / "variance_summary.json").read_text())
    assert "Target-variance results" in page and summary["note"] in page
    for row in summary["contrasts"]:
        values = ", ".join(f"{v['value']:+.5f}" for v in row["per_replicate"])
        assert values in page
    assert page.count("<img ") == 3, "strip plot, training curves, reliability diagrams"
    assert page.count("<tr><td>") >= len(summary["training_flags"])
    config_page, config_run = _page(rp002a_runs, "confirmatory-config")
    config = json.loads((config_run / "summary" / "CONFIRMATORY_CONFIG.json").read_text())
    assert f"<dd>{config['branch']}</dd>" in config_page
    for candidate in config["candidates"]:
        assert f'<td class="num" data-sort="{candidate["n"]}">{candidate["n"]}</td>' in config_page
    path = tmp_path / "target-variance.html"
    path.write_text(page, encoding="utf-8")
    _browser(path, tmp_path, capsys)


@pytest.mark.slow
def test_the_index_shows_the_confirmatory_runs_decisions_as_its_result(rp002a_runs):
    root = rp002a_runs.parent
    rows = {r["stage"]: r for r in index_rows(root, every_run(root), audit="none")}
    _, run = _page(rp002a_runs, "confirmatory")
    contrasts = json.loads((run / "summary" / "decisions.json").read_text())["contrasts"]
    assert rows["confirmatory"]["headline"] == "; ".join(
        f"{c['contrast']}: {c['decision']}" for c in contrasts
    )
    assert rows["calibration"]["headline"] is None  # a kind without a headline
