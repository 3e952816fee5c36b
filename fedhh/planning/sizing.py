"""``fedhh size``: the smallest population that finds an item of a given share with a given probability.

The deployment question: an item held by a share ``f`` of the users must be
found with probability at least ``p`` at a privacy target.  How many users
does that take?  Each protocol answers from its analysis of an item sharing
no prefix with any other value (TrieHH's Proposition 1 setting; for the LDP
protocols, no other value competes for its places either):

* **TrieHH**: the worst-case discovery rate ``P(Hypergeom(n, fn, m) >= θ)^L``
  behind ``fedhh plan triehh``, with θ and m solved from (ε, δ, n, L);
* **PEM**: the design ``fedhh plan pem`` chooses for ``n``, and the item's
  chance to survive every level by the order-statistics model
  (:mod:`fedhh.protocols.item_discovery`);
* **TreeHist**: the levels ``fedhh plan treehist`` describes, the same model
  with threshold pruning and the final full-value pass.

The discovery rate is not monotone in ``n`` step by step: θ is fixed but m
and the item's holders ``round(f n)`` move in integer steps, and PEM's
optimizer changes its design with ``n``.  So the answer is defined as:

* TrieHH: the smallest ``n`` such that the bound meets the target at ``n``
  *and at every larger population* (the rate only drops between the
  population sizes where m or the holders grow, so the scan checks those
  points, over a window of several such steps above and below the first
  crossing; beyond it the rate's lower envelope grows with ``n``);
* PEM and TreeHist: a population ``n`` where the analysis meets the target
  while ``n`` less 1% does not (bisection over ``log n`` to 1%).

Either way, the analysis at ``n`` and at ``n - 1%`` is part of the answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import InputError
from ..privacy.validation import check_epsilon, check_positive_int
from ..protocols.common.prefix_encoding import ValueSpace
from ..protocols.item_discovery import item_discovery
from ..protocols.pem_analysis import (
    DEFAULT_DISTINCT_VALUES,
    DEFAULT_QUERY_LIMIT,
    DEFAULT_ZIPF_EXPONENT,
    MODELS,
    ORDER_STATISTICS,
)
from .commands import Option, Options
from .pem import DEFAULT_ORACLE as PEM_ORACLE
from .pem import pem_search_parameters, plan_pem
from .treehist import treehist_design, treehist_options, treehist_parameters

MAX_USERS = 10**12  # beyond this, the answer is "not reachable"
PRECISION = 0.01  # the LDP answers: n meets the target, n less this share does not
COLLISION_ORACLES = ("flh", "cms", "hcms", "count-mean", "count-median", "count-min", "count-sketch")
PEM_SHOWN = ("start_length", "segment_lengths", "group_shares", "candidates_per_step", "top_k", "oracle",
             "value_bits", "epsilon", "utility_model", "predicted_f1")
LDP_DEFINITION = "the analysis meets the target at n and not at n less 1% (bisection over log n)"


@dataclass(frozen=True)
class SizeAnswer:
    """The population an item needs, the analysis there and 1% below, and the parameters at ``users``."""

    protocol: str
    users: int
    frequency: float
    target: float
    discovery: float
    below_users: int
    below_discovery: float
    definition: str
    parameters: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_share(value: float, flag: str, upper_open: bool = True) -> float:
    """A share or probability in (0, 1) (``(0, 1]`` when ``upper_open`` is false)."""
    allowed = "(0, 1)" if upper_open else "(0, 1]"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
        0 < value < 1 or (not upper_open and value == 1)
    ):
        raise InputError(f"{flag}: must be a number in {allowed}, got {value!r}")
    return float(value)


OnStep = Callable[[int, float], None]  # (population size tried, the analysis' discovery rate there)


def no_check(args: Options, mode: str) -> None:
    """A protocol whose options need no check beyond their parsers'."""


@dataclass(frozen=True)
class Sizing:
    """What ``fedhh size NAME`` needs of one protocol (its spec names it: ``ProtocolSpec.sizing``).

    Its functions read the command's parsed options (``args``: an attribute per option)."""

    title: str  # the protocol's name in help texts and tables
    verify_trials: int  # default runs of --verify
    options: tuple[Option, ...]  # its own options
    answer: Callable[[Options, OnStep], SizeAnswer]  # the analytic answer
    verify_setup: Callable[[Options, SizeAnswer], dict[str, Any]]  # simulations.sizing.verify_item's
    check_analytic: Callable[[Options, str], None] = no_check  # options --frequency needs or refuses
    check_recall: Callable[[Options, str], None] = no_check  # options --recall refuses


