"""TrieHH's device side: a sampled user votes for its item's next prefix if the trie holds the shorter one."""

from __future__ import annotations

import numpy as np

from ...data.population import Shard
from ...kernels.randomness import RandomnessSource
from ..common.item_choice import choose_items
from .messages import TrieHHRequest, TrieHHResponse

CHOICE_PURPOSE = "triehh.choice"


def sampled_in_shard(sampled: np.ndarray, shard: Shard) -> np.ndarray:
    """Local indices of the sampled users that this shard holds."""
    lo, hi = np.searchsorted(sampled, [shard.first_user, shard.stop_user])
    return sampled[lo:hi] - shard.first_user


def respond(request: TrieHHRequest, shard: Shard, randomness: RandomnessSource) -> TrieHHResponse:
    """The votes of a shard's sampled users for depth-``round`` prefixes.

    What each user does (a device is a shard of one user): if its global id
    is in ``sampled``, it picks one of its items (with one item, that item;
    with several, item ``i`` with probability its local frequency) and takes
    the item's first ``round`` symbols (the symbol row of ``fedhh.data.items``,
    end symbol included).  It votes for that prefix if the prefix exists (the
    item did not end before symbol ``round``) and, from round 2 on, its first
    ``round - 1`` symbols are a row of ``parents``.  The reply lists each
    distinct voted prefix once with its number of votes; ``sampled_users``
    counts the sampled users, ``responding_users`` the votes.

    Work is proportional to the shard's sampled users, not to the vocabulary:
    the chosen items are mapped to their prefixes, and these to the round's
    candidates (the prefixes that extend the trie), through the
    vocabulary's prefix index, which works out the candidates once per
    round for all the shards a process holds.
    """
    depth = request.round
    local = sampled_in_shard(request.sampled, shard)
    _, chosen = choose_items(shard, local, randomness, CHOICE_PURPOSE, depth)
    prefixes = shard.vocabulary.prefixes
    candidate_rows, candidate_of_prefix = prefixes.extending(depth, request.parents)
    _, item_to_prefix = prefixes.at(depth)
    candidate = candidate_of_prefix[item_to_prefix[chosen]]  # -1: no symbol at this depth, or off the trie
    candidate = candidate[candidate >= 0]
    if candidate_rows.shape[0] <= 4 * candidate.size:  # a count per candidate beats sorting the votes
        tally = np.bincount(candidate, minlength=candidate_rows.shape[0])
        voted = np.flatnonzero(tally)
        votes = tally[voted]
    else:
        voted, votes = np.unique(candidate, return_counts=True)
    rows = candidate_rows[voted]
    return TrieHHResponse(
        round=depth,
        sampled_users=int(local.size),
        responding_users=int(votes.sum()),
        prefixes=rows,
        votes=votes.astype(np.int64),
    )
