"""``fedhh report``: plots and a Markdown summary of a sweep's tables.

A plot shows a metric (``--y``) against one key (``--x``), one line per
value of a second (``--hue``) and one panel per value of a third and a
fourth (``--col``, ``--row``): at each point the mean over the trials with
its interval (:mod:`simulations.sweep_intervals` says which and why), and,
in the same axes and colour, what each of the protocol's models predicts
(:mod:`simulations.analytic`).  Nothing is pooled unless asked: every key
the sweep varies must be on one of the plot's axes, fixed
(``--where KEY=VALUE``) or pooled by name (``--pool KEY``), or the report is
refused, naming it.  Without ``--x``, the axes are chosen: the key with the
most values on x, then hue, columns and rows.  Two axes come from the
per-item table:

* ``--x k``: recall of the true top K against K ([Zhu20] Figs. 6, 8, 9);
* ``--x frequency``: the share of item-trials found against the items' true
  frequency, in bins of ``--bins N`` per decade (default 4) or item by item
  (``--bins none``) ([Zhu20] Figs. 5, 7; [Wang19] Fig. 2), beside TrieHH's
  worst-case bound at the run's θ, m and L; ``summary.md`` adds, read item
  by item, where the runs and each model reach 50% and 90%
  (:mod:`simulations.sweep_crossings`).

``--y discovery`` is the share of the tracked true top items found, or, with
``--frequency F``, of the items whose true frequency is within a factor 1.1
of F ([Zhu20] Fig. 3, beside the bound at F over the whole x range);
``--y recall@K`` the share of the true top K found, for any K the items table
reaches.  Every plot is written as PNG and SVG with its numbers in a CSV
beside them (:mod:`simulations.sweep_figures`); ``summary.md`` tables every
grid point: its privacy (ε spent, δ, the LDP reports' ε once shuffled, and
TrieHH's θ and m) and the mean and
interval of each headline metric.

A report goes into a folder of its own (by default ``DIR/report``), claimed
as every fedhh output is (:class:`fedhh.results.ResultsFolder`): a new or
empty folder, or a previous report, which is replaced whole, its files
removed only because its marker lists them; any other folder, the sweep
folder itself or a folder holding anything else (a file of the user's, a
symbolic link) is refused before anything is drawn.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedhh.config import Scalar, build_config
from fedhh.errors import InputError
from fedhh.experiment import item_codec
from fedhh.results import OutputError, ResultsFolder
from fedhh.studies import REPORT_FOLDER

from .analytic import PREDICTED, model_label, triehh_bound, triehh_rate
from .sweep_crossings import LEVELS, model_crossing, simulated_crossing
from .sweep_figures import label, number, render, value_text
from .sweep_intervals import METHODS, RANGE, Interval, binomial, over_trials
from .sweep_plots import (
    BINS_PER_DECADE,
    CENTRAL,
    FREQUENCY_AXIS,
    K_AXIS,
    LOCAL,
    SHUFFLED,
    Curve,
    ModelLine,
    Plot,
    privacy_kind,
)
from .sweep_tables import DISCOVERY, RECALL_AT, SweepTables
from .sweep_trial import RECALL_KS

REPORT_KIND = "report"  # the kind its marker records: a later report replaces it
RECALL = "recall"
FREQUENCY_BAND = 1.1  # --frequency F selects items with true frequency in [F / 1.1, 1.1 F]
DENSE = 120  # points of an analytic curve drawn over a continuous axis
SUMMARY_METRICS = ("recall_at_10", "precision", "f1", "ncr", "discovered", "rounds", "user_bits", "server_s", "wall_s")
# ε spent, δ, the LDP reports' central ε once shuffled (at the same δ), θ, m
PRIVACY_COLUMNS = ("epsilon", "delta", "shuffle_epsilon", "param.theta", "param.batch_size")
TRIEHH_CURVE_KEYS = ("population.users", "privacy.epsilon", "privacy.delta")


@dataclass(frozen=True)
class PlotRequest:
    """The axes of one plot."""

    x: str
    y: str
    hue: str | None = None
    row: str | None = None
    col: str | None = None


@dataclass
class Report:
    """What :func:`write_report` wrote."""

    folder: Path
    files: list[Path]
    plots: list[Plot]
    trials: int  # successful trials behind the plots (after --where)
    failed: int  # failed trials in the sweep's table

    def to_dict(self) -> dict[str, Any]:
        return {
            "folder": str(self.folder),
            "files": [str(path) for path in self.files],
            "summary": str(self.folder / "summary.md"),
            "trials": self.trials,
            "failed_trials": self.failed,
            "plots": [
                {
                    "name": plot.stem,
                    "x": plot.x,
                    "y": plot.y,
                    "hue": plot.hue,
                    "row": plot.row,
                    "col": plot.col,
                    "pooled": plot.pooled,
                    "where": plot.filters,
                    "intervals": plot.methods,
                    "models": list(plot.model_labels),
                    "files": [str(self.folder / f"{plot.stem}.{kind}") for kind in ("png", "svg", "csv")],
                }
                for plot in self.plots
            ],
        }


def write_report(
    folder: str | Path,
    x: str | None = None,
    y: str | None = None,
    hue: str | None = None,
    row: str | None = None,
    col: str | None = None,
    pool: Sequence[str] = (),
    where: Sequence[str] = (),
    frequency: float | None = None,
    bins: int | None = BINS_PER_DECADE,
    output: str | Path | None = None,
) -> Report:
    """Write the plots (PNG, SVG, CSV) and ``summary.md`` into the report folder (``output``,
    by default ``folder/report``: see :func:`claim_report_folder`)."""
    every = SweepTables(folder)
    if every.count == 0:
        raise InputError(f"folder: {str(every.folder)!r} has no successful trial to plot")
    if frequency is not None and not (math.isfinite(frequency) and 0 < frequency <= 1):
        raise InputError(f"--frequency: a share of users in (0, 1], got {frequency!r}")
    if bins is not None and (isinstance(bins, bool) or not isinstance(bins, int) or bins < 1):
        raise InputError(f"--bins: a whole number of bins per decade >= 1, or none; got {bins!r}")
    tables = every.where(where)
    names: list[str] = []
    with claim_report_folder(tables.folder, output) as report:
        requests, pooled = plan_plots(tables, x, y, hue, row, col, pool)
        if frequency is not None and not any(
            request.y == DISCOVERY and request.x != FREQUENCY_AXIS for request in requests
        ):
            raise InputError("--frequency: selects the items of --y discovery against a key; not used by this plot")
        if bins != BINS_PER_DECADE and not any(request.x == FREQUENCY_AXIS for request in requests):
            raise InputError(f"--bins: the bins of --x {FREQUENCY_AXIS}; not used by this plot")
        plots = [build_plot(tables, request, pooled, frequency, bins) for request in requests]

        def draw_all(staging: Path) -> None:
            for plot in plots:
                names.extend(path.name for path in render(plot, staging))
            names.append(write_summary(tables, plots, staging).name)

        report.commit(None, [draw_all])
    failed = len(every.all_rows.get("trial_key", [])) - every.count
    return Report(report.path, [report.path / name for name in names], plots, tables.count, failed)


def claim_report_folder(sweep_folder: Path, output: str | Path | None) -> ResultsFolder:
    """The report's folder, checked and locked: ``output`` or ``sweep_folder/report``.

    Never the sweep folder itself nor another folder inside it (only the
    default ``report`` lives there, so a sweep can still resume in it); a
    previous report is replaced whole, anything else follows the rules of
    every fedhh output (:class:`fedhh.results.ResultsFolder`).
    """
    sweep = Path(os.path.abspath(sweep_folder))
    default = sweep / REPORT_FOLDER
    destination = Path(os.path.abspath(output)) if output is not None else default
    try:
        resolved, inside = destination.resolve(), sweep.resolve()
        is_default = destination.name == REPORT_FOLDER and destination.parent.resolve() == inside
    except (OSError, RuntimeError) as error:
        raise OutputError(f"--output: cannot resolve {destination} ({error})") from None
    if resolved == inside:
        raise OutputError(
            f"--output: {destination} is the sweep folder itself; a report goes into a folder of its "
            f"own (default: {default})"
        )
    if resolved.is_relative_to(inside) and not is_default:
        raise OutputError(
            f"--output: {destination} is inside the sweep folder {sweep}, where fedhh writes only "
            f"its default report folder {default}; choose a folder outside it"
        )
    return ResultsFolder.claim(destination, overwrite=True, field="--output", kind=REPORT_KIND)


# -- which plots --------------------------------------------------------------------------------


def plan_plots(
    tables: SweepTables,
    x: str | None,
    y: str | None,
    hue: str | None = None,
    row: str | None = None,
    col: str | None = None,
    pool: Sequence[str] = (),
) -> tuple[list[PlotRequest], list[str]]:
    """The plots to draw and the axes pooled on request.

    With ``--x``, the one plot asked for, its roles as given.  Without it,
    the roles not given are filled with the swept axes not yet used, the one
    with the most values first (x, then hue, columns, rows); with ``--y``
    that one plot, else the headline metrics against that key, recall against
    K and discovery against frequency.  Every plot must place every swept
    axis not pooled (:func:`check_placed`).
    """
    pooled = [_pooled_axis(tables, key) for key in pool]
    roles = {flag: _checked(tables, key, flag) for flag, key in (("--hue", hue), ("--row", row), ("--col", col))}
    given = [key for key in roles.values() if key]
    for key in pooled:
        if _overlaps(key, [*given, *([x] if x else [])]):
            raise InputError(f"--pool {key}: already an axis of the plot")
    if x is not None:
        if x not in (K_AXIS, FREQUENCY_AXIS):
            _checked(tables, x, "--x")
        request = PlotRequest(x, y or _default_y(tables, x), roles["--hue"], roles["--row"], roles["--col"])
        check_axes(tables, request)
        check_placed(tables, request, pooled, explicit=True)
        return [request], pooled
    free = [
        axis
        for axis in sorted(tables.swept, key=lambda key: -len(set(tables.column(key))))
        if axis not in pooled and not _overlaps(axis, given)
    ]

    def fill(first: str | None) -> PlotRequest:
        """A plot with x ``first`` (or a special axis) and the roles not given filled in turn."""
        taken = [first] if first else []
        chosen: dict[str, str | None] = {}
        for flag in ("--hue", "--col", "--row"):
            chosen[flag] = axis = roles[flag] or next((axis for axis in free if axis not in taken), None)
            if axis and not roles[flag]:
                taken.append(axis)
        return PlotRequest(first or "", "", chosen["--hue"], chosen["--row"], chosen["--col"])

    first = free[0] if free else None
    if y is not None:
        x_axis = first or K_AXIS
        base = fill(first)
        requests = [PlotRequest(x_axis, y, base.hue, base.row, base.col)]
    else:
        requests = []
        if first is not None:
            base = fill(first)
            requests += [
                PlotRequest(first, metric, base.hue, base.row, base.col)
                for metric in (_default_y(tables, first), "f1", "ncr")
            ]
        items = fill(None)
        requests += [
            PlotRequest(K_AXIS, RECALL, items.hue, items.row, items.col),
            PlotRequest(FREQUENCY_AXIS, DISCOVERY, items.hue, items.row, items.col),
        ]
    for request in requests:
        check_axes(tables, request)
        check_placed(tables, request, pooled, explicit=False)
    return requests, pooled


def _checked(tables: SweepTables, key: str | None, flag: str) -> str | None:
    """``key`` if it names a column (or a zipped group: columns joined by commas)."""
    if key is not None:
        tables.column(key, flag)
    return key


def _default_y(tables: SweepTables, x: str) -> str:
    if x == K_AXIS:
        return RECALL
    if x == FREQUENCY_AXIS:
        return DISCOVERY
    return f"recall_at_{max([k for k in RECALL_KS if k <= min(tables.column('top_k'))] or [RECALL_KS[0]])}"


def _pooled_axis(tables: SweepTables, key: str) -> str:
    swept = tables.swept
    for axis in swept:
        if key == axis or key in axis.split(","):
            return axis
    raise InputError(
        f"--pool {key}: not a key this sweep varies"
        + (f" among the trials --where keeps ({' '.join(tables.filters)})" if tables.filters else "")
        + f"; varied: {swept or 'none'}"
    )


def _typed(value: Any) -> str:
    """A value as ``--where`` reads it back (20000, 4, pem)."""
    return f"{value:g}" if isinstance(value, float) else str(value).lower() if isinstance(value, bool) else str(value)


def _overlaps(axis: str, keys: Sequence[str]) -> bool:
    return bool(set(axis.split(",")) & {part for key in keys for part in key.split(",")})


def check_axes(tables: SweepTables, request: PlotRequest) -> None:
    """Refuse a metric that does not go with its x axis, or a key on two axes."""
    x, y = request.x, request.y
    if x in (K_AXIS, FREQUENCY_AXIS):
        expected = RECALL if x == K_AXIS else DISCOVERY
        if y != expected:
            raise InputError(f"--y {y}: with --x {x} the metric is {expected!r}")
    else:
        tables.column(x, "--x")
        if y == RECALL:
            raise InputError(f"--y {y}: recall against K needs --x {K_AXIS}; against a key use recall@K")
    taken = [x]
    for flag, key in (("--hue", request.hue), ("--col", request.col), ("--row", request.row)):
        if key is not None:
            if _overlaps(key, taken):
                raise InputError(f"{flag} {key}: already an axis of the plot")
            taken.append(key)


def check_placed(tables: SweepTables, request: PlotRequest, pooled: Sequence[str], explicit: bool) -> None:
    """Refuse a plot whose points would mix trials of different values of a swept axis that is
    not pooled by name: each such axis must take one value within each point of the plot."""
    cells = _cells(tables, request)
    mixed: dict[str, list[Any]] = {}
    for axis in tables.swept:
        if axis in pooled:
            continue
        values = tables.column(axis)
        seen: dict[tuple[Any, ...], Any] = {}
        for cell, value in zip(cells, values):
            if seen.setdefault(cell, value) != value:
                mixed[axis] = sorted(set(values), key=_sortable)
                break
    if not mixed:
        return
    named = "; ".join(f"{axis} ({', '.join(value_text(v) for v in values)})" for axis, values in mixed.items())
    first = next(iter(mixed))
    example = first.split(",")[0]
    value = _typed(tables.column(example)[0])
    hint = (
        f"put each on an axis (--hue, --col, --row), fix it (--where {example}={value}) or pool it by name "
        f"(--pool {first})"
    )
    if explicit:
        raise InputError(f"--x {request.x}: the plot would pool trials of different {named}; {hint}")
    raise InputError(f"report: the sweep varies {named} beyond what one plot shows (x, --hue, --col, --row); {hint}")


# -- the numbers of one plot --------------------------------------------------------------------


def build_plot(
    tables: SweepTables,
    request: PlotRequest,
    pooled: Sequence[str] = (),
    frequency: float | None = None,
    bins: int | None = BINS_PER_DECADE,
) -> Plot:
    """The numbers of one plot (means, intervals, models), without drawing it."""
    x, y = request.x, request.y
    check_axes(tables, request)
    groups = _groups(tables, request)
    plot = Plot(
        x,
        y,
        request.hue,
        request.row,
        request.col,
        [],
        _pooled_within(tables, request, pooled),
        list(tables.filters),
        bins if x == FREQUENCY_AXIS else BINS_PER_DECADE,
    )
    kinds = _privacy_kinds(tables, request, groups)
    if x == K_AXIS:
        plot.curves = _recall_by_k(tables, groups)
    elif x == FREQUENCY_AXIS:
        plot.curves = _discovery_by_frequency(tables, groups, bins)
        plot.crossings = _crossings(tables, groups, plot.curves)
    else:
        plot.curves = _metric_by_key(tables, groups, x, y, frequency)
    for curve, kind in zip(plot.curves, kinds, strict=True):
        curve.privacy = kind
    return plot


# Each kind of ε a line may not mix with another: how the refusal names it, and what it protects.
KIND_PROMISES = (
    (CENTRAL, ("central ε", "user-level, the published output")),
    (SHUFFLED, ("the shuffled reports' central ε", "each value, against whoever sees only the shuffled reports")),
    (LOCAL, ("local ε", "each report, against the server")),
)


def _privacy_kinds(tables: SweepTables, request: PlotRequest, groups: list[Group]) -> list[str]:
    """The kind of ε of each line (:func:`~simulations.sweep_plots.privacy_kind`); a line that would
    join trials under two kinds of ε (central, the shuffled reports' central, local) is refused: they are
    different promises."""
    models = tables.rows.get("privacy_model", [None] * tables.count)
    protocols = tables.rows.get("protocol", [None] * tables.count)
    kinds = []
    for *_, rows in groups:
        by_kind: dict[str, set[str]] = {}
        for i in rows.tolist():
            by_kind.setdefault(privacy_kind(models[i]), set()).add(str(protocols[i]))
        promises = [(kind, text) for kind, text in KIND_PROMISES if kind in by_kind]
        if len(promises) > 1:
            roles = [
                f"{flag} {key}"
                for flag, key in (
                    ("--x", request.x),
                    ("--hue", request.hue),
                    ("--col", request.col),
                    ("--row", request.row),
                )
                if key
            ]
            joined = " and under ".join(
                f"{text} ({', '.join(sorted(by_kind[kind]))}: {what})" for (kind, (text, what)) in promises
            )
            raise InputError(
                f"report: a line of this plot ({', '.join(roles)}) would join trials under {joined}, which are "
                "different promises; give each protocol (and privacy model) its own line or panel (--hue "
                "protocol.name, --col protocol.name, --hue privacy.model) or keep one kind (--where protocol.name=...)"
            )
        named = [kind for kind in by_kind if kind]
        kinds.append(named[0] if len(named) == 1 else " / ".join(sorted(named)))
    return kinds


def _pooled_within(tables: SweepTables, request: PlotRequest, pooled: Sequence[str]) -> list[str]:
    """The pooled axes that do vary within some point of this plot."""
    cells = _cells(tables, request)
    within = []
    for axis in pooled:
        seen: dict[tuple[Any, ...], Any] = {}
        if any(seen.setdefault(cell, value) != value for cell, value in zip(cells, tables.column(axis))):
            within.append(axis)
    return within


def _cells(tables: SweepTables, request: PlotRequest) -> list[tuple[Any, ...]]:
    """Per trial, the values that place it in the plot: its x (unless k or frequency), hue, column, row."""
    shown = [
        key for key in (request.x, request.hue, request.col, request.row) if key and key not in (K_AXIS, FREQUENCY_AXIS)
    ]
    return list(zip(*(tables.column(key) for key in shown))) if shown else [()] * tables.count


Group = tuple[Scalar | None, Scalar | None, Scalar | None, np.ndarray]  # row, col, hue values and trial indices


def _groups(tables: SweepTables, request: PlotRequest) -> list[Group]:
    """(row, col, hue values, trial indices) in sorted order of the values."""

    def values(key: str | None, flag: str) -> list[Any]:
        return tables.column(key, flag) if key else [None] * tables.count

    rows, cols, hues = values(request.row, "--row"), values(request.col, "--col"), values(request.hue, "--hue")
    keys = sorted(set(zip(rows, cols, hues)), key=lambda cell: tuple(_sortable(part) for part in cell))
    members: dict[tuple[Any, ...], list[int]] = {}
    for i, cell in enumerate(zip(rows, cols, hues)):
        members.setdefault(cell, []).append(i)
    return [(r, c, h, np.array(members[(r, c, h)], dtype=np.int64)) for r, c, h in keys]


def _sortable(value: Any) -> tuple[Any, ...]:
    if isinstance(value, tuple):
        return tuple(_sortable(part) for part in value)
    if value is None:
        return (2, "")
    return (0, value) if isinstance(value, (int, float)) else (1, str(value))


def _objects(values: Sequence[Any]) -> np.ndarray:
    """A 1-D object array (pairs of a zipped axis stay single cells)."""
    array = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        array[i] = value
    return array


def _by_point(rows: np.ndarray, xs: list[Any], points: list[Any], values: np.ndarray) -> np.ndarray:
    """Trials x points matrix of ``values`` (NaN-padded: points have different trial counts)."""
    columns = [[values[i] for i in rows if xs[i] == point] for point in points]
    depth = max((len(column) for column in columns), default=0)
    matrix = np.full((depth, len(points)), np.nan)
    for j, column in enumerate(columns):
        matrix[: len(column), j] = column
    return matrix


def _samples(matrix: np.ndarray) -> list[np.ndarray]:
    return [column[~np.isnan(column)] for column in matrix.T]


def _model_means(matrix: np.ndarray) -> np.ndarray:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a point without the model: NaN
        return np.nanmean(matrix, axis=0) if matrix.size else np.full(matrix.shape[1], np.nan)


def _protocol(tables: SweepTables, rows: Sequence[int] | np.ndarray) -> str:
    names = sorted({str(tables.rows["protocol"][i]) for i in rows})
    return names[0] if len(names) == 1 else "/".join(names)


def _model_lines(column: str, x: np.ndarray, at_points: np.ndarray, protocols: Sequence[str]) -> list[ModelLine]:
    """A model's prediction at a curve's points, one line per protocol among the points (a curve
    across protocols, such as one against ``protocol.name``, shows each protocol's own model)."""
    lines = []
    for protocol in dict.fromkeys(protocols):
        mine = np.array([p == protocol for p in protocols])
        values = np.where(mine, at_points, np.nan)
        if not np.all(np.isnan(values)):
            lines.append(ModelLine(column, model_label(column, protocol), x, values, values))
    return lines


def _metric_by_key(tables: SweepTables, groups: list[Group], x: str, y: str, frequency: float | None) -> list[Curve]:
    xs = tables.column(x, "--x")
    recall_k = RECALL_AT.fullmatch(y)
    if y == DISCOVERY:
        return _discovery_by_key(tables, groups, x, frequency)
    models: dict[str, np.ndarray] = {}
    if recall_k:
        k = int(recall_k.group(1))
        tables.check_recall_depth(k)
        values = tables.recall_at(k)
        models = {column: tables.recall_at(k, column) for column in tables.item_models}
    else:
        values = tables.numeric(y)
        for column in (PREDICTED, "predicted_eq5"):
            name = f"{column}_{y}"
            if name in tables.rows:
                models[column] = tables.numeric(name)
    curves = []
    for row, col, hue, rows in groups:
        points = sorted({xs[i] for i in rows}, key=_sortable)
        matrix = _by_point(rows, xs, points, values)
        keep = ~np.all(np.isnan(matrix), axis=0)
        points = [p for p, k in zip(points, keep) if k]
        matrix = matrix[:, keep]
        curve = Curve(row, col, hue, _objects(points), over_trials(matrix), _samples(matrix))
        protocols = [_protocol(tables, [i for i in rows if xs[i] == point]) for point in points]
        for column, predicted in models.items():
            at_points = _model_means(_by_point(rows, xs, points, predicted))
            curve.models += _model_lines(column, curve.x, at_points, protocols)
        curves.append(curve)
    return curves


def _discovery_by_key(tables: SweepTables, groups: list[Group], x: str, frequency: float | None) -> list[Curve]:
    """Per point, the share of the item-trials found (within the frequency band if given), with its
    binomial interval; TrieHH's bound at exactly ``frequency`` drawn over the whole x range."""
    xs = tables.column(x, "--x")
    chosen = np.ones(tables.item_trial.size, dtype=bool)
    if frequency is not None:
        chosen = (tables.item_frequency >= frequency / FREQUENCY_BAND) & (
            tables.item_frequency <= frequency * FREQUENCY_BAND
        )
    trial = tables.item_trial[chosen]
    tried = np.bincount(trial, minlength=tables.count).astype(np.float64)
    found = np.bincount(trial, weights=tables.item_found[chosen], minlength=tables.count)
    predicted = {
        column: np.bincount(trial, weights=values[chosen], minlength=tables.count)
        for column, values in tables.item_models.items()
    }
    curves = []
    for row, col, hue, rows in groups:
        points = [
            p for p in sorted({xs[i] for i in rows}, key=_sortable) if tried[[i for i in rows if xs[i] == p]].sum() > 0
        ]
        members = [np.array([i for i in rows if xs[i] == point]) for point in points]
        n_tried = np.array([tried[m].sum() for m in members])
        n_found = np.array([found[m].sum() for m in members])
        interval = binomial(n_found, n_tried, np.array([m.size for m in members]))
        curve = Curve(
            row,
            col,
            hue,
            _objects(points),
            interval,
            extra={"found": n_found.astype(np.int64), "item_trials": n_tried.astype(np.int64)},
        )
        protocols = [_protocol(tables, m) for m in members]
        for column, sums in predicted.items():
            at_points = np.array([sums[m].sum() for m in members]) / np.maximum(n_tried, 1)
            lines = _model_lines(column, curve.x, at_points, protocols)
            if frequency is not None and column == PREDICTED and x in TRIEHH_CURVE_KEYS and len(lines) == 1:
                dense = _triehh_dense(tables, rows, x, points, frequency)
                if dense is not None:
                    lines[0].x, lines[0].y = dense
                    lines[0].label = f"TrieHH worst-case bound at frequency {frequency:g} (Prop. 1)"
            curve.models += lines
        curves.append(curve)
    return curves


def _recall_by_k(tables: SweepTables, groups: list[Group]) -> list[Curve]:
    curves = []
    for row, col, hue, rows in groups:
        found, models = _item_matrix(tables, rows)
        ks = np.arange(1, found.shape[1] + 1)
        recall = np.cumsum(found, axis=1) / ks
        curve = Curve(row, col, hue, ks, over_trials(recall), _samples(recall))
        protocols = [_protocol(tables, rows)] * ks.size
        for column, model in models.items():
            curve.models += _model_lines(column, ks, _model_means(np.cumsum(model, axis=1) / ks), protocols)
        curves.append(curve)
    return curves


def _item_matrix(tables: SweepTables, rows: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Trials x ranks: found (0/1) and each model's prediction, over the ranks every trial of ``rows`` tracked."""
    chosen = np.isin(tables.item_trial, rows)
    trial, rank = tables.item_trial[chosen], tables.item_rank[chosen]
    depth = int(min(np.bincount(trial, minlength=tables.count)[rows])) if rows.size else 0
    index = np.searchsorted(rows, trial)
    inside = rank <= depth

    def matrix(values: np.ndarray) -> np.ndarray:
        result = np.full((rows.size, depth), np.nan)
        result[index[inside], rank[inside] - 1] = values[chosen][inside]
        return result

    return matrix(tables.item_found), {column: matrix(values) for column, values in tables.item_models.items()}


def _discovery_by_frequency(tables: SweepTables, groups: list[Group], bins: int | None) -> list[Curve]:
    """The share of item-trials found against true frequency: per bin of ``bins`` per decade, or per
    item (and frequency: with a population per trial, an item's frequency changes), each with its
    binomial interval."""
    frequency = tables.item_frequency
    positive = frequency > 0
    if not positive.any():
        raise InputError(f"--x {FREQUENCY_AXIS}: no item with a positive frequency in the items table")
    if bins is not None:
        low_edge = math.floor(math.log10(frequency[positive].min()) * bins)
        high_edge = math.ceil(math.log10(frequency[positive].max()) * bins) + 1
        edges = 10.0 ** (np.arange(low_edge, high_edge + 1) / bins)
        cell_of = np.clip(np.searchsorted(edges, frequency, side="right") - 1, 0, edges.size - 2)
    curves = []
    for row, col, hue, rows in groups:
        chosen = np.isin(tables.item_trial, rows) & positive
        if bins is None:
            keys = list(zip(tables.item_name[chosen].tolist(), frequency[chosen].tolist()))
            distinct = sorted(set(keys), key=lambda key: (key[1], key[0]))
            position = {key: j for j, key in enumerate(distinct)}
            cell = np.array([position[key] for key in keys], dtype=np.int64)
            size = len(distinct)
        else:
            cell, size = cell_of[chosen], edges.size - 1
        tried = np.bincount(cell, minlength=size).astype(np.float64)
        found = np.bincount(cell, weights=tables.item_found[chosen], minlength=size)
        pairs = np.unique(cell * tables.count + tables.item_trial[chosen])  # (point, trial) pairs
        trials = np.bincount(pairs // tables.count, minlength=size)
        used = tried > 0
        with np.errstate(invalid="ignore", divide="ignore"):
            centre = np.exp(np.bincount(cell, weights=np.log(frequency[chosen]), minlength=size) / tried)
        interval = binomial(found[used], tried[used], trials[used])
        curve = Curve(
            row,
            col,
            hue,
            centre[used],
            interval,
            extra={"found": found[used].astype(np.int64), "item_trials": tried[used].astype(np.int64)},
        )
        if bins is None:
            curve.extra["item"] = _objects([distinct[j][0] for j in np.flatnonzero(used)])
        else:
            curve.extra["bin_low"], curve.extra["bin_high"] = edges[:-1][used], edges[1:][used]
        protocols = [_protocol(tables, rows)] * curve.x.size
        for column, values in tables.item_models.items():
            with np.errstate(invalid="ignore", divide="ignore"):
                at_points = (np.bincount(cell, weights=values[chosen], minlength=size) / tried)[used]
            lines = _model_lines(column, curve.x, at_points, protocols)
            if not lines:
                continue
            line = lines[0]
            if column == PREDICTED:
                low = edges[np.flatnonzero(used)[0]] if bins is not None else float(curve.x.min())
                high = edges[np.flatnonzero(used)[-1] + 1] if bins is not None else float(curve.x.max())
                dense_x = np.geomspace(low, high, DENSE)
                dense = _triehh_at_frequencies(tables, rows, dense_x)
                if dense is not None:
                    line.x, line.y = dense_x, dense
                    line.label = "TrieHH worst-case bound (Prop. 1, one item per user)"
            curve.models.append(line)
        curves.append(curve)
    return curves


def _crossings(tables: SweepTables, groups: list[Group], curves: list[Curve]) -> list[dict[str, Any]]:
    """Per curve, the frequencies at which the item-trials (logistic fit) and each model reach each
    level of :data:`LEVELS` (:mod:`simulations.sweep_crossings`)."""
    found: list[dict[str, Any]] = []
    for (row, col, hue, rows), curve in zip(groups, curves):
        chosen = np.isin(tables.item_trial, rows) & (tables.item_frequency > 0)
        frequency = tables.item_frequency[chosen]
        entry: dict[str, Any] = {"row": row, "col": col, "hue": hue, "simulated": {}, "models": {}}
        for level in LEVELS:
            entry["simulated"][level] = simulated_crossing(frequency, tables.item_found[chosen], level)
        for line in curve.models:
            entry["models"][line.label] = {
                level: model_crossing(frequency, tables.item_models[line.column][chosen], level) for level in LEVELS
            }
        found.append(entry)
    return found


def one_item_per_user(population: dict[str, Any]) -> bool:
    """Whether every user of a sweep's population holds one item (what TrieHH's Proposition 1 assumes):
    one word each, or each user's most frequent word alone (tables written before ``per_user`` existed
    have every user's words)."""
    return population["words_per_user"] == 1 or population.get("per_user", "all") == "mode"


def _single_triehh_setting(tables: SweepTables, rows: np.ndarray) -> dict[str, Any] | None:
    """The one TrieHH setting (one item per user) shared by ``rows``, or None."""
    missing = [None] * tables.count
    settings = {
        (
            tables.rows["protocol"][i],
            tables.rows.get("param.theta", missing)[i],
            tables.rows.get("param.batch_size", missing)[i],
            tables.rows.get("param.max_rounds", missing)[i],
            tables.rows["n"][i],
        )
        for i in rows
    }
    if len(settings) != 1:
        return None
    protocol, theta, batch, rounds, n_users = settings.pop()
    if protocol != "triehh" or theta is None:
        return None
    configs = {tables.rows["config"][i] for i in rows}
    if not all(one_item_per_user(json.loads(text)["population"]) for text in configs):
        return None
    return {"theta": theta, "batch_size": batch, "max_rounds": rounds, "n_users": n_users}


def _triehh_at_frequencies(tables: SweepTables, rows: np.ndarray, frequencies: np.ndarray) -> np.ndarray | None:
    setting = _single_triehh_setting(tables, rows)
    if setting is None:
        return None
    return triehh_rate(frequencies, setting["n_users"], setting["batch_size"], setting["theta"], setting["max_rounds"])


def _triehh_dense(
    tables: SweepTables, rows: np.ndarray, x: str, points: list[Any], frequency: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """Proposition 1 at ``frequency`` over the whole range of ``x`` (n, ε or δ), the other
    settings those of the group's trials (TrieHH, one item per user)."""
    if not all(isinstance(p, (int, float)) for p in points):
        return None
    settings = []
    for text in {tables.rows["config"][i] for i in rows}:
        config = json.loads(text)
        if config["protocol"]["name"] != "triehh" or not one_item_per_user(config["population"]):
            return None
        settings.append(
            {
                "population.users": config["population"]["users"],
                "privacy.epsilon": config["privacy"]["epsilon"],
                "privacy.delta": config["privacy"]["delta"],
                "rounds": item_codec(build_config(config)).max_rounds,
            }
        )
    if len({tuple(v for k, v in setting.items() if k != x) for setting in settings}) != 1:
        return None  # the curve would mix settings
    fixed = settings[0]
    low, high = float(min(points)), float(max(points))
    grid = np.geomspace(low, high, DENSE) if low > 0 and high / low >= 10 else np.linspace(low, high, DENSE)
    values = []
    for value in grid:
        setting = {**fixed, x: value}
        values.append(
            float(
                triehh_bound(
                    frequency,
                    int(round(setting["population.users"])),
                    setting["privacy.epsilon"],
                    setting["privacy.delta"],
                    setting["rounds"],
                )
            )
        )
    return grid, np.array(values)


# -- summary ---------------------------------------------------------------------------------


def write_summary(tables: SweepTables, plots: Sequence[Plot], folder: Path) -> Path:
    """``summary.md``: the sweep, its plots, each grid point's privacy and headline metrics
    (mean and interval), where discovery reaches 50% and 90%, the failures."""
    manifest = tables.manifest
    rows = tables.all_rows
    total = len(rows.get("trial_key", []))
    failed = total - len([e for e in rows.get("error", []) if not e])
    swept = manifest.get("swept_keys", [])
    redraw = manifest.get("redraw_population", False)
    lines = [
        f"# Sweep report: {Path(manifest.get('sweep_file', '')).name}",
        "",
        f"{total} trials at {manifest.get('points')} grid points ({manifest.get('trials_per_point')} per point), "
        f"{failed} failed; swept: {', '.join(f'`{key}`' for key in swept) or 'nothing'}. "
        + (
            "Each trial drew its own population (`sweep.redraw_population = true`), so the intervals cover the "
            "population's variability too."
            if redraw
            else "The trials of a grid point share one population, drawn once with the point's `run.seed`: the "
            "intervals cover the protocol's randomness on that population, not the population's variability "
            "(`sweep.redraw_population = true` redraws it per trial)."
        ),
        "",
        "Means over trials. Intervals: "
        + "; ".join(f"`{method}`: {text}" for method, text in METHODS.items())
        + ". In the table, `0.43 [0.38, 0.47]` is a mean and its interval, `0.43 (0.38–0.47)` a mean and the "
        "range of the trials, one number what every trial gave.",
        "",
    ]
    if tables.filters:
        lines += [f"Only the {tables.count} successful trials with {', '.join(f'`{f}`' for f in tables.filters)}.", ""]
    for plot in plots:
        lines += [f"![{plot.stem}]({plot.stem}.png)", "", _caption(plot), ""]
    lines += _point_table(tables, swept)
    for plot in plots:
        lines += _crossing_table(plot)
    errors: dict[str, int] = {}
    for error in rows.get("error", []):
        if error:
            errors[error] = errors.get(error, 0) + 1
    if errors:
        lines += ["", "## Failed trials", ""]
        lines += [f"* {count} x {message}" for message, count in sorted(errors.items(), key=lambda e: -e[1])]
    path = folder / "summary.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _caption(plot: Plot) -> str:
    parts = [f"*{label(plot.y)} against {label(plot.x)}*"]
    if plot.x == FREQUENCY_AXIS:
        parts.append("item by item" if plot.bins is None else f"{plot.bins} bins per decade")
    parts.append("intervals: " + ", ".join(f"`{method}`" for method in plot.methods))
    if plot.model_labels:
        parts.append("models: " + ", ".join(plot.model_labels))
    if plot.pooled:
        parts.append("pooled over " + ", ".join(f"`{key}`" for key in plot.pooled))
    if plot.filters:
        parts.append("where " + ", ".join(f"`{text}`" for text in plot.filters))
    return "; ".join(parts) + "."


def _point_table(tables: SweepTables, swept: Sequence[str]) -> list[str]:
    """One row per grid point of the trials kept: swept values, trials, privacy, metrics."""
    rows = tables.rows
    all_rows = tables.all_rows
    privacy = [c for c in PRIVACY_COLUMNS if c in rows and any(v is not None for v in rows[c])]
    metrics = [m for m in SUMMARY_METRICS if m in rows]
    names = {
        "epsilon": "ε spent",
        "delta": "δ",
        "shuffle_epsilon": "ε shuffled",
        "param.theta": "θ",
        "param.batch_size": "m",
    }
    models = rows.get("privacy_model")
    header = [
        *swept,
        "trials",
        "failed",
        *(["ε is"] if models else []),
        *(names[c] for c in privacy),
        "interval",
        *(label(m) for m in metrics),
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    failed_at: dict[Any, int] = {}
    for point, error in zip(all_rows.get("point", []), all_rows.get("error", [])):
        failed_at[point] = failed_at.get(point, 0) + bool(error)
    for point in sorted(set(rows.get("point", []))):
        members = [i for i, p in enumerate(rows["point"]) if p == point]
        cells = [value_text(rows[key][members[0]]) if key in rows else "" for key in swept]
        cells += [str(len(members)), str(failed_at.get(point, 0))]
        if models:
            cells.append(" / ".join(sorted({privacy_kind(models[i]) or str(models[i]) for i in members})))
        for column in privacy:
            values = sorted({rows[column][i] for i in members if rows[column][i] is not None})
            cells.append(
                " – ".join(number(v) for v in (values[0], values[-1]))
                if len(values) > 1
                else number(values[0])
                if values
                else ""
            )
        matrix = np.array([[np.nan if rows[m][i] is None else float(rows[m][i]) for m in metrics] for i in members])
        interval = over_trials(matrix)
        cells.append(next((m for m in interval.method.tolist() if m), ""))
        cells += [_mean_and_interval(interval, j) for j in range(len(metrics))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _mean_and_interval(interval: Interval, j: int) -> str:
    """``0.43 [0.38, 0.47]`` (an interval), ``0.43 (0.38–0.47)`` (the range of the trials); one
    number when every trial gave it; blank without data."""
    if not np.isfinite(interval.mean[j]):
        return ""
    mean, low, high = (number(v) for v in (interval.mean[j], interval.low[j], interval.high[j]))
    if low == mean == high:
        return mean
    return f"{mean} ({low}–{high})" if interval.method[j] == RANGE else f"{mean} [{low}, {high}]"


def _crossing_table(plot: Plot) -> list[str]:
    """Where each curve of a frequency plot reaches 50% and 90%: runs, models, and their ratio."""
    if not plot.crossings:
        return []
    lines = [
        "",
        f"## Where discovery reaches {' and '.join(f'{level:.0%}' for level in LEVELS)} ({plot.stem})",
        "",
        "Read item by item, without bins: the runs by a logistic fit of found on log frequency over the "
        "item-trials, a model from its per-item probabilities (made monotone, interpolated); the ratio is the "
        "model's frequency over the runs'.",
        "",
    ]
    keys = [key for key in (plot.row, plot.col, plot.hue) if key]
    header = [*keys, "level", "runs", "model", "model's frequency", "ratio"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for entry in plot.crossings:
        where = [
            value_text(entry[role]) for role, key in (("row", plot.row), ("col", plot.col), ("hue", plot.hue)) if key
        ]
        for level in LEVELS:
            simulated = entry["simulated"][level]
            models = entry["models"] or {"": {level: None}}
            for name, crossing in models.items():
                model = crossing[level]
                ratio = number(model / simulated) if model and simulated else ""
                runs = number(simulated) if simulated else "not reached"
                cells = [*where, f"{level:.0%}", runs, name, number(model) if model else "", ratio]
                lines.append("| " + " | ".join(cells) + " |")
    return lines
