"""``fedhh report``: plots and a Markdown summary of a sweep's tables.

A plot shows a metric against one key (``--x``), one line per value of a
second (``--hue``) and one panel per value of a third (``--facet``): the
mean over the trials at each point with its 95% interval (Student t), and,
in the same axes and colour, dashed, what the protocol's analysis predicts
(:mod:`simulations.analytic`).  Keys left out of the three are pooled (the
title says so).  Two axes come from the per-item table:

* ``--x k``: recall of the true top K against K ([Zhu20] Figs. 6, 8, 9);
* ``--x frequency``: the share of items found against their true
  frequency, items binned by quarter decades ([Zhu20] Figs. 5, 7; [Wang19]
  Fig. 2), beside TrieHH's worst-case bound at the run's θ, m and L.

``--y discovery`` is the share of the tracked true top items found, or, with
``--frequency F``, of the items whose true frequency is within a factor 1.1
of F ([Zhu20] Fig. 3, beside the bound at F over the whole x range).
Every plot is written as PNG and SVG with the numbers drawn in a CSV beside
them; ``summary.md`` tables the mean of every headline metric per grid point.

A report goes into a folder of its own (by default ``DIR/report``), claimed
as every fedhh output is (:class:`fedhh.results.ResultsFolder`): a new or
empty folder, or a previous report, which is replaced whole, its files
removed only because its marker lists them; any other folder, the sweep
folder itself or a folder holding anything else (a file of the user's, a
symbolic link) is refused before anything is drawn.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedhh.config import Scalar, build_config
from fedhh.errors import InputError
from fedhh.experiment import item_codec
from fedhh.results import OutputError, ResultsFolder

from .analytic import triehh_bound, triehh_rate
from .sweep_store import ITEMS_TABLE, MANIFEST, REPORT_FOLDER, TRIALS_TABLE
from .sweep_trial import RECALL_KS

REPORT_KIND = "report"  # the kind its marker records: a later report replaces it
K_AXIS, FREQUENCY_AXIS = "k", "frequency"
DISCOVERY, RECALL = "discovery", "recall"
FREQUENCY_BAND = 1.1  # --frequency F selects items with true frequency in [F / 1.1, 1.1 F]
BINS_PER_DECADE = 4
DENSE = 120  # points of an analytic curve drawn over a continuous axis
SIMULATED = "simulated: mean, 95% interval"
MARKED = 30  # curves with at most this many points show a marker at each
SUMMARY_METRICS = ("recall_at_10", "precision", "f1", "ncr", "discovered", "rounds", "user_bits", "server_s", "wall_s")
TRIEHH_CURVE_KEYS = ("population.users", "privacy.epsilon", "privacy.delta")
LABELS = {
    "population.users": "users n", "privacy.epsilon": "target ε", "privacy.delta": "target δ",
    "population.words_per_user": "words per user", "protocol.unit_size": "unit size", "protocol.name": "protocol",
    "protocol.top_k": "k (values reported)", "protocol.oracle": "oracle", "protocol.segment_length": "η", "epsilon": "ε", "delta": "δ", "n": "users n",
    K_AXIS: "K (true top K)", FREQUENCY_AXIS: "true frequency (share of users)", DISCOVERY: "discovery rate",
    RECALL: "recall of the true top K", "f1": "F1", "ncr": "NCR", "precision": "precision",
    "wall_s": "seconds per trial", "user_bits": "bits a user sends", "user_bits_max": "most bits a user sends",
    "server_s": "server seconds", "shards_s": "shards' seconds",
}


@dataclass
class Curve:
    """One line: the points of one hue value in one panel, with the analysis beside them."""

    facet: Scalar | None
    hue: Scalar | None
    x: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    trials: np.ndarray
    model_x: np.ndarray | None = None
    model_y: np.ndarray | None = None


@dataclass
class Plot:
    """What one figure shows."""

    x: str
    y: str
    hue: str | None
    facet: str | None
    curves: list[Curve]
    pooled: list[str] = field(default_factory=list)
    model_label: str = ""

    @property
    def stem(self) -> str:
        name = f"{self.y}-vs-{self.x}" + (f"-by-{self.hue}" if self.hue else "") + (
            f"-per-{self.facet}" if self.facet else "")
        return re.sub(r"[^A-Za-z0-9_.=-]+", "_", name)


class SweepTables:
    """A sweep folder's manifest and tables, read once."""

    def __init__(self, folder: str | Path) -> None:
        import pyarrow.parquet as pq

        self.folder = Path(folder)
        try:
            self.manifest = json.loads((self.folder / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise InputError(f"folder: {str(self.folder)!r} holds no sweep ({MANIFEST}); run fedhh sweep first") from None
        paths = {name: self.folder / f"{name}.parquet" for name in (TRIALS_TABLE, ITEMS_TABLE)}
        missing = [str(path) for path in paths.values() if not path.is_file()]
        if missing:
            raise InputError(f"folder: {missing} missing; run the sweep again to rebuild its tables")
        table = pq.read_table(paths[TRIALS_TABLE])
        self.all_rows: dict[str, list[Any]] = table.to_pydict()
        ok = [i for i, error in enumerate(self.all_rows.get("error", [])) if not error]
        self.rows = {column: [values[i] for i in ok] for column, values in self.all_rows.items()}
        self.count = len(ok)
        items = pq.read_table(paths[ITEMS_TABLE])
        keep = {key: i for i, key in enumerate(self.rows.get("trial_key", []))}
        trial_of = np.array([keep.get(key, -1) for key in items.column("trial_key").to_pylist()], dtype=np.int64)
        kept = trial_of >= 0
        self.item_trial = trial_of[kept]
        self.item_rank = items.column("true_rank").to_numpy()[kept]
        self.item_frequency = items.column("true_frequency").to_numpy()[kept]
        self.item_found = items.column("discovered").to_numpy(zero_copy_only=False)[kept].astype(np.float64)
        predicted = items.column("predicted").to_numpy(zero_copy_only=False)
        self.item_predicted = np.asarray(predicted, dtype=np.float64)[kept]

    @property
    def swept(self) -> list[str]:
        """The axes that vary among the successful trials: each swept key, and each zipped
        group as one axis of its varying keys joined by commas."""
        zipped = [[key for key in group if key in self.rows] for group in self.manifest.get("zip", [])]
        in_zip = {key for group in zipped for key in group}
        axes = [key for key in self.manifest.get("swept_keys", []) if key in self.rows and key not in in_zip]
        axes += [",".join(group) for group in zipped]
        return [axis for axis in axes if len(set(self.column(axis))) > 1]

    def column(self, name: str, flag: str = "column") -> list[Any]:
        """A column's values; ``a,b`` names the pairs of columns ``a`` and ``b`` (a zipped axis)."""
        parts = name.split(",")
        for part in parts:
            if part not in self.rows:
                raise InputError(f"{flag} {part}: not a column of {TRIALS_TABLE}.parquet; allowed: {sorted(self.rows)}")
        if len(parts) == 1:
            return self.rows[name]
        return list(zip(*(self.rows[part] for part in parts)))

    def numeric(self, name: str, flag: str = "--y") -> np.ndarray:
        values = self.column(name, flag)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) or v is None for v in values):
            raise InputError(f"{flag} {name}: not a numeric column; allowed: {self.numeric_columns()} or {DISCOVERY}")
        return np.array([math.nan if v is None else float(v) for v in values])

    def numeric_columns(self) -> list[str]:
        return sorted(name for name, values in self.rows.items()
                      if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values))


