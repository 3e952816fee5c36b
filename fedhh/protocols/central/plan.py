"""``fedhh plan central``: the curator's noise and threshold for (n, ε, δ), and the chance of each frequency."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ...planning.commands import JSON_OPTION, Option, Options, PlanCommand, PlanTable, ldp_plan_rows
from ...planning.plan import PLAN_FREQUENCIES, check_frequencies
from ...privacy.central import LAPLACE, NOISES, CentralParameters, normal_quantile_upper, solve_central


def release_probability(params: CentralParameters, count: float) -> float:
    """The chance that an item sent by ``count`` users is released: its noisy count exceeds τ."""
    gap = (count - params.threshold) / params.scale
    if params.noise == LAPLACE:
        return 1 - 0.5 * math.exp(-gap) if gap >= 0 else 0.5 * math.exp(gap)
    return 0.5 * math.erfc(-gap / math.sqrt(2))


def count_released_with(params: CentralParameters, probability: float) -> float:
    """The count at which an item is released with ``probability`` (in (0, 1))."""
    if params.noise == LAPLACE:
        tail = 1 - probability
        offset = -math.log(2 * tail) if tail <= 0.5 else math.log(2 * probability)
        return params.threshold + params.scale * offset
    return params.threshold + params.scale * normal_quantile_upper(1 - probability)


def plan_central(
    n_users: int,
    epsilon: float,
    delta: float,
    noise: str = LAPLACE,
    frequencies: Sequence[float] = PLAN_FREQUENCIES,
) -> dict[str, Any]:
    """The curator's noise scale and threshold, its guarantee, the counts released with probability
    ½ and 0.9, and the chance that an item of each population share is released (every holder sending it)."""
    check_frequencies(frequencies)
    params = solve_central(n_users, epsilon, delta, noise)
    report = params.report()
    return {
        "protocol": "central",
        "n_users": n_users,
        "epsilon": report.epsilon,
        "delta": report.delta,
        "noise": params.noise,
        "scale": params.scale,
        "threshold": params.threshold,
        "count_released_half": count_released_with(params, 0.5),
        "count_released_0.9": count_released_with(params, 0.9),
        "discovery_rate": {f"{f:g}": release_probability(params, f * n_users) for f in frequencies},
        "model": report.model,
        "privacy": report.to_dict(),
    }


def _plan(args: Options) -> dict[str, Any]:
    return plan_central(args.users, args.epsilon, args.delta, args.noise)


def _table(args: Options, planned: dict[str, Any]) -> PlanTable:
    return PlanTable(
        f"central plan: n = {args.users:,}, ε = {args.epsilon:g}, δ = {args.delta:g}",
        ldp_plan_rows(planned),
        [f"privacy: {planned['model']}"],
    )


CENTRAL_PLAN = PlanCommand(
    "the curator baseline's noise and threshold for (n, ε, δ), and the chance of each frequency",
    (
        Option("--users", "population size n", int, required=True),
        Option("--epsilon", "central ε > 0 (user-level)", float, required=True),
        Option("--delta", "δ in (0, 1/n)", float, required=True),
        Option("--noise", "noise added to each count (default laplace)", default=LAPLACE, choices=NOISES),
        JSON_OPTION,
    ),
    _plan,
    _table,
    description="A curator's noisy histogram of the items present, released above a threshold calibrated to "
    "(ε, δ) (docs/privacy.md).",
)
