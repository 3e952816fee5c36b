"""``fedhh plan NAME``: the parsers of the protocols' plan commands, and the tables they print.

Each registered protocol whose spec declares a plan command
(``ProtocolSpec.plan_command``, a :class:`fedhh.planning.commands.PlanCommand`)
gets a subcommand built from its declared options; its plan is printed as a
table, or as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Sequence
from typing import Any

from fedhh.planning.commands import Option, PlanCommand, PlanTable
from fedhh.protocols import PROTOCOLS


def add_plan_arguments(plan: argparse.ArgumentParser) -> None:
    """``fedhh plan NAME`` for every registered protocol whose spec declares a plan command."""
    plans = plan.add_subparsers(dest="protocol", required=True)
    for name, spec in PROTOCOLS.items():
        if spec.plan_command is not None:
            add_plan_parser(plans, name)


def add_plan_parser(plans: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    """Register ``plan NAME`` (protocol ``name``'s declared command) under the ``plan`` subcommands;
    its handler is the parser's ``func``."""
    command = PROTOCOLS[name].plan_command
    assert command is not None, f"{name!r} declares no plan command"
    parser = plans.add_parser(name, help=command.help, description=command.description)
    add_options(parser, command.options)
    parser.set_defaults(func=functools.partial(print_plan, command))
    return parser


def add_options(parser: argparse.ArgumentParser, options: Sequence[Option]) -> None:
    """Declared options as ``parser``'s arguments."""
    for option in options:
        settings: dict[str, Any] = (
            {"action": "store_true"} if option.switch else {"type": option.type, "default": option.default}
        )
        if option.required:
            settings["required"] = True
        for name in ("dest", "choices", "metavar", "help"):
            if getattr(option, name) is not None:
                settings[name] = getattr(option, name)
        parser.add_argument(option.flag, **settings)


def print_plan(command: PlanCommand, args: argparse.Namespace) -> int:
    planned = command.plan(args)
    if getattr(args, "json", False) or command.table is None:
        print(json.dumps(planned, indent=2))
        return 0
    print_table(command.table(args, planned))
    return 0


def print_table(table: PlanTable) -> None:
    """A plan's table (quantity, value), then its notes."""
    from rich.console import Console
    from rich.table import Table

    shown = Table(title=table.title)
    shown.add_column("quantity")
    shown.add_column("value", justify="right")
    for quantity, value in table.rows:
        shown.add_row(quantity, value)
    console = Console()
    console.print(shown)
    for note in table.notes:
        console.print(note)
