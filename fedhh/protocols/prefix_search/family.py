"""The prefix-search family (PEM, TreeHist): one protocol, one spec builder, a variant each.

[Cormode21] §5 groups them as one family: frequency oracles on prefixes of
increasing length, each level querying only the extensions of the previous
level's survivors.  Everything the two share -- the ``[protocol]`` keys
(:mod:`~fedhh.protocols.prefix_search.config`), the messages and the client
function (:mod:`~fedhh.protocols.prefix_search.reports`), the server
(:mod:`~fedhh.protocols.prefix_search.search`) and the checks of a node's replies
(:mod:`~fedhh.protocols.prefix_search.nodes`) -- is declared once; a variant is a
:class:`~fedhh.protocols.prefix_search.search.PrefixVariant` and a server class
naming it, and :func:`prefix_search_spec` turns that into its
:class:`~fedhh.protocols.spec.ProtocolSpec`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...data.items import ItemCodec
from ...errors import InputError
from ...schema import PrivacySection
from ..common.crowds import prefix_search_crowds
from ..spec import LDP_DROPOUT_PRIVACY, ProtocolSpec
from .config import PREFIX_KEYS, search_parameters
from .contract import CONTRACT
from .law import law
from .nodes import check_reply, describe_round, narrow, reply_budget
from .reports import PrefixRequest, PrefixResponse, respond
from .search import PrefixSearchServer, PrefixVariant
from .wire import prefix_search_bits

VARIANTS: dict[str, PrefixVariant] = {}  # the family's members by name, as their specs register them


def prefix_search_spec(server: type[PrefixSearchServer]) -> ProtocolSpec:
    """The spec of the variant ``server`` names: the family's messages, client function, keys
    and node checks, and a builder reading its ``[protocol]`` section with the variant's defaults."""
    variant = server.variant

    def build(
        privacy: PrivacySection, protocol: Mapping[str, Any], n_users: int, codec: ItemCodec, seed: int
    ) -> PrefixSearchServer:
        params = search_parameters(variant, protocol, privacy.epsilon, n_users, codec, seed)
        return server(params, codec, seed)

    VARIANTS[variant.name] = variant
    return ProtocolSpec(
        name=variant.name,
        summary=variant.summary,
        build=build,
        respond=respond,
        request_type=PrefixRequest,
        response_type=PrefixResponse,
        dropout_privacy=LDP_DROPOUT_PRIVACY,
        keys=PREFIX_KEYS,
        narrow=narrow,
        reply_budget=reply_budget,
        check_reply=check_reply,
        describe_round=describe_round,
        no_dense_reason=(
            "not declared: a level round's counts have a length fixed by the request, but a one-shot "
            "collection sends its users' distinct report rows, which no fixed-length vector holds"
        ),
        budget=variant.budget,
        crowds=prefix_search_crowds,
        planner=variant.planner,
        plan_command=variant.plan_command,
        sizing=variant.sizing,
        communication=prefix_search_bits,
        contract=CONTRACT,
        law=law,
    )


def prefix_variant(name: str) -> PrefixVariant:
    """The registered variant called ``name``."""
    try:
        return VARIANTS[name]
    except KeyError:
        raise InputError(f"protocol.name: {name!r} is not a prefix search; allowed: {sorted(VARIANTS)}") from None
