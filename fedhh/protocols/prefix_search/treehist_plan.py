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
users is reported (:mod:`fedhh.protocols.prefix_search.item_discovery`: the item shares no
prefix with other values and none competes with it), at a few shares, and
the shares found with probability 0.5 and 0.9.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ...errors import InputError
from ...oracles.count_sketch_hadamard import NAME as COUNT_SKETCH_HADAMARD
from ...oracles.count_sketch_hadamard import auto_sketch_shape
from ...oracles.registry import ORACLE_NAMES
from ...planning.commands import JSON_OPTION, Option, Options, PlanCommand, PlanTable
from ...planning.plan import PLAN_FREQUENCIES, check_frequencies
from ...privacy.ldp import ldp_report
from ...privacy.validation import check_epsilon, check_positive_int
from ..common.prefix_encoding import ValueSpace
from ..registry import split_budget
from .search import THRESHOLD, SearchParameters, level_shares, uniform_segments

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
    for value, flag in (
        (n_users, "--users"),
        (value_bits, "--bits"),
        (segment_length, "--segment-length"),
        (top_k, "--top-k"),
        (candidates_per_step, "--candidates"),
    ):
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
        "treehist",
        n_users,
        epsilon,
        "bits",
        0,
        segments,
        level_shares(len(segments)),
        oracle,
        candidates_per_step,
        top_k,
        THRESHOLD,
        float(threshold),
        sketch_rows=sketch_rows,
        sketch_width=sketch_width,
    )


def detectable_share(params: SearchParameters, space: ValueSpace, probability: float) -> float | None:
    """The smallest share (to 1%) of users an item needs to be reported with ``probability``
    (``None`` when even an item held by everyone is not)."""
    from .item_discovery import item_discovery  # scipy: only when planning

    if item_discovery(params, space, 1.0).probability < probability:
        return None
    low, high = 1.0 / params.n_users, 1.0
    if item_discovery(params, space, low).probability >= probability:
        return low
    while high / low > 1.01:
        middle = math.sqrt(low * high)
        low, high = (
            (low, middle) if item_discovery(params, space, middle).probability >= probability else (middle, high)
        )
    return high


def plan_treehist(
    n_users: int, epsilon: float, frequencies: Sequence[float] = PLAN_FREQUENCIES, **design: Any
) -> dict[str, Any]:
    """TreeHist's parameters for the target (``design``: the options of :func:`treehist_parameters`),
    the guarantee, and what an item can expect (module docstring)."""
    from .item_discovery import item_discovery  # scipy: only when planning

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
        **(
            {"sketch": {"rows": params.sketch_rows, "width": params.sketch_width}}
            if params.sketch_rows or params.sketch_width
            else {}
        ),
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


def treehist_options(top_k_default: int | None = 32) -> tuple[Option, ...]:
    """TreeHist's design options (shared with ``fedhh size treehist``, where ``--top-k`` is also
    recall's K and so has no default)."""
    return (
        Option("--bits", "value length m in bits (default 64)", int, 64),
        Option("--segment-length", "η, bits each level adds (default 1)", int, 1),
        Option(
            "--top-k",
            "values reported at most (default 32)" + ("" if top_k_default else "; with --recall: K"),
            int,
            top_k_default,
        ),
        Option("--oracle", f"frequency oracle (default {DEFAULT_ORACLE})", default=DEFAULT_ORACLE),
        Option("--candidates", "prefixes kept per level at most (default 32)", int, 32),
        Option("--threshold", "share of users a prefix needs (default 0: the noise level)", float, 0.0),
        Option("--sketch-rows", "sketch rows / hash pairs t (default 0: automatic)", int, 0),
        Option("--sketch-width", "sketch width, a power of two (default 0: automatic)", int, 0),
    )


def treehist_design(args: Options) -> dict[str, Any]:
    """The keyword arguments of :func:`treehist_parameters` from :func:`treehist_options`' options."""
    return {
        "value_bits": args.bits,
        "segment_length": args.segment_length,
        "top_k": args.top_k,
        "oracle": args.oracle,
        "candidates_per_step": args.candidates,
        "threshold": args.threshold,
        "sketch_rows": args.sketch_rows,
        "sketch_width": args.sketch_width,
    }


def _treehist_plan(args: Options) -> dict[str, Any]:
    check_positive_int(args.users, "--users")
    return plan_treehist(args.users, args.epsilon, **treehist_design(args))


def _treehist_table(args: Options, plan: dict[str, Any]) -> PlanTable:
    oracle = plan["oracle"]
    if "sketch" in plan:
        oracle += f" ({plan['sketch']['rows']} x {plan['sketch']['width']:,})"
    rows = [
        ("levels (bits each)", f"{plan['levels']} ({args.segment_length})"),
        ("users per level", f"{plan['users_per_level']:,.0f}"),
        ("budget split", ", ".join(f"{name}: ε = {part:g}" for name, part in plan["budget_split"].items())),
        ("oracle", oracle),
        (
            "threshold, population counts (level 2)",
            "—" if len(plan["level_thresholds"]) < 2 else f"{plan['level_thresholds'][1]:,.0f}",
        ),
        ("prefixes kept per level (at most)", str(plan["candidates_per_step"])),
    ]
    rows += [
        (f"share found with probability {share}", "not reachable" if frequency is None else f"{frequency:.3g}")
        for share, frequency in plan["detectable_share"].items()
    ]
    rows += [
        (f"discovery, item of share {frequency}", f"{rate:.3f}") for frequency, rate in plan["discovery_rate"].items()
    ]
    notes = [
        f"privacy: {plan['model']}, ε = {args.epsilon:g}, δ = 0; an item sharing no prefix, "
        "no value competing for its places (see docs/sizing.md)"
    ]
    return PlanTable(f"TreeHist plan: n = {args.users:,}, ε = {args.epsilon:g}, m = {args.bits} bits", rows, notes)


TREEHIST_PLAN = PlanCommand(
    "TreeHist's levels, sketch, threshold and budget split from (n, ε, m), and what it finds",
    (
        Option("--users", "population size n", int, required=True),
        Option("--epsilon", "per-user ε > 0 (ε-LDP, δ = 0)", float, required=True),
        *treehist_options(),
        JSON_OPTION,
    ),
    _treehist_plan,
    _treehist_table,
    description="[Bassily17] §3 as `fedhh run` configures it, with the probability that an item of a given "
    "share is reported (an item sharing no prefix with other values, none competing with it).",
)
