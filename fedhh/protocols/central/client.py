"""The curator baseline's device side: every user sends one of its items, in the clear, to the curator."""

from __future__ import annotations

import numpy as np

from ...data.population import Shard
from ...kernels.randomness import RandomnessSource
from ..common.item_choice import choose_items
from .messages import ItemHistogram, ItemRequest

CHOICE_PURPOSE = "central.choice"


def respond(request: ItemRequest, shard: Shard, randomness: RandomnessSource) -> ItemHistogram:
    """The histogram of the items a shard's users send.

    What each user does (a device is a shard of one user): it sends one of
    its items (with one item, that item; with several, item ``i`` with
    probability its local frequency, drawn once), as its symbol row; a user
    holding none sends nothing.  The reply lists each distinct item sent
    once with the number of users who sent it; ``sampled_users`` counts
    the shard's users, ``responding_users`` those who sent an item.  Nothing
    is randomised on the device: the curator adds the noise to the total.
    """
    users, chosen = choose_items(shard, np.arange(shard.n_users), randomness, CHOICE_PURPOSE, request.round)
    tally = np.bincount(chosen, minlength=shard.vocabulary.size)
    held = np.flatnonzero(tally)
    return ItemHistogram(
        round=request.round,
        sampled_users=shard.n_users,
        responding_users=int(users.size),
        items=shard.vocabulary.rows[held].astype(np.int64),
        counts=tally[held].astype(np.int64),
    )
