"""A protocol's ``fedhh plan NAME`` as data: its options, its planner call and the table it prints.

A protocol declares its plan command (``ProtocolSpec.plan_command``); the
command line builds one parser per declaration and prints what it returns
(:mod:`simulations.plan_cli`), so nothing here parses arguments or prints.
Most LDP planners take (n, ε) and a few options of their own and return the
same kind of dict (parameters, budget split, guarantee, what a run can be
expected to find): :func:`ldp_plan_command` makes their command.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Planner = Callable[..., dict[str, Any]]
# The parsed options of a command: one attribute per option, named by its dest (an argparse.Namespace).
Options = Any
# The guarantee's full reports, in --json only (the shuffled (ε, δ) gets a row of its own).
NOT_TABLED = ("privacy", "shuffle")


@dataclass(frozen=True)
class Option:
    """One command-line option: its flag and what a parser needs to read it."""

    flag: str
    help: str | None = None
    type: Callable[[str], Any] | None = None  # None: the text as given
    default: Any = None
    dest: str | None = None  # the attribute it is read into; None: named after the flag
    required: bool = False
    choices: Sequence[str] | None = None
    switch: bool = False  # a flag that takes no value: true when given
    metavar: str | None = None

    @property
    def attribute(self) -> str:
        """The attribute the parsed value is read into (argparse's, from the flag, unless ``dest`` names it)."""
        return self.dest or self.flag.lstrip("-").replace("-", "_")


JSON_OPTION = Option("--json", "print JSON instead of a table", switch=True)


@dataclass(frozen=True)
class PlanTable:
    """A plan as printed: a two-column table (quantity, value) and lines printed after it."""

    title: str
    rows: list[tuple[str, str]]
    notes: list[str]


@dataclass(frozen=True)
class PlanCommand:
    """``fedhh plan NAME``: its help, its options, the plan for parsed options and the table showing it.

    With ``--json`` (an option named ``json``), or without a ``table``, the plan is printed as JSON.
    """

    help: str
    options: tuple[Option, ...]
    plan: Callable[[Options], dict[str, Any]]
    table: Callable[[Options, dict[str, Any]], PlanTable] | None = None
    description: str | None = None


def ldp_plan_command(name: str, summary: str, planner: Planner, options: Sequence[Option]) -> PlanCommand:
    """The plan command of an LDP ``planner(n_users, epsilon, **options)``: ``--users``, ``--epsilon``,
    the planner's own ``options`` (each help ending with its default), ``--json``; its table lists the
    planner's answer entry by entry."""
    dests = tuple(option.attribute for option in options)

    def plan(args: Options) -> dict[str, Any]:
        return planner(n_users=args.users, epsilon=args.epsilon, **{dest: getattr(args, dest) for dest in dests})

    def table(args: Options, planned: dict[str, Any]) -> PlanTable:
        return PlanTable(f"{name} plan: n = {args.users:,}, ε = {args.epsilon:g}", ldp_plan_rows(planned), [])

    shown = tuple(
        Option(option.flag, f"{option.help} (default {option.default})", option.type, option.default, option.dest)
        for option in options
    )
    return PlanCommand(
        summary,
        (
            Option("--users", "population size n", int, required=True),
            Option("--epsilon", "per-user ε > 0 (ε-LDP, δ = 0)", float, required=True),
            *shown,
            JSON_OPTION,
        ),
        plan,
        table,
        description=summary,
    )


def ldp_plan_rows(planned: dict[str, Any]) -> list[tuple[str, str]]:
    """A planner's answer as table rows: one per entry (a nested dict: one per sub-entry), the
    guarantee's full report left to ``--json``."""
    rows = []
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
            rows.append((label.replace("_", " "), _number(entry)))
    return rows


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)
