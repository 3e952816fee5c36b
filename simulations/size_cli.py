"""``fedhh size triehh|pem|treehist``: the population a deployment needs (the command line).

Two questions, one command per protocol:

* ``--frequency F --discovery P`` (and the privacy target): the smallest
  population in which an item held by a share F of the users is found with
  probability P, from the protocol's analysis (:mod:`fedhh.planning.sizing`);
  ``--verify`` runs the real protocol a few times at the answer on the
  population the analysis assumes and prints both (above a million users
  as law simulations, which the output says);
* ``--top-k K --recall R --population CONFIG``: the population at which runs
  of a config's population shape, protocol and privacy reach recall@K = R
  (:mod:`simulations.sizing`, on the fast driver).

Each protocol's part -- its options, its analysis, how ``--verify`` sets up
its runs -- is one :class:`fedhh.planning.sizing.Sizing`, named by its spec
(``ProtocolSpec.sizing``); the command has one subcommand per protocol
whose spec names one, built here from the sizing's declared options.  The
runs behind ``--verify`` and ``--recall`` are :mod:`simulations.sizing`'s,
handed in by the command line (:func:`add_size_arguments`).  Bad input raises
:class:`fedhh.errors.InputError` naming the option (exit status 2).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from fedhh.config import load_config
from fedhh.planning.sizing import SizeAnswer, Sizing, forbidden, required
from fedhh.protocols import PROTOCOLS

from .plan_cli import add_options

DEFAULT_RECALL_TRIALS = 3


def sizings() -> dict[str, Sizing]:
    """The registered protocols that can be sized, by name, in registration order."""
    return {name: spec.sizing for name, spec in PROTOCOLS.items() if spec.sizing is not None}


def add_size_arguments(
    size: argparse.ArgumentParser, *, verify_item: Callable[..., Any], size_by_recall: Callable[..., Any]
) -> None:
    """``size triehh|pem|treehist`` under the ``size`` subcommand; each handler is its parser's ``func``.

    ``verify_item`` and ``size_by_recall`` run the protocols for ``--verify`` and
    ``--recall`` (:mod:`simulations.sizing`'s functions of those names).
    """
    size.description = (
        "The smallest population for which an item held by --frequency of the users is found "
        "with probability --discovery, from each protocol's analysis (see docs/sizing.md); or, with "
        "--top-k K --recall R --population CONFIG, the population at which runs reach recall@K = R."
    )
    kinds = size.add_subparsers(dest="sized", required=True)
    for protocol, sizing in sizings().items():
        name = sizing.title
        parser = kinds.add_parser(
            protocol,
            help=f"size a {name} deployment",
            description=f"The population {name} needs (see `fedhh size --help`).",
        )
        parser.add_argument("--frequency", type=float, help="share of users holding the item, in (0, 1]")
        parser.add_argument("--discovery", type=float, help="probability of finding it, in (0, 1)")
        parser.add_argument("--epsilon", type=float, help="target ε > 0 (TrieHH central, PEM/TreeHist per user)")
        add_options(parser, sizing.options)
        parser.add_argument(
            "--verify",
            action="store_true",
            help="run the protocol on the assumed population at the answer and print both",
        )
        parser.add_argument(
            "--trials",
            type=int,
            help=f"runs for --verify (default {sizing.verify_trials}) or per population size "
            f"with --recall (default {DEFAULT_RECALL_TRIALS})",
        )
        parser.add_argument("--seed", type=int, default=0, help="first seed of the --verify runs (default 0)")
        parser.add_argument("--recall", type=float, help="target recall@K, in (0, 1] (with --top-k and --population)")
        parser.add_argument("--population", metavar="CONFIG", help="TOML config whose population shape is sized")
        parser.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="SECTION.KEY=VALUE",
            help="override one value of the --population config (repeatable)",
        )
        parser.add_argument("--json", action="store_true", help="print JSON (`users` is the answer)")
        parser.set_defaults(
            func=run_size, protocol=protocol, sizing=sizing, verify_item=verify_item, size_by_recall=size_by_recall
        )


def run_size(args: argparse.Namespace) -> int:
    if args.population is not None or args.recall is not None:
        return _size_by_recall(args)
    mode = "with --frequency / --discovery"
    required(args, ("frequency", "discovery", "epsilon"), "(the item's share, the probability and ε)")
    args.sizing.check_analytic(args, mode)
    forbidden(args, ("set",), mode + " (it overrides the --population config)")
    console = Console(stderr=True)
    with console.status("sizing...") as status:

        def show(users: int, discovery: float) -> None:
            status.update(f"n = {users:,}: discovery {discovery:.3f} (target {args.discovery:g})")

        answer = args.sizing.answer(args, show)
        verification = _verify(args, answer, status) if args.verify else None
    document: dict[str, Any] = {**answer.to_dict(), **({"verification": verification} if verification else {})}
    if args.json:
        print(json.dumps(document, indent=2, default=float))
    else:
        _print_answer(answer, verification)
    return 0


def _verify(args: argparse.Namespace, answer: SizeAnswer, status: Any) -> dict[str, Any]:
    verify_item = args.verify_item
    trials = args.trials if args.trials is not None else args.sizing.verify_trials

    def progress(done: int, total: int) -> None:
        status.update(f"verifying at n = {answer.users:,}: run {done}/{total}")

    result = verify_item(
        args.protocol,
        answer.users,
        args.frequency,
        answer.discovery,
        trials,
        args.seed,
        progress=progress,
        **args.sizing.verify_setup(args, answer),
    )
    return result.to_dict()


def _print_answer(answer: SizeAnswer, verification: dict[str, Any] | None) -> None:
    table = Table(
        title=f"{answer.protocol}: an item held by {answer.frequency:g} of the users, "
        f"found with probability {answer.target:g}"
    )
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("users needed", f"{answer.users:,}")
    table.add_row(f"discovery at {answer.users:,} (analysis)", f"{answer.discovery:.4f}")
    table.add_row(f"discovery at {answer.below_users:,} (1% fewer)", f"{answer.below_discovery:.4f}")
    for key, value in answer.parameters.items():
        table.add_row(key.replace("_", " "), _shown(value))
    if verification is not None:
        low, high = verification["interval"]
        how = (
            "law simulation, each round's aggregate from its exact law"
            if verification["simulation"] == "law"
            else "simulated, every user's report drawn"
        )
        table.add_row(
            f"{how}: found in {verification['found']} of {verification['trials']} runs",
            f"{verification['rate']:.3f} [{low:.3f}, {high:.3f}]",
        )
    console = Console()
    console.print(table)
    console.print(f"definition: {answer.definition}")
    if verification is not None and not verification["consistent"]:
        console.print("[yellow]the analysis lies outside the simulated rate's 95% interval[/]")
    for warning in answer.warnings:
        console.print(f"[yellow]warning: {warning}[/]")


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ", ".join(_shown(item) for item in value)
    if isinstance(value, dict):
        return ", ".join(f"{key} {_shown(item)}" for key, item in value.items())
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _size_by_recall(args: argparse.Namespace) -> int:
    mode = "with --recall / --population"
    required(args, ("top_k", "recall", "population"), mode)
    forbidden(args, ("frequency", "discovery", "verify"), mode)
    args.sizing.check_recall(args, mode)
    overrides = [*args.set, f'protocol.name="{args.protocol}"', "run.top_k=" + str(args.top_k)]
    if args.epsilon is not None:
        overrides.append(f"privacy.epsilon={args.epsilon!r}")
    if getattr(args, "delta", None) is not None:
        overrides.append(f"privacy.delta={args.delta!r}")
    config = load_config(args.population, overrides)
    size_by_recall = args.size_by_recall
    trials = args.trials if args.trials is not None else DEFAULT_RECALL_TRIALS
    console = Console(stderr=True)
    with console.status("sizing by simulation...") as status:

        def show(users: int, recall: float) -> None:
            status.update(f"n = {users:,}: recall@{args.top_k} {recall:.3f} (target {args.recall:g}, {trials} runs)")

        answer = size_by_recall(config, args.top_k, args.recall, trials, on_step=show)
    if args.json:
        print(json.dumps(answer.to_dict(), indent=2, default=float))
        return 0
    table = Table(title=f"{answer.protocol}: recall@{answer.top_k} >= {answer.target:g} on {args.population}")
    table.add_column("users")
    table.add_column(f"mean recall@{answer.top_k} ({answer.trials} runs)", justify="right")
    table.add_column("interval", justify="right")
    for step in answer.steps:
        style = "bold green" if step["users"] == answer.users else None
        table.add_row(
            f"{step['users']:,}", f"{step['recall']:.3f}", f"{step['low']:.3f} – {step['high']:.3f}", style=style
        )
    console = Console()
    console.print(table)
    console.print(f"users needed: {answer.users:,} (recall {answer.recall:.3f}); definition: {answer.definition}")
    low, high = answer.interval
    console.print(
        f"interval: {'?' if low is None else f'{low:,}'} to {'?' if high is None else f'{high:,}'} users: "
        "at the first the runs fall short of the target, from the second on every size tried reaches it "
        f"('?': no size tried settles it; per size: {answer.interval_method})"
    )
    return 0
