"""``fedhh size pem`` and ``fedhh size treehist``: the population in which an item of a given share is found.

* **PEM**: the best, at each ``n``, of the designs ``fedhh plan pem``
  considers, by the item's chance to survive every level under the
  order-statistics model (:mod:`fedhh.protocols.prefix_search.item_discovery`);
* **TreeHist**: the levels ``fedhh plan treehist`` describes, the same model
  with threshold pruning and the final full-value pass.

PEM's optimizer chooses its design for F1 over a Zipf population, not for
one item, and changes it with ``n``; sized through the optimizer's design,
the answer would sit where the design changes and jump with ε.  So PEM's
sizing searches over the designs themselves: every design the optimizer
considers (:func:`~fedhh.protocols.prefix_search.pem_analysis.candidate_designs`,
within the query limit), and at each ``n`` the best of them for the item;
the answer is the smallest ``n`` at which some design reaches the target
(bisection over ``log n`` to 1%, :func:`fedhh.planning.sizing.size_by_analysis`),
with that design, and the design the optimizer would choose at ``n``
beside it.  A fixed design finds the item more often as ``n`` or ε grows,
so the answer does not jump, and falls as ε grows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import InputError
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
from .search import TOP_K, SearchParameters
from .treehist_plan import treehist_design, treehist_options, treehist_parameters

if TYPE_CHECKING:
    from .pem_analysis import PEMDesign

COLLISION_ORACLES = ("flh", "cms", "hcms", "count-mean", "count-median", "count-min", "count-sketch")
PEM_DEFINITION = (
    "the smallest n (bisection over log n, to 1%) at which some design the optimizer considers finds the item "
    "with the target probability; the analysis at n less 1% falls short"
)


def size_pem(
    frequency: float,
    discovery: float,
    epsilon: float,
    on_step: Callable[[int, float], None] | None = None,
    **design: Any,
) -> SizeAnswer:
    """The smallest population at which a PEM design (``design``: the options of :func:`plan_pem`;
    every design its optimizer considers is tried) reports an item of share ``frequency`` with
    probability ``discovery`` (see the module docstring)."""
    from .item_discovery import item_discovery  # scipy: only when sizing
    from .pem_analysis import UtilityModel, candidate_designs, zipf_frequencies

    check_share(frequency, "--frequency", upper_open=False)
    check_share(discovery, "--discovery")
    check_epsilon(epsilon, "--epsilon")
    options = {**_PLAN_DEFAULTS, **design}
    value_bits = check_positive_int(options["value_bits"], "--bits")
    top_k = check_positive_int(options["top_k"], "--top-k")
    kept = check_positive_int(options["candidates_per_step"] or top_k, "--candidates")
    space = ValueSpace(value_bits, 2)
    designs = candidate_designs(space, kept, check_positive_int(options["query_limit"], "--query-limit"))
    if not designs:
        raise InputError(
            f"--query-limit: {options['query_limit']:,} oracle queries are too few for any design over "
            f"{value_bits} bits with {kept} candidates per step"
        )
    plan_pem(1 << 20, epsilon, **design)  # refuses the options plan_pem refuses (ε no oracle takes, ...)

    def search(users: int, chosen: PEMDesign) -> SearchParameters:
        return SearchParameters(
            "pem",
            users,
            epsilon,
            "bits",
            chosen.start_length,
            tuple(chosen.segment_lengths),
            tuple(chosen.shares),
            options["oracle"],
            kept,
            top_k,
            TOP_K,
        )

    def rate(users: int) -> tuple[float, dict[str, Any]]:
        found = [item_discovery(search(users, chosen), space, frequency).probability for chosen in designs]
        best = max(range(len(designs)), key=found.__getitem__)  # the first of equals, in the optimizer's order
        chosen = designs[best]
        return found[best], {
            "start_length": chosen.start_length,
            "segment_lengths": list(chosen.segment_lengths),
            "group_shares": list(chosen.shares),
            "candidates_per_step": kept,
            "top_k": top_k,
            "oracle": options["oracle"],
            "value_bits": value_bits,
            "epsilon": epsilon,
            "designs_searched": len(designs),
        }

    smallest = max(math.ceil(1 / frequency), value_bits)
    answer = size_by_analysis(
        "pem",
        frequency,
        discovery,
        rate,
        smallest,
        int(frequency**-2),
        on_step,
        _collision_hint(options["oracle"]),
        PEM_DEFINITION,
    )
    chosen = next(
        d
        for d in designs
        if d.start_length == answer.parameters["start_length"]
        and list(d.segment_lengths) == answer.parameters["segment_lengths"]
    )
    utility = UtilityModel(
        space,
        answer.users,
        epsilon,
        top_k,
        options["oracle"],
        zipf_frequencies(options["zipf_exponent"], options["distinct"]),
        model=options["model"],
    )
    optimizer = plan_pem(answer.users, epsilon, **design)
    answer.parameters.update(
        {
            "utility_model": options["model"],
            "predicted_f1": utility.predict(chosen).f1,  # of this design, on the optimizer's Zipf assumption
            "optimizer_design": {key: optimizer[key] for key in ("start_length", "segment_lengths", "group_shares")},
            "optimizer_discovery": item_discovery(pem_search_parameters(optimizer), space, frequency).probability,
        }
    )
    return answer


_PLAN_DEFAULTS: dict[str, Any] = {
    "value_bits": 64,
    "top_k": 32,
    "oracle": PEM_ORACLE,
    "query_limit": DEFAULT_QUERY_LIMIT,
    "candidates_per_step": None,
    "zipf_exponent": DEFAULT_ZIPF_EXPONENT,
    "distinct": DEFAULT_DISTINCT_VALUES,
    "model": ORDER_STATISTICS,
}  # plan_pem's defaults, for the options a caller leaves out


def answer_search(answer: SizeAnswer, users: int) -> SearchParameters:
    """The search parameters of a PEM answer's design at ``users`` (what ``--verify`` runs)."""
    shown = answer.parameters
    return SearchParameters(
        "pem",
        users,
        shown["epsilon"],
        "bits",
        shown["start_length"],
        tuple(shown["segment_lengths"]),
        tuple(shown["group_shares"]),
        shown["oracle"],
        shown["candidates_per_step"],
        shown["top_k"],
        TOP_K,
    )


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
            "levels": params.levels,
            "segment_lengths": list(params.segment_lengths),
            "oracle": params.oracle,
            "sketch": {"rows": params.sketch_rows, "width": params.sketch_width},
            "top_k": params.top_k,
            "candidates_per_step": params.candidates_per_step,
            "threshold": params.threshold,
            "value_bits": space.length,
            "epsilon": epsilon,
        }

    return size_by_analysis(
        "treehist",
        frequency,
        discovery,
        rate,
        max(smallest, math.ceil(1 / frequency)),
        int(frequency**-2),
        on_step,
        _collision_hint(design.get("oracle", "")),
    )


