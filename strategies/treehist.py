"""TreeHist on Flower: the wire format of its messages and its strategy.

TreeHist is a prefix search like PEM (``strategies.pem`` holds what they
share); its rounds are one tree level each, then the final estimation pass
that asks every node, and its log says which.
"""

from __future__ import annotations

from fedhh.protocols.treehist import TreeHistRequest, TreeHistResponse

from .codec import MessageCodec
from .pem import REQUEST_ARRAYS, REQUEST_MINIMUMS, RESPONSE_ARRAYS, PrefixSearchStrategy

REQUEST_CODEC: MessageCodec[TreeHistRequest] = MessageCodec(TreeHistRequest, REQUEST_ARRAYS, REQUEST_MINIMUMS)
RESPONSE_CODEC: MessageCodec[TreeHistResponse] = MessageCodec(TreeHistResponse, RESPONSE_ARRAYS, {"round": 1})


class TreeHistStrategy(PrefixSearchStrategy):
    """TreeHist rounds over Flower: one tree level per round, then every user's full-value report."""
