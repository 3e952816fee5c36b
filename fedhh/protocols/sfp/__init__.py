"""Apple's Sequence Fragment Puzzle (Apple 2017; [Cormode21] §5): fragments tagged with the
word's hash, reassembled by the server, then estimated by a full-word sketch.

Every value is its ``U`` symbols, padded with zeros (``protocol.max_length``
characters in ``unit_size``-character symbols), cut into ``P = U / f``
fragments of ``f = protocol.fragment_length`` symbols.  Each user

* is assigned one fragment position by public randomness (sent in the clear:
  it depends on nothing the user holds) and reports that fragment of its
  value concatenated with an 8-bit public hash of the whole value, through
  a sketch oracle (Apple's CMS, count-mean over OUE, or HCMS, over HM(1)),
  with ``fragment_share x ε``;
* reports its whole value through a second sketch with the rest of ε
  (``protocol.word_pass = false``: no full-word report, the whole ε on
  the fragment).

A shard sends the flat statistics of both sketches, per position for the
fragments: additive, decoded once.  The server

1. estimates every (fragment, hash) pair at every position (the ``B^f x
   256`` pairs are enumerated: a sketch decodes each row once) and keeps,
   per position, the best ``protocol.fragment_candidates`` of those above
   the noise level (``Φ⁻¹(1 - 1/pairs)`` times a robust spread of the
   estimates, most pairs being held by nobody);
2. solves the puzzle: for every hash value, every way of choosing one kept
   fragment per position with that hash is a candidate word, kept only if
   it is the encoding of some item and its own hash is that hash (the hash
   is what keeps "apples" and "orange" from becoming "orales");
3. estimates the candidates with the full-word sketch (without one, with
   the mean of their fragments' estimates) and reports the best
   ``protocol.words_reported`` of those with a positive estimate.

With ``protocol.report = "top_k"`` (:mod:`fedhh.protocols.common.report_mode`) the
server keeps the best ``protocol.fragment_candidates`` pairs per position
whatever the noise level and reports the best ``protocol.words_reported``
candidates whatever their estimate, as pure-ldp does (every candidate the
puzzle assembles, if fewer).

Both reports are ε-LDP by their oracles at their share of ε; a user's
guarantee is their sum (basic composition), as the privacy report states.

The package: its keys and constants (``parameters``), budget split and the
noise of its sketches (``analysis``), public encoding (``encoding``),
messages (``messages``), device side (``client``), law sampler (``law``), server (``server``), what
an untrusting server checks (``nodes``), planner (``plan``), the bits a user
sends (``wire``), and its spec, registered here.
"""

from __future__ import annotations

from ..common.item_choice import ITEM_CHOICE_CONTRACT
from ..registry import register_protocol
from ..spec import ProtocolSpec
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
        summary="Apple's Sequence Fragment Puzzle: hashed fragments through a sketch, reassembled, then a full-word sketch",
        build=build_sfp,
        respond=respond,  # type: ignore[arg-type]
        request_type=SFPRequest,
        response_type=SFPResponse,
        dropout_privacy=(
            "unchanged: both reports are ε-LDP on the device that sends them; a node that does not answer "
            "only removes its users' reports"
        ),
        keys=SFP_KEYS,
        reply_budget=reply_budget,  # type: ignore[arg-type]
        check_reply=check_reply,  # type: ignore[arg-type]
        describe_round=describe_round,
        budget=sfp_budget(),
        planner=plan_sfp,
        plan_command=SFP_PLAN,
        communication=sfp_bits,
        contract=ITEM_CHOICE_CONTRACT,
        law=law,  # type: ignore[arg-type]
    )
)
