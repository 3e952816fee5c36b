"""``fedhh plan aggregate-trie``: the noise of every level for (n, ε, δ), the threshold, and the chance
that an item of each population share survives every level."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ...data.items import ItemCodec, get_alphabet
from ...planning.commands import JSON_OPTION, Option, Options, PlanCommand, PlanTable, ldp_plan_rows
from ...planning.plan import PLAN_FREQUENCIES, check_frequencies
from ...privacy.aggregate_trie import AggregateTrieParameters, solve_aggregate_trie
from ...privacy.central import GAUSSIAN, LAPLACE, NOISES
from ...privacy.validation import check_positive_int
from .extensions import ExtensionDomain
from .parameters import MAX_EXTENSION, levels_for, sampling_rate
from .server import check_findable


def pass_probability(params: AggregateTrieParameters, holders: float, threshold: float) -> float:
    """The chance that a candidate held by ``holders`` users passes ``threshold`` in one level: its
    count (Binomial(holders, q), taken as normal) plus the level's noise exceeds the threshold."""
    q = params.sampling_rate
    mean = holders * q
    noise_variance = 2 * params.scale**2 if params.noise == LAPLACE else params.scale**2
    spread = math.sqrt(holders * q * (1 - q) + noise_variance)
    return 0.5 * math.erfc((threshold - mean) / (spread * math.sqrt(2)))


def plan_aggregate_trie(
    n_users: int,
    epsilon: float,
    delta: float,
    max_length: int = 10,
    noise: str = GAUSSIAN,
    users_per_level: int = 0,
    extension: int = 2,
    contributions: int = 1,
    max_prefixes: int = 64,
    unit_size: int = 1,
    alphabet: str = "lowercase",
    frequencies: Sequence[float] = PLAN_FREQUENCIES,
) -> dict[str, Any]:
    """The noise scale solved for the target over the tree's levels, the guarantee, the largest
    level's threshold, and per population share the chance that an item of the longest length held
    by that share of users (each counting it) passes every level: a lower bound where
    ``max_prefixes`` larger prefixes do not outrank it (a normal approximation of the sampled count)."""
    check_frequencies(frequencies)
    check_positive_int(extension, "--extension", maximum=MAX_EXTENSION)
    check_positive_int(max_prefixes, "--max-prefixes")
    check_positive_int(contributions, "--contributions")
    codec = ItemCodec(get_alphabet(alphabet), unit_size, max_length)
    levels = levels_for(codec.max_rounds, extension)
    params = solve_aggregate_trie(
        n_users, epsilon, delta, noise, contributions, sampling_rate(users_per_level, n_users), levels
    )
    threshold = check_findable(params, 0.0, max_prefixes, extension, codec)
    candidates = max_prefixes * ExtensionDomain(codec.symbol_ids, extension).size
    report = params.report()
    return {
        "protocol": "aggregate-trie",
        "n_users": n_users,
        "epsilon": report.epsilon,
        "delta": report.delta,
        "noise": noise,
        "scale": params.scale,
        "levels": levels,
        "sampling_rate": params.sampling_rate,
        "users_per_level": params.expected_users,
        "contributions": contributions,
        "candidates_per_level": candidates,
        "threshold": threshold,
        "discovery_rate": {f"{f:g}": pass_probability(params, f * n_users, threshold) ** levels for f in frequencies},
        "model": report.model,
        "privacy": report.to_dict(),
    }


def _plan(args: Options) -> dict[str, Any]:
    return plan_aggregate_trie(
        args.users,
        args.epsilon,
        args.delta,
        args.max_length,
        args.noise,
        args.users_per_level,
        args.extension,
        args.contributions,
        args.max_prefixes,
    )


def _table(args: Options, planned: dict[str, Any]) -> PlanTable:
    return PlanTable(
        f"aggregate-trie plan: n = {args.users:,}, ε = {args.epsilon:g}, δ = {args.delta:g}, "
        f"{planned['levels']} levels",
        ldp_plan_rows(planned),
        [f"privacy: {planned['model']}"],
    )


AGGREGATE_TRIE_PLAN = PlanCommand(
    "the noise of every level for (n, ε, δ), its threshold, and the chance of each frequency",
    (
        Option("--users", "population size n", int, required=True),
        Option("--epsilon", "central ε > 0 (user-level, over all levels)", float, required=True),
        Option("--delta", "δ in (0, 1/n)", float, required=True),
        Option("--max-length", "characters of the longest item (default 10)", int, default=10),
        Option("--noise", "noise added to each count (default gaussian)", default=GAUSSIAN, choices=NOISES),
        Option("--users-per-level", "users sampled per level on average (default 0: every user)", int, default=0),
        Option("--extension", "symbols a level adds (default 2)", int, default=2),
        Option("--contributions", "candidates a user adds 1 to per level (default 1)", int, default=1),
        Option("--max-prefixes", "prefixes kept per level (default 64)", int, default=64),
        JSON_OPTION,
    ),
    _plan,
    _table,
    description="The aggregate-DP prefix tree (Chadha et al., SaTML 2024): Gaussian or Laplace noise on each "
    "level's summed counts, composed over the levels by dp-accounting (docs/protocols.md).",
)
