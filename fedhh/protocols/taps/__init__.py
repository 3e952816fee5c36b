"""TAPS, the target-aligning prefix tree (Zhang, Ye and Hu, "Federated Heavy Hitter Analytics with
Local Differential Privacy", 2024): parties with different distributions find the global heavy
hitters under ε-LDP.

``protocol.name = "taps"``: each party (a silo; a range of global user ids,
laid out by ``population.languages``) grows its own prefix tree with its own
users, PEM-like levels of adaptive length, and prunes it by the consensus of
every party's noisy estimates (:mod:`fedhh.protocols.taps.server`).  Each
user sends one report, through an ε-LDP frequency oracle: every user's
guarantee is ε-LDP.

The package: its messages (``messages``), the device side (``client``), its
law sampler (``law``, for ``run.simulation = "law"``), the server
(``server``), what an untrusting server checks (``nodes``), its planner
(``plan``, ``fedhh plan taps``) and sizing (``sizing``, ``fedhh size taps``), the bits a user sends (``wire``), and its
spec, registered here.
"""

from __future__ import annotations

from ..common.crowds import party_level_crowds
from ..registry import register_protocol
from ..spec import ContractText, ProtocolSpec
from .client import respond
from .law import law
from .messages import PartyLevelRequest, PartySupport
from .nodes import DROPOUT_PRIVACY, NO_DENSE_LAYOUT, check_reply, describe_round
from .plan import TAPS_PLAN, plan_taps
from .server import BUDGET, NAME, TapsKeys, TapsServer, build_taps
from .sizing import TAPS_SIZING
from .wire import taps_bits

CONTRACT = ContractText(
    definitions=(
        "TAPS parties: party p holds the global user ids [party_bounds[p], party_bounds[p+1]); a deployment maps "
        "each party's users to those ids (a party is a silo: its users' node or nodes).",
    )
)

SPEC = register_protocol(
    ProtocolSpec(
        name=NAME,
        summary="TAPS (Zhang et al.): parties' prefix trees pruned by their consensus; ε-LDP per user",
        build=build_taps,
        respond=respond,
        law=law,
        planner=plan_taps,
        plan_command=TAPS_PLAN,
        sizing=TAPS_SIZING,
        request_type=PartyLevelRequest,
        response_type=PartySupport,
        dropout_privacy=DROPOUT_PRIVACY,
        keys=TapsKeys.keys(),
        check_reply=check_reply,
        describe_round=describe_round,
        no_dense_reason=NO_DENSE_LAYOUT,
        budget=BUDGET,
        crowds=party_level_crowds,
        communication=taps_bits,
        contract=CONTRACT,
    )
)

__all__ = ["SPEC", "PartyLevelRequest", "PartySupport", "TapsServer", "respond"]
