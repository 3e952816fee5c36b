"""A run's report: the console summary and the files of its results folder.

The folder holds ``result.json`` (the full document, schema in docs/results.md),
``heavy_hitters.csv``, ``rounds.csv`` and ``discovery.png`` (true frequency
by true rank, discovered items marked; without an evaluation section, the
published estimates by output rank), written atomically together.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from fedhh.result_tables import discoveries_with_truth, table_writers
from fedhh.results import ResultsFolder, write_result

from .plot_process import draw

SHOWN_ITEMS = 30


def write_run_outputs(output_dir: str | Path | ResultsFolder, result: dict[str, Any]) -> Path:
    """Write the results folder; nothing is left behind if any part fails."""

    def discovery_plot(folder: Path) -> None:
        draw(plot_discovery, result, folder / "discovery.png")

    return write_result(output_dir, result, [*table_writers(result), discovery_plot])


def plot_discovery(result: dict[str, Any], path: Path, shown_ranks: int = 500) -> None:
    """With an evaluation: true frequency against true rank (log-log), discovered items in
    colour.  Without: what the protocol published, its estimated counts (or supports) by
    output rank; nothing of the truth is drawn."""
    # A bare Figure (no pyplot: no backend, no global figure list) drawn once, into
    # margins fixed for these short log-scale labels: tight_layout would draw it twice.
    # The minor grid is one line collection per axis, not minor ticks (see minor_grid).
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4.2), dpi=120)
    figure.subplots_adjust(left=0.11, right=0.97, bottom=0.13, top=0.92)
    axes = figure.add_subplot()
    evaluation = result.get("evaluation")
    if evaluation is not None:
        found = {h["true_rank"]: h["true_frequency"] for h in evaluation["heavy_hitters"] if h["true_rank"]}
        top = evaluation["truth_top"][:shown_ranks]
        axes.loglog(
            range(1, len(top) + 1), [t["true_frequency"] for t in top], color="0.75", lw=1.2, label="true top items"
        )
        hit = [(r, f) for r, f in found.items() if r <= len(top)]
        if hit:
            ranks, frequencies = zip(*hit)
            axes.scatter(ranks, frequencies, s=9, color="tab:blue", zorder=3, label="discovered")
        axes.set_xlabel("true rank")
        axes.set_ylabel("true frequency (share of users)")
        axes.legend(loc="upper right", fontsize=8)
    else:
        key = "estimated_count" if any("estimated_count" in h for h in result["heavy_hitters"]) else "support"
        values = [h[key] for h in result["heavy_hitters"] if h.get(key, 0) > 0]
        if values:
            axes.loglog(range(1, len(values) + 1), values, marker=".", color="tab:blue", lw=1)
        axes.set_xlabel("output rank (no ground truth: run.evaluation = false)")
        axes.set_ylabel("estimated count" if key == "estimated_count" else "support (votes)")
    privacy = result["privacy"]
    axes.set_title(
        f"{result['protocol']}: {len(result['heavy_hitters'])} discovered, n = {result['n_users']:,}, "
        f"ε = {float(privacy['epsilon']):.3g}, δ = {float(privacy['delta']):.2g}",
        fontsize=10,
    )
    axes.grid(True, which="major", alpha=0.25)
    minor_grid(axes, alpha=0.25)
    figure.savefig(path)


MINOR_LABELS_BELOW = 10.0  # a log axis spanning less (high / low) labels some of its minor ticks


def minor_grid(axes: Any, alpha: float) -> None:
    """Grid lines at a log axis's minor positions (2..9 times each power of ten), drawn as one
    line collection per axis in the grid's style.

    matplotlib would draw them through minor ticks, an object of several artists each, which
    cost 40% of the drawing of the discovery plot; the lines look the same, and the minor
    ticks are left out where they carry no label: on an axis spanning more than a decade
    (matplotlib's ``LogFormatter`` labels minor ticks only below that).  A narrower axis
    keeps its minor ticks and their grid.  The limits are fixed first so that the lines do
    not widen them.
    """
    from matplotlib import rcParams
    from matplotlib.collections import LineCollection
    from matplotlib.ticker import LogLocator, NullLocator

    style = {
        "colors": rcParams["grid.color"],
        "linewidths": rcParams["grid.linewidth"],
        "linestyles": rcParams["grid.linestyle"],
        "alpha": alpha,
        "zorder": 1.5,
    }
    for axis, limits, transform, segment in (
        (
            axes.xaxis,
            axes.set_xlim(axes.get_xlim()),
            axes.get_xaxis_transform(),
            lambda value: [(value, 0.0), (value, 1.0)],
        ),
        (
            axes.yaxis,
            axes.set_ylim(axes.get_ylim()),
            axes.get_yaxis_transform(),
            lambda value: [(0.0, value), (1.0, value)],
        ),
    ):  # set_*lim: keep the limits the data gave (autoscaling is on until they are set)
        if axis.get_scale() != "log":
            continue
        low, high = sorted(limits)
        if high <= MINOR_LABELS_BELOW * low:
            axes.grid(True, which="minor", axis=axis.axis_name, alpha=alpha)
            continue
        ticks: Any = LogLocator(subs=tuple(range(2, 10))).tick_values(low, high)  # an array
        values = [value for value in ticks.tolist() if low <= value <= high]
        axes.add_collection(
            LineCollection([segment(value) for value in values], transform=transform, **style), autolim=False
        )
        axis.set_minor_locator(NullLocator())


def print_run_report(result: dict[str, Any], output_dir: Path | None, console: Console | None = None) -> None:
    """The human summary: discovered items (by true rank when evaluated), utility, privacy, parameters."""
    console = console or Console()
    evaluation = result.get("evaluation")
    found = discoveries_with_truth(result)
    if evaluation is not None:
        found.sort(key=lambda e: (e["true_rank"] is None, e["true_rank"] or 0, e["item"]))
    order = "by true rank" if evaluation is not None else "as published"
    table = Table(title=f"{len(found)} heavy hitters discovered (first {min(len(found), SHOWN_ITEMS)} {order})")
    columns = {"item": lambda hit: hit["item"]}
    if evaluation is not None:
        columns["true rank"] = lambda hit: str(hit["true_rank"])
        columns["true count"] = lambda hit: f"{hit['true_count']:,}"
    if any("support" in hit for hit in found):
        columns["support"] = lambda hit: str(hit.get("support", ""))
    if any("estimated_count" in hit for hit in found):
        columns["estimate"] = lambda hit: f"{hit['estimated_count']:,.0f}" if "estimated_count" in hit else ""
    for name in columns:
        table.add_column(name, justify="left" if name == "item" else "right")
    for hit in found[:SHOWN_ITEMS]:
        table.add_row(*(cell(hit) for cell in columns.values()))
    console.print(table)

    if evaluation is not None:
        metrics = evaluation["metrics"]
        recalls = "  ".join(f"@{k}: {v:.3f}" for k, v in metrics["recall_at_k"].items())
        console.print(f"[bold]recall[/]  {recalls}")
        console.print(
            f"[bold]top-{metrics['top_k']}[/]  precision {metrics['precision']:.3f}  "
            f"F1 {metrics['f1']:.3f}  NCR {metrics['ncr']:.3f}"
        )
    else:
        console.print("[bold]evaluation[/]  off (run.evaluation = false): no ground truth in the result")
    privacy = result["privacy"]
    console.print(
        f"[bold]privacy[/]  ε = {float(privacy['epsilon']):.4g}, δ = {float(privacy['delta']):.3g}  "
        f"({privacy['model']})"
    )
    params = ", ".join(f"{k} = {v}" for k, v in result["params"].items())
    console.print(f"[bold]parameters[/]  {params}")
    console.print(f"[bold]population[/]  {population_line(result)}")
    deny = result.get("deny_list")
    if deny is not None:
        held = f", {deny['in_vocabulary']:,} of them in the population" if "in_vocabulary" in deny else ""
        console.print(
            f"[bold]deny list[/]  {deny['items']:,} items left out{held}, from {deny['path']} "
            f"(sha256 {deny['sha256'][:12]}...); the metrics are of the items left"
        )
    timing = ", ".join(f"{k} {v:.2f}" for k, v in result["timing_s"].items())
    console.print(
        f"[bold]run[/]  {len(result['rounds'])} rounds via {result['transport']}, "
        f"{result.get('simulation', 'users')} simulation ({result['stopped_because']}); "
        f"seconds: {timing}"
    )
    if output_dir is not None:
        console.print(f"[bold]results[/]  {output_dir}")


def population_line(result: dict[str, Any]) -> str:
    """Users, distinct items and what encoding dropped; the data-derived parts come from
    the evaluation section, so a run without one says only what is public."""
    population = {**result["population"], **result.get("evaluation", {}).get("population", {})}
    line = f"{result['n_users']:,} users"
    if "vocabulary" in population:
        encoding = population.get("encoding", {})
        line += (
            f", {population['vocabulary']:,} distinct items; dropped overlong {encoding.get('dropped_overlong', 0):,}, "
            f"truncated {encoding.get('truncated', 0):,}, dropped for unknown characters "
            f"{encoding.get('dropped_unknown_chars', 0):,} (vocabulary entries)"
        )
    if "users_without_items" in population:
        line += f"; users holding nothing encodable: {population['users_without_items']:,}"
    return line