def required(args: Options, names: tuple[str, ...], mode: str) -> None:
    """Refuse options among ``names`` that were not given (``mode``: with which others they are needed)."""
    for name in names:
        if getattr(args, name, None) is None:
            raise InputError(f"--{name.replace('_', '-')}: required {mode}")


def forbidden(args: Options, names: tuple[str, ...], mode: str) -> None:
    """Refuse options among ``names`` that were given (``mode``: with which others they are not used)."""
    for name in names:
        if getattr(args, name, None) not in (None, False, []):
            raise InputError(f"--{name.replace('_', '-')}: not used {mode}")


def bracket(
    meets: Callable[[int], bool], start: int, smallest: int, flags: str, describe: Callable[[int], str] | None = None
) -> tuple[int, int]:
    """(a population that fails, a larger one that meets the target): halving from ``start`` while
    it meets, doubling while it does not.  Below ``smallest`` nothing meets (the protocol cannot run);
    ``describe(n)`` says what the analysis gives at the largest ``n`` when the target is out of reach."""
    if meets(start):
        high, low = start, max(start // 2, smallest - 1)
        while low >= smallest and meets(low):
            high, low = low, max(low // 2, smallest - 1)
        return low, high
    low, high = start, start * 2
    while not meets(high):
        low, high = high, high * 2
        if high > MAX_USERS:
            found = "" if describe is None else f" ({describe(low)})"
            raise InputError(
                f"{flags}: not reached with up to {MAX_USERS:.0e} users{found}; ask for a larger share, "
                "a lower discovery probability or a looser privacy target"
            )
    return low, high


# -- PEM and TreeHist -------------------------------------------------------------------------------


def size_by_analysis(
    protocol: str,
    frequency: float,
    discovery: float,
    rate: Callable[[int], tuple[float, dict[str, Any]]],
    smallest: int,
    start: int,
    on_step: Callable[[int, float], None] | None = None,
    hint: str = "",
) -> SizeAnswer:
    """The population (to ``PRECISION``) at which ``rate(n)`` -- the analysis' discovery probability
    and the parameters it used -- reaches ``discovery``; the search starts at ``start`` users and
    never goes below ``smallest``.  ``hint`` explains an unreachable target."""
    evaluated: dict[int, tuple[float, dict[str, Any]]] = {}

    def evaluate(users: int) -> tuple[float, dict[str, Any]]:
        if users not in evaluated:
            evaluated[users] = rate(users)
            if on_step is not None:
                on_step(users, evaluated[users][0])
        return evaluated[users]

    def meets(users: int) -> bool:
        return users >= smallest and evaluate(users)[0] >= discovery

    def describe(users: int) -> str:
        return f"discovery {evaluate(users)[0]:.3g} at {users:,} users{hint}"

    flags = "--frequency / --discovery"
    low, high = bracket(meets, max(start, smallest), smallest, flags, describe)
    while True:
        while high - low > max(1, PRECISION * low):
            middle = min(max(int(round(math.sqrt(max(low, 1) * high))), low + 1), high - 1)
            low, high = (low, middle) if meets(middle) else (middle, high)
        below = int(high * (1 - PRECISION))
        if not meets(below):
            break
        low, high = bracket(meets, below, smallest, flags, describe)  # the design changed between
    discovered, parameters = evaluate(high)
    below = int(high * (1 - PRECISION))
    return SizeAnswer(protocol, high, frequency, discovery, discovered, below,
                      evaluate(below)[0] if below >= smallest else 0.0, LDP_DEFINITION, parameters)


def size_pem(
    frequency: float,
    discovery: float,
    epsilon: float,
    on_step: Callable[[int, float], None] | None = None,
    **design: Any,
) -> SizeAnswer:
    """The population at which the design ``fedhh plan pem`` chooses (``design``: the options of
    :func:`plan_pem`) reports an item of share ``frequency`` with probability ``discovery``."""
    check_share(frequency, "--frequency", upper_open=False)
    check_share(discovery, "--discovery")
    check_epsilon(epsilon, "--epsilon")
    value_bits = check_positive_int(design.get("value_bits", 64), "--bits")
    space = ValueSpace(value_bits, 2)

    def rate(users: int) -> tuple[float, dict[str, Any]]:
        plan = plan_pem(users, epsilon, **design)
        found = item_discovery(pem_search_parameters(plan), space, frequency)
        return found.probability, {key: plan[key] for key in PEM_SHOWN}

    smallest = max(math.ceil(1 / frequency), value_bits)
    return size_by_analysis("pem", frequency, discovery, rate, smallest, int(frequency**-2), on_step,
                            _collision_hint(design.get("oracle", "olh")))


def size_treehist(
    frequency: float,
    discovery: float,
    epsilon: float,
    on_step: Callable[[int, float], None] | None = None,
    **design: Any,
) -> SizeAnswer:
    """The population at which TreeHist (``design``: the options of :func:`treehist_parameters`)
    reports an item of share ``frequency`` with probability ``discovery``."""
    check_share(frequency, "--frequency", upper_open=False)
    check_share(discovery, "--discovery")
    check_epsilon(epsilon, "--epsilon")
    smallest = treehist_parameters(1 << 20, epsilon, **design).levels
    space = ValueSpace(design.get("value_bits", 64), 2)

    def rate(users: int) -> tuple[float, dict[str, Any]]:
        params = treehist_parameters(users, epsilon, **design)
        return item_discovery(params, space, frequency).probability, {
            "levels": params.levels, "segment_lengths": list(params.segment_lengths), "oracle": params.oracle,
            "sketch": {"rows": params.sketch_rows, "width": params.sketch_width}, "top_k": params.top_k,
            "candidates_per_step": params.candidates_per_step, "threshold": params.threshold,
            "value_bits": space.length, "epsilon": epsilon,
        }

    return size_by_analysis("treehist", frequency, discovery, rate, max(smallest, math.ceil(1 / frequency)),
                            int(frequency**-2), on_step, _collision_hint(design.get("oracle", "")))


def _collision_hint(oracle: str) -> str:
    """Why an oracle with collision variance can fall short in the assumed population at any size."""
    if oracle not in COLLISION_ORACLES:
        return ""
    return (f"; with {oracle}, the users without the item (one heavy empty value) add collision variance that "
            "grows like the item's count, so no population is enough: try --oracle olh")


# -- the sizings of ``fedhh size NAME`` --------------------------------------------------------------


def _pem_design(args: Options) -> dict[str, Any]:
    """The keyword arguments of :func:`plan_pem` from PEM's sizing options."""
    return {
        "value_bits": args.bits, "top_k": args.top_k or 32, "oracle": args.oracle, "query_limit": args.query_limit,
        "candidates_per_step": args.candidates, "zipf_exponent": args.zipf, "distinct": args.distinct,
        "model": args.model,
    }


def _pem_answer(args: Options, show: OnStep) -> SizeAnswer:
    return size_pem(args.frequency, args.discovery, args.epsilon, on_step=show, **_pem_design(args))


def _treehist_design(args: Options) -> dict[str, Any]:
    return {**treehist_design(args), "top_k": args.top_k or 32}


def _treehist_answer(args: Options, show: OnStep) -> SizeAnswer:
    return size_treehist(args.frequency, args.discovery, args.epsilon, on_step=show, **_treehist_design(args))


PEM_SIZING = Sizing(
    "PEM", 20,
    (
        Option("--bits", "value length m in bits (default 64)", int, 64),
        Option("--top-k", "k, values PEM reports (default 32); with --recall: K of recall@K", int),
        Option("--oracle", f"frequency oracle (default {PEM_ORACLE})", default=PEM_ORACLE),
        Option("--candidates", "|C_i|, prefixes kept per level (default: k)", int),
        Option("--query-limit", f"most oracle queries of the optimizer's design (default {DEFAULT_QUERY_LIMIT:,})",
               int, DEFAULT_QUERY_LIMIT),
        Option("--zipf", "Zipf exponent the optimizer assumes (default 1)", float, DEFAULT_ZIPF_EXPONENT),
        Option("--distinct", f"distinct values the optimizer assumes (default {DEFAULT_DISTINCT_VALUES:,})", int,
               DEFAULT_DISTINCT_VALUES),
        Option("--model", "survival model of the analysis (default order-statistics)", default=ORDER_STATISTICS,
               choices=MODELS),
    ),
    _pem_answer,
    lambda args, answer: {"search": pem_search_parameters(plan_pem(answer.users, args.epsilon, **_pem_design(args)))},
)
TREEHIST_SIZING = Sizing(
    "TreeHist", 20, treehist_options(top_k_default=None), _treehist_answer,
    lambda args, answer: {"search": treehist_parameters(answer.users, args.epsilon, **_treehist_design(args))},
)
