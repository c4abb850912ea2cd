"""A real headless browser (Debian's chromium) loading a report: errors, images, sorting."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

CHROMIUM_PATH = Path("/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(
    not CHROMIUM_PATH.exists(),
    reason="/usr/bin/chromium is absent: install Debian's browser (apt-get install -y chromium)",
)

CHROMIUM = [
    str(CHROMIUM_PATH),
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# Injected first in <head>: records uncaught errors, then on load counts decoded images and
# clicks the first header of every sortable table, checking the column came out ordered.
PROBE = """<script>
window.__errors = [];
window.addEventListener("error", function (e) { window.__errors.push(String(e.message)); });
window.addEventListener("load", function () {
  var images = Array.from(document.images);
  var decoded = images.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  var tables = Array.from(document.querySelectorAll("table.sortable")), ordered = 0;
  tables.forEach(function (t) {
    t.tHead.rows[0].cells[0].click();
    var keys = Array.from(t.tBodies[0].rows).map(function (r) {
      var c = r.cells[0]; return c.dataset.sort !== undefined ? c.dataset.sort : c.textContent.trim(); });
    var numeric = keys.every(function (k) { return k === "" || !isNaN(Number(k)); });
    var ok = keys.every(function (k, i) { return i === 0 ||
      (numeric ? Number(keys[i - 1]) <= Number(k) : keys[i - 1].localeCompare(k) <= 0); });
    if (ok) { ordered += 1; }
  });
  document.title = "probe images=" + decoded + "/" + images.length + " errors=" +
    window.__errors.length + " sorted=" + ordered + "/" + tables.length;
});
</script>"""


def browse(page: Path, tmp_path: Path) -> tuple[str, str]:
    """The probe's title and chromium's log for ``page`` (loaded from a probed copy)."""
    probed = tmp_path / f"probed-{page.name}"
    probed.write_text(page.read_text(encoding="utf-8").replace("<head>", "<head>\n" + PROBE, 1))
    done = subprocess.run(
        CHROMIUM
        + [
            f"--user-data-dir={tmp_path / 'profile'}",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=5000",
            "--dump-dom",
            probed.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    title = re.search(r"<title>(probe [^<]*)</title>", done.stdout)
    assert title, f"chromium did not run the probe (exit {done.returncode}):\n{done.stderr[-3000:]}"
    return title.group(1), done.stderr


def screenshot(page: Path, tmp_path: Path) -> Path:
    png = tmp_path / f"{page.stem}.png"
    subprocess.run(
        CHROMIUM
        + [
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={png}",
            "--window-size=1280,2000",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "no screenshot written"
    return png


def check_in_browser(page: Path, tmp_path: Path) -> Path:
    """Assert the page loads with no error, every image decodes, every sortable table sorts;
    returns the screenshot's path."""
    html = page.read_text(encoding="utf-8")
    images = html.count("<img ")
    tables = html.count('<table class="sortable"')
    title, log = browse(page, tmp_path)
    assert title == f"probe images={images}/{images} errors=0 sorted={tables}/{tables}", title
    console = [line for line in log.splitlines() if ":CONSOLE" in line]
    assert not console, console
    return screenshot(page, tmp_path)
