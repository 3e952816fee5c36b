"""Drawing a report's plot: the figure (PNG, SVG) and the CSV of its numbers.

One panel per (row, column) value, one colour per hue value; in each, the
simulated means as a line with their interval as a band (for fewer trials
than a bootstrap needs, the band is the trials' range and the trials are
drawn as dots; item by item, each item is a dot), and each model of the
protocol in the same colour, dashed (the protocol's own model) or dotted
([Wang19]'s eq. (5)).  The legend names the interval method and the models.
An axis is logarithmic only when its values are positive and span at least
a decade, and never for a share (recall, discovery, F1, ...).  Lines of
different kinds of ε (central user-level, local, none) are told apart by
their marker and legend, and an ε axis is named by the kind it holds
("ε, central (user-level)", "ε, local"); no line joins two kinds (the
report refuses it).  The CSV holds every point: its keys, the kind of ε
(``privacy``), ``mean, low, high, method, trials``, the item-trials behind
a discovery rate, and each model's prediction at the point.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .analytic import EQ5, PREDICTED
from .sweep_intervals import METHODS, RANGE
from .sweep_plots import EPSILON_AXES, NO_PRIVACY, PRIVACY_MARKERS, PRIVACY_SYMBOLS
from .sweep_tables import DISCOVERY, RECALL_AT

if TYPE_CHECKING:
    from .sweep_plots import Plot

MARKED = 30  # curves with at most this many points show a marker at each
WRAP = 3  # panels per line when only --col splits them
MODEL_STYLES = {PREDICTED: "--", EQ5: ":"}
SHARES = {DISCOVERY, "recall", "precision", "f1", "ncr"}  # metrics in [0, 1]: never on a log axis
LABELS = {
    "population.users": "users n",
    "privacy.epsilon": "target ε",
    "privacy.delta": "target δ",
    "population.words_per_user": "words per user",
    "protocol.unit_size": "unit size",
    "protocol.name": "protocol",
    "population.per_user": "words a user keeps",
    "population.concentration": "concentration α (0: independent)",
    "protocol.top_k": "k (values reported)",
    "protocol.oracle": "oracle",
    "protocol.segment_length": "η",
    "population.path": "population",
    "epsilon": "ε",
    "delta": "δ",
    "n": "users n",
    "k": "K (true top K)",
    "frequency": "true frequency (share of users)",
    DISCOVERY: "discovery rate",
    "recall": "recall of the true top K",
    "f1": "F1",
    "ncr": "NCR",
    "precision": "precision",
    "wall_s": "seconds per trial",
    "user_bits": "bits a user sends",
    "user_bits_max": "most bits a user sends",
    "server_s": "server seconds",
    "shards_s": "shards' seconds",
}


def render(plot: Plot, folder: Path) -> list[Path]:
    """Draw ``plot`` into ``folder`` as PNG and SVG, with its numbers as CSV; the files written."""
    import matplotlib.pyplot as plt

    figure = draw(plot)
    paths = [folder / f"{plot.stem}.{kind}" for kind in ("png", "svg")]
    for path in paths:
        figure.savefig(path, bbox_inches="tight")
    plt.close(figure)
    return [*paths, write_csv(plot, folder / f"{plot.stem}.csv")]


def write_csv(plot: Plot, path: Path) -> Path:
    """Every point of ``plot``: its keys, mean, interval, method, trials, and each model there."""
    roles = [(role, key) for role, key in (("row", plot.row), ("col", plot.col), ("hue", plot.hue)) if key]
    extras = [
        name
        for name in ("item", "bin_low", "bin_high", "found", "item_trials")
        if any(name in curve.extra for curve in plot.curves)
    ]
    before = [name for name in extras if name in ("item", "bin_low", "bin_high")]
    after = [name for name in extras if name not in before]
    models = list(plot.model_labels)
    kinds = ["privacy"] if plot.privacy_kinds else []
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                *(key for _, key in roles),
                *kinds,
                plot.x,
                *before,
                "mean",
                "low",
                "high",
                "method",
                "trials",
                *after,
                *(f"model: {name}" for name in models),
            ]
        )
        for curve in plot.curves:
            by_label = {line.label: line.at_points for line in curve.models}
            interval = curve.interval
            for j in range(curve.x.size):
                writer.writerow(
                    [
                        *(_cell(getattr(curve, role)) for role, _ in roles),
                        *([curve.privacy] if kinds else []),
                        _cell(curve.x[j]),
                        *(_cell(curve.extra[name][j]) for name in before),
                        _cell(interval.mean[j]),
                        _cell(interval.low[j]),
                        _cell(interval.high[j]),
                        interval.method[j],
                        int(interval.trials[j]),
                        *(_cell(curve.extra[name][j]) for name in after),
                        *(_cell(by_label[name][j]) if name in by_label else "" for name in models),
                    ]
                )
    return path


def draw(plot: Plot) -> Any:
    """The matplotlib figure of ``plot``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullLocator

    row_values = list(dict.fromkeys(curve.row for curve in plot.curves))
    col_values = list(dict.fromkeys(curve.col for curve in plot.curves))
    hues = list(dict.fromkeys(curve.hue for curve in plot.curves))
    where: dict[tuple[Any, Any], tuple[int, int]]  # (row value, column value) -> its panel
    if plot.row is None and len(col_values) > WRAP:  # only columns: wrap them
        columns, lines = WRAP, math.ceil(len(col_values) / WRAP)
        where = {(None, c): divmod(i, WRAP) for i, c in enumerate(col_values)}
    else:
        columns, lines = len(col_values), len(row_values)
        where = {(r, c): (i, j) for i, r in enumerate(row_values) for j, c in enumerate(col_values)}
    figure, grid = plt.subplots(
        lines, columns, figsize=(4.6 * columns + 1.2, 3.6 * lines), dpi=110, squeeze=False, sharey=True
    )
    colours = plt.get_cmap("viridis" if len(hues) > 6 else "tab10")
    hue_names = dict(zip(hues, display_names(hues)))
    categorical = not all(isinstance(v, (int, float, np.integer, np.floating)) for c in plot.curves for v in c.x)
    categories = list(dict.fromkeys(v for c in plot.curves for v in c.x)) if categorical else []
    unbinned = plot.x == "frequency" and plot.bins is None
    kinds = plot.privacy_kinds
    mixed = len(kinds) > 1  # lines of different kinds of ε: each marked by its kind
    used: set[tuple[int, int]] = set()
    for curve in plot.curves:
        place = where[(curve.row, curve.col)]
        used.add(place)
        axes = grid[place[0]][place[1]]
        index = hues.index(curve.hue)
        colour = colours(index / max(len(hues) - 1, 1)) if len(hues) > 6 else colours(index % 10)
        x = np.array([categories.index(v) for v in curve.x], dtype=float) if categorical else curve.x.astype(float)
        name = hue_names[curve.hue] if plot.hue else "simulated"
        marker = PRIVACY_MARKERS.get(curve.privacy, "o") if mixed else "o"
        if mixed and curve.privacy:
            name += f" — {'no privacy' if curve.privacy == NO_PRIVACY else 'ε ' + curve.privacy}"
        interval = curve.interval
        if unbinned:
            axes.plot(x, interval.mean, marker, color=colour, ms=2.2, alpha=0.45, label=name)
        else:
            axes.plot(
                x, interval.mean, marker + "-" if x.size <= MARKED else "-", color=colour, ms=3.5, lw=1.4, label=name
            )
            axes.fill_between(x, interval.low, interval.high, color=colour, alpha=0.18, lw=0)
            for j, samples in enumerate(curve.samples):
                if interval.method[j] == RANGE and samples.size:
                    axes.plot(np.full(samples.size, x[j]), samples, ".", color=colour, ms=2.5, alpha=0.6)
        for line in curve.models:
            model_x = (
                np.array([categories.index(v) for v in line.x], dtype=float)
                if categorical
                else np.asarray(line.x, dtype=float)
            )
            order = np.argsort(model_x, kind="stable") if unbinned else np.arange(model_x.size)
            style = MODEL_STYLES.get(line.column, "-.") + ("x" if categorical else "")  # a point each: marked
            axes.plot(model_x[order], np.asarray(line.y, dtype=float)[order], style, color=colour, lw=1.2, ms=5)
    shares = is_share(plot.y)
    for (line_index, column_index), axes in ((place, grid[place[0]][place[1]]) for place in sorted(used)):
        panel_curves = [c for c in plot.curves if where[(c.row, c.col)] == (line_index, column_index)]
        points = sorted({float(v) for c in panel_curves for v in c.x}) if not categorical else []
        if categorical:
            axes.set_xticks(range(len(categories)), display_names(categories))
        elif spans_decade(points):
            axes.set_xscale("log")
        if points and len(points) <= MARKED // 3 and plot.x not in ("frequency", "k"):  # few swept values: label each
            axes.set_xticks(points, [_compact(v) for v in points])
            axes.xaxis.set_minor_locator(NullLocator())
        means = [v for c in plot.curves for v in c.interval.mean if np.isfinite(v)]
        if not shares and spans_decade(means):
            axes.set_yscale("log")
        if shares:
            axes.set_ylim(-0.03, 1.03)
        first = panel_curves[0]
        title = [
            f"{label(key)} = {value_text(value)}"
            for key, value in ((plot.row, first.row), (plot.col, first.col))
            if key
        ]
        if title:
            axes.set_title(", ".join(title), fontsize=10)
        axes.set_xlabel(axis_label(plot))
        axes.grid(True, which="both", alpha=0.25)
    for i in range(lines):
        for j in range(columns):
            if (i, j) not in used:
                grid[i][j].set_visible(False)
        grid[i][0].set_ylabel(label(plot.y))
    legend: dict[str, Any] = {}
    for axes in figure.axes:
        for handle, name in zip(*axes.get_legend_handles_labels()):
            legend.setdefault(name, handle)
    handles = list(legend.values()) if plot.hue else []
    grey = "0.3"
    if unbinned:
        handles.append(
            Line2D([], [], color=grey, marker="o", ls="", ms=3, label="each item: share of its trials found")
        )
    else:
        handles.append(Line2D([], [], color=grey, marker="o", ms=3.5, label="simulated: mean over trials"))
        for method in plot.methods:
            text = METHODS[method]
            handles.append(
                Line2D(
                    [],
                    [],
                    color=grey,
                    lw=6,
                    alpha=0.3,
                    label=("band and dots: " if method == RANGE else "band: ") + text,
                )
            )
    for name, column in plot.model_labels.items():
        handles.append(Line2D([], [], color=grey, ls=MODEL_STYLES.get(column, "-."), label=name))
    if mixed:
        for kind in kinds:
            text = "no privacy (ε ignored)" if kind == NO_PRIVACY else f"ε, {kind}"
            handles.append(Line2D([], [], color=grey, marker=PRIVACY_MARKERS[kind], ls="", ms=4, label=text))
    figure.legend(
        handles=handles,
        loc="center left",
        bbox_to_anchor=(1.0, 0.5),
        fontsize=8,
        frameon=False,
        title=label(plot.hue) or None,
        title_fontsize=8,
        alignment="left",
    )
    heading = f"{label(plot.y)} against {label(plot.x)}"
    if plot.pooled:
        heading += f" (pooled over {', '.join(plot.pooled)})"
    if plot.filters:
        heading += f"; {', '.join(plot.filters)}"
    figure.suptitle(heading, fontsize=11)
    figure.tight_layout()
    return figure


