"""The report's building blocks: escaping, tables, plots, peak memory, section registry."""

from __future__ import annotations

import base64
import io
import struct
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from prereg.commands.report.header import consumed_run_link
from prereg.kinds.report import html as h
from prereg.kinds.report import plots
from prereg.kinds.report.model import RunRecord, missing_items, peak_memory
from prereg.kinds.report.sections import SectionContext, section_for
from prereg.records.runs import valid_run_id

pytestmark = pytest.mark.software


class _Cells(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.cells: list[str] = []
        self.tags: list[str] = []
        self._in = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag in ("td", "th"):
            self._in = True
            self.cells.append("")

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._in = False

    def handle_data(self, data):
        if self._in:
            self.cells[-1] += data


texts = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=30)


@given(st.lists(st.lists(texts, min_size=2, max_size=2), max_size=5), texts, texts)
def test_table_cells_read_back_exactly_whatever_the_text(rows, head1, head2):
    parser = _Cells()
    parser.feed(h.table([head1, head2], rows))
    assert parser.cells == [head1, head2] + [c for row in rows for c in row]
    assert set(parser.tags) <= {"div", "table", "thead", "tbody", "tr", "th", "td"}, (
        "no injected markup"
    )


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)

    def handle_data(self, data):
        self.text.append(data)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=10,
)


def _strings(value) -> list[str]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


@given(json_values)
def test_a_value_tree_shows_every_key_and_text_and_injects_no_markup(value):
    """A nested summary or plan parameters drawn as what they are: every key and string
    reads back from the page's text, and no text becomes markup."""
    parser = _Text()
    parser.feed(h.value_tree(value))
    shown = "".join(parser.text)
    for text in _strings(value):
        assert text in shown
    allowed = {"dl", "dt", "dd", "em", "div", "table", "thead", "tbody", "tr", "th", "td"}
    assert parser.tags <= allowed, parser.tags


def test_a_value_tree_nests_objects_and_tabulates_a_list_of_objects():
    drawn = h.value_tree({"rule": {"below": -0.01}, "runs": [{"id": "a", "n": 2}]})
    assert drawn.index("<dt>rule</dt>") < drawn.index("<dt>below</dt>")  # nested, not flattened
    assert "<th" in drawn and ">id<" in drawn and ">n<" in drawn


def test_table_refuses_a_row_of_the_wrong_length():
    with pytest.raises(ValueError, match=r"table row 1 has 1 cells but there are 2 headers"):
        h.table(["a", "b"], [[1, 2], [3]])


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_numbers_carry_their_exact_value_as_sort_key(value):
    page = h.table(["x"], [[value]])
    assert f'data-sort="{value}"' in page and 'class="num"' in page
    assert float(page.split('data-sort="')[1].split('"')[0]) == value


def test_fmt_reference_values():
    # hand-written: four significant digits, booleans as words, None as a dash
    assert [h.fmt(0.0012345), h.fmt(True), h.fmt(None), h.fmt(7)] == ["0.001234", "yes", "-", "7"]


def test_image_refuses_anything_but_a_data_uri():
    with pytest.raises(ValueError, match="data_uri must be a data:image"):
        h.image("https://example.org/plot.png", "plot")


def _png_size(uri: str) -> tuple[int, int]:
    data = base64.b64decode(uri.split(",", 1)[1])
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_png_data_uri_has_the_figure_size_and_no_timestamp():
    figure = plots.new_figure(4.0, 2.0)
    figure.subplots().plot([0, 1], [1, 0])
    uri = plots.png_data_uri(figure)
    assert _png_size(uri) == (400, 200)  # 4 x 2 inches at 100 dpi
    assert uri == plots.png_data_uri(figure), "same figure, same bytes"
    assert b"Software" not in base64.b64decode(uri.split(",", 1)[1])


def test_heatmap_refuses_values_of_the_wrong_shape():
    panel = plots.HeatPanel("p", np.zeros((2, 3)), [["a"] * 3] * 2, np.zeros((2, 3), bool))
    with pytest.raises(ValueError, match=r"shape \(2, 3\), expected \(2, 2\)"):
        plots.annotated_heatmap(
            [panel],
            row_labels=["r1", "r2"],
            col_labels=["c1", "c2"],
            xlabel="x",
            ylabel="y",
            colorbar_label="c",
            vmax=1.0,
            flag_note="",
        )


