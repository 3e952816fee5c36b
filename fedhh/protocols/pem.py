"""PEM, the Prefix Extending Method (Wang, Li and Jha; [Wang19] §IV).

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
result for the same seed (see :mod:`fedhh.protocols.prefix_reports`).  With
``protocol.segment_length = 0`` the optimizer of [Wang19] §IV-C chooses γ,
η and the group split (:mod:`fedhh.protocols.pem_analysis`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..items import ItemCodec
from .registry import register_protocol
from .prefix_config import search_parameters
from .prefix_nodes import prefix_search_spec
from .prefix_reports import PrefixRequest, PrefixResponse
from .prefix_search import TOP_K, PrefixSearchServer

DEFAULT_ORACLE = "olh"  # [Wang19] §II-B2


@dataclass(frozen=True)
class PEMRequest(PrefixRequest):
    """A PEM round: one group's prefix (or, one-shot, every user's report)."""


@dataclass(frozen=True)
class PEMResponse(PrefixResponse):
    """A shard's counts for the round (flat statistics or support counts), or its report table."""


PEMRequest.response_class = PEMResponse


class PEMServer(PrefixSearchServer):
    """PEM's server: one level per group, the last group's estimates are the counts."""

    name = "pem"
    request_type = PEMRequest
    response_type = PEMResponse
    final_pass = False


def build_pem(
    privacy: Mapping[str, Any], protocol: Mapping[str, Any], n_users: int, codec: ItemCodec, seed: int
) -> PEMServer:
    """PEM from a config: the seed's OLH and top-k selection unless configured otherwise."""
    params = search_parameters(
        "pem", protocol, float(privacy["epsilon"]), n_users, codec, seed,
        default_oracle=DEFAULT_ORACLE, default_selection=TOP_K, default_segment=None,
    )
    return PEMServer(params, codec, seed)


SPEC = register_protocol(
    prefix_search_spec(
        "pem",
        "PEM (Wang et al.): users split into groups, each group's prefix through an ε-LDP frequency oracle",
        build_pem,
        PEMRequest,
        PEMResponse,
    )
)
