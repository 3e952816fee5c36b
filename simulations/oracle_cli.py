"""``fedhh oracles``: compare every frequency oracle on one Zipf population.

Prints a table (or, with ``--json``, a JSON list of ``{oracle, mse,
predicted_variance, users_per_s}``) from
:func:`fedhh.oracles.experiment.run_oracle_experiment`.
"""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from fedhh.oracles.experiment import run_oracle_experiment

JSON_FIELDS = ("oracle", "mse", "predicted_variance", "users_per_s")


def add_oracles_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``oracles`` subcommand's arguments; its handler is the parser's ``func`` default."""
    parser.description = (
        "Every frequency oracle on the same Zipf population at the same epsilon: "
        "measured MSE over the domain, predicted variance, their ratio, users per second."
    )
    parser.add_argument("--epsilon", type=float, default=4.0, help="privacy budget ε > 0 (default 4)")
    parser.add_argument("--domain", type=int, default=1024, help="domain size d >= 2 (default 1024)")
    parser.add_argument("--users", type=int, default=100_000, help="number of users n (default 100000)")
    parser.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent of the data (default 1.1)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of the table")
    parser.set_defaults(func=run_oracles_command)


def run_oracles_command(args: argparse.Namespace) -> int:
    rows = run_oracle_experiment(
        epsilon=args.epsilon, domain=args.domain, users=args.users, zipf=args.zipf, seed=args.seed
    )
    if args.json:
        print(json.dumps([{field: row[field] for field in JSON_FIELDS} for row in rows], indent=2))
        return 0
    table = Table(
        title=f"Frequency oracles: ε = {args.epsilon:g}, d = {args.domain:,}, n = {args.users:,}, "
        f"Zipf({args.zipf:g}), seed {args.seed}"
    )
    for column in ("oracle", "MSE", "predicted variance", "MSE / predicted", "users/s", "decode s"):
        table.add_column(column, justify="left" if column == "oracle" else "right")
    best = min(row["mse"] for row in rows)
    for row in rows:
        style = "bold green" if row["mse"] == best else None
        table.add_row(
            row["oracle"],
            f"{row['mse']:,.1f}",
            f"{row['predicted_variance']:,.1f}",
            f"{row['ratio']:.3f}",
            f"{row['users_per_s']:,.0f}",
            f"{row['decode_s']:.3g}",
            style=style,
        )
    Console().print(table)
    return 0
