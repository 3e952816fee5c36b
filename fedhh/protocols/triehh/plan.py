"""``fedhh plan triehh``: θ and m from a privacy target, and the worst-case discovery rate they give.

This module also generates the table of TrieHH parameters in
``docs/privacy.md`` (:func:`triehh_table`, :func:`markdown_table`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...planning.commands import Option, Options, PlanCommand, PlanTable
from ...planning.plan import PLAN_FREQUENCIES, check_frequencies
from ...privacy.triehh import PrivacyTargetError, solve_triehh, worst_case_discovery_rate


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
    check_frequencies(frequencies)
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


def _triehh_plan(args: Options) -> dict[str, Any]:
    return plan_triehh(n_users=args.users, epsilon=args.epsilon, delta=args.delta, max_rounds=args.max_rounds)


def _triehh_table(args: Options, planned: dict[str, Any]) -> PlanTable:
    rows = [
        ("threshold θ", str(planned["theta"])),
        ("batch size m", f"{planned['batch_size']:,}"),
        ("sampling rate m/n", f"{planned['sampling_rate']:.4g}"),
        ("ε (guaranteed)", f"{planned['epsilon']:.6g}"),
        ("δ (guaranteed)", f"{planned['delta']:.3g}"),
    ]
    rows += [
        (f"worst-case discovery, frequency {frequency}", f"{rate:.3f}")
        for frequency, rate in planned["worst_case_discovery_rate"].items()
    ]
    return PlanTable(
        f"TrieHH plan: n = {args.users:,}, L = {args.max_rounds} rounds", rows, [f"model: {planned['model']}"]
    )


TRIEHH_PLAN = PlanCommand(
    "θ and batch size m from (n, ε, δ, L)",
    (
        Option("--users", "population size n", int, required=True),
        Option("--epsilon", "target ε > 0", float, required=True),
        Option("--delta", "target δ in (0, 1)", float, required=True),
        Option("--max-rounds", "L: rounds, i.e. symbols of the longest item plus the end symbol", int, required=True),
        Option("--json", switch=True),
    ),
    _triehh_plan,
    _triehh_table,
)


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
                rows.append(
                    {
                        "n_users": n_users,
                        "target_epsilon": epsilon,
                        "theta": None,
                        "batch_size": None,
                        "epsilon": None,
                        "delta": None,
                        "discovery": None,
                    }
                )
                continue
            rows.append(
                {
                    "n_users": n_users,
                    "target_epsilon": epsilon,
                    "theta": planned["theta"],
                    "batch_size": planned["batch_size"],
                    "epsilon": planned["epsilon"],
                    "delta": planned["delta"],
                    "discovery": planned["worst_case_discovery_rate"][f"{frequency:g}"],
                }
            )
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
