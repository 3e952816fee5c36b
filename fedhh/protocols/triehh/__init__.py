"""TrieHH: interactive heavy-hitter discovery by a sampled, thresholded trie.

Zhu et al., AISTATS 2020, Algorithms 1-3.  Round ``r`` samples ``m`` users
uniformly without replacement; a sampled user whose item's length-(r-1)
prefix is in the trie votes for its length-r prefix; prefixes with at least
``θ`` votes grow the trie at depth r.  A user holding several items first
picks one with probability equal to its local frequency (Algorithm 3).  The
run stops when a round adds nothing or after ``L`` rounds; discovered items
are the root-to-leaf paths ending in the end-of-sequence symbol.

The package: its messages (``messages``), the device side
(``client``), its law sampler (``law``: a shard's votes from its item
counts, for ``run.simulation = "law"``), the server (``server``), what a server that cannot
trust its nodes checks (``nodes``: a node's votes add up and only extend
the trie's current level; a round's request narrows to a node's own sampled
users; its responses as fixed-length vectors for secure aggregation), its
planner and sizing (``plan``, ``sizing``), the bits a user sends
(``wire``), and its spec, registered here.
"""

from __future__ import annotations

from ..registry import register_protocol
from ..spec import ProtocolSpec
from .client import respond
from .contract import CONTRACT
from .law import law
from .messages import TrieHHRequest, TrieHHResponse
from .nodes import DROPOUT_PRIVACY, TrieHHDense, check_reply, describe_round, narrow, reply_budget
from .plan import TRIEHH_PLAN, plan_triehh
from .server import NAME, TrieHHServer, build_triehh
from .sizing import TRIEHH_SIZING
from .wire import triehh_bits

SPEC = register_protocol(
    ProtocolSpec(
        name=NAME,
        summary="TrieHH (Zhu et al.): a sampled, thresholded trie grown one symbol per round; central DP",
        build=build_triehh,
        respond=respond,
        request_type=TrieHHRequest,
        response_type=TrieHHResponse,
        dropout_privacy=DROPOUT_PRIVACY,
        narrow=narrow,
        reply_budget=reply_budget,
        check_reply=check_reply,
        describe_round=describe_round,
        dense=TrieHHDense,
        contract=CONTRACT,
        planner=plan_triehh,
        plan_command=TRIEHH_PLAN,
        sizing=TRIEHH_SIZING,
        communication=triehh_bits,
        law=law,
    )
)

__all__ = ["SPEC", "TrieHHRequest", "TrieHHResponse", "TrieHHServer", "respond"]