def write_report(
    folder: str | Path,
    x: str | None = None,
    y: str | None = None,
    hue: str | None = None,
    facet: str | None = None,
    frequency: float | None = None,
    output: str | Path | None = None,
) -> list[Path]:
    """Write the plots (PNG, SVG, CSV) and ``summary.md`` into the report folder (``output``,
    by default ``folder/report``: see :func:`claim_report_folder`); the files written."""
    tables = SweepTables(folder)
    if tables.count == 0:
        raise InputError(f"folder: {str(tables.folder)!r} has no successful trial to plot")
    if frequency is not None and not (math.isfinite(frequency) and 0 < frequency <= 1):
        raise InputError(f"--frequency: a share of users in (0, 1], got {frequency!r}")
    names: list[str] = []
    with claim_report_folder(tables.folder, output) as report:
        plots = [build_plot(tables, px, py, ph, pf, frequency) for px, py, ph, pf in plan_plots(tables, x, y, hue, facet)]

        def draw_all(staging: Path) -> None:
            for plot in plots:
                names.extend(path.name for path in render(plot, staging))
            names.append(write_summary(tables, plots, staging).name)

        report.commit(None, [draw_all])
    return [report.path / name for name in names]


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
        raise OutputError(f"--output: {destination} is the sweep folder itself; a report goes into a folder of its "
                          f"own (default: {default})")
    if resolved.is_relative_to(inside) and not is_default:
        raise OutputError(f"--output: {destination} is inside the sweep folder {sweep}, where fedhh writes only "
                          f"its default report folder {default}; choose a folder outside it")
    return ResultsFolder.claim(destination, overwrite=True, field="--output", kind=REPORT_KIND)


