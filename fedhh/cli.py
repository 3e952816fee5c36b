"""The ``fedhh`` command line: run experiments, plan parameters, compare oracles.

Errors in the user's input (config keys, values, items, privacy targets
that cannot be met) exit with status 2 and one message naming the field;
nothing is written in that case.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .config import ConfigError, load_config
from .oracles.cli import add_oracles_parser
from .privacy.cli import add_audit_parser
from .privacy.pem_plan import add_pem_plan_parser
from .privacy.plan import plan as plan_protocol
from .privacy.sizing_cli import add_size_parser
from .privacy.treehist_plan import add_treehist_plan_parser
from .results import to_json

EXIT_USAGE = 2


def _run(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.set)
    output = Path(args.output) if args.output else Path("results") / (
        f"{config['protocol']['name']}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    from simulations.report import print_run_report
    from simulations.run import run_experiment

    result = run_experiment(config, output, show_progress=not args.quiet)
    if args.json:
        print(to_json(result))
    else:
        print_run_report(result, output)
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
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run an experiment (default: TrieHH on 1M wordfreq users)")
    run.add_argument("config", nargs="?", help="TOML config (defaults apply to missing keys)")
    run.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                     help="override one config value (repeatable)")
    run.add_argument("--output", help="results folder (default: results/<protocol>-<time>)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--json", action="store_true", help="print result.json instead of the summary")
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ConfigError, ValueError) as error:
        Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {escape(str(error))}", highlight=False)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