def axis_label(plot: Plot) -> str:
    """The x axis's name; an ε axis says which ε its lines hold (central user-level or local)."""
    if plot.x not in EPSILON_AXES or not plot.privacy_kinds:
        return label(plot.x)
    private = [kind for kind in plot.privacy_kinds if kind != NO_PRIVACY]
    name = "target ε" if plot.x == "privacy.epsilon" else "ε spent"
    if len(private) == 1:
        return f"{name}, {private[0]}"
    if not private:
        return label(plot.x)
    return f"{name}: " + " or ".join(f"{kind} {PRIVACY_SYMBOLS[PRIVACY_MARKERS[kind]]}" for kind in private)


def is_share(metric: str) -> bool:
    """Whether ``metric`` is a share in [0, 1] (drawn on a linear axis from 0 to 1)."""
    return (
        metric in SHARES
        or bool(RECALL_AT.fullmatch(metric))
        or bool(re.fullmatch(r"(predicted_(eq5_)?)?(recall_at_\d+|f1|ncr)", metric))
    )


def spans_decade(values: Sequence[Any]) -> bool:
    """Whether the values are all positive and the largest is at least ten times the smallest."""
    numbers = [float(v) for v in values if isinstance(v, (int, float, np.integer, np.floating))]
    return bool(numbers) and min(numbers) > 0 and max(numbers) / min(numbers) >= 10