def plan_plots(
    tables: SweepTables, x: str | None, y: str | None, hue: str | None, facet: str | None
) -> list[tuple[str, str, str | None, str | None]]:
    """Which plots to draw: the one asked for, or by default the headline metrics against the
    most-valued swept key, recall against K and discovery against frequency."""
    axes = sorted(tables.swept, key=lambda key: -len(set(tables.column(key))))
    headline = f"recall_at_{max([k for k in RECALL_KS if k <= min(tables.column('top_k'))] or [RECALL_KS[0]])}"

    def pick(taken: Sequence[str | None]) -> str | None:
        """The next axis sharing no key with those taken (a zipped axis contains its keys)."""
        used = {part for key in taken if key for part in key.split(",")}
        return next((key for key in axes if not used & set(key.split(","))), None)

    if x is not None or y is not None:
        chosen_x = x or pick([])
        if chosen_x is None:
            chosen_x = K_AXIS
        chosen_y = y or (RECALL if chosen_x == K_AXIS else DISCOVERY if chosen_x == FREQUENCY_AXIS else headline)
        chosen_hue = hue if hue is not None else pick([chosen_x])
        chosen_facet = facet if facet is not None else pick([chosen_x, chosen_hue])
        return [(chosen_x, chosen_y, chosen_hue, chosen_facet)]
    plans: list[tuple[str, str, str | None, str | None]] = []
    first = pick([])
    if first is not None:
        second = hue if hue is not None else pick([first])
        third = facet if facet is not None else pick([first, second])
        plans += [(first, metric, second, third) for metric in (headline, "f1", "ncr")]
    item_hue = hue if hue is not None else first
    item_facet = facet if facet is not None else pick([item_hue])
    plans += [(K_AXIS, RECALL, item_hue, item_facet), (FREQUENCY_AXIS, DISCOVERY, item_hue, item_facet)]
    return plans


