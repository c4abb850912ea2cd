"""Report plots: matplotlib's Agg canvas (no pyplot, no display), embedded as PNG data URIs.

matplotlib is imported when a figure is made, not with this module (:mod:`prereg.api`
exports it as ``plots``, and importing the API must stay light).

Readable in print: every axis labelled with its unit, values written into heat-map cells,
series told apart by marker and line style as well as colour, a colour map whose
lightness is monotone (viridis) so grey-scale print keeps the order.
"""

from __future__ import annotations

import base64
import io
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", ":", "-.")
DPI = 100


def new_figure(width: float, height: float) -> Figure:
    """A figure on its own Agg canvas (inches)."""
    # matplotlib: heavy, only for plots (import prereg.api does not load it)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def png_data_uri(figure: Figure) -> str:
    """The figure as ``data:image/png;base64,...`` (no timestamp or software metadata)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


@dataclass(frozen=True)
class HeatPanel:
    """One panel of an annotated heat map: a matrix with its row and column labels."""

    title: str
    values: np.ndarray  # rows x columns; NaN: no value
    annotations: Sequence[Sequence[str]]  # text written into each cell
    flagged: np.ndarray  # bool, rows x columns: hatched and marked (e.g. over a threshold)


def annotated_heatmap(
    panels: Sequence[HeatPanel],
    *,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    xlabel: str,
    ylabel: str,
    colorbar_label: str,
    vmax: float,
    flag_note: str,
) -> Figure:
    """Heat maps stacked vertically, sharing one colour scale, each cell's value written in it.

    Flagged cells get a thick dashed frame and carry a "!", so the flag survives grey-scale print.
    """
    if not panels:
        raise ValueError("annotated_heatmap needs at least one panel; got panels=[]")
    for panel in panels:
        if panel.values.shape != (len(row_labels), len(col_labels)):
            raise ValueError(
                f"panel {panel.title!r} has values of shape {panel.values.shape}, expected "
                f"({len(row_labels)}, {len(col_labels)}) from row_labels and col_labels"
            )
    width = 2.2 + 0.72 * len(col_labels)
    figure = new_figure(max(width, 6.0), 0.6 + len(panels) * (1.9 + 0.5 * len(row_labels)))
    axes = figure.subplots(len(panels), 1, squeeze=False)[:, 0]
    mesh = None
    for ax, panel in zip(axes, panels):
        mesh = ax.imshow(
            np.ma.masked_invalid(panel.values), cmap="viridis", vmin=0.0, vmax=vmax, aspect="auto"
        )
        for i in range(len(row_labels)):
            for j in range(len(col_labels)):
                value = panel.values[i, j]
                dark = np.isfinite(value) and value < 0.55 * vmax
                text = panel.annotations[i][j] + ("\n!" if panel.flagged[i, j] else "")
                ax.text(
                    j,
                    i,
                    text,
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if dark else "black",
                    fontweight="bold" if panel.flagged[i, j] else "normal",
                )
                if panel.flagged[i, j]:
                    ax.add_patch(_flag_frame(j, i))
        ax.set_xticks(range(len(col_labels)), col_labels, rotation=90, fontsize=7)
        ax.set_yticks(range(len(row_labels)), row_labels, fontsize=8)
        ax.set_title(panel.title, fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
    bar = figure.colorbar(mesh, ax=list(axes), shrink=0.9)
    bar.set_label(colorbar_label, fontsize=8)
    if flag_note:
        chars = int(figure.get_figwidth() * 14)  # about 14 characters per inch at 8 pt
        figure.suptitle("\n".join(textwrap.wrap(flag_note, chars)), fontsize=8)
    return figure


def _flag_frame(x: float, y: float):
    # matplotlib: heavy, only for plots (import prereg.api does not load it)
    from matplotlib.patches import Rectangle

    return Rectangle(
        (x - 0.46, y - 0.44),
        0.92,
        0.88,
        fill=False,
        edgecolor="black",
        linewidth=2.2,
        linestyle="--",
    )


@dataclass(frozen=True)
class Series:
    """One line of a line plot."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    marked_x: float | None = None  # a point to mark (e.g. the selected epoch)


