"""TrieHH's messages: a round's request (who is sampled, the trie's current level) and the votes that answer it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...data.prefixes import sum_histograms
from ..base import Request, Response
from ..messages import array_field, message


@message
class TrieHHRequest(Request):
    """Round ``r``: who is sampled, and the trie's extendable depth-(r-1) prefixes."""

    sampled: np.ndarray = array_field("int64", ("m",))  # sorted global user ids
    parents: np.ndarray = array_field("int64", ("K", "round-1"))  # the trie's depth-(round-1) prefixes, as symbol rows
    # users the round samples in all (public); a law simulation's request lists none of them in sampled
    sample_size: int


@message
class TrieHHResponse(Response):
    """Votes per depth-r prefix (a sparse, additive histogram)."""

    prefixes: np.ndarray = array_field("int64", ("K", "round"))  # distinct voted depth-round prefixes, symbol rows
    votes: np.ndarray = array_field("int64", ("K",))  # votes for each prefix (at least 1 in an honest reply)

    @classmethod
    def combine(cls, responses: Sequence[TrieHHResponse]) -> TrieHHResponse:
        if not responses:
            raise ValueError("combine needs at least one response")
        rounds = {r.round for r in responses}
        if len(rounds) != 1:
            raise ValueError(f"cannot combine responses of different rounds: {sorted(rounds)}")
        (round_,) = rounds
        prefixes, votes = sum_histograms([(r.prefixes, r.votes) for r in responses], round_)
        return cls(
            round=round_,
            sampled_users=sum(r.sampled_users for r in responses),
            responding_users=sum(r.responding_users for r in responses),
            prefixes=prefixes,
            votes=votes,
        )
