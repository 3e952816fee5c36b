"""``fedhh size triehh|pem|treehist``: the population a deployment needs.

Two questions, one command per protocol:

* ``--frequency F --discovery P`` (and the privacy target): the smallest
  population in which an item held by a share F of the users is found with
  probability P, from the protocol's analysis (:mod:`fedhh.planning.sizing`);
  ``--verify`` runs the real protocol a few times at the answer on the
  population the analysis assumes and prints both;
* ``--top-k K --recall R --population CONFIG``: the population at which runs
  of a config's population shape, protocol and privacy reach recall@K = R
  (:mod:`simulations.sizing`, on the fast driver).

Each protocol's part -- its options, its analysis, how ``--verify`` sets up
its runs -- is one :class:`Sizing`, named by its spec
(``ProtocolSpec.sizing``); the command has one subcommand per protocol
whose spec names one.  The simulations are drivers, above this module: the
command line hands them in (:func:`add_size_arguments`), so nothing here
imports them and the analytic answers stay framework-free.  Bad input raises
:class:`fedhh.errors.InputError` naming the option (exit status 2).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from ..config import load_config
from ..errors import InputError
from ..protocols import PROTOCOLS, load_tool
from ..protocols.pem_analysis import DEFAULT_DISTINCT_VALUES, DEFAULT_QUERY_LIMIT, DEFAULT_ZIPF_EXPONENT, MODELS, ORDER_STATISTICS
from .pem import DEFAULT_ORACLE as PEM_ORACLE
from .pem import pem_search_parameters, plan_pem
from .sizing import SizeAnswer, size_pem, size_treehist, size_triehh
from .treehist import add_treehist_options, treehist_options, treehist_parameters

DEFAULT_RECALL_TRIALS = 3
OnStep = Callable[[int, float], None]


def no_check(args: argparse.Namespace, mode: str) -> None:
    """A protocol whose options need no check beyond their parsers'."""


@dataclass(frozen=True)
class Sizing:
    """What ``fedhh size NAME`` needs of one protocol (its spec names it: ``ProtocolSpec.sizing``)."""

    title: str  # the protocol's name in help texts and tables
    verify_trials: int  # default runs of --verify
    add_options: Callable[[argparse.ArgumentParser], None]  # its own options
    answer: Callable[[argparse.Namespace, OnStep], SizeAnswer]  # the analytic answer
    verify_setup: Callable[[argparse.Namespace, SizeAnswer], dict[str, Any]]  # simulations.sizing.verify_item's
    check_analytic: Callable[[argparse.Namespace, str], None] = no_check  # options --frequency needs or refuses
    check_recall: Callable[[argparse.Namespace, str], None] = no_check  # options --recall refuses


def sizings() -> dict[str, Sizing]:
    """The registered protocols that can be sized, by name, in registration order."""
    return {
        name: load_tool(spec.sizing, f"the sizing of {name!r}")
        for name, spec in PROTOCOLS.items() if spec.sizing is not None
    }


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
        parser = kinds.add_parser(protocol, help=f"size a {name} deployment",
                                  description=f"The population {name} needs (see `fedhh size --help`).")
        parser.add_argument("--frequency", type=float, help="share of users holding the item, in (0, 1]")
        parser.add_argument("--discovery", type=float, help="probability of finding it, in (0, 1)")
        parser.add_argument("--epsilon", type=float, help="target ε > 0 (TrieHH central, PEM/TreeHist per user)")
        sizing.add_options(parser)
        parser.add_argument("--verify", action="store_true",
                            help="run the protocol on the assumed population at the answer and print both")
        parser.add_argument("--trials", type=int,
                            help=f"runs for --verify (default {sizing.verify_trials}) or per population size "
                            f"with --recall (default {DEFAULT_RECALL_TRIALS})")
        parser.add_argument("--seed", type=int, default=0, help="first seed of the --verify runs (default 0)")
        parser.add_argument("--recall", type=float, help="target recall@K, in (0, 1] (with --top-k and --population)")
        parser.add_argument("--population", metavar="CONFIG", help="TOML config whose population shape is sized")
        parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                            help="override one value of the --population config (repeatable)")
        parser.add_argument("--json", action="store_true", help="print JSON (`users` is the answer)")
        parser.set_defaults(func=run_size, protocol=protocol, sizing=sizing, verify_item=verify_item,
                            size_by_recall=size_by_recall)


def _add_triehh_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--delta", type=float, help="target δ in (0, 1)")
    parser.add_argument("--max-rounds", type=int, help="L: rounds, i.e. symbols of the longest item plus the end symbol")
    parser.add_argument("--top-k", type=int, help="K of recall@K (with --recall and --population)")


def _check_triehh_analytic(args: argparse.Namespace, mode: str) -> None:
    _required(args, ("delta", "max_rounds"), mode)
    _forbidden(args, ("top_k",), mode + " (TrieHH has no k)")


def _check_triehh_recall(args: argparse.Namespace, mode: str) -> None:
    _forbidden(args, ("max_rounds",), mode + " (L comes from the config's protocol.max_length)")


