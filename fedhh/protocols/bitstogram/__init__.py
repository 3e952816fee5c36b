"""Bitstogram (Bassily, Nissim, Stemmer and Thakurta; [Bassily17] §4): heavy hitters recovered bit by bit.

A public hash ``h: V -> [T]`` spreads the values over ``T`` channels (about
``sqrt(n)``), so that each heavy value is, with good probability, the only
heavy value of its channel.  Every user is assigned one bit position ``l``
of the ``m``-bit value (public randomness keyed by the user id) and sends,
with half of its budget, the pair ``(h(v), v[l])`` through the Hashtogram
oracle over ``[T] x {0, 1}`` (a domain that small is not hashed); with the
other half it sends its whole value through the Hashtogram oracle (hashed
rows, :mod:`fedhh.oracles.hashtogram`).  All reports go in one round (the
paper's protocol is non-interactive).

The server decodes once: for each channel ``t`` and position ``l`` the bit
``b`` whose pair ``(t, b)`` is estimated more often becomes bit ``l`` of the
channel's candidate ``v_hat(t)``.  A heavy value alone in its channel is
recovered whole, since every user of its channel and position holding it
votes for its bit; the other channels give arbitrary bit strings.  The
``T`` candidates that can be items are then estimated with everyone's
full-value reports, and those estimated above the noise level (set so that
on average :data:`~fedhh.protocols.bitstogram.parameters.ABSENT_REPORTED` of the candidates no user holds passes)
are reported, the ``top_k`` best.  The estimates are unbiased (the
Hashtogram estimator); the privacy split is ε/2 + ε/2, as in TreeHist.

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
from .messages import BitstogramRequest, BitstogramResponse
from .nodes import check_reply, describe_round, reply_budget
from .parameters import BUDGET, KEYS, NAME
from .plan import BITSTOGRAM_PLAN, plan_bitstogram
from .server import build_bitstogram
from .wire import bitstogram_bits

SPEC = register_protocol(
    ProtocolSpec(
        name=NAME,
        summary=(
            "Bitstogram (Bassily et al.): values hashed into channels, each channel's heavy hitter recovered bit by bit"
        ),
        build=build_bitstogram,
        respond=respond,
        request_type=BitstogramRequest,
        response_type=BitstogramResponse,
        dropout_privacy=LDP_DROPOUT_PRIVACY,
        keys=KEYS,
        reply_budget=reply_budget,
        check_reply=check_reply,
        describe_round=describe_round,
        no_dense_reason=DENSE_NOT_DECLARED,
        budget=BUDGET,
        crowds=bit_position_crowds,
        planner=plan_bitstogram,
        plan_command=BITSTOGRAM_PLAN,
        communication=bitstogram_bits,
        contract=ITEM_CHOICE_CONTRACT,
        law=law,
    )
)
