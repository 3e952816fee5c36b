"""``fedhh plan NAME`` for an LDP protocol whose planner takes (n, ε) and a few options of its own.

PEM and TreeHist print tables of their own; the other LDP protocols'
planners return the same kind of dict (parameters, budget split, guarantee,
what a run can be expected to find), so one command shape serves them all:
``--users``, ``--epsilon``, the protocol's options, ``--json``.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Planner = Callable[..., dict[str, Any]]
AddPlanCommand = Callable[[argparse._SubParsersAction], argparse.ArgumentParser]
NOT_TABLED = ("privacy",)  # the guarantee's full report: in --json only


@dataclass(frozen=True)
class Option:
    """One planner keyword argument as a command-line option."""

    flag: str
    dest: str  # the planner's keyword
    type: type
    default: Any
    help: str


def plan_command(name: str, summary: str, planner: Planner, options: Sequence[Option]) -> AddPlanCommand:
    """What registers ``fedhh plan NAME`` (a spec's ``plan_command``) for ``planner``."""

    def add(plans: argparse._SubParsersAction) -> argparse.ArgumentParser:
        parser = plans.add_parser(name, help=summary, description=summary)
        parser.add_argument("--users", type=int, required=True, help="population size n")
        parser.add_argument("--epsilon", type=float, required=True, help="per-user ε > 0 (ε-LDP, δ = 0)")
        for option in options:
            parser.add_argument(option.flag, dest=option.dest, type=option.type, default=option.default,
                                help=f"{option.help} (default {option.default})")
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
        parser.set_defaults(func=functools.partial(print_plan, name, planner, tuple(o.dest for o in options)))
        return parser

    return add


def print_plan(name: str, planner: Planner, dests: tuple[str, ...], args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    planned = planner(n_users=args.users, epsilon=args.epsilon, **{dest: getattr(args, dest) for dest in dests})
    if args.json:
        print(json.dumps(planned, indent=2))
        return 0
    table = Table(title=f"{name} plan: n = {args.users:,}, ε = {args.epsilon:g}")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for key, value in planned.items():
        if key in NOT_TABLED:
            continue
        entries = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, entry in entries:
            label = key if sub is None else f"{key}, {sub}"
            if isinstance(entry, dict):
                entry = ", ".join(f"{k} {_number(v)}" for k, v in entry.items())
            elif isinstance(entry, list):
                entry = ", ".join(map(_number, entry))
            table.add_row(label.replace("_", " "), _number(entry))
    Console().print(table)
    return 0


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)
