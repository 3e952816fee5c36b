"""A run's report: the console summary and the files of its results folder.

The folder holds ``result.json`` (the full document, schema in the README),
``heavy_hitters.csv``, ``rounds.csv`` and ``discovery.png`` (true frequency
by true rank, discovered items marked), written atomically together.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from fedhh.results import ResultsFolder, write_result

SHOWN_ITEMS = 30


def write_run_outputs(output_dir: str | Path | ResultsFolder, result: dict[str, Any]) -> Path:
    """Write the results folder; nothing is left behind if any part fails."""

    def heavy_hitters_csv(folder: Path) -> None:
        columns = ["item", "true_rank", "true_count", "true_frequency", "support", "estimated_count"]
        with open(folder / "heavy_hitters.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(result["heavy_hitters"])

    def rounds_csv(folder: Path) -> None:
        rounds = result["rounds"]
        if not rounds:
            return
        with open(folder / "rounds.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, list(rounds[0]))
            writer.writeheader()
            writer.writerows(rounds)

    def discovery_plot(folder: Path) -> None:
        plot_discovery(result, folder / "discovery.png")

    return write_result(output_dir, result, [heavy_hitters_csv, rounds_csv, discovery_plot])


def plot_discovery(result: dict[str, Any], path: Path, shown_ranks: int = 500) -> None:
    """True frequency against true rank (log-log), discovered items in colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = {h["true_rank"]: h["true_frequency"] for h in result["heavy_hitters"] if h["true_rank"]}
    top = result["truth_top"][:shown_ranks]
    figure, axes = plt.subplots(figsize=(7, 4.2), dpi=120)
    ranks = range(1, len(top) + 1)
    axes.loglog(list(ranks), [t["true_frequency"] for t in top], color="0.75", lw=1.2, label="true top items")
    hit = [(r, f) for r, f in found.items() if r <= len(top)]
    if hit:
        axes.scatter(*zip(*hit), s=9, color="tab:blue", zorder=3, label="discovered")
    privacy = result["privacy"]
    axes.set_title(
        f"{result['protocol']}: {len(result['heavy_hitters'])} discovered, n = {result['n_users']:,}, "
        f"ε = {float(privacy['epsilon']):.3g}, δ = {float(privacy['delta']):.2g}",
        fontsize=10,
    )
    axes.set_xlabel("true rank")
    axes.set_ylabel("true frequency (share of users)")
    axes.grid(True, which="both", alpha=0.25)
    axes.legend(loc="upper right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def print_run_report(result: dict[str, Any], output_dir: Path | None, console: Console | None = None) -> None:
    """The human summary: discovered items by true rank, utility, privacy, parameters."""
    console = console or Console()
    found = result["heavy_hitters"]
    table = Table(title=f"{len(found)} heavy hitters discovered (first {min(len(found), SHOWN_ITEMS)} by true rank)")
    table.add_column("item")
    table.add_column("true rank", justify="right")
    table.add_column("true count", justify="right")
    table.add_column("support", justify="right")
    if any("estimated_count" in h for h in found):
        table.add_column("estimate", justify="right")
    for hit in found[:SHOWN_ITEMS]:
        row = [hit["item"], str(hit["true_rank"]), f"{hit['true_count']:,}", str(hit.get("support", ""))]
        if "estimated_count" in hit:
            row.append(f"{hit['estimated_count']:,.0f}")
        table.add_row(*row)
    console.print(table)

    metrics = result["metrics"]
    recalls = "  ".join(f"@{k}: {v:.3f}" for k, v in metrics["recall_at_k"].items())
    console.print(f"[bold]recall[/]  {recalls}")
    console.print(
        f"[bold]top-{metrics['top_k']}[/]  precision {metrics['precision']:.3f}  "
        f"F1 {metrics['f1']:.3f}  NCR {metrics['ncr']:.3f}"
    )
    privacy = result["privacy"]
    console.print(
        f"[bold]privacy[/]  ε = {float(privacy['epsilon']):.4g}, δ = {float(privacy['delta']):.3g}  "
        f"({privacy['model']})"
    )
    params = ", ".join(f"{k} = {v}" for k, v in result["params"].items())
    console.print(f"[bold]parameters[/]  {params}")
    population = result["population"]
    encoding = population.get("encoding", {})
    console.print(
        f"[bold]population[/]  {result['n_users']:,} users, {population.get('vocabulary', 0):,} distinct items; "
        f"dropped overlong {encoding.get('dropped_overlong', 0):,}, truncated {encoding.get('truncated', 0):,}, "
        f"dropped for unknown characters {encoding.get('dropped_unknown_chars', 0):,} "
        f"(vocabulary entries); users holding nothing encodable: {population.get('users_without_items', 0):,}"
    )
    timing = ", ".join(f"{k} {v:.2f}" for k, v in result["timing_s"].items())
    console.print(
        f"[bold]run[/]  {len(result['rounds'])} rounds via {result['transport']} ({result['stopped_because']}); "
        f"seconds: {timing}"
    )
    if output_dir is not None:
        console.print(f"[bold]results[/]  {output_dir}")
