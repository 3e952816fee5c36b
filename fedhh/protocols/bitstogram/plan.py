"""``fedhh plan bitstogram``: the buckets, hash rows and budget split from (n, ε, m), and what a run finds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

from ...oracles.hashtogram import Hashtogram
from ...planning.commands import Option, ldp_plan_command
from ...planning.plan import PLAN_FREQUENCIES, check_frequencies
from ...privacy.ldp import ldp_report
from .parameters import ABSENT_REPORTED, NAME, ORACLE, BitstogramParameters, bitstogram_parameters


def discovery_probability(params: BitstogramParameters, frequency: float) -> float:
    """Chance that a value of population share ``frequency``, alone in its channel, is reported.

    Every bit position's vote: ``f n / m`` holders among the position's
    ``n / m`` users, against two uncorrelated estimates of variance
    ``(n / m) / c^2`` each (``c`` at ε/2): right with probability
    ``Phi(c f n / m / sqrt(2 n / m))``, all ``m`` of them to the power ``m``.
    Then the full-value estimate must pass the threshold.  Other values
    sharing the channel only shift the votes by about ``n / (T m)``, which
    ``T ~ sqrt(n)`` keeps well below the noise; this is ignored.
    """
    split = params.split
    n, m = params.n_users, params.value_bits
    c = math.tanh(split.parts[0][1] / 2)  # (e^ε - 1)/(e^ε + 1)
    holders = frequency * n
    per_bit = NormalDist().cdf(c * holders / m / math.sqrt(2 * n / m))
    final = Hashtogram(split.parts[1][1], 1 << 64, rows=params.rows, width=params.buckets, estimator="median")
    other, same = final.per_user_variance()
    sd = math.sqrt((n - holders) * other + holders * same)
    threshold = math.sqrt(n * other) * NormalDist().inv_cdf(1 - ABSENT_REPORTED / params.buckets)
    return per_bit**m * NormalDist().cdf((holders - threshold) / sd)


def plan_bitstogram(
    n_users: int,
    epsilon: float,
    value_bits: int = 64,
    buckets: int = 0,
    rows: int = 0,
    top_k: int = 32,
    frequencies: Sequence[float] = PLAN_FREQUENCIES,
) -> dict[str, Any]:
    """Bitstogram's parameters for ``n`` users at ε, the guarantee, and the chance of each frequency."""
    check_frequencies(frequencies)
    params = bitstogram_parameters(
        {"buckets": buckets, "hashtogram_rows": rows, "top_k": top_k}, epsilon, n_users, value_bits
    )
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
        Option(
            "--buckets", "T, channels and Hashtogram width (0: the power of two at or above sqrt(n))", int, 0, "buckets"
        ),
        Option("--hashtogram-rows", "Hashtogram hash rows (0: about ln n)", int, 0, "rows"),
        Option("--top-k", "k, values reported at most", int, 32, "top_k"),
    ],
)
