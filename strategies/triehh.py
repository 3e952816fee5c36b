"""TrieHH on Flower: its wire format and the round log it shows.

Everything else (sampling, thresholding, trie growth, stopping) is the
core's ``TrieHHServer``; this module only declares what TrieHH's messages
look like on the wire and which numbers a round's log line shows.
"""

from __future__ import annotations

from fedhh.protocols import RoundRecord
from fedhh.protocols.triehh import TrieHHRequest, TrieHHResponse

from .base import ProtocolStrategy
from .codec import ArraySpec, MessageCodec

# Round r: the sampled users (m sorted ids) and the trie's K extendable
# depth-(r-1) prefixes; the answer: K' voted depth-r prefixes and their votes.
REQUEST_CODEC: MessageCodec[TrieHHRequest] = MessageCodec(
    TrieHHRequest,
    arrays={"sampled": ArraySpec("int64", ("m",)), "parents": ArraySpec("int64", ("K", "round-1"))},
    minimums={"round": 1},
)
RESPONSE_CODEC: MessageCodec[TrieHHResponse] = MessageCodec(
    TrieHHResponse,
    arrays={"prefixes": ArraySpec("int64", ("K", "round")), "votes": ArraySpec("int64", ("K",))},
    minimums={"round": 1},
)


class TrieHHStrategy(ProtocolStrategy):
    """TrieHH rounds over Flower, logging how the trie grows."""

    def describe_round(self, record: RoundRecord) -> str:
        values = record.values
        return (
            f"{values['votes_received']} votes from {values['sampled_users']} sampled users, "
            f"{values['prefixes_voted']} prefixes voted, {values['prefixes_added']} added "
            f"({values['items_completed']} complete items); trie size "
            f"{sum(values['trie_size_per_depth'])}, per depth {values['trie_size_per_depth']}"
        )
