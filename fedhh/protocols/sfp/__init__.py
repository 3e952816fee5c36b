"""Apple's Sequence Fragment Puzzle (Apple 2017; [Cormode21] §5): fragments tagged with the
word's hash, reassembled by the server, then estimated by a full-word sketch.

Every value is cut into ``P`` fragments of ``protocol.fragment_length``
symbols.  Each user reports, through a sketch oracle (CMS or HCMS), one
fragment at a position drawn by public randomness (sent in the clear)
together with an 8-bit public hash of the whole value, with
``fragment_share x ε``, and its whole value through a second sketch with
the rest of ε (``protocol.word_pass = false``: none).  The server keeps each
position's (fragment, hash) pairs above the noise level, solves the puzzle
(every way of choosing one kept fragment per position with one hash, kept
if it encodes an item whose own hash matches) and reports the best
candidates by the full-word estimate (``protocol.report = "top_k"``: the
``K`` best whatever their noise, :mod:`fedhh.protocols.common.report_mode`).
Both reports are ε-LDP at their share of ε; a user's guarantee is their sum.
The decoder is described step by step in ``docs/derivations.md`` ("SFP's
puzzle").

The package: its keys and constants (``parameters``), budget split and the
noise of its sketches (``analysis``), public encoding (``encoding``),
messages (``messages``), device side (``client``), law sampler (``law``), server (``server``), what
an untrusting server checks (``nodes``), planner (``plan``), the bits a user
sends (``wire``), and its spec, registered here.
"""

from __future__ import annotations

from ..common.crowds import fragment_crowds
from ..common.item_choice import ITEM_CHOICE_CONTRACT
from ..registry import register_protocol
from ..spec import DENSE_NOT_DECLARED, ProtocolSpec
from .analysis import sfp_budget
from .client import respond
from .law import law
from .messages import SFPRequest, SFPResponse
from .nodes import check_reply, describe_round, reply_budget
from .parameters import NAME, SFP_KEYS
from .plan import SFP_PLAN, plan_sfp
from .server import build_sfp
from .wire import sfp_bits

SPEC = register_protocol(
    ProtocolSpec(
        name=NAME,
        summary=(
            "Apple's Sequence Fragment Puzzle: hashed fragments through a sketch, reassembled, then a full-word sketch"
        ),
        build=build_sfp,
        respond=respond,
        request_type=SFPRequest,
        response_type=SFPResponse,
        dropout_privacy=(
            "unchanged: both reports are ε-LDP on the device that sends them; a node that does not answer "
            "only removes its users' reports"
        ),
        keys=SFP_KEYS,
        reply_budget=reply_budget,
        check_reply=check_reply,
        describe_round=describe_round,
        no_dense_reason=DENSE_NOT_DECLARED,
        budget=sfp_budget(),
        crowds=fragment_crowds,
        planner=plan_sfp,
        plan_command=SFP_PLAN,
        communication=sfp_bits,
        contract=ITEM_CHOICE_CONTRACT,
        law=law,
    )
)
