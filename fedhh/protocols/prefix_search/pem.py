"""PEM, the Prefix Extending Method (Wang, Li and Jha; [Wang19] §IV): a variant of the prefix search.

Users are split at random into ``g`` groups; group ``i`` reports the prefix
of length ``γ + η_1 + ... + η_i`` of its value once, with the whole ε,
through a frequency oracle (OLH in the paper; any oracle here).  The server
queries the first group's oracle on every prefix of length ``γ + η_1`` and
keeps the ``|C_1|`` best, extends them by every segment of ``η_2`` units for
the second group, and so on; the last group covers whole values, and its
best ``k`` estimates are the output, with those estimates (scaled to the
population and post-processed) as the counts.  "Divide the population, not
the budget": each user sends one report, so each user's guarantee is ε.

Interactively one group answers per round; in the one-shot collection all
users report at once and the server runs the levels alone, with the same
result for the same seed (see :mod:`fedhh.protocols.prefix_search.reports`).  With
``protocol.segment_length = 0`` the optimizer of [Wang19] §IV-C chooses γ,
η and the group split (:mod:`fedhh.protocols.prefix_search.pem_analysis`).  All the rest
is the family's (:mod:`fedhh.protocols.prefix_search.family`).
"""

from __future__ import annotations

from ...privacy.ldp import BudgetRule
from ..registry import register_protocol
from .family import prefix_search_spec
from .pem_plan import PEM_PLAN, plan_pem
from .search import TOP_K, PrefixSearchServer, PrefixVariant
from .sizing import PEM_SIZING

PEM = PrefixVariant(
    name="pem",
    summary="PEM (Wang et al.): users split into groups, each group's prefix through an ε-LDP frequency oracle",
    final_pass=False,  # the last group's estimates are the counts
    default_oracle="olh",  # [Wang19] §II-B2
    default_selection=TOP_K,
    default_segment=None,  # the optimizer of [Wang19] §IV-C
    budget=BudgetRule(
        (("prefix of the user's group", 1.0),),
        "Wang et al., Locally Differentially Private Heavy Hitter Identification (PEM): "
        "users are partitioned into groups, one report per user",
    ),
    planner=plan_pem,
    plan_command=PEM_PLAN,
    sizing=PEM_SIZING,
)


class PEMServer(PrefixSearchServer):
    """PEM's server: one level per group, the last group's estimates are the counts."""

    variant = PEM


SPEC = register_protocol(prefix_search_spec(PEMServer))
