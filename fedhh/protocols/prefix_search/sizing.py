"""``fedhh size pem`` and ``fedhh size treehist``: the population in which an item of a given share is found.

* **PEM**: the design ``fedhh plan pem`` chooses for ``n``, and the item's
  chance to survive every level by the order-statistics model
  (:mod:`fedhh.protocols.prefix_search.item_discovery`);
* **TreeHist**: the levels ``fedhh plan treehist`` describes, the same model
  with threshold pruning and the final full-value pass.

PEM's optimizer changes its design with ``n``, so the answer is a
population ``n`` where the analysis meets the target while ``n`` less 1%
does not (:func:`fedhh.planning.sizing.size_by_analysis`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ...planning.commands import Option, Options
from ...planning.sizing import OnStep, SizeAnswer, Sizing, check_share, size_by_analysis
from ...privacy.validation import check_epsilon, check_positive_int
from ..common.prefix_encoding import ValueSpace
from .pem_assumptions import (
    DEFAULT_DISTINCT_VALUES,
    DEFAULT_QUERY_LIMIT,
    DEFAULT_ZIPF_EXPONENT,
    MODELS,
    ORDER_STATISTICS,
)
from .pem_plan import DEFAULT_ORACLE as PEM_ORACLE
from .pem_plan import pem_search_parameters, plan_pem
from .treehist_plan import treehist_design, treehist_options, treehist_parameters

COLLISION_ORACLES = ("flh", "cms", "hcms", "count-mean", "count-median", "count-min", "count-sketch")
PEM_SHOWN = ("start_length", "segment_lengths", "group_shares", "candidates_per_step", "top_k", "oracle",
             "value_bits", "epsilon", "utility_model", "predicted_f1")


def size_pem(
    frequency: float,
    discovery: float,
    epsilon: float,
    on_step: Callable[[int, float], None] | None = None,
    **design: Any,
) -> SizeAnswer:
    """The population at which the design ``fedhh plan pem`` chooses (``design``: the options of
    :func:`plan_pem`) reports an item of share ``frequency`` with probability ``discovery``."""
    from .item_discovery import item_discovery  # scipy: only when sizing

    check_share(frequency, "--frequency", upper_open=False)
    check_share(discovery, "--discovery")
    check_epsilon(epsilon, "--epsilon")
    value_bits = check_positive_int(design.get("value_bits", 64), "--bits")
    space = ValueSpace(value_bits, 2)

    def rate(users: int) -> tuple[float, dict[str, Any]]:
        plan = plan_pem(users, epsilon, **design)
        found = item_discovery(pem_search_parameters(plan), space, frequency)
        return found.probability, {key: plan[key] for key in PEM_SHOWN}

    smallest = max(math.ceil(1 / frequency), value_bits)
    return size_by_analysis("pem", frequency, discovery, rate, smallest, int(frequency**-2), on_step,
                            _collision_hint(design.get("oracle", "olh")))


def size_treehist(
    frequency: float,
    discovery: float,
    epsilon: float,
    on_step: Callable[[int, float], None] | None = None,
    **design: Any,
) -> SizeAnswer:
    """The population at which TreeHist (``design``: the options of :func:`treehist_parameters`)
    reports an item of share ``frequency`` with probability ``discovery``."""
    from .item_discovery import item_discovery  # scipy: only when sizing

    check_share(frequency, "--frequency", upper_open=False)
    check_share(discovery, "--discovery")
    check_epsilon(epsilon, "--epsilon")
    smallest = treehist_parameters(1 << 20, epsilon, **design).levels
    space = ValueSpace(design.get("value_bits", 64), 2)

    def rate(users: int) -> tuple[float, dict[str, Any]]:
        params = treehist_parameters(users, epsilon, **design)
        return item_discovery(params, space, frequency).probability, {
            "levels": params.levels, "segment_lengths": list(params.segment_lengths), "oracle": params.oracle,
            "sketch": {"rows": params.sketch_rows, "width": params.sketch_width}, "top_k": params.top_k,
            "candidates_per_step": params.candidates_per_step, "threshold": params.threshold,
            "value_bits": space.length, "epsilon": epsilon,
        }

    return size_by_analysis("treehist", frequency, discovery, rate, max(smallest, math.ceil(1 / frequency)),
                            int(frequency**-2), on_step, _collision_hint(design.get("oracle", "")))


def _collision_hint(oracle: str) -> str:
    """Why an oracle with collision variance can fall short in the assumed population at any size."""
    if oracle not in COLLISION_ORACLES:
        return ""
    return (f"; with {oracle}, the users without the item (one heavy empty value) add collision variance that "
            "grows like the item's count, so no population is enough: try --oracle olh")


def _pem_design(args: Options) -> dict[str, Any]:
    """The keyword arguments of :func:`plan_pem` from PEM's sizing options."""
    return {
        "value_bits": args.bits, "top_k": args.top_k or 32, "oracle": args.oracle, "query_limit": args.query_limit,
        "candidates_per_step": args.candidates, "zipf_exponent": args.zipf, "distinct": args.distinct,
        "model": args.model,
    }


def _pem_answer(args: Options, show: OnStep) -> SizeAnswer:
    return size_pem(args.frequency, args.discovery, args.epsilon, on_step=show, **_pem_design(args))


def _treehist_design(args: Options) -> dict[str, Any]:
    return {**treehist_design(args), "top_k": args.top_k or 32}


def _treehist_answer(args: Options, show: OnStep) -> SizeAnswer:
    return size_treehist(args.frequency, args.discovery, args.epsilon, on_step=show, **_treehist_design(args))


PEM_SIZING = Sizing(
    "PEM", 20,
    (
        Option("--bits", "value length m in bits (default 64)", int, 64),
        Option("--top-k", "k, values PEM reports (default 32); with --recall: K of recall@K", int),
        Option("--oracle", f"frequency oracle (default {PEM_ORACLE})", default=PEM_ORACLE),
        Option("--candidates", "|C_i|, prefixes kept per level (default: k)", int),
        Option("--query-limit", f"most oracle queries of the optimizer's design (default {DEFAULT_QUERY_LIMIT:,})",
               int, DEFAULT_QUERY_LIMIT),
        Option("--zipf", "Zipf exponent the optimizer assumes (default 1)", float, DEFAULT_ZIPF_EXPONENT),
        Option("--distinct", f"distinct values the optimizer assumes (default {DEFAULT_DISTINCT_VALUES:,})", int,
               DEFAULT_DISTINCT_VALUES),
        Option("--model", "survival model of the analysis (default order-statistics)", default=ORDER_STATISTICS,
               choices=MODELS),
    ),
    _pem_answer,
    lambda args, answer: {"search": pem_search_parameters(plan_pem(answer.users, args.epsilon, **_pem_design(args)))},
)
TREEHIST_SIZING = Sizing(
    "TreeHist", 20, treehist_options(top_k_default=None), _treehist_answer,
    lambda args, answer: {"search": treehist_parameters(answer.users, args.epsilon, **_treehist_design(args))},
)
