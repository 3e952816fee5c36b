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
from dataclasses import replace
from typing import Any

from fedhh.planning.commands import Option, PlanCommand, PlanTable
from fedhh.privacy.report import PrivacyReport
from fedhh.protocols import PROTOCOLS
from fedhh.schema import PrivacySection


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
    parser.set_defaults(func=functools.partial(print_plan, command, name))
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


def print_plan(command: PlanCommand, name: str, args: argparse.Namespace) -> int:
    planned = with_shuffle(name, command.plan(args), args)
    if getattr(args, "json", False) or command.table is None:
        print(json.dumps(planned, indent=2))
        return 0
    table = command.table(args, planned)
    shuffle = planned.get("shuffle")
    if shuffle is not None:
        value = (
            "not applicable"
            if shuffle["epsilon"] is None
            else f"ε = {shuffle['epsilon']:.4g} at δ = {shuffle['delta']:.3g}"
        )
        table = replace(
            table,
            rows=[*table.rows, ("shuffled central (ε, δ)", value)],
            notes=[*table.notes, SHUFFLE_NOTE if shuffle["epsilon"] is not None else shuffle["reason"]],
        )
    print_table(table)
    return 0


SHUFFLE_NOTE = (
    "shuffled: the central (ε, δ) if every kind of report goes through an anonymising shuffle among its "
    'senders (Feldman, McMillan and Talwar 2021, numerical bound; docs/privacy.md, "The shuffle model")'
)


def with_shuffle(name: str, planned: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The plan with ``shuffle``: its ε-LDP reports' central (ε, δ) once shuffled, at the plan's δ (or the
    config's default δ), for a plan that states its guarantee and population."""
    privacy, n_users = planned.get("privacy"), planned.get("n_users")
    if not isinstance(privacy, dict) or not isinstance(n_users, int):
        return planned
    delta = getattr(args, "delta", None) or PrivacySection.keys()["delta"].default
    section = PrivacySection.of({"epsilon": 1.0, "delta": delta, "ledger": "", "max_epsilon": 0.0, "model": "local"})
    report = PROTOCOLS[name].shuffle_setting(section, n_users).apply(PrivacyReport.from_dict(privacy))
    return {**planned, "shuffle": report.shuffle}


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
