"""The reports in a real headless browser (Debian's chromium): load without error, every
image decodes, header clicks sort. Skipped, with the reason, where chromium is absent."""

from __future__ import annotations

import pytest
from browser_probe import check_in_browser, needs_chromium
from reportruns import COMPLETE, INCOMPLETE

from prereg.commands.report.render import every_run, index_rows, write_index, write_report

pytestmark = [pytest.mark.software, needs_chromium]


@pytest.mark.parametrize("which", [COMPLETE, INCOMPLETE, "index"])
def test_report_loads_without_error_and_every_image_decodes(which, toy_runs, tmp_path, capsys):
    root = toy_runs.root
    if which == "index":
        page = write_index(root, index_rows(root, every_run(root), audit="none"))
    else:
        page = write_report(root, toy_runs.run_dir(which), audit="none")
    if which == COMPLETE:
        assert "<img " in page.read_text(encoding="utf-8"), "the calibration page has its heat map"
    png = check_in_browser(page, tmp_path)
    with capsys.disabled():
        print(f"\nscreenshot of {page.name}: {png}")