def _collision_hint(oracle: str) -> str:
    """Why an oracle with collision variance can fall short in the assumed population at any size."""
    if oracle not in COLLISION_ORACLES:
        return ""
    return (
        f"; with {oracle}, the users without the item (one heavy empty value) add collision variance that "
        "grows like the item's count, so no population is enough: try --oracle olh"
    )


def _pem_design(args: Options) -> dict[str, Any]:
    """The keyword arguments of :func:`plan_pem` from PEM's sizing options."""
    return {
        "value_bits": args.bits,
        "top_k": args.top_k or 32,
        "oracle": args.oracle,
        "query_limit": args.query_limit,
        "candidates_per_step": args.candidates,
        "zipf_exponent": args.zipf,
        "distinct": args.distinct,
        "model": args.model,
    }


def _pem_answer(args: Options, show: OnStep) -> SizeAnswer:
    return size_pem(args.frequency, args.discovery, args.epsilon, on_step=show, **_pem_design(args))


def _treehist_design(args: Options) -> dict[str, Any]:
    return {**treehist_design(args), "top_k": args.top_k or 32}


def _treehist_answer(args: Options, show: OnStep) -> SizeAnswer:
    return size_treehist(args.frequency, args.discovery, args.epsilon, on_step=show, **_treehist_design(args))


PEM_SIZING = Sizing(
    "PEM",
    20,
    (
        Option("--bits", "value length m in bits (default 64)", int, 64),
        Option("--top-k", "k, values PEM reports (default 32); with --recall: K of recall@K", int),
        Option("--oracle", f"frequency oracle (default {PEM_ORACLE})", default=PEM_ORACLE),
        Option("--candidates", "|C_i|, prefixes kept per level (default: k)", int),
        Option(
            "--query-limit",
            f"most oracle queries of the optimizer's design (default {DEFAULT_QUERY_LIMIT:,})",
            int,
            DEFAULT_QUERY_LIMIT,
        ),
        Option("--zipf", "Zipf exponent the optimizer assumes (default 1)", float, DEFAULT_ZIPF_EXPONENT),
        Option(
            "--distinct",
            f"distinct values the optimizer assumes (default {DEFAULT_DISTINCT_VALUES:,})",
            int,
            DEFAULT_DISTINCT_VALUES,
        ),
        Option(
            "--model",
            "survival model of the analysis (default order-statistics)",
            default=ORDER_STATISTICS,
            choices=MODELS,
        ),
    ),
    _pem_answer,
    lambda args, answer: {"search": answer_search(answer, answer.users)},
)
TREEHIST_SIZING = Sizing(
    "TreeHist",
    20,
    treehist_options(top_k_default=None),
    _treehist_answer,
    lambda args, answer: {"search": treehist_parameters(answer.users, args.epsilon, **_treehist_design(args))},
)
