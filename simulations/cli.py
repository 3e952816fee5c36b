"""The ``fedhh`` command line: run experiments, plan parameters, compare oracles.

It sits on top of every layer (simulations -> strategies -> fedhh), so the
core never imports a driver: the commands that run protocols hand the
drivers down (``fedhh size`` gets :mod:`simulations.sizing`'s runs).  Each
command's module is imported only when that command runs.

Exit statuses: 0 success; 2 bad input (a config key or value, an item, a
privacy target that cannot be met, an output folder that must not be
written: :class:`fedhh.errors.InputError`), reported as one line naming the
field, with nothing written; 130 (SIGINT) or 143 (SIGTERM) when a run was
stopped; 1 for a Flower run that failed in its federation, reported as one
line with the ServerApp's error, whatever Flower returned
(:class:`simulations.run.FlowerRunFailed`; the results folder then holds
the run's log alone, the error's traceback in it), and for anything else, which is
a failure of fedhh or of its environment, not of the input, and is reported
with its traceback.  ``fedhh sweep`` also exits with 3 when every trial ran
and some failed, and with 1 when it stopped before every trial ran
(:mod:`simulations.study_cli`).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from fedhh import __version__
from fedhh.config import FedhhConfig, load_config
from fedhh.errors import InputError, one_line
from fedhh.results import ResultsFolder, to_json

from .interrupts import exit_status, interruptible

EXIT_FAILURE = 1
EXIT_USAGE = 2
RESULTS_ROOT = Path("results")
LINGER_GRACE = 1.0  # seconds threads left running after main() get before the process ends anyway


def claim_output(args: argparse.Namespace, config: FedhhConfig) -> ResultsFolder:
    """The run's results folder, checked and locked before anything runs.

    Without ``--output``: ``results/<protocol>-<time>``, or the first of
    ``-2``, ``-3``, ... that no other run holds.
    """
    if args.output is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return ResultsFolder.claim_new(RESULTS_ROOT / f"{config['protocol']['name']}-{stamp}", field="--output")
    return ResultsFolder.claim(args.output, overwrite=args.overwrite, field="--output", overwrite_hint="--overwrite")


@contextlib.contextmanager
def ray_address(address: str | None) -> Iterator[None]:
    """``RAY_ADDRESS`` set to ``--ray-address`` for the length of a run (the drivers join the cluster it
    names; ``auto`` is refused there), then put back as it was."""
    previous = os.environ.get("RAY_ADDRESS")
    if address is not None:
        os.environ["RAY_ADDRESS"] = address
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("RAY_ADDRESS", None)
        else:
            os.environ["RAY_ADDRESS"] = previous


def _run(args: argparse.Namespace) -> int:
    if args.overwrite and args.output is None:
        raise InputError("--overwrite: replaces the folder named by --output; give --output too")
    if args.protocol_module:
        from fedhh.protocols.registry import import_protocol_module

        for module in args.protocol_module:
            import_protocol_module(module)
    config = load_config(args.config, args.set)
    from .plot_process import plots_aside
    from .report import print_run_report
    from .run import FlowerRunFailed, run_experiment

    # forked once the output is claimed (a refused run starts nothing), before Ray starts, and ended
    # before the claim is released; Flower's ServerApp draws through it from its own thread
    written = False
    try:
        with claim_output(args, config) as output, ray_address(args.ray_address), plots_aside():
            result = run_experiment(config, output, show_progress=not args.quiet, verbose=args.verbose)
            written = True
        if args.json:
            print(to_json(result))
        else:
            print_run_report(result, output.path)
    except FlowerRunFailed as failure:
        from rich.markup import escape

        log = f"; the run's log, with the error's traceback: {failure.log}" if failure.log is not None else ""
        _print_error(f"[bold red]error:[/] {escape(str(failure))}; no results were written{escape(log)}")
        return EXIT_FAILURE
    except KeyboardInterrupt as stop:
        if written:
            stop.add_note(f"the result was written to {output.path} before the stop")
        raise
    return 0


def _add_run_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("config", nargs="?", help="TOML config (defaults apply to missing keys)")
    run.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override one config value (repeatable)"
    )
    run.add_argument("--output", help="results folder, new or empty (default: results/<protocol>-<time>)")
    run.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --output if it holds a previous fedhh result (and nothing else)",
    )
    run.add_argument("--quiet", action="store_true", help="no status line or progress bar")
    run.add_argument(
        "--verbose",
        action="store_true",
        help="show Flower's and Ray's logs on the terminal, in place of the status line and the "
        "progress bar (a Flower run always writes them into run.log in the results folder)",
    )
    run.add_argument("--json", action="store_true", help="print result.json instead of the summary")
    run.add_argument(
        "--ray-address",
        help="run on this existing Ray cluster (host:port; default: $RAY_ADDRESS; "
        "'auto' is refused): the fast driver's shards become actors there (run.backend auto)",
    )
    run.add_argument(
        "--protocol-module",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE (on the Python path) before the config is read: a module that "
        "registers a protocol defined outside fedhh (repeatable); on Flower, every node imports it too",
    )
    run.set_defaults(func=_run)


def _add_plan_arguments(plan: argparse.ArgumentParser) -> None:
    from .plan_cli import add_plan_arguments

    add_plan_arguments(plan)


def _add_size_arguments(size: argparse.ArgumentParser) -> None:
    from .size_cli import add_size_arguments
    from .sizing import size_by_recall, verify_item  # the runs behind --verify and --recall

    add_size_arguments(size, verify_item=verify_item, size_by_recall=size_by_recall)


def _add_oracles_arguments(oracles: argparse.ArgumentParser) -> None:
    from .oracle_cli import add_oracles_arguments

    add_oracles_arguments(oracles)


def _add_audit_arguments(audit: argparse.ArgumentParser) -> None:
    from .audit_cli import add_audit_arguments

    add_audit_arguments(audit)


def _add_sweep_arguments(sweep: argparse.ArgumentParser) -> None:
    from .study_cli import add_sweep_arguments

    add_sweep_arguments(sweep)


def _add_report_arguments(report: argparse.ArgumentParser) -> None:
    from .study_cli import add_report_arguments

    add_report_arguments(report)


def _add_population_arguments(population: argparse.ArgumentParser) -> None:
    from .population_cli import add_population_arguments

    add_population_arguments(population)


def _add_new_client_arguments(new_client: argparse.ArgumentParser) -> None:
    from .new_client import add_new_client_arguments

    add_new_client_arguments(new_client)


class Command(NamedTuple):
    """A subcommand: the line ``fedhh --help`` lists, and what adds its arguments and handler."""

    summary: str
    add_arguments: Callable[[argparse.ArgumentParser], None]


# Each command's module (and what it imports: numpy, scipy, the protocols, matplotlib) is
# imported by its ``add_arguments`` only when that command runs, so ``fedhh --help`` and
# ``fedhh run`` do not pay for the planners' or the audit's imports.
COMMANDS: dict[str, Command] = {
    "run": Command("run an experiment (default: TrieHH on 1M wordfreq users)", _add_run_arguments),
    "plan": Command("solve protocol parameters from a privacy target", _add_plan_arguments),
    "size": Command(
        "the population needed to find an item of a given share (or to reach a recall@K)", _add_size_arguments
    ),
    "oracles": Command("compare the LDP frequency oracles on Zipf data (MSE vs theory, speed)", _add_oracles_arguments),
    "audit": Command("measure a lower bound on the ε actually spent (Monte Carlo / exact)", _add_audit_arguments),
    "sweep": Command(
        "run a grid of experiments (a sweep file) in parallel, resumably, into tables", _add_sweep_arguments
    ),
    "report": Command("plots (PNG, SVG) and a Markdown summary of a sweep's tables", _add_report_arguments),
    "population": Command("populations on disk: build once, run from them many times", _add_population_arguments),
    "new-client": Command(
        "write a Flower App project: your own ClientApp (numpy only) with fedhh's ServerApp", _add_new_client_arguments
    ),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``fedhh`` parser: every command with its arguments, or, given ``only``, just that
    command's arguments (the others are listed by name and summary; ``""``: none)."""
    parser = argparse.ArgumentParser(
        prog="fedhh", description="Federated heavy-hitter discovery with differential privacy."
    )
    parser.add_argument("--version", action="version", version=f"fedhh {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        subparser = commands.add_parser(name, help=command.summary, description=command.summary)
        if only is None or only == name:
            command.add_arguments(subparser)
    return parser


def named_command(argv: Sequence[str]) -> str:
    """The command ``argv`` names: its first word that is not an option (the top level's
    options, ``--help`` and ``--version``, take no value), or ``""``."""
    return next((word for word in argv if not word.startswith("-")), "")


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser(only=named_command(argv)).parse_args(argv)  # plan's and size's read the protocols
        with interruptible():
            return int(args.func(args))
    except InputError as error:
        from rich.markup import escape

        _print_error(f"[bold red]error:[/] {escape(one_line(str(error)))}")
        return EXIT_USAGE
    except KeyboardInterrupt as interrupt:
        from rich.markup import escape

        outcome = "; ".join(getattr(interrupt, "__notes__", [])) or "no results were written"
        _print_error(f"[bold red]interrupted[/] ({str(interrupt) or 'SIGINT'}): stopped; {escape(outcome)}")
        return exit_status(interrupt)
    except BrokenPipeError:  # the reader of our output went away (`fedhh plan ... | head`): nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's flush at exit must not fail
        return EXIT_FAILURE
    except Exception:  # a bug or a failing environment, never the user's input: show where
        traceback.print_exc()
        _print_error(
            f"[bold red]internal error[/] in fedhh {__version__} (not a problem with the input); "
            "the traceback above says where"
        )
        return EXIT_FAILURE


def _print_error(markup: str) -> None:
    from rich.console import Console

    Console(stderr=True, soft_wrap=True).print(markup, highlight=False)


def run() -> None:
    """The ``fedhh`` program: :func:`main`, then exit without waiting for threads left behind.

    Everything fedhh started has been stopped and cleaned up when
    :func:`main` returns, and after a run, completed or stopped, no other
    thread is left.  Should one be (a stop that came while a module was
    being imported aside, a library's thread waiting on a call that will
    never return), the interpreter's exit would wait for it forever, or tear
    the modules down under it (a crash at exit, if it runs in native code),
    so the process then ends at once with :func:`main`'s status.

    The objects still alive are frozen first (``gc.freeze``): Python's last
    collection at exit would otherwise traverse every object the run's
    imports left (Flower, Ray, fastapi, SQLAlchemy), a second or more, only to
    free memory the exit frees anyway.
    """
    status = main()
    gc.freeze()
    lingering = [thread for thread in threading.enumerate() if thread is not threading.current_thread()]
    for thread in lingering:
        thread.join(timeout=LINGER_GRACE / max(len(lingering), 1))
    if any(thread.is_alive() for thread in lingering):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    run()
