"""``fedhh plan``: protocol parameters and expected utility from a privacy target.

A planner takes a population size and a privacy target and returns a plain
dict (JSON-ready): the derived parameters, the guarantee they carry, and
what a run can be expected to find.  A protocol names its planner on its
spec (``ProtocolSpec.planner``), so a protocol that lands later brings its
own and :func:`plan` finds it there; nothing here needs to change.

This module also generates the table of TrieHH parameters in
``docs/privacy.md`` (:func:`triehh_table`, :func:`markdown_table`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import InputError
from ..protocols import PROTOCOLS, load_tool
from ..privacy.triehh import PrivacyTargetError, solve_triehh, worst_case_discovery_rate

Planner = Callable[..., dict[str, Any]]

PLAN_FREQUENCIES = (0.0005, 0.001, 0.002, 0.005, 0.01)

def plan(protocol: str, **target: Any) -> dict[str, Any]:
    """The plan of ``protocol`` for ``target`` (keyword arguments of the planner its spec names)."""
    spec = PROTOCOLS.get(protocol)
    if spec is None or spec.planner is None:
        allowed = sorted(name for name, other in PROTOCOLS.items() if other.planner is not None)
        raise InputError(f"protocol.name: no planner for {protocol!r}; allowed: {allowed}")
    planner: Planner = load_tool(spec.planner, f"the planner of {protocol!r}")
    return planner(**target)


def plan_triehh(
    n_users: int,
    epsilon: float,
    delta: float,
    max_rounds: int,
    frequencies: Sequence[float] = PLAN_FREQUENCIES,
) -> dict[str, Any]:
    """θ and m for the target, the guarantee, and the worst-case discovery rate
    of an item at each population frequency (Proposition 1: an item sharing
    no prefix with any other, of the longest length L; real data does better).
    """
    params = solve_triehh(n_users, epsilon, delta, max_rounds)
    for frequency in frequencies:
        if not 0 < frequency <= 1:
            raise InputError(f"frequencies: each must be in (0, 1], got {frequency!r}")
    holders = [round(f * n_users) for f in frequencies]
    rates = worst_case_discovery_rate(holders, n_users, params.batch_size, params.theta, max_rounds)
    report = params.report()
    return {
        "protocol": "triehh",
        "n_users": n_users,
        "max_rounds": max_rounds,
        "theta": params.theta,
        "batch_size": params.batch_size,
        "sampling_rate": params.sampling_rate,
        "epsilon": params.epsilon,
        "delta": params.delta,
        "epsilon_per_round": params.epsilon / max_rounds,
        "model": report.model,
        "privacy": report.to_dict(),
        "worst_case_discovery_rate": {f"{f:g}": float(r) for f, r in zip(frequencies, rates, strict=True)},
    }



def triehh_table(
    n_values: Sequence[int], epsilons: Sequence[float], delta: float, max_rounds: int, frequency: float = 0.001
) -> list[dict[str, Any]]:
    """One row per (n, ε): θ, m, the guarantee actually met, and the worst-case
    discovery rate at ``frequency``; targets the solver refuses get ``None``s."""
    rows = []
    for n_users in n_values:
        for epsilon in epsilons:
            try:
                planned = plan_triehh(n_users, epsilon, delta, max_rounds, (frequency,))
            except PrivacyTargetError:
                rows.append({"n_users": n_users, "target_epsilon": epsilon, "theta": None, "batch_size": None,
                             "epsilon": None, "delta": None, "discovery": None})
                continue
            rows.append({
                "n_users": n_users,
                "target_epsilon": epsilon,
                "theta": planned["theta"],
                "batch_size": planned["batch_size"],
                "epsilon": planned["epsilon"],
                "delta": planned["delta"],
                "discovery": planned["worst_case_discovery_rate"][f"{frequency:g}"],
            })
    return rows


def markdown_table(rows: Sequence[dict[str, Any]], frequency: float = 0.001) -> str:
    """``triehh_table`` rows as the Markdown table of ``docs/privacy.md``."""
    lines = [
        f"| n | target ε | θ | m | ε met | δ met | worst-case discovery at f = {frequency:g} |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        if row["theta"] is None:
            lines.append(f"| {row['n_users']:,} | {row['target_epsilon']:g} | refused: m < θ | | | | |")
            continue
        lines.append(
            f"| {row['n_users']:,} | {row['target_epsilon']:g} | {row['theta']} | {row['batch_size']:,} | "
            f"{row['epsilon']:.4f} | {row['delta']:.2e} | {row['discovery']:.3f} |"
        )
    return "\n".join(lines)