def build_plot(
    tables: SweepTables, x: str, y: str, hue: str | None, facet: str | None, frequency: float | None = None
) -> Plot:
    """The numbers of one plot (means, intervals, analysis), without drawing it."""
    for flag, key in (("--hue", hue), ("--facet", facet)):
        if key is not None:
            tables.column(key, flag)
            if key in (x, y):
                raise InputError(f"{flag} {key}: already an axis of the plot")
    if x in (K_AXIS, FREQUENCY_AXIS):
        expected = RECALL if x == K_AXIS else DISCOVERY
        if y != expected:
            raise InputError(f"--y {y}: with --x {x} the metric is {expected!r}")
    else:
        if not all(part in tables.rows for part in x.split(",")):
            raise InputError(f"--x {x}: not a column of {TRIALS_TABLE}.parquet; allowed: {K_AXIS}, {FREQUENCY_AXIS} "
                             f"or a column: {sorted(tables.rows)}")
        if y == RECALL:
            raise InputError(f"--y {y}: recall against K needs --x {K_AXIS}; against a key use recall_at_K")
    shown = {part for key in (x, hue, facet) if key for part in key.split(",")}
    pooled = [key for key in tables.swept if not shown & set(key.split(","))]
    groups = _groups(tables, facet, hue)
    if x == K_AXIS:
        curves, label = _recall_by_k(tables, groups)
    elif x == FREQUENCY_AXIS:
        curves, label = _discovery_by_frequency(tables, groups)
    else:
        curves, label = _metric_by_key(tables, groups, x, y, frequency)
    return Plot(x, y, hue, facet, curves, pooled, label)


Group = tuple[Scalar | None, Scalar | None, np.ndarray]


def _groups(tables: SweepTables, facet: str | None, hue: str | None) -> list[Group]:
    """(facet value, hue value, row indices) in sorted order of the values."""
    facets = tables.column(facet, "--facet") if facet else [None] * tables.count
    hues = tables.column(hue, "--hue") if hue else [None] * tables.count
    keys = sorted({(f, h) for f, h in zip(facets, hues)}, key=lambda pair: (_sortable(pair[0]), _sortable(pair[1])))
    return [(f, h, np.array([i for i in range(tables.count) if facets[i] == f and hues[i] == h])) for f, h in keys]


def _sortable(value: Any) -> tuple[Any, ...]:
    if isinstance(value, tuple):
        return tuple(_sortable(part) for part in value)
    return (0, value) if isinstance(value, (int, float)) else (1, str(value))


def _objects(values: Sequence[Any]) -> np.ndarray:
    """A 1-D object array (pairs of a zipped axis stay single cells)."""
    array = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        array[i] = value
    return array