def _panel_grid(count: int, columns: int, *, width: float, height: float, margin: float):
    """``count`` small multiples in at most ``columns`` columns (sizes in inches per panel)."""
    columns = max(1, min(columns, count))
    rows = -(-count // columns)
    figure = new_figure(width * columns + margin, height * rows + 0.4)
    axes = figure.subplots(rows, columns, squeeze=False)
    for index in range(count, rows * columns):  # the grid's unused trailing panels
        axes[index // columns][index % columns].set_visible(False)
    return figure, axes, columns


def line_panels(
    panels: Sequence[tuple[str, Sequence[Series]]],
    *,
    xlabel: str,
    ylabel: str,
    columns: int = 3,
    mark_label: str = "",
    ylog: bool = False,
) -> Figure:
    """Small multiples of line plots; series differ by line style and marker, not colour only."""
    if not panels:
        raise ValueError("line_panels needs at least one panel; got panels=[]")
    figure, axes, columns = _panel_grid(len(panels), columns, width=3.6, height=2.6, margin=0.6)
    for index, (title, series) in enumerate(panels):
        ax = axes[index // columns][index % columns]
        for k, s in enumerate(series):
            x, y = np.asarray(s.x, dtype=float), np.asarray(s.y, dtype=float)
            every = max(1, len(x) // 12)
            ax.plot(
                x,
                y,
                linestyle=LINESTYLES[k % len(LINESTYLES)],
                marker=MARKERS[k % len(MARKERS)],
                markevery=every,
                markersize=3.5,
                linewidth=1.2,
                label=s.label,
            )
            if s.marked_x is not None:
                ax.axvline(s.marked_x, color="black", linestyle=":", linewidth=1.0)
        if ylog:
            ax.set_yscale("log")
        ax.set_title(title, fontsize=8)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, linewidth=0.3)
        handles, labels = ax.get_legend_handles_labels()
        if mark_label and any(s.marked_x is not None for s in series):
            # matplotlib: heavy, only for plots (import prereg.api does not load it)
            from matplotlib.lines import Line2D

            handles.append(Line2D([], [], color="black", linestyle=":"))
            labels.append(mark_label)
        ax.legend(handles, labels, fontsize=6.5)
    return figure


@dataclass(frozen=True)
class Interval:
    """One row of a forest plot: an estimate and a two-sided interval."""

    label: str
    estimate: float
    low: float
    high: float


def forest_plot(
    groups: Sequence[tuple[str, Sequence[Interval]]],
    *,
    margin: float,
    xlabel: str,
) -> Figure:
    """Intervals per row, one style per group (e.g. inflated / uninflated), with ±margin lines.

    Rows keep the given order top to bottom (the protocol's order of the family).
    """
    if not groups or not groups[0][1]:
        raise ValueError("forest_plot needs at least one group with one interval")
    labels = [iv.label for iv in groups[0][1]]
    figure = new_figure(7.5, 1.0 + 0.42 * len(labels) * max(1, len(groups)) ** 0.5)
    ax = figure.subplots()
    offsets = np.linspace(-0.18, 0.18, len(groups)) if len(groups) > 1 else [0.0]
    for k, ((name, intervals), offset) in enumerate(zip(groups, offsets)):
        y = np.arange(len(intervals))[::-1] + offset
        est = np.array([iv.estimate for iv in intervals])
        low = np.array([iv.low for iv in intervals])
        high = np.array([iv.high for iv in intervals])
        ax.errorbar(
            est,
            y,
            xerr=[est - low, high - est],
            fmt=MARKERS[k % len(MARKERS)],
            linestyle="none",
            capsize=3,
            linewidth=1.2 if k else 2.0,
            label=name,
            mfc="white" if k else None,
        )
    for x, style in ((-margin, "--"), (margin, "--"), (0.0, ":")):
        ax.axvline(x, color="black", linestyle=style, linewidth=0.9)
    ax.set_yticks(np.arange(len(labels))[::-1], labels, fontsize=8)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.text(
        -margin, 1.01, f"-{margin:g}", transform=ax.get_xaxis_transform(), ha="center", fontsize=7
    )
    ax.text(
        margin, 1.01, f"+{margin:g}", transform=ax.get_xaxis_transform(), ha="center", fontsize=7
    )
    ax.legend(fontsize=7, loc="best")
    ax.grid(True, axis="x", linewidth=0.3)
    return figure


def reliability_panels(
    panels: Sequence[
        tuple[str, Sequence[tuple[str, Sequence[float | None], Sequence[float | None]]]]
    ],
    *,
    columns: int = 3,
) -> Figure:
    """Reliability diagrams: accuracy against mean top-label confidence per bin, diagonal drawn.

    Each panel holds series ``(label, mean_confidence_per_bin, accuracy_per_bin)``; empty bins
    (None) are left out.
    """
    series_panels = []
    for title, series in panels:
        lines = []
        for label, conf, acc in series:
            keep = [(c, a) for c, a in zip(conf, acc) if c is not None and a is not None]
            lines.append(Series(label, [c for c, _ in keep], [a for _, a in keep]))
        lines.append(Series("perfect calibration", [0.0, 1.0], [0.0, 1.0]))
        series_panels.append((title, lines))
    figure = line_panels(
        series_panels,
        xlabel="mean top-label confidence (probability)",
        ylabel="accuracy (fraction)",
        columns=columns,
    )
    for ax in figure.axes:
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
    return figure


@dataclass(frozen=True)
class FitCurve:
    """One fit's per-epoch losses and its selected (minimum-validation) epoch."""

    label: str
    epochs: Sequence[int]
    train: Sequence[float]
    validation: Sequence[float]
    best_epoch: int


def fit_curve_panels(
    panels: Sequence[tuple[str, Sequence[FitCurve]]], *, ylabel: str, columns: int = 2
) -> Figure:
    """Per panel every fit: train dashed, validation solid, the selected epoch a black dot."""
    if not panels:
        raise ValueError("fit_curve_panels needs at least one panel; got panels=[]")
    # matplotlib: heavy, only for plots (import prereg.api does not load it)
    from matplotlib.lines import Line2D

    figure, axes, columns = _panel_grid(len(panels), columns, width=4.6, height=2.8, margin=0.4)
    for index, (title, fits) in enumerate(panels):
        ax = axes[index // columns][index % columns]
        for k, fit in enumerate(fits):
            line = ax.plot(fit.epochs, fit.validation, linewidth=1.0)[0]
            ax.plot(fit.epochs, fit.train, linewidth=0.8, linestyle="--", color=line.get_color())
            if fit.best_epoch in list(fit.epochs):
                y = fit.validation[list(fit.epochs).index(fit.best_epoch)]
                ax.plot([fit.best_epoch], [y], marker="o", color="black", markersize=4)
        ax.set_title(f"{title} ({len(fits)} fits)", fontsize=8)
        ax.set_xlabel("epoch", fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, linewidth=0.3)
        ax.legend(
            [
                Line2D([], [], color="grey", linestyle="--"),
                Line2D([], [], color="grey"),
                Line2D([], [], color="black", marker="o", linestyle="none"),
            ],
            ["train", "validation", "selected epoch"],
            fontsize=6.5,
        )
    return figure


def strip_plot(
    rows: Sequence[tuple[str, Sequence[float]]], *, margin: float | None, xlabel: str
) -> Figure:
    """One row per label (top to bottom in the given order), one open circle per value."""
    if not rows:
        raise ValueError("strip_plot needs at least one row; got rows=[]")
    figure = new_figure(7.5, 1.0 + 0.38 * len(rows))
    ax = figure.subplots()
    for i, (label, values) in enumerate(rows):
        y = len(rows) - 1 - i
        ax.plot(
            values,
            [y] * len(values),
            linestyle="none",
            marker="o",
            mfc="white",
            color="black",
            markersize=5,
        )
    if margin is not None:
        for x in (-margin, margin):
            ax.axvline(x, color="black", linestyle="--", linewidth=0.9)
    ax.axvline(0.0, color="black", linestyle=":", linewidth=0.8)
    ax.set_yticks(range(len(rows))[::-1], [label for label, _ in rows], fontsize=8)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.grid(True, axis="x", linewidth=0.3)
    return figure