def label(key: str | None) -> str:
    """An axis's or a key's name for a reader."""
    if key is None:
        return ""
    if "," in key:
        return " / ".join(label(part) for part in key.split(","))
    match = re.fullmatch(r"(predicted_)?recall_at_(\d+)", key) or RECALL_AT.fullmatch(key)
    if match:
        return f"recall@{match.groups()[-1]}"
    return LABELS.get(key, key)


def value_text(value: Any) -> str:
    """A value for a reader: 20,000, 0.5, pem / flh, a file by its name."""
    if isinstance(value, tuple):
        return " / ".join(value_text(part) for part in value)
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, (float, np.floating)):
        return number(float(value))
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    text = str(value)
    return Path(text).name or text if "/" in text else text


def display_names(values: Sequence[Any]) -> list[str]:
    """:func:`value_text` of each value; values whose short texts would coincide (two files of one
    name) keep their full text."""
    short = [value_text(value) for value in values]
    return [text if short.count(text) == 1 else _full(value) for text, value in zip(short, values)]


def _full(value: Any) -> str:
    if isinstance(value, tuple):
        return " / ".join(_full(part) for part in value)
    return str(value)


def number(value: Any) -> str:
    """A number for a reader: three significant digits, thousands separated, no float noise
    (0.1, 4, 2.3e-12, 21,978); blank for a missing one."""
    if value is None:
        return ""
    number_ = float(value)
    if not math.isfinite(number_):
        return "" if math.isnan(number_) else str(number_)
    if abs(number_) >= 1000:
        return f"{number_:,.0f}"
    text = f"{number_:.3g}"
    return "0" if text in ("0", "-0") else text


def _compact(value: float) -> str:
    """A tick label: 20k, 1.5M, 0.5, 64."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def _cell(value: Any) -> Any:
    """A CSV cell: pairs joined, numpy scalars as Python numbers, NaN blank."""
    if isinstance(value, tuple):
        return " / ".join(map(str, value))
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return ""
    return value
