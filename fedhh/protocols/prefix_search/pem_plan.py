"""``fedhh plan pem``: PEM's γ, η and group split from its utility analysis, with predicted F1 and NCR.

[Wang19] §IV-C: under a Zipf assumption on the values and a limit on the
number of frequency-oracle queries, choose the design whose predicted
utility (eq. (4), :mod:`fedhh.protocols.prefix_search.pem_analysis`) is highest.  Each
level's survival comes from the order-statistics model over every candidate
by default; [Wang19]'s eq. (5) is printed beside it for the same design
(``--model eq5`` optimizes with it).  The guarantee does not depend on the
design: every user sends one ε-LDP report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import InputError
from ...planning.commands import JSON_OPTION, Option, Options, PlanCommand, PlanTable
from ...privacy.ldp import ldp_report
from ...privacy.validation import check_positive_int, check_users
from ..common.prefix_encoding import ValueSpace
from ..registry import split_budget
from .pem_assumptions import (
    DEFAULT_DISTINCT_VALUES,
    DEFAULT_QUERY_LIMIT,
    DEFAULT_ZIPF_EXPONENT,
    EQUATION_5,
    MODELS,
    ORDER_STATISTICS,
)
from .search import TOP_K, SearchParameters

DEFAULT_ORACLE = "olh"
MAX_VALUE_BITS = 1024  # the optimizer tries every (γ, g): its time grows with the square of m
MAX_DISTINCT = 10_000_000  # the assumed frequencies are held (three times) in memory


def pem_search_parameters(plan: Mapping[str, Any]) -> SearchParameters:
    """A plan of :func:`plan_pem` as the parameters of a PEM run (bits encoding, top-k selection)."""
    return SearchParameters(
        "pem",
        plan["n_users"],
        plan["epsilon"],
        "bits",
        plan["start_length"],
        tuple(plan["segment_lengths"]),
        tuple(plan["group_shares"]),
        plan["oracle"],
        plan["candidates_per_step"],
        plan["top_k"],
        TOP_K,
    )


def plan_pem(
    n_users: int,
    epsilon: float,
    value_bits: int = 64,
    top_k: int = 32,
    oracle: str = DEFAULT_ORACLE,
    query_limit: int = DEFAULT_QUERY_LIMIT,
    candidates_per_step: int | None = None,
    zipf_exponent: float = DEFAULT_ZIPF_EXPONENT,
    distinct: int = DEFAULT_DISTINCT_VALUES,
    model: str = ORDER_STATISTICS,
) -> dict[str, Any]:
    """The optimizer's design for ``m = value_bits`` bit values, its predicted utility (under
    ``model``, and under eq. (5) for comparison) and its guarantee."""
    from .pem_analysis import UtilityModel, optimize_pem, zipf_frequencies  # scipy: only when planning

    check_users(n_users)
    split = split_budget("pem", epsilon)
    check_positive_int(value_bits, "--bits", maximum=MAX_VALUE_BITS)
    check_positive_int(top_k, "--top-k")
    check_positive_int(distinct, "--distinct", maximum=MAX_DISTINCT)
    if distinct < top_k:
        raise InputError(f"--distinct: the assumed {distinct:,} distinct values are fewer than --top-k = {top_k}")
    utility = UtilityModel(
        ValueSpace(value_bits, 2),
        n_users,
        epsilon,
        top_k,
        oracle,
        zipf_frequencies(zipf_exponent, distinct),
        model=model,
    )
    prediction = optimize_pem(utility, query_limit, candidates_per_step)
    design = prediction.design
    parameters = {
        "levels": design.levels,
        "start_length": design.start_length,
        "segment_lengths": list(design.segment_lengths),
        "candidates_per_step": design.candidates_per_step,
    }
    equation_5 = utility.with_model(EQUATION_5).predict(design)
    return {
        "protocol": "pem",
        "n_users": n_users,
        "epsilon": epsilon,
        "delta": 0.0,
        "value_bits": value_bits,
        "top_k": top_k,
        "oracle": oracle,
        "query_limit": query_limit,
        "assumption": {"zipf_exponent": zipf_exponent, "distinct_values": distinct},
        **parameters,
        "prefix_lengths": [int(length) for length in design.lengths()],
        "group_shares": list(design.shares),
        "group_sizes": [round(share * n_users) for share in design.shares],
        "queries": prediction.queries,
        "utility_model": model,
        "predicted_f1": prediction.f1,
        "predicted_ncr": prediction.ncr,
        "identification_probability": [float(p) for p in prediction.overall],
        "equation_5": {
            "predicted_f1": equation_5.f1,
            "predicted_ncr": equation_5.ncr,
            "identification_probability": [float(p) for p in equation_5.overall],
        },
        "model": "local, per-user ε-LDP",
        "privacy": ldp_report(split, oracle, parameters).to_dict(),
    }


def _pem_plan(args: Options) -> dict[str, Any]:
    return plan_pem(
        args.users,
        args.epsilon,
        args.bits,
        args.top_k,
        args.oracle,
        args.query_limit,
        args.candidates,
        args.zipf,
        args.distinct,
        args.model,
    )


def _pem_table(args: Options, plan: dict[str, Any]) -> PlanTable:
    rows = [
        ("start length γ", str(plan["start_length"])),
        ("segment lengths η[i]", ", ".join(map(str, plan["segment_lengths"]))),
        ("groups g", str(plan["levels"])),
        ("group sizes n[i]", ", ".join(f"{size:,}" for size in plan["group_sizes"])),
        ("candidates kept |C_i|", str(plan["candidates_per_step"])),
        ("oracle queries", f"{plan['queries']:,} of {args.query_limit:,}"),
        (f"predicted F1 ({args.model})", f"{plan['predicted_f1']:.3f}"),
        (f"predicted NCR ({args.model})", f"{plan['predicted_ncr']:.3f}"),
    ]
    if args.model != EQUATION_5:
        rows.append(("predicted F1 (eq. (5), same design)", f"{plan['equation_5']['predicted_f1']:.3f}"))
    notes = [
        f"assumption: Zipf({args.zipf:g}) over {plan['assumption']['distinct_values']:,} values; "
        f"oracle {args.oracle}; privacy: {plan['model']}, ε = {args.epsilon:g}, δ = 0",
        "run it with --set protocol.name=pem (protocol.segment_length = 0 asks this optimizer)",
    ]
    return PlanTable(
        f"PEM plan: n = {args.users:,}, ε = {args.epsilon:g}, m = {args.bits} bits, k = {args.top_k}", rows, notes
    )


PEM_PLAN = PlanCommand(
    "γ, η and the group split of PEM from (n, ε, m, k) by its utility analysis",
    (
        Option("--users", "population size n", int, required=True),
        Option("--epsilon", "per-user ε > 0 (ε-LDP, δ = 0)", float, required=True),
        Option("--bits", "value length m in bits (default 64)", int, 64),
        Option("--top-k", "k, values to find (default 32)", int, 32),
        Option("--oracle", "frequency oracle of every level (default olh)", default=DEFAULT_ORACLE),
        Option(
            "--query-limit",
            f"most oracle queries over all levels (default {DEFAULT_QUERY_LIMIT:,})",
            int,
            DEFAULT_QUERY_LIMIT,
        ),
        Option("--candidates", "|C_i|, prefixes kept per level (default: k)", int),
        Option(
            "--zipf",
            f"assumed Zipf exponent s, f_j ∝ j^-s (default {DEFAULT_ZIPF_EXPONENT:g})",
            float,
            DEFAULT_ZIPF_EXPONENT,
        ),
        Option(
            "--distinct",
            f"assumed number of distinct values (default {DEFAULT_DISTINCT_VALUES:,})",
            int,
            DEFAULT_DISTINCT_VALUES,
        ),
        Option(
            "--model",
            "survival model of a level: order statistics over every candidate (default) or "
            "[Wang19]'s eq. (5); the other is printed beside it",
            default=ORDER_STATISTICS,
            choices=MODELS,
        ),
        JSON_OPTION,
    ),
    _pem_plan,
    _pem_table,
    description="[Wang19] §IV-C: maximise the predicted F1 (eq. (4)) under a Zipf assumption "
    "and a limit on frequency-oracle queries.",
)
