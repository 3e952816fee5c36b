"""``fedhh sweep`` and ``fedhh report``: the study commands' arguments and handlers, for :mod:`simulations.cli`.

Only argument parsing lives at module level; the handlers import the
sweep and report machinery (numpy, pyarrow, matplotlib, Ray when asked)
when they run.

``fedhh sweep`` exits with 0 when every trial of the grid ran without
error; 2 for bad input, refused before any trial runs (the sweep file, a
grid point that ``fedhh run`` would refuse, a sweep over the trial cap, an
output folder fedhh must not write or another sweep is writing); 3 when
every trial ran but some failed (their errors are in the tables, the
sweep is otherwise complete); 1 when the sweep stopped before every trial
ran (a worker lost, a folder that cannot be written any more such as a
full disk: run the same command again to resume); 130 after Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path
from typing import Any

EXIT_INTERRUPTED = 130  # SIGINT (Ctrl-C); 143 for SIGTERM: 128 + the signal's number
EXIT_TERMINATED = 143
EXIT_INCOMPLETE = 1
EXIT_FAILED_TRIALS = 3
SWEEP_EXITS = {  # --json: what each exit status of fedhh sweep means
    0: "every trial of the grid ran without error",
    EXIT_FAILED_TRIALS: "every trial ran and some failed: their errors are in the tables; --retry-failed runs them "
    "again",
    EXIT_INCOMPLETE: "the sweep stopped before every trial ran; the same command resumes it",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C): the finished trials are kept; the same command resumes",
    EXIT_TERMINATED: "stopped by SIGTERM: the finished trials are kept; the same command resumes",
}


def add_sweep_arguments(sweep: argparse.ArgumentParser) -> None:
    """The ``sweep`` subcommand's arguments; its handler is the parser's ``func``."""
    sweep.description = (
        "Run every trial of a sweep file on the fast driver and write trials.parquet "
        "(one row per trial) and items.parquet (per-item discovery) to the output folder. "
        "Re-running the same command skips the trials already done."
    )
    sweep.add_argument("sweep_file", help="TOML sweep file (a base config and a [sweep] table)")
    sweep.add_argument(
        "--output",
        help="results folder, new, empty or an earlier run of the same sweep file "
        "(default: results/sweeps/<sweep file name>)",
    )
    sweep.add_argument(
        "--max-trials",
        type=int,
        default=None,
        metavar="N",
        help="run a sweep of more trials than the cap (grid points x trials per point; default cap 100,000)",
    )
    sweep.add_argument("--workers", type=int, help="worker processes (default: the cores available)")
    sweep.add_argument(
        "--ray-address",
        default=os.environ.get("RAY_ADDRESS") or None,
        help="run the trials as Ray tasks on this cluster (default: $RAY_ADDRESS; "
        "unset: worker processes on this machine)",
    )
    sweep.add_argument("--csv", action="store_true", help="also write trials.csv and items.csv")
    sweep.add_argument("--retry-failed", action="store_true", help="run again the trials that failed before")
    sweep.add_argument("--quiet", action="store_true", help="no progress bar")
    sweep.add_argument(
        "--json",
        action="store_true",
        help="print a JSON summary on stdout (tables written, trial counts, status, what the exit "
        "status means) instead of the closing lines",
    )
    sweep.add_argument(
        "--protocol-module",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE (on the Python path) before the sweep file is read: a module that "
        "registers a protocol defined outside fedhh (repeatable); every worker imports it too",
    )
    sweep.set_defaults(func=_sweep)


def add_report_arguments(report: argparse.ArgumentParser) -> None:
    """The ``report`` subcommand's arguments; its handler is the parser's ``func``."""
    report.description = (
        "Plot a metric against a swept key: the mean over trials with its interval (Clopper-Pearson for "
        "discovery rates over item-trials, bootstrap for per-trial metrics, the trials' range below 10 trials) "
        "and the protocols' models beside the simulated points. Special axes: --x k (recall of the true top K "
        "against K) and --x frequency (discovery rate against the item's true frequency). Every key the sweep "
        "varies must be on an axis, fixed with --where or pooled with --pool: nothing is pooled silently."
    )
    report.add_argument("folder", help="a folder written by fedhh sweep")
    report.add_argument(
        "--x",
        help="x axis: a swept key or a column, k, or frequency (default: the "
        "swept key with the most values; with --x, the other roles are only those given)",
    )
    report.add_argument(
        "--y",
        help="metric: a column of trials.parquet (recall_at_10, f1, ncr, ...), "
        "recall@K for any K (from items.parquet), or discovery (share of the true top items "
        "found; see --frequency)",
    )
    report.add_argument("--hue", help="key drawn as one line per value (without --x: the next swept key)")
    report.add_argument(
        "--col", "--facet", dest="col", help="key drawn as one column of panels per value (--facet: the same)"
    )
    report.add_argument("--row", help="key drawn as one row of panels per value")
    report.add_argument(
        "--pool",
        action="append",
        default=[],
        metavar="KEY",
        help="pool the trials of every value of this swept key into each point (repeatable)",
    )
    report.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only the trials whose column KEY holds VALUE, read as a config value (repeatable: "
        "values of one key are alternatives, different keys all apply)",
    )
    report.add_argument(
        "--frequency",
        type=float,
        help="with --y discovery: only items whose true frequency is within a factor 1.1 of this share of users",
    )
    report.add_argument(
        "--bins",
        default="4",
        metavar="N|none",
        help="with --x frequency: bins per decade (default 4), or none: item by item",
    )
    report.add_argument(
        "--output",
        help="folder for the plots and summary.md, new, empty or an earlier report, "
        "which is replaced (default: FOLDER/report)",
    )
    report.add_argument(
        "--json",
        action="store_true",
        help="print a JSON summary on stdout (files and plots written, trials used) instead of one path a line",
    )
    report.set_defaults(func=_report)


def _bins(text: str) -> int | None:
    """``--bins``: a whole number of bins per decade, or ``none``."""
    from fedhh.errors import InputError

    if text.strip().lower() == "none":
        return None
    try:
        bins = int(text)
    except ValueError:
        bins = 0
    if bins < 1:
        raise InputError(f"--bins: a whole number of bins per decade >= 1, or none; got {text!r}")
    return bins


def _sweep(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape

    from fedhh.errors import InputError, one_line
    from fedhh.results import output_path

    from .interrupts import exit_status
    from .sweep import run_sweep
    from .sweep_spec import DEFAULT_MAX_TRIALS, load_sweep

    if args.workers is not None and args.workers < 1:
        raise InputError(f"--workers: must be >= 1, got {args.workers}")
    name = Path(os.path.realpath(args.sweep_file)).stem  # the sweep file's own name, as spec.path has it
    output = Path(args.output) if args.output else Path("results") / "sweeps" / name
    output_path(output, "--output")  # a folder fedhh must never write is refused before the sweep file is read
    if args.protocol_module:
        from fedhh.protocols.registry import import_protocol_module

        for module in args.protocol_module:
            import_protocol_module(module)
    spec = load_sweep(args.sweep_file, DEFAULT_MAX_TRIALS if args.max_trials is None else args.max_trials)
    console = Console(stderr=True, soft_wrap=True)
    try:
        outcome = run_sweep(
            spec,
            output,
            args.workers,
            args.ray_address,
            args.csv,
            show_progress=not args.quiet,
            retry_failed=args.retry_failed,
        )
    except KeyboardInterrupt as interrupt:
        status = exit_status(interrupt)
        if args.json:
            _print_json({"folder": str(output), "status": "interrupted", **_exit(status)})
        else:
            console.print(
                f"interrupted ({signal.Signals(status - 128).name}): the finished trials are in "
                f"{escape(str(output))}; run the same command to resume"
            )
        return status
    status = EXIT_INCOMPLETE if outcome.status != "complete" else EXIT_FAILED_TRIALS if outcome.failed_total else 0
    if args.json:
        _print_json(_sweep_summary(outcome, args.csv, status))
        return status
    folder = escape(str(outcome.folder))
    console.print(
        f"[bold]sweep[/] {outcome.total} trials: {outcome.computed} run now ({outcome.failed} failed), "
        f"{outcome.skipped} done before, {outcome.not_run} not run; {outcome.seconds:.1f} s; "
        f"{escape(one_line(outcome.status))}"
    )
    if outcome.rows is None:
        console.print("[bold]tables[/] not rebuilt: the folder cannot be written")
    else:
        console.print(f"[bold]tables[/] {folder}/trials.parquet ({outcome.rows} rows), {folder}/items.parquet")
    if outcome.status != "complete":
        console.print(
            f"[bold red]incomplete:[/] the finished trials are kept in {folder}; once the cause is fixed, "
            "run the same command to resume"
        )
        return EXIT_INCOMPLETE
    if outcome.failed_total:
        common, count = outcome.errors.most_common(1)[0]
        console.print(
            f"[bold red]{outcome.failed_total} of {outcome.total} trials failed[/]: their errors are in the error "
            f"column of {folder}/trials.parquet and in {folder}/trials/<trial_key>.json (--retry-failed runs them "
            f"again); the most common, {count} time(s): {escape(one_line(common))}"
        )
        return EXIT_FAILED_TRIALS
    console.print(f"next: fedhh report {folder}")
    return 0


def _sweep_summary(outcome: Any, csv: bool, status: int) -> dict[str, Any]:
    """``fedhh sweep --json``: what the sweep wrote and did."""
    folder = Path(outcome.folder)
    tables = (
        None
        if outcome.rows is None
        else {
            "trials": str(folder / "trials.parquet"),
            "items": str(folder / "items.parquet"),
            **({"trials_csv": str(folder / "trials.csv"), "items_csv": str(folder / "items.csv")} if csv else {}),
        }
    )
    return {
        "folder": str(folder),
        "tables": tables,  # null: not rebuilt, the folder cannot be written
        "rows": outcome.rows,
        "trials": {
            "total": outcome.total,
            "run_now": outcome.computed,
            "failed_now": outcome.failed,
            "done_before": outcome.skipped,
            "not_run": outcome.not_run,
            "failed_in_tables": outcome.failed_total,
        },
        "errors": [{"error": error, "trials": count} for error, count in outcome.errors.most_common()],
        "status": outcome.status,
        "seconds": outcome.seconds,
        **_exit(status),
    }


def _exit(status: int) -> dict[str, Any]:
    return {"exit_status": status, "exit_meaning": SWEEP_EXITS[status]}


def _print_json(document: dict[str, Any]) -> None:
    print(json.dumps(document, indent=2, ensure_ascii=False))


def _report(args: argparse.Namespace) -> int:
    from .sweep_report import write_report

    report = write_report(
        args.folder,
        x=args.x,
        y=args.y,
        hue=args.hue,
        row=args.row,
        col=args.col,
        pool=args.pool,
        where=args.where,
        frequency=args.frequency,
        bins=_bins(args.bins),
        output=args.output,
    )
    if args.json:
        _print_json({**report.to_dict(), "exit_status": 0, "exit_meaning": "the report was written"})
        return 0
    for path in report.files:  # one file a line, for scripts
        print(path)
    return 0
