"""HTML building blocks of the reports: escaped text, sortable tables, the page shell.

The page is self-contained: one file, inline CSS, images as ``data:`` URIs, no network
and no JavaScript framework. Tables are sortable by a few lines of vanilla JavaScript on
a header click; with JavaScript off they are ordinary static tables in their documented
order, so nothing depends on the script.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Union

CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 78em;
       color: #111; line-height: 1.4; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #888; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .6em 0 1.2em; font-size: .9em; }
th, td { border: 1px solid #999; padding: .2em .5em; vertical-align: top; }
th { background: #eee; text-align: left; }
table.sortable th { cursor: pointer; }
table.sortable th::after { content: " \\2195"; color: #777; font-size: .8em; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { font-family: ui-monospace, monospace; font-size: .85em; }
pre { background: #f6f6f6; border: 1px solid #ccc; padding: .6em; overflow-x: auto;
      white-space: pre-wrap; }
.status { font-weight: bold; padding: .1em .4em; border: 2px solid #111; }
.status-complete { border-style: solid; }
.status-incomplete, .status-refused, .status-no-manifest { border-style: dashed; }
.note { border-left: 4px solid #555; padding: .3em .8em; background: #f4f4f4; }
.bad { font-weight: bold; }
div.scroll { overflow-x: auto; max-width: 100%; }
img.plot { max-width: 100%; height: auto; border: 1px solid #ccc; }
dl.kv { display: grid; grid-template-columns: max-content auto; gap: .15em 1em; }
dl.kv dt { font-weight: bold; } dl.kv dd { margin: 0; }
@media print { table.sortable th::after { content: ""; } a { color: #111; } }
"""

# Sorts the rows of a table.sortable by the clicked column: numerically when every
# cell's data-sort (or text) is a number, else as text; a second click reverses.
SORT_SCRIPT = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("thead th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var body = table.tBodies[0], rows = Array.from(body.rows);
      var key = function (r) { var c = r.cells[col];
        return c ? (c.dataset.sort !== undefined ? c.dataset.sort : c.textContent.trim()) : ""; };
      var numeric = rows.every(function (r) { var k = key(r); return k === "" || !isNaN(Number(k)); });
      var dir = th.dataset.dir === "asc" ? -1 : 1; th.dataset.dir = dir === 1 ? "asc" : "desc";
      rows.sort(function (a, b) { var x = key(a), y = key(b);
        return dir * (numeric ? Number(x) - Number(y) : x.localeCompare(y)); });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""


@dataclass(frozen=True)
class Cell:
    """A table cell: its shown text (escaped) or markup, and an optional sort key."""

    text: str
    sort: str | float | None = None
    markup: bool = False  # True: ``text`` is trusted HTML built by this package
    numeric: bool = False


CellLike = Union[Cell, str, int, float, bool, None]


def esc(value: object) -> str:
    """HTML-escape ``str(value)`` (quotes included)."""
    return html.escape(str(value), quote=True)


def fmt(value: object, digits: int = 4) -> str:
    """A number in print: ``digits`` significant digits, ``-`` for None, yes/no for booleans."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _cell(value: CellLike) -> Cell:
    if isinstance(value, Cell):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Cell(fmt(value), sort=value, numeric=True)
    return Cell(fmt(value))


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[CellLike]],
    *,
    caption: str = "",
    sortable: bool = True,
    table_id: str = "",
) -> str:
    """A ``<table>`` with a header row; ``sortable`` adds the click-to-sort class."""
    rows = [list(r) for r in rows]
    for i, row in enumerate(rows):
        if len(row) != len(headers):
            raise ValueError(
                f"table row {i} has {len(row)} cells but there are {len(headers)} headers "
                f"({list(headers)}); give one value per header"
            )
    attrs = ' class="sortable"' if sortable else ""
    attrs += f' id="{esc(table_id)}"' if table_id else ""
    out = [f'<div class="scroll"><table{attrs}>']
    if caption:
        out.append(f"<caption>{esc(caption)}</caption>")
    out.append("<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr></thead>")
    out.append("<tbody>")
    for row in rows:
        cells = []
        for value in row:
            cell = _cell(value)
            attr = ' class="num"' if cell.numeric else ""
            if cell.sort is not None:
                attr += f' data-sort="{esc(cell.sort)}"'
            cells.append(f"<td{attr}>{cell.text if cell.markup else esc(cell.text)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    return "\n".join(out)


def key_values(pairs: Sequence[tuple[str, CellLike]]) -> str:
    """A definition list of label / value pairs (values escaped unless a markup Cell)."""
    out = ['<dl class="kv">']
    for label, value in pairs:
        cell = _cell(value)
        out.append(f"<dt>{esc(label)}</dt><dd>{cell.text if cell.markup else esc(cell.text)}</dd>")
    out.append("</dl>")
    return "\n".join(out)


def value_tree(value: object) -> str:
    """A JSON value drawn as what it is: an object as labelled values (nested objects
    nested), a list of objects as a table, any other list as its values, a scalar as text."""
    if isinstance(value, dict):
        if not value:
            return "<em>(empty)</em>"
        out = ['<dl class="kv">']
        for label, item in value.items():
            out.append(f"<dt>{esc(label)}</dt><dd>{value_tree(item)}</dd>")
        out.append("</dl>")
        return "\n".join(out)
    if isinstance(value, list):
        if value and all(isinstance(item, dict) for item in value):
            headers = list(dict.fromkeys(key for item in value for key in item))
            rows = [
                [Cell(value_tree(item.get(key)), markup=True) for key in headers] for item in value
            ]
            return table(headers, rows)
        return ", ".join(value_tree(item) for item in value) or "<em>(none)</em>"
    return esc(fmt(value))


def image(data_uri: str, alt: str) -> str:
    """An ``<img>`` from a ``data:image/png;base64,...`` URI, with its alternative text."""
    if not data_uri.startswith("data:image/"):
        raise ValueError(
            f"image data_uri must be a data:image/... URI (self-contained page), got {data_uri[:40]!r}"
        )
    return f'<img class="plot" src="{data_uri}" alt="{esc(alt)}">'


def section(title: str, body: str, *, section_id: str = "") -> str:
    ident = f' id="{esc(section_id)}"' if section_id else ""
    return f"<section{ident}>\n<h2>{esc(title)}</h2>\n{body}\n</section>"


def details(summary: str, body: str) -> str:
    return f"<details><summary>{esc(summary)}</summary>\n{body}\n</details>"


def paragraph(text: str, *, css: str = "") -> str:
    cls = f' class="{esc(css)}"' if css else ""
    return f"<p{cls}>{esc(text)}</p>"


def pre(text: str) -> str:
    return f"<pre>{esc(text)}</pre>"


def page(title: str, body: str, *, generated: str) -> str:
    """The whole self-contained document."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'\">\n"
        f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        f"{body}\n"
        f'<footer><p class="note">Generated by <code>prereg report</code> at {esc(generated)}. '
        "This page is derived from the run folder and can be regenerated; the manifest is the "
        "record.</p></footer>\n"
        f"<script>{SORT_SCRIPT}</script>\n</body>\n</html>\n"
    )
