"""The exact baseline's device side: every user sends all of its items with their shares, in the clear."""

from __future__ import annotations

import numpy as np

from ...data.population import PopulationCounts, Shard, Vocabulary
from ...kernels.randomness import RandomnessSource
from .messages import ItemsRequest, ItemWeights


def respond(request: ItemsRequest, shard: Shard, randomness: RandomnessSource) -> ItemWeights:
    """The summed shares of the items a shard's users hold.

    What each user does (a device is a shard of one user): for every item it
    holds, it sends the item's symbol row and its share of the user's items
    (the item's local count over the user's total) in units of ``2**-32``,
    rounded to the nearest unit; a user holding one item sends it with
    ``2**32``, a user holding none sends nothing.  The reply lists each
    distinct item once with the summed shares; ``sampled_users`` counts the
    shard's users, ``responding_users`` those holding an item.  Nothing is
    randomised: this baseline has no privacy.
    """
    return summed_shares(request, shard.counts(), shard.vocabulary)


def summed_shares(request: ItemsRequest, counts: PopulationCounts, vocabulary: Vocabulary) -> ItemWeights:
    """The reply of users whose true counts are ``counts``: the same fixed-point shares the
    evaluation's truth adds up."""
    held = np.flatnonzero(counts.weight_units)
    return ItemWeights(
        round=request.round,
        sampled_users=counts.users,
        responding_users=counts.users - counts.users_without_items,
        items=vocabulary.rows[held].astype(np.int64),
        weights=counts.weight_units[held].astype(np.int64),
    )
