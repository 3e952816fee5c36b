"""The ``fedhh`` command line: run experiments, plan parameters, compare oracles.

Exit statuses: 0 success; 2 bad input (a config key or value, an item, a
privacy target that cannot be met, an output folder that must not be
written: :class:`fedhh.errors.InputError`), reported as one line naming the
field, with nothing written; 130 (SIGINT) or 143 (SIGTERM) when a run was
stopped; 1 for anything else, which is a failure of fedhh or of its
environment, not of the input, and is reported with its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import __version__
from .config import FedhhConfig, load_config
from .errors import InputError
from .interrupts import exit_status, interruptible
from .oracles.cli import add_oracles_parser
from .privacy.cli import add_audit_parser
from .privacy.pem_plan import add_pem_plan_parser
from .privacy.plan import plan as plan_protocol
from .privacy.sizing_cli import add_size_parser
from .privacy.treehist_plan import add_treehist_plan_parser
from .results import ResultsFolder, to_json

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
    config = load_config(args.config, args.set)
    from simulations.report import print_run_report
    from simulations.run import run_experiment

    with claim_output(args, config) as output, ray_address(args.ray_address):
        result = run_experiment(config, output, show_progress=not args.quiet)
    if args.json:
        print(to_json(result))
    else:
        print_run_report(result, output.path)
    return 0


def _plan_triehh(args: argparse.Namespace) -> int:
    plan = plan_protocol(
        "triehh", n_users=args.users, epsilon=args.epsilon, delta=args.delta, max_rounds=args.max_rounds
    )
    if args.json:
        print(json.dumps(plan, indent=2))
        return 0
    table = Table(title=f"TrieHH plan: n = {args.users:,}, L = {args.max_rounds} rounds")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("threshold θ", str(plan["theta"]))
    table.add_row("batch size m", f"{plan['batch_size']:,}")
    table.add_row("sampling rate m/n", f"{plan['sampling_rate']:.4g}")
    table.add_row("ε (guaranteed)", f"{plan['epsilon']:.6g}")
    table.add_row("δ (guaranteed)", f"{plan['delta']:.3g}")
    for frequency, rate in plan["worst_case_discovery_rate"].items():
        table.add_row(f"worst-case discovery, frequency {frequency}", f"{rate:.3f}")
    console = Console()
    console.print(table)
    console.print(f"model: {plan['model']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedhh", description="Federated heavy-hitter discovery with differential privacy."
    )
    parser.add_argument("--version", action="version", version=f"fedhh {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run an experiment (default: TrieHH on 1M wordfreq users)")
    run.add_argument("config", nargs="?", help="TOML config (defaults apply to missing keys)")
    run.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                     help="override one config value (repeatable)")
    run.add_argument("--output", help="results folder, new or empty (default: results/<protocol>-<time>)")
    run.add_argument("--overwrite", action="store_true",
                     help="replace --output if it holds a previous fedhh result (and nothing else)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--json", action="store_true", help="print result.json instead of the summary")
    run.add_argument("--ray-address", help="run on this existing Ray cluster (host:port; default: $RAY_ADDRESS; "
                     "'auto' is refused): the fast driver's shards become actors there (run.backend auto)")
    run.set_defaults(func=_run)

    plan = commands.add_parser("plan", help="solve protocol parameters from a privacy target")
    plans = plan.add_subparsers(dest="protocol", required=True)
    triehh = plans.add_parser("triehh", help="θ and batch size m from (n, ε, δ, L)")
    triehh.add_argument("--users", type=int, required=True, help="population size n")
    triehh.add_argument("--epsilon", type=float, required=True, help="target ε > 0")
    triehh.add_argument("--delta", type=float, required=True, help="target δ in (0, 1)")
    triehh.add_argument("--max-rounds", type=int, required=True,
                        help="L: rounds, i.e. symbols of the longest item plus the end symbol")
    triehh.add_argument("--json", action="store_true")
    triehh.set_defaults(func=_plan_triehh)
    add_pem_plan_parser(plans)
    add_treehist_plan_parser(plans)
    add_size_parser(commands)

    add_oracles_parser(commands)
    add_audit_parser(commands)
    from simulations.study_cli import add_study_parsers  # sweeps and reports are drivers: simulations/

    add_study_parsers(commands)
    from simulations.population_cli import add_population_parser  # the builder is a driver too

    add_population_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    errors = Console(stderr=True, soft_wrap=True)
    try:
        with interruptible():
            return int(args.func(args))
    except InputError as error:
        errors.print(f"[bold red]error:[/] {escape(str(error))}", highlight=False)
        return EXIT_USAGE
    except KeyboardInterrupt as interrupt:
        errors.print(
            f"[bold red]interrupted[/] ({str(interrupt) or 'SIGINT'}): stopped; no results were written",
            highlight=False,
        )
        return exit_status(interrupt)
    except Exception:  # a bug or a failing environment, never the user's input: show where
        traceback.print_exc()
        errors.print(
            f"[bold red]internal error[/] in fedhh {__version__} (not a problem with the input); "
            "the traceback above says where",
            highlight=False,
        )
        return EXIT_FAILURE


def run() -> None:
    """The ``fedhh`` program: :func:`main`, then exit without waiting for threads a stopped engine left behind.

    After an interrupted Flower run, Flower's engine can leave worker
    threads blocked on Ray calls that will never return (Ray is shut down by
    then); Python would wait for them at exit forever.  Everything fedhh
    started has been stopped and cleaned up when :func:`main` returns, so
    the process ends at once with :func:`main`'s status.
    """
    status = main()
    lingering = [
        thread for thread in threading.enumerate()
        if thread is not threading.current_thread() and not thread.daemon and thread.is_alive()
    ]
    for thread in lingering:
        thread.join(timeout=LINGER_GRACE / max(len(lingering), 1))
    if any(thread.is_alive() for thread in lingering):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    run()