def _add_pem_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bits", type=int, default=64, help="value length m in bits (default 64)")
    parser.add_argument("--top-k", type=int,
                        help="k, values PEM reports (default 32); with --recall: K of recall@K")
    parser.add_argument("--oracle", default=PEM_ORACLE, help=f"frequency oracle (default {PEM_ORACLE})")
    parser.add_argument("--candidates", type=int, help="|C_i|, prefixes kept per level (default: k)")
    parser.add_argument("--query-limit", type=int, default=DEFAULT_QUERY_LIMIT,
                        help=f"most oracle queries of the optimizer's design (default {DEFAULT_QUERY_LIMIT:,})")
    parser.add_argument("--zipf", type=float, default=DEFAULT_ZIPF_EXPONENT,
                        help="Zipf exponent the optimizer assumes (default 1)")
    parser.add_argument("--distinct", type=int, default=DEFAULT_DISTINCT_VALUES,
                        help=f"distinct values the optimizer assumes (default {DEFAULT_DISTINCT_VALUES:,})")
    parser.add_argument("--model", choices=MODELS, default=ORDER_STATISTICS,
                        help="survival model of the analysis (default order-statistics)")


def _pem_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :func:`plan_pem` from :func:`_add_pem_options`' options."""
    return {
        "value_bits": args.bits, "top_k": args.top_k or 32, "oracle": args.oracle, "query_limit": args.query_limit,
        "candidates_per_step": args.candidates, "zipf_exponent": args.zipf, "distinct": args.distinct,
        "model": args.model,
    }


def _required(args: argparse.Namespace, names: tuple[str, ...], mode: str) -> None:
    for name in names:
        if getattr(args, name, None) is None:
            raise InputError(f"--{name.replace('_', '-')}: required {mode}")


def _forbidden(args: argparse.Namespace, names: tuple[str, ...], mode: str) -> None:
    for name in names:
        if getattr(args, name, None) not in (None, False, []):
            raise InputError(f"--{name.replace('_', '-')}: not used {mode}")


def run_size(args: argparse.Namespace) -> int:
    if args.population is not None or args.recall is not None:
        return _size_by_recall(args)
    mode = "with --frequency / --discovery"
    _required(args, ("frequency", "discovery", "epsilon"), "(the item's share, the probability and ε)")
    args.sizing.check_analytic(args, mode)
    _forbidden(args, ("set",), mode + " (it overrides the --population config)")
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


def _triehh_answer(args: argparse.Namespace, show: OnStep) -> SizeAnswer:
    return size_triehh(args.frequency, args.discovery, args.epsilon, args.delta, args.max_rounds)


def _pem_answer(args: argparse.Namespace, show: OnStep) -> SizeAnswer:
    return size_pem(args.frequency, args.discovery, args.epsilon, on_step=show, **_pem_options(args))


def _treehist_design(args: argparse.Namespace) -> dict[str, Any]:
    return {**treehist_options(args), "top_k": args.top_k or 32}


def _treehist_answer(args: argparse.Namespace, show: OnStep) -> SizeAnswer:
    return size_treehist(args.frequency, args.discovery, args.epsilon, on_step=show, **_treehist_design(args))


def _verify(args: argparse.Namespace, answer: SizeAnswer, status: Any) -> dict[str, Any]:
    verify_item = args.verify_item
    trials = args.trials if args.trials is not None else args.sizing.verify_trials

    def progress(done: int, total: int) -> None:
        status.update(f"verifying at n = {answer.users:,}: run {done}/{total}")

    result = verify_item(args.protocol, answer.users, args.frequency, answer.discovery, trials, args.seed,
                         progress=progress, **args.sizing.verify_setup(args, answer))
    return result.to_dict()


def _print_answer(answer: SizeAnswer, verification: dict[str, Any] | None) -> None:
    table = Table(title=f"{answer.protocol}: an item held by {answer.frequency:g} of the users, "
                        f"found with probability {answer.target:g}")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("users needed", f"{answer.users:,}")
    table.add_row(f"discovery at {answer.users:,} (analysis)", f"{answer.discovery:.4f}")
    table.add_row(f"discovery at {answer.below_users:,} (1% fewer)", f"{answer.below_discovery:.4f}")
    for key, value in answer.parameters.items():
        table.add_row(key.replace("_", " "), _shown(value))
    if verification is not None:
        low, high = verification["interval"]
        table.add_row(f"simulated: found in {verification['found']} of {verification['trials']} runs",
                      f"{verification['rate']:.3f} [{low:.3f}, {high:.3f}]")
    console = Console()
    console.print(table)
    console.print(f"definition: {answer.definition}")
    if verification is not None and not verification["consistent"]:
        console.print("[yellow]the analysis lies outside the simulated rate's 95% interval[/]")


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
    _required(args, ("top_k", "recall", "population"), mode)
    _forbidden(args, ("frequency", "discovery", "verify"), mode)
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
    for step in answer.steps:
        style = "bold green" if step["users"] == answer.users else None
        table.add_row(f"{step['users']:,}", f"{step['recall']:.3f}", style=style)
    console = Console()
    console.print(table)
    console.print(f"users needed: {answer.users:,} (recall {answer.recall:.3f}); definition: {answer.definition}")
    return 0


TRIEHH = Sizing(
    "TrieHH", 200, _add_triehh_options, _triehh_answer,  # --verify: TrieHH's runs cost a few ms each
    lambda args, answer: {"privacy": (args.epsilon, args.delta, args.max_rounds)},
    check_analytic=_check_triehh_analytic, check_recall=_check_triehh_recall,
)
PEM = Sizing(
    "PEM", 20, _add_pem_options, _pem_answer,
    lambda args, answer: {"search": pem_search_parameters(plan_pem(answer.users, args.epsilon, **_pem_options(args)))},
)
TREEHIST = Sizing(
    "TreeHist", 20, lambda parser: add_treehist_options(parser, top_k_default=None), _treehist_answer,
    lambda args, answer: {"search": treehist_parameters(answer.users, args.epsilon, **_treehist_design(args))},
)
