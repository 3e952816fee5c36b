"""``fedhh plan treehist``: TreeHist's levels, sketch, threshold and budget split, and what it can find.

What a run of TreeHist ([Bassily17] §3, as ``fedhh run`` configures it) does
with ``n`` users and ``m``-bit values:

* levels: ``ceil(m / η)`` (η = 1: the paper's binary prefix tree), each
  asked of ``n / levels`` users chosen by public randomness;
* budget split: every user reports its level's prefix with ε/2 and its
  whole value with ε/2 (the even split of Cormode et al.);
* oracle: the count sketch of Hadamard bits, ``t`` hash pairs (odd, near
  ``ln n``) and width the power of two at or above ``sqrt(n)``; any other
  frequency oracle with ``--oracle``;
* pruning: a prefix survives when its estimate clears the threshold (the
  noise level by default: about one absent prefix per level passes), at
  most ``candidates_per_step`` of them; the survivors of the last level are
  estimated from everyone's full-value reports and the best ``top_k`` are
  reported.

Expected utility: the probability that an item held by a share ``f`` of the
users is reported (:mod:`fedhh.protocols.item_discovery`: the item shares no
prefix with other values and none competes with it), at a few shares, and
the shares found with probability 0.5 and 0.9.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from ..errors import InputError
from ..oracles.count_sketch_hadamard import NAME as COUNT_SKETCH_HADAMARD
from ..oracles.count_sketch_hadamard import auto_sketch_shape
from ..oracles.registry import ORACLE_NAMES
from ..privacy.ldp import ldp_report
from ..privacy.validation import check_epsilon, check_positive_int
from ..protocols.item_discovery import item_discovery
from ..protocols.prefix_encoding import ValueSpace
from ..protocols.prefix_search import THRESHOLD, SearchParameters, level_shares, uniform_segments
from ..protocols.registry import split_budget
from .plan import PLAN_FREQUENCIES, check_frequencies

DEFAULT_ORACLE = COUNT_SKETCH_HADAMARD
DETECTION_TARGETS = (0.5, 0.9)


def treehist_parameters(
    n_users: int,
    epsilon: float,
    value_bits: int = 64,
    segment_length: int = 1,
    top_k: int = 32,
    oracle: str = DEFAULT_ORACLE,
    candidates_per_step: int = 32,
    threshold: float = 0.0,
    sketch_rows: int = 0,
    sketch_width: int = 0,
) -> SearchParameters:
    """The parameters a TreeHist run over ``value_bits``-bit values uses (sketch shape automatic when 0)."""
    for value, flag in ((n_users, "--users"), (value_bits, "--bits"), (segment_length, "--segment-length"),
                        (top_k, "--top-k"), (candidates_per_step, "--candidates")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{flag}: must be an integer >= 1, got {value!r}")
    if segment_length > value_bits:
        raise InputError(f"--segment-length: at most --bits = {value_bits}, got {segment_length}")
    if oracle not in ORACLE_NAMES:
        raise InputError(f"--oracle: unknown name {oracle!r}; allowed: {list(ORACLE_NAMES)}")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold <= 1:
        raise InputError(f"--threshold: must be a share of the users in [0, 1] (0: the noise level), got {threshold!r}")
    check_epsilon(epsilon, "--epsilon")
    if oracle == COUNT_SKETCH_HADAMARD:
        auto_rows, auto_width = auto_sketch_shape(n_users)
        sketch_rows, sketch_width = sketch_rows or auto_rows, sketch_width or auto_width
    segments = uniform_segments(value_bits, 0, segment_length)
    return SearchParameters(
        "treehist", n_users, epsilon, "bits", 0, segments, level_shares(len(segments)), oracle,
        candidates_per_step, top_k, THRESHOLD, float(threshold), sketch_rows=sketch_rows, sketch_width=sketch_width,
    )


def detectable_share(params: SearchParameters, space: ValueSpace, probability: float) -> float | None:
    """The smallest share (to 1%) of users an item needs to be reported with ``probability``
    (``None`` when even an item held by everyone is not)."""
    if item_discovery(params, space, 1.0).probability < probability:
        return None
    low, high = 1.0 / params.n_users, 1.0
    if item_discovery(params, space, low).probability >= probability:
        return low
    while high / low > 1.01:
        middle = math.sqrt(low * high)
        low, high = (low, middle) if item_discovery(params, space, middle).probability >= probability else (middle, high)
    return high


def plan_treehist(
    n_users: int, epsilon: float, frequencies: Sequence[float] = PLAN_FREQUENCIES, **design: Any
) -> dict[str, Any]:
    """TreeHist's parameters for the target (``design``: the options of :func:`treehist_parameters`),
    the guarantee, and what an item can expect (module docstring)."""
    params = treehist_parameters(n_users, epsilon, **design)
    value_bits = int(params.start_length + sum(params.segment_lengths))
    check_frequencies(frequencies)
    space = ValueSpace(value_bits, 2)
    split = split_budget("treehist", epsilon)
    detectable = {f"{p:g}": detectable_share(params, space, p) for p in DETECTION_TARGETS}
    reference = detectable["0.9"] or detectable["0.5"] or 1.0
    levels = item_discovery(params, space, reference).steps
    parameters = {
        "levels": params.levels,
        "segment_lengths": list(params.segment_lengths),
        "oracle": params.oracle,
        "candidates_per_step": params.candidates_per_step,
        "top_k": params.top_k,
        "threshold": params.threshold,
        **({"sketch": {"rows": params.sketch_rows, "width": params.sketch_width}}
           if params.sketch_rows or params.sketch_width else {}),
    }
    return {
        "protocol": "treehist",
        "n_users": n_users,
        "epsilon": epsilon,
        "delta": 0.0,
        "value_bits": value_bits,
        **parameters,
        "prefix_lengths": [int(length) for length in params.lengths(value_bits)],
        "users_per_level": n_users / params.levels,
        "budget_split": {name: part for name, part in split.parts},
        "discovery_rate": {f"{f:g}": item_discovery(params, space, f).probability for f in frequencies},
        "detectable_share": detectable,
        "level_thresholds": [step["threshold"] for step in levels if step["level"] != "final"],
        "expected_candidates": [step["candidates"] for step in levels if step["level"] != "final"],
        "model": "local, per-user ε-LDP",
        "privacy": ldp_report(split, params.oracle, parameters).to_dict(),
    }


def add_treehist_plan_parser(plans: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``plan treehist`` under the ``plan`` subcommands; its handler is the parser's ``func``."""
    treehist = plans.add_parser(
        "treehist",
        help="TreeHist's levels, sketch, threshold and budget split from (n, ε, m), and what it finds",
        description="[Bassily17] §3 as `fedhh run` configures it, with the probability that an item of a given "
        "share is reported (an item sharing no prefix with other values, none competing with it).",
    )
    treehist.add_argument("--users", type=int, required=True, help="population size n")
    treehist.add_argument("--epsilon", type=float, required=True, help="per-user ε > 0 (ε-LDP, δ = 0)")
    add_treehist_options(treehist)
    treehist.add_argument("--json", action="store_true", help="print JSON instead of a table")
    treehist.set_defaults(func=print_treehist_plan)
    return treehist


