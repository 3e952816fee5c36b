"""The multiple-channel method (MCM; Bassily and Smith 2015 as [Wang19] §III-D describes it, §VI-A's version).

A public hash ``H`` maps every value to one of ``h`` channels, so that
with good probability each channel holds at most one frequent value.  Every
user is assigned one bit position ``l`` (public randomness keyed by the user
id) and reports, with ε/2 each, the pair ``(H(v), v[l])`` and its whole
value.  In [Bassily15] the pair travels as ``h`` bits, random except the
own channel's, which is ``v[l]`` under randomised response; [Wang19] §VI-A
replaces that primitive with OLH (the pair over ``[h] x {0, 1}``), uses
``h = ceil(k^1.5)`` channels instead of ``n^1.5``, and reports the top ``k``
instead of testing a threshold; this package is that version.

Round 1: per bit position, the shards send OLH support counts of all ``2h``
pairs from the position's users; the server sets bit ``l`` of channel
``j``'s candidate to the bit whose pair ``(j, b)`` is estimated higher (the
majority vote).  Round 2: the candidates that can be items are estimated
with everyone's full-value reports and the ``k`` best are reported.  The
estimates are OLH's, unbiased.

The package: its keys, budget and parameters (``parameters``), messages
(``messages``), device side (``client``), law sampler (``law``), server
(``server``), what an untrusting server checks (``nodes``), planner
(``plan``), the bits a user sends (``wire``), and its spec, registered here.
"""

from __future__ import annotations

from ..common.crowds import bit_position_crowds
from ..common.item_choice import ITEM_CHOICE_CONTRACT
from ..registry import register_protocol
from ..spec import DENSE_NOT_DECLARED, LDP_DROPOUT_PRIVACY, ProtocolSpec
from .client import respond
from .law import law
from .messages import MCMRequest, MCMResponse
from .nodes import check_reply, describe_round, reply_budget
from .parameters import BUDGET, KEYS, NAME
from .plan import MCM_PLAN, plan_mcm
from .server import build_mcm
from .wire import mcm_bits

SPEC = register_protocol(
    ProtocolSpec(
        name=NAME,
        summary=(
            "MCM (Bassily and Smith, as Wang et al. §VI-A run it): k^1.5 channels decoded bit by bit with OLH, top k"
        ),
        build=build_mcm,
        respond=respond,
        request_type=MCMRequest,
        response_type=MCMResponse,
        dropout_privacy=LDP_DROPOUT_PRIVACY,
        keys=KEYS,
        reply_budget=reply_budget,
        check_reply=check_reply,
        describe_round=describe_round,
        no_dense_reason=DENSE_NOT_DECLARED,
        budget=BUDGET,
        crowds=bit_position_crowds,
        planner=plan_mcm,
        plan_command=MCM_PLAN,
        communication=mcm_bits,
        contract=ITEM_CHOICE_CONTRACT,
        law=law,
    )
)
