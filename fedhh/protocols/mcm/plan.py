"""``fedhh plan mcm``: the channels and budget split from (n, ε, m), and the chance of each frequency."""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

from ...oracles import make_oracle
from ...planning.commands import Option, ldp_plan_command
from ...planning.plan import PLAN_FREQUENCIES, check_frequencies
from ...privacy.ldp import ldp_report
from .parameters import BUDGET, NAME, ORACLE, MCMParameters, mcm_parameters


def discovery_probability(params: MCMParameters, frequency: float) -> float:
    """Chance that a value of population share ``frequency`` is recovered and reported, in the worst case.

    It must share its channel with none of the other ``k - 1`` heaviest values
    (``(1 - 1/h)^(k - 1)``), win every bit position's vote (``f n / m``
    holders among ``n / m`` reporters, against two OLH estimates of variance
    ``(n / m) Var_OLH`` each, every bit contested), and its full-value
    estimate must beat an absent value's by the noise (``Phi(f n / sd)``,
    standing for the top-k selection among the ``h`` candidates).
    """
    n, m = params.n_users, params.value_bits
    bit_oracle = make_oracle(ORACLE, epsilon=params.epsilon / 2, domain=2 * params.channels)
    final_oracle = make_oracle(ORACLE, epsilon=params.epsilon / 2, domain=2)
    holders = frequency * n
    vote = NormalDist().cdf(holders / m / math.sqrt(2 * n / m * bit_oracle.per_user_variance()[0]))
    final = NormalDist().cdf(holders / math.sqrt(n * final_oracle.per_user_variance()[0]))
    alone = (1 - 1 / params.channels) ** (params.top_k - 1)
    return alone * vote**m * final


def plan_mcm(
    n_users: int,
    epsilon: float,
    value_bits: int = 64,
    channels: int = 0,
    top_k: int = 32,
    frequencies: Sequence[float] = PLAN_FREQUENCIES,
) -> dict[str, Any]:
    """MCM's parameters for ``n`` users at ε, the guarantee, and the worst-case chance of each frequency."""
    check_frequencies(frequencies)
    params = mcm_parameters({"channels": channels, "top_k": top_k}, epsilon, n_users, value_bits)
    split = BUDGET.split(NAME, epsilon)
    parameters = {"value_bits": value_bits, "channels": params.channels, "top_k": top_k}
    return {
        "protocol": NAME,
        "n_users": n_users,
        "epsilon": epsilon,
        "delta": 0.0,
        **parameters,
        "users_per_bit_position": n_users / value_bits,
        "budget_split": {name: part for name, part in split.parts},
        "discovery_rate": {f"{f:g}": discovery_probability(params, f) for f in frequencies},
        "model": "local, per-user ε-LDP",
        "privacy": ldp_report(split, ORACLE, parameters).to_dict(),
    }


MCM_PLAN = ldp_plan_command(
    NAME,
    "MCM's channels and budget split from (n, ε, m), and the chance of each frequency",
    plan_mcm,
    [
        Option("--bits", "value length m in bits", int, 64, "value_bits"),
        Option("--channels", "channels (0: ceil(k^1.5))", int, 0, "channels"),
        Option("--top-k", "k, values reported at most", int, 32, "top_k"),
    ],
)
