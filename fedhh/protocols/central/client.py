"""The curator baseline's device side: every user sends one of its items, in the clear, to the curator."""

from __future__ import annotations

import numpy as np

from ...data.population import Shard, Vocabulary
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
    _, chosen = choose_items(shard, np.arange(shard.n_users), randomness, CHOICE_PURPOSE, request.round)
    tally = np.bincount(chosen, minlength=shard.vocabulary.size)
    return item_histogram(request, tally, shard.vocabulary, shard.n_users)


def item_histogram(request: ItemRequest, tally: np.ndarray, vocabulary: Vocabulary, users: int) -> ItemHistogram:
    """The reply of ``users`` users of whom ``tally[i]`` send item ``i`` (the others send nothing)."""
    held = np.flatnonzero(tally)
    return ItemHistogram(
        round=request.round,
        sampled_users=users,
        responding_users=int(tally.sum()),
        items=vocabulary.rows[held].astype(np.int64),
        counts=tally[held].astype(np.int64),
    )