def mean_interval(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per column of ``values`` (trials x points, NaN where absent): mean, 95% Student-t
    interval and the number of trials."""
    import warnings

    from scipy.stats import t as student

    count = np.sum(~np.isnan(values), axis=0)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # points with fewer than two trials get no interval
        mean = np.nanmean(np.where(count > 0, values, 0.0), axis=0) if values.size else np.zeros(0)
        mean = np.where(count > 0, mean, np.nan)
        spread = np.nanstd(values, axis=0, ddof=1) if values.shape[0] > 1 else np.zeros(values.shape[1])
        half = np.where(count > 1, student.ppf(0.975, np.maximum(count - 1, 1)) * spread / np.sqrt(count), 0.0)
    return mean, mean - half, mean + half, count


def _metric_by_key(
    tables: SweepTables, groups: list[Group], x: str, y: str, frequency: float | None
) -> tuple[list[Curve], str]:
    xs = tables.column(x, "--x")
    if y == DISCOVERY:
        values = _discovery_per_trial(tables, frequency)
        predicted = _discovery_per_trial(tables, frequency, predicted=True)
    else:
        values = tables.numeric(y)
        model = f"predicted_{y}"
        predicted = tables.numeric(model) if model in tables.rows else np.full(tables.count, np.nan)
    curves, labels = [], set()
    for facet, hue, rows in groups:
        points = sorted({xs[i] for i in rows}, key=_sortable)
        matrix = _by_point(rows, xs, points, values)
        mean, low, high, count = mean_interval(matrix)
        curve = Curve(facet, hue, _objects(points), mean, low, high, count)
        dense = _triehh_dense(tables, rows, x, points, frequency) if y == DISCOVERY and frequency else None
        if dense is not None:
            curve.model_x, curve.model_y = dense
            labels.add(f"TrieHH worst-case bound at frequency {frequency:g} (Prop. 1)")
        else:
            model_mean = mean_interval(_by_point(rows, xs, points, predicted))[0]
            if not np.all(np.isnan(model_mean)):
                curve.model_x, curve.model_y = curve.x, model_mean
                labels.add(_model_label(tables, rows))
        curves.append(curve)
    return curves, "; ".join(sorted(labels))


def _by_point(rows: np.ndarray, xs: list[Any], points: list[Any], values: np.ndarray) -> np.ndarray:
    """Trials x points matrix of ``values`` (NaN-padded: points have different trial counts)."""
    columns = [[values[i] for i in rows if xs[i] == point] for point in points]
    depth = max((len(column) for column in columns), default=0)
    matrix = np.full((depth, len(points)), np.nan)
    for j, column in enumerate(columns):
        matrix[: len(column), j] = column
    return matrix


def _discovery_per_trial(tables: SweepTables, frequency: float | None, predicted: bool = False) -> np.ndarray:
    """Per trial, the share of its tracked items found (or predicted), within the frequency band if given."""
    chosen = np.ones(tables.item_trial.size, dtype=bool)
    if frequency is not None:
        chosen = (tables.item_frequency >= frequency / FREQUENCY_BAND) & (tables.item_frequency <= frequency * FREQUENCY_BAND)
    weights = tables.item_predicted if predicted else tables.item_found
    total = np.bincount(tables.item_trial[chosen], minlength=tables.count)
    found = np.bincount(tables.item_trial[chosen], weights=weights[chosen], minlength=tables.count)
    with np.errstate(invalid="ignore"):
        return np.where(total > 0, found / np.maximum(total, 1), np.nan)


def _recall_by_k(tables: SweepTables, groups: list[Group]) -> tuple[list[Curve], str]:
    curves, labels = [], set()
    for facet, hue, rows in groups:
        found, model = _item_matrix(tables, rows)
        ks = np.arange(1, found.shape[1] + 1)
        recall = np.cumsum(found, axis=1) / ks
        mean, low, high, count = mean_interval(recall)
        curve = Curve(facet, hue, ks, mean, low, high, count)
        if not np.all(np.isnan(model)):
            curve.model_x, curve.model_y = ks, np.nanmean(np.cumsum(model, axis=1) / ks, axis=0)
            labels.add(_model_label(tables, rows))
        curves.append(curve)
    return curves, "; ".join(sorted(labels))


def _item_matrix(tables: SweepTables, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Trials x ranks: found (0/1) and predicted, over the ranks every trial of ``rows`` tracked."""
    chosen = np.isin(tables.item_trial, rows)
    trial, rank = tables.item_trial[chosen], tables.item_rank[chosen]
    depth = int(min(np.bincount(trial, minlength=tables.count)[rows])) if rows.size else 0
    index = np.searchsorted(rows, trial)
    found = np.full((rows.size, depth), np.nan)
    model = np.full((rows.size, depth), np.nan)
    inside = rank <= depth
    found[index[inside], rank[inside] - 1] = tables.item_found[chosen][inside]
    model[index[inside], rank[inside] - 1] = tables.item_predicted[chosen][inside]
    return found, model


def _discovery_by_frequency(tables: SweepTables, groups: list[Group]) -> tuple[list[Curve], str]:
    frequency = tables.item_frequency
    positive = frequency > 0
    low_edge = math.floor(math.log10(frequency[positive].min()) * BINS_PER_DECADE)
    high_edge = math.ceil(math.log10(frequency[positive].max()) * BINS_PER_DECADE) + 1
    edges = 10.0 ** (np.arange(low_edge, high_edge + 1) / BINS_PER_DECADE)
    bins = np.clip(np.searchsorted(edges, frequency, side="right") - 1, 0, edges.size - 2)
    curves, labels = [], set()
    for facet, hue, rows in groups:
        chosen = np.isin(tables.item_trial, rows) & positive
        trial = np.searchsorted(rows, tables.item_trial[chosen])
        cell = trial * (edges.size - 1) + bins[chosen]
        size = rows.size * (edges.size - 1)
        total = np.bincount(cell, minlength=size).reshape(rows.size, -1)
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = np.bincount(cell, weights=tables.item_found[chosen], minlength=size).reshape(rows.size, -1) / total
            centre = np.exp(np.bincount(bins[chosen], weights=np.log(frequency[chosen]), minlength=edges.size - 1)
                            / np.bincount(bins[chosen], minlength=edges.size - 1))
            model = np.bincount(cell, weights=tables.item_predicted[chosen], minlength=size).reshape(rows.size, -1) / total
        used = total.sum(axis=0) > 0
        mean, low, high, count = mean_interval(np.where(total > 0, rate, np.nan)[:, used])
        curve = Curve(facet, hue, centre[used], mean, low, high, count)
        dense_x = np.geomspace(edges[used.argmax()], edges[np.flatnonzero(used)[-1] + 1], DENSE)
        dense = _triehh_at_frequencies(tables, rows, dense_x)
        if dense is not None:
            curve.model_x, curve.model_y = dense_x, dense
            labels.add("TrieHH worst-case bound (Prop. 1, one item per user)")
        elif not np.all(np.isnan(model[:, used])):
            curve.model_x, curve.model_y = centre[used], np.nanmean(model[:, used], axis=0)
            labels.add(_model_label(tables, rows))
        curves.append(curve)
    return curves, "; ".join(sorted(labels))


def _single_triehh_setting(tables: SweepTables, rows: np.ndarray) -> dict[str, Any] | None:
    """The one TrieHH setting (one item per user) shared by ``rows``, or None."""
    settings = {
        (tables.rows["protocol"][i], tables.rows.get("param.theta", [None] * tables.count)[i],
         tables.rows.get("param.batch_size", [None] * tables.count)[i],
         tables.rows.get("param.max_rounds", [None] * tables.count)[i], tables.rows["n"][i])
        for i in rows
    }
    if len(settings) != 1:
        return None
    protocol, theta, batch, rounds, n_users = settings.pop()
    configs = {tables.rows["config"][i] for i in rows}
    words = {json.loads(text)["population"]["words_per_user"] for text in configs}
    if protocol != "triehh" or words != {1} or theta is None:
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
    if x not in TRIEHH_CURVE_KEYS or not all(isinstance(p, (int, float)) for p in points):
        return None
    settings = []
    for text in {tables.rows["config"][i] for i in rows}:
        config = json.loads(text)
        if config["protocol"]["name"] != "triehh" or config["population"]["words_per_user"] != 1:
            return None
        settings.append({"population.users": config["population"]["users"],
                         "privacy.epsilon": config["privacy"]["epsilon"], "privacy.delta": config["privacy"]["delta"],
                         "rounds": item_codec(build_config(config)).max_rounds})
    if len({tuple(v for k, v in setting.items() if k != x) for setting in settings}) != 1:
        return None  # the curve would mix settings that the plot pools
    fixed = settings[0]
    low, high = float(min(points)), float(max(points))
    grid = np.geomspace(low, high, DENSE) if low > 0 and high / low >= 10 else np.linspace(low, high, DENSE)
    values = []
    for value in grid:
        setting = {**fixed, x: value}
        values.append(float(triehh_bound(frequency, int(round(setting["population.users"])),
                                         setting["privacy.epsilon"], setting["privacy.delta"], setting["rounds"])))
    return grid, np.array(values)


MODEL_LABELS = {"triehh": "TrieHH worst-case bound (Prop. 1)", "pem": "PEM analysis (order-statistics model)"}


def _model_label(tables: SweepTables, rows: np.ndarray) -> str:
    """What the dashed lines are, from the protocols of the rows that carry a prediction."""
    predicted = tables.rows.get("predicted_ncr", [None] * tables.count)
    protocols = sorted({tables.rows["protocol"][i] for i in rows if predicted[i] is not None})
    return "; ".join(MODEL_LABELS.get(protocol, f"{protocol} analysis") for protocol in protocols)


# -- drawing ---------------------------------------------------------------------------------


def render(plot: Plot, folder: Path) -> list[Path]:
    """Draw ``plot`` into ``folder`` as PNG and SVG, with its numbers as CSV; the files written."""
    figure = draw(plot)
    paths = [folder / f"{plot.stem}.{kind}" for kind in ("png", "svg")]
    for path in paths:
        figure.savefig(path, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(figure)
    data = folder / f"{plot.stem}.csv"
    with open(data, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([plot.facet or "facet", plot.hue or "hue", plot.x, f"mean {plot.y}", "low 95%", "high 95%",
                         "trials"])
        for curve in plot.curves:
            for j in range(curve.x.size):
                writer.writerow([_cell(curve.facet), _cell(curve.hue), _cell(curve.x[j]), curve.mean[j], curve.low[j],
                                 curve.high[j], int(curve.trials[j])])
    return [*paths, data]


def draw(plot: Plot) -> Any:
    """The matplotlib figure of ``plot``: one panel per facet value, one colour per hue value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    facets = list(dict.fromkeys(curve.facet for curve in plot.curves))
    hues = list(dict.fromkeys(curve.hue for curve in plot.curves))
    columns = min(len(facets), 3)
    rows = math.ceil(len(facets) / columns)
    from matplotlib.ticker import NullLocator

    figure, grid = plt.subplots(rows, columns, figsize=(4.6 * columns + 1.2, 3.6 * rows), dpi=110,
                                squeeze=False, sharey=True)
    colours = plt.get_cmap("viridis" if len(hues) > 6 else "tab10")
    categorical = not all(isinstance(v, (int, float, np.integer, np.floating)) for c in plot.curves for v in c.x)
    categories = list(dict.fromkeys(v for c in plot.curves for v in c.x)) if categorical else []
    # an interval of a share (recall, discovery, F1, ...) is drawn within [0, 1]; the CSV keeps it whole
    shares = all(0 <= v <= 1 for c in plot.curves for v in c.mean if np.isfinite(v))
    for panel, facet in enumerate(facets):
        axes = grid[panel // columns][panel % columns]
        for curve in (c for c in plot.curves if c.facet == facet):
            index = hues.index(curve.hue)
            colour = colours(index / max(len(hues) - 1, 1)) if len(hues) > 6 else colours(index % 10)
            x = np.array([categories.index(v) for v in curve.x]) if categorical else curve.x.astype(float)
            name = _value(curve.hue) if plot.hue else SIMULATED
            axes.plot(x, curve.mean, "o-" if x.size <= MARKED else "-", color=colour, ms=3.5, lw=1.4, label=name)
            low, high = (np.clip(curve.low, 0, 1), np.clip(curve.high, 0, 1)) if shares else (curve.low, curve.high)
            axes.fill_between(x, low, high, color=colour, alpha=0.18, lw=0)
            if curve.model_x is not None and curve.model_y is not None:
                model_x = (np.array([categories.index(v) for v in curve.model_x]) if categorical
                           else np.asarray(curve.model_x, dtype=float))
                axes.plot(model_x, curve.model_y, "--", color=colour, lw=1.2)
        points = sorted({float(v) for c in plot.curves for v in c.x}) if not categorical else []
        if categorical:
            axes.set_xticks(range(len(categories)), [_value(v) for v in categories])
        elif _spans_decades(points):
            axes.set_xscale("log")
        if points and len(points) <= MARKED // 3 and plot.x != FREQUENCY_AXIS:  # few swept values: label each
            axes.set_xticks(points, [_compact(v) for v in points])
            axes.xaxis.set_minor_locator(NullLocator())
        if _spans_decades([v for c in plot.curves for v in c.mean if np.isfinite(v)], factor=100):
            axes.set_yscale("log")
        if plot.facet:
            axes.set_title(f"{_label(plot.facet)} = {_value(facet)}", fontsize=10)
        axes.set_xlabel(_label(plot.x))
        axes.grid(True, which="both", alpha=0.25)
    for panel in range(len(facets), rows * columns):
        grid[panel // columns][panel % columns].set_visible(False)
    grid[0][0].set_ylabel(_label(plot.y))
    legend: dict[str, Any] = {}
    for axes in figure.axes:
        for handle, name in zip(*axes.get_legend_handles_labels()):
            legend.setdefault(name, handle)
    handles = list(legend.values())
    from matplotlib.lines import Line2D

    if plot.hue:
        handles.append(Line2D([], [], color="0.3", marker="o", ms=3.5, label=SIMULATED))
    if plot.model_label:
        handles.append(Line2D([], [], color="0.3", ls="--", label=plot.model_label))
    figure.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False,
                  title=_label(plot.hue) or None, title_fontsize=8, alignment="left")
    title = f"{_label(plot.y)} against {_label(plot.x)}"
    if plot.pooled:
        title += f" (pooled over {', '.join(plot.pooled)})"
    figure.suptitle(title, fontsize=11)
    figure.tight_layout()
    return figure


def _spans_decades(values: Sequence[Any], factor: float = 10) -> bool:
    numbers = [float(v) for v in values if isinstance(v, (int, float, np.integer, np.floating))]
    return bool(numbers) and min(numbers) > 0 and max(numbers) / min(numbers) >= factor


def _cell(value: Any) -> Any:
    return " / ".join(map(str, value)) if isinstance(value, tuple) else value


def _label(key: str | None) -> str:
    if key is None:
        return ""
    if "," in key:
        return " / ".join(_label(part) for part in key.split(","))
    match = re.fullmatch(r"(predicted_)?recall_at_(\d+)", key)
    if match:
        return f"recall@{match.group(2)}"
    return LABELS.get(key, key)


def _compact(value: float) -> str:
    """A tick label: 20k, 1.5M, 0.5, 64."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def _value(value: Any) -> str:
    if isinstance(value, tuple):
        return " / ".join(_value(part) for part in value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


# -- summary ---------------------------------------------------------------------------------


def write_summary(tables: SweepTables, plots: Sequence[Plot], folder: Path) -> Path:
    """``summary.md``: the sweep, its plots, the mean of each headline metric per grid point, failures."""
    manifest = tables.manifest
    rows = tables.all_rows
    total = len(rows.get("trial_key", []))
    failed = total - tables.count
    swept = manifest.get("swept_keys", [])
    lines = [
        f"# Sweep report: {Path(manifest.get('sweep_file', '')).name}",
        "",
        f"{total} trials at {manifest.get('points')} grid points ({manifest.get('trials_per_point')} per point), "
        f"{failed} failed; swept: {', '.join(f'`{key}`' for key in swept) or 'nothing'}. "
        f"Means over trials with their 95% Student-t interval.",
        "",
    ]
    for plot in plots:
        lines += [f"![{plot.stem}]({plot.stem}.png)", ""]
    metrics = [m for m in SUMMARY_METRICS if m in tables.rows]
    header = [*swept, "trials", "failed", *(_label(m) for m in metrics)]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    points = sorted(set(rows.get("point", [])))
    for point in points:
        members = [i for i, p in enumerate(rows["point"]) if p == point]
        good = [i for i in members if not rows["error"][i]]
        cells = [_value(rows[key][members[0]]) if key in rows else "" for key in swept]
        cells += [str(len(members)), str(len(members) - len(good))]
        for metric in metrics:
            values = np.array([float(rows[metric][i]) for i in good], dtype=float)
            if not values.size:
                cells.append("")
                continue
            mean, low, high, _ = mean_interval(values[:, None])
            cells.append(f"{mean[0]:.3g} ± {(high[0] - mean[0]):.2g}" if values.size > 1 else f"{mean[0]:.3g}")
        lines.append("| " + " | ".join(cells) + " |")
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