def test_forest_and_training_plots_render():
    ivs = [
        plots.Interval(f"c{i}", 0.001 * i, 0.001 * i - 0.004, 0.001 * i + 0.004) for i in range(7)
    ]
    forest = plots.forest_plot([("inflated", ivs), ("uninflated", ivs)], margin=0.01, xlabel="nats")
    curves = plots.line_panels(
        [("fit", [plots.Series("train", [1, 2, 3], [3, 2, 1], marked_x=2)])],
        xlabel="epoch",
        ylabel="loss (nats)",
        mark_label="selected epoch",
    )
    for figure in (forest, curves):
        width, height = _png_size(plots.png_data_uri(figure))
        assert width > 100 and height > 50
    assert forest.axes[0].get_xlabel() == "nats"


items = st.lists(
    st.fixed_dictionaries(
        {
            "nodeid": st.text(min_size=1, max_size=8),
            "peak_rss_bytes": st.integers(0, 2**40),
            "peak_rss_scope": st.sampled_from(["item", "process lifetime"]),
        }
    ),
    max_size=8,
)


@given(items, st.integers(0, 3))
def test_peak_memory_is_the_max_over_items_with_its_scopes(records, unmeasured):
    records = records + [{"nodeid": "no rss"}] * unmeasured
    peak = peak_memory(tuple(records))
    measured = [r for r in records if "peak_rss_bytes" in r]
    if not measured:
        assert peak is None
        return
    assert peak.bytes == max(r["peak_rss_bytes"] for r in measured)
    assert any(r["nodeid"] == peak.nodeid and r["peak_rss_bytes"] == peak.bytes for r in measured)
    assert set(peak.scopes) == {r["peak_rss_scope"] for r in measured}


@given(st.lists(st.sampled_from(["passed", "failed", "error", "not run", "skipped"]), max_size=10))
def test_missing_items_counts_what_did_not_pass(outcomes):
    records = tuple(
        {"nodeid": f"t[{i}]", "outcome": o, "phases": {} if o == "not run" else {"setup": "passed"}}
        for i, o in enumerate(outcomes)
    )
    record = RunRecord("r", Path("."), "s", "incomplete", {}, {"expected_items": 10}, records)
    missing = missing_items(record)
    assert missing.passed == outcomes.count("passed")
    assert len(missing.not_passed) == len(outcomes) - outcomes.count("passed")
    assert missing.present == len(outcomes) - outcomes.count("not run")
    assert missing.expected == 10


def test_a_kind_renders_its_own_section_and_an_unknown_or_silent_kind_none():
    from prereg.kinds.stages import BUILT_IN_KINDS, StageKind, load_kind, register_kind

    def renderer(context: SectionContext) -> str:
        return "<section>custom</section>"

    register_kind(StageKind(name="report-check.custom", render=renderer))
    register_kind(StageKind(name="report-check.silent"))
    assert section_for("report-check.custom") is renderer
    assert section_for("report-check.silent") is None  # header and items only
    assert section_for("report-check.unknown") is None
    assert section_for("plain") is None
    assert section_for(None) is None
    for name in BUILT_IN_KINDS:  # every project kind renders its own section
        assert section_for(name) is load_kind(name).render is not None, name


def test_sort_script_and_page_need_no_network():
    page = h.page("t", h.table(["a"], [[1]]), generated="now")
    assert "default-src 'none'" in page and "img-src data:" in page
    assert "http://" not in page and "https://" not in page
    assert io.StringIO(page).read().count("<script>") == 1


@given(st.text(max_size=40))
def test_a_consumed_run_links_to_its_report_only_when_its_id_is_a_run_id(text):
    linked = consumed_run_link("calibration-20261009-001")
    assert linked.text == '<a href="calibration-20261009-001.html">calibration-20261009-001</a>'
    assert linked.markup
    if not valid_run_id(text):
        assert consumed_run_link(text) == text  # shown as recorded, never a path
