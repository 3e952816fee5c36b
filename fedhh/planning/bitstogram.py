"""``fedhh plan bitstogram``: Bitstogram's buckets, hash rows and budget split from (n, ε, m), and what it finds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..privacy.ldp import ldp_report
from ..protocols.bitstogram import NAME, ORACLE, bitstogram_parameters, discovery_probability
from .commands import Option, ldp_plan_command
from .plan import PLAN_FREQUENCIES, check_frequencies


def plan_bitstogram(
    n_users: int, epsilon: float, value_bits: int = 64, buckets: int = 0, rows: int = 0, top_k: int = 32,
    frequencies: Sequence[float] = PLAN_FREQUENCIES,
) -> dict[str, Any]:
    """Bitstogram's parameters for ``n`` users at ε, the guarantee, and the chance of each frequency."""
    check_frequencies(frequencies)
    params = bitstogram_parameters({"buckets": buckets, "hashtogram_rows": rows, "top_k": top_k}, epsilon, n_users, value_bits)
    parameters = {"value_bits": value_bits, "buckets": params.buckets, "hashtogram_rows": params.rows, "top_k": top_k}
    return {
        "protocol": NAME,
        "n_users": n_users,
        "epsilon": epsilon,
        "delta": 0.0,
        **parameters,
        "users_per_bit_position": n_users / value_bits,
        "budget_split": {name: part for name, part in params.split.parts},
        "discovery_rate": {f"{f:g}": discovery_probability(params, f) for f in frequencies},
        "model": "local, per-user ε-LDP",
        "privacy": ldp_report(params.split, ORACLE, parameters).to_dict(),
    }


BITSTOGRAM_PLAN = ldp_plan_command(
    NAME,
    "Bitstogram's buckets, hash rows and budget split from (n, ε, m), and what it finds",
    plan_bitstogram,
    [
        Option("--bits", "value length m in bits", int, 64, "value_bits"),
        Option("--buckets", "T, channels and Hashtogram width (0: the power of two at or above sqrt(n))", int, 0, "buckets"),
        Option("--hashtogram-rows", "Hashtogram hash rows (0: about ln n)", int, 0, "rows"),
        Option("--top-k", "k, values reported at most", int, 32, "top_k"),
    ],
)
