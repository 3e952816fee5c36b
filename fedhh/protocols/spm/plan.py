"""``fedhh plan spm``: the segments and budget split from (n, ε, m), and each frequency's margin at every stage."""

from __future__ import annotations

import math
import typing
from collections.abc import Sequence
from typing import Any

from ...oracles import make_oracle
from ...oracles.local_hashing import LocalHashing
from ...planning.commands import Option, ldp_plan_command
from ...planning.plan import PLAN_FREQUENCIES, check_frequencies
from ...privacy.ldp import ldp_report
from .parameters import BUDGET, NAME, ORACLE, SPMParameters, spm_parameters


def stage_margins(params: SPMParameters, frequency: float) -> dict[str, float]:
    """How many standard deviations a value of population share ``frequency`` stands above an
    absent one at each stage (OLH at ε/3; patterns and pairs shared with other values ignored).

    Segments: ``2n/g`` reporters of each segment; pairs: ``n / C(g, 2)``
    reporters of each pair, the joint estimator's variance per reporter being
    about ``(q (1 - q))^2 / (p - q)^4``; final: all ``n``.
    """
    oracle = typing.cast(LocalHashing, make_oracle(ORACLE, epsilon=params.epsilon / 3, domain=2))  # OLH
    p, q = oracle.p, oracle.q
    n, g = params.n_users, params.segments
    pairs = g * (g - 1) / 2
    single = oracle.per_user_variance()[0]
    segment_users, pair_users = 2 * n / g, n / pairs
    return {
        "segments": frequency * segment_users / math.sqrt(segment_users * single),
        "pairs": frequency * pair_users / math.sqrt(pair_users * (q * (1 - q)) ** 2 / (p - q) ** 4),
        "final": frequency * n / math.sqrt(n * single),
    }


def plan_spm(
    n_users: int,
    epsilon: float,
    value_bits: int = 64,
    segment_bits: int = 0,
    top_k: int = 32,
    frequencies: Sequence[float] = PLAN_FREQUENCIES,
) -> dict[str, Any]:
    """SPM's segments for ``n`` users at ε, the guarantee, and each frequency's margin at every stage."""
    check_frequencies(frequencies)
    params = spm_parameters({"segment_bits": segment_bits, "top_k": top_k}, epsilon, n_users, value_bits)
    split = BUDGET.split(NAME, epsilon)
    parameters = {
        "value_bits": value_bits,
        "segment_bits": params.segment_bits,
        "segments": params.segments,
        "top_k": top_k,
    }
    return {
        "protocol": NAME,
        "n_users": n_users,
        "epsilon": epsilon,
        "delta": 0.0,
        **parameters,
        "segment_bounds": [int(b) for b in params.bounds],
        "users_per_segment": 2 * n_users / params.segments,
        "users_per_pair": n_users / (params.segments * (params.segments - 1) / 2),
        "budget_split": {name: part for name, part in split.parts},
        "standard_deviations_above_absent": {f"{f:g}": stage_margins(params, f) for f in frequencies},
        "model": "local, per-user ε-LDP",
        "privacy": ldp_report(split, ORACLE, parameters).to_dict(),
    }


SPM_PLAN = ldp_plan_command(
    NAME,
    "SPM's segments and budget split from (n, ε, m), and each frequency's margin at every stage",
    plan_spm,
    [
        Option("--bits", "value length m in bits", int, 64, "value_bits"),
        Option("--segment-bits", "bits per segment (0: the longest with g 2^s <= 65,536)", int, 0, "segment_bits"),
        Option("--top-k", "k, values reported at most", int, 32, "top_k"),
    ],
)
