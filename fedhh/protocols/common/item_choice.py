"""Which of its items a user reports: one, with probability its share of the user's items.

Every protocol's device side starts here (Algorithm 3 of TrieHH, and the
same choice for the LDP protocols): a user holding one item reports it, a
user holding several draws one by their local frequencies, keyed by its
global user id so that the choice does not depend on sharding.
"""

from __future__ import annotations

import numpy as np

from ...data.population import Shard
from ...kernels.randomness import RandomnessSource
from ..spec import ContractText

# What every device does with its items, as the message contract states it for device implementers.
ITEM_CHOICE_RULE = (
    "A user holding several items reports one of them, each with probability its share of the user's items, "
    "drawn once per run (TrieHH: anew every round); a user holding none reports the empty value (all units 0), "
    "so that taking part reveals nothing (TrieHH: it does not vote).  Before any of this, every device (the "
    "baselines' too) leaves out of its items those the run config's deny list names (run.deny_list, when set: "
    "a UTF-8 file of one item a line, or a results folder whose result.json lists them in deny_list.denied and "
    "heavy_hitters; items compared by exact text), so that a user whose items are all denied holds none."
)
ITEM_CHOICE_CONTRACT = ContractText(definitions=(ITEM_CHOICE_RULE,))


def choose_items(
    shard: Shard, local_users: np.ndarray, randomness: RandomnessSource, purpose: str, round_: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each user picks one of its items with probability equal to its local frequency.

    Returns (users that hold an item, chosen item id per such user).  The draw
    is keyed by global user id, so it does not depend on sharding.
    """
    if shard.one_item_per_user:
        chosen = shard.item_of_user[local_users]
        holds = chosen >= 0
        return local_users[holds], chosen[holds]
    starts = shard.item_offsets[local_users]
    ends = shard.item_offsets[local_users + 1]
    holds = ends > starts
    users, starts, ends = local_users[holds], starts[holds], ends[holds]
    cumulative = np.concatenate(([0], np.cumsum(shard.item_counts)))
    total = cumulative[ends] - cumulative[starts]
    uniforms = randomness.for_users(purpose, round_, users + shard.first_user).random(users.size)
    target = cumulative[starts] + np.floor(uniforms * total).astype(np.int64)
    entry = np.searchsorted(cumulative, target, side="right") - 1
    return users, shard.item_ids[entry]
