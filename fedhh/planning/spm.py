"""``fedhh plan spm``: SPM's segments and budget split from (n, ε, m), and each frequency's margin at every stage."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..privacy.ldp import ldp_report
from ..protocols.spm import BUDGET, NAME, ORACLE, spm_parameters, stage_margins
from .commands import Option, ldp_plan_command
from .plan import PLAN_FREQUENCIES, check_frequencies


def plan_spm(
    n_users: int, epsilon: float, value_bits: int = 64, segment_bits: int = 0, top_k: int = 32,
    frequencies: Sequence[float] = PLAN_FREQUENCIES,
) -> dict[str, Any]:
    """SPM's segments for ``n`` users at ε, the guarantee, and each frequency's margin at every stage."""
    check_frequencies(frequencies)
    params = spm_parameters({"segment_bits": segment_bits, "top_k": top_k}, epsilon, n_users, value_bits)
    split = BUDGET.split(NAME, epsilon)
    parameters = {"value_bits": value_bits, "segment_bits": params.segment_bits, "segments": params.segments, "top_k": top_k}
    return {
        "protocol": NAME, "n_users": n_users, "epsilon": epsilon, "delta": 0.0, **parameters,
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
