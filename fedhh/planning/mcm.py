"""``fedhh plan mcm``: MCM's channels and budget split from (n, ε, m), and the chance of each frequency."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..privacy.ldp import ldp_report
from ..protocols.mcm import BUDGET, NAME, ORACLE, discovery_probability, mcm_parameters
from .commands import Option, ldp_plan_command
from .plan import PLAN_FREQUENCIES, check_frequencies


def plan_mcm(
    n_users: int, epsilon: float, value_bits: int = 64, channels: int = 0, top_k: int = 32,
    frequencies: Sequence[float] = PLAN_FREQUENCIES,
) -> dict[str, Any]:
    """MCM's parameters for ``n`` users at ε, the guarantee, and the worst-case chance of each frequency."""
    check_frequencies(frequencies)
    params = mcm_parameters({"channels": channels, "top_k": top_k}, epsilon, n_users, value_bits)
    split = BUDGET.split(NAME, epsilon)
    parameters = {"value_bits": value_bits, "channels": params.channels, "top_k": top_k}
    return {
        "protocol": NAME, "n_users": n_users, "epsilon": epsilon, "delta": 0.0, **parameters,
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