def add_treehist_options(parser: argparse.ArgumentParser, top_k_default: int | None = 32) -> None:
    """TreeHist's design options (shared with ``fedhh size treehist``, where ``--top-k`` is also
    recall's K and so has no default)."""
    parser.add_argument("--bits", type=int, default=64, help="value length m in bits (default 64)")
    parser.add_argument("--segment-length", type=int, default=1, help="η, bits each level adds (default 1)")
    parser.add_argument("--top-k", type=int, default=top_k_default,
                        help="values reported at most (default 32)" + ("" if top_k_default else "; with --recall: K"))
    parser.add_argument("--oracle", default=DEFAULT_ORACLE, help=f"frequency oracle (default {DEFAULT_ORACLE})")
    parser.add_argument("--candidates", type=int, default=32, help="prefixes kept per level at most (default 32)")
    parser.add_argument("--threshold", type=float, default=0.0,
                        help="share of users a prefix needs (default 0: the noise level)")
    parser.add_argument("--sketch-rows", type=int, default=0, help="sketch rows / hash pairs t (default 0: automatic)")
    parser.add_argument("--sketch-width", type=int, default=0, help="sketch width, a power of two (default 0: automatic)")


def treehist_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :func:`treehist_parameters` from :func:`add_treehist_options`' options."""
    return {
        "value_bits": args.bits, "segment_length": args.segment_length, "top_k": args.top_k, "oracle": args.oracle,
        "candidates_per_step": args.candidates, "threshold": args.threshold, "sketch_rows": args.sketch_rows,
        "sketch_width": args.sketch_width,
    }


def print_treehist_plan(args: argparse.Namespace) -> int:
    check_positive_int(args.users, "--users")
    plan = plan_treehist(args.users, args.epsilon, **treehist_options(args))
    if args.json:
        print(json.dumps(plan, indent=2))
        return 0
    table = Table(title=f"TreeHist plan: n = {args.users:,}, ε = {args.epsilon:g}, m = {args.bits} bits")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("levels (bits each)", f"{plan['levels']} ({args.segment_length})")
    table.add_row("users per level", f"{plan['users_per_level']:,.0f}")
    table.add_row("budget split", ", ".join(f"{name}: ε = {part:g}" for name, part in plan["budget_split"].items()))
    oracle = plan["oracle"]
    if "sketch" in plan:
        oracle += f" ({plan['sketch']['rows']} x {plan['sketch']['width']:,})"
    table.add_row("oracle", oracle)
    table.add_row("threshold, population counts (level 2)",
                  "—" if len(plan["level_thresholds"]) < 2 else f"{plan['level_thresholds'][1]:,.0f}")
    table.add_row("prefixes kept per level (at most)", str(plan["candidates_per_step"]))
    for share, frequency in plan["detectable_share"].items():
        table.add_row(f"share found with probability {share}", "not reachable" if frequency is None else f"{frequency:.3g}")
    for frequency, rate in plan["discovery_rate"].items():
        table.add_row(f"discovery, item of share {frequency}", f"{rate:.3f}")
    console = Console()
    console.print(table)
    console.print(f"privacy: {plan['model']}, ε = {args.epsilon:g}, δ = 0; an item sharing no prefix, "
                  "no value competing for its places (see docs/sizing.md)")
    return 0
