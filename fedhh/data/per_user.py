"""What each user keeps of their items: all of them, or only their most frequent one (``population.per_user``).

``per_user = "all"`` (the default) leaves a population as its source builds
it.  ``per_user = "mode"`` keeps, for every user, only the item the user
holds most often, once: the one-word-per-user setting of [Zhu20]'s
Figs. 5-6, which on Sentiment140 kept "the word with the highest local
frequency" of each user.  Whatever the source (sampled, a file, a built
dataset), the reduced population is a new population with its own truth:
a word's frequency there is the share of users whose most frequent word it
is, not its share of all words.

Ties (several items held equally often, as every item of a user holding
distinct items) are broken uniformly at random among the tied items, by a
uniform keyed by (seed, global user id, item id): the same whatever shard or
chunk holds the user, and, unlike "the smallest item id", not favouring the
items a source happens to list first.  A user holding nothing keeps nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels.randomness import derive_key, splitmix64
from .population import PopulationSource, Shard, SingleItemShard

PER_USER = ("all", "mode")
MODE_TIES_PURPOSE = "population.mode_ties"
REDUCE_CHUNK_USERS = 1 << 18  # users built and reduced at once: a chunk's words exist at once, not all


def tie_break_words(key: np.uint64, users: np.ndarray, items: np.ndarray) -> np.ndarray:
    """A uniform 64-bit word for each (global user, item) pair, keyed by ``key``."""
    with np.errstate(over="ignore"):
        return splitmix64(splitmix64(users.astype(np.uint64) ^ key) + items.astype(np.uint64))


def most_frequent_items(shard: Shard, key: np.uint64) -> np.ndarray:
    """Each local user's most frequent item id (``-1`` for a user holding nothing), ties broken by
    :func:`tie_break_words` under ``key``: one pass over the shard's entries, no loop over users.

    Each entry scores its count in the high 32 bits and the top 32 bits of its tie word in the
    low ones (a user's count of one item is below 2^32 in any population fedhh can hold), so a
    user's highest score is its most frequent item, ties going to the larger tie word; equal
    scores (a tie of 32-bit words, about one chance in 4·10^9) go to the smaller item id.
    """
    dtype = np.int32 if shard.vocabulary.size < 1 << 31 else np.int64
    if shard.one_item_per_user:
        return shard.item_of_user.astype(dtype, copy=False)
    held = np.diff(shard.item_offsets)
    holders = np.flatnonzero(held)
    owner = np.repeat(np.arange(shard.n_users), held)
    score = tie_break_words(key, shard.first_user + owner, shard.item_ids) >> np.uint64(32)
    score |= np.asarray(shard.item_counts).astype(np.uint64) << np.uint64(32)
    starts = shard.item_offsets[holders]
    best = np.maximum.reduceat(score, starts) if starts.size else score[:0]
    winners = np.flatnonzero(score == np.repeat(best, held[holders]))
    items = np.full(shard.n_users, -1, dtype=dtype)
    items[holders] = shard.item_ids[winners[np.searchsorted(winners, starts)]]
    return items


class MostFrequentItemSource(PopulationSource):
    """The population of ``source`` with each user reduced to their most frequent item (module docstring).

    Users are built from ``source`` a chunk of :data:`REDUCE_CHUNK_USERS` at a
    time and reduced at once, so the reduced population (one 4-byte item id a
    user) is all that stays in memory; its truth is counted from the reduced
    users, never taken from ``source``.
    """

    def __init__(self, source: PopulationSource, seed: int) -> None:
        self.source = source
        self.n_users = source.n_users
        self.vocabulary = source.vocabulary
        self._key = derive_key(seed, MODE_TIES_PURPOSE)

    def build_users(self, start: int, stop: int) -> Shard:
        items = [
            most_frequent_items(self.source.build_users(first, min(first + REDUCE_CHUNK_USERS, stop)), self._key)
            for first in range(start, stop, REDUCE_CHUNK_USERS)
        ]
        dtype = np.int32 if self.vocabulary.size < 1 << 31 else np.int64
        return SingleItemShard(self.vocabulary, start, np.concatenate(items) if items else np.zeros(0, dtype=dtype))

    def require_memory(self, items_per_user: float) -> None:
        self.source.require_memory(1)

    def describe(self) -> dict[str, Any]:
        return {**self.source.describe(), "per_user": "mode"}

    def describe_data(self) -> dict[str, Any]:
        return self.source.describe_data()


def keep_per_user(source: PopulationSource, per_user: str, seed: int) -> PopulationSource:
    """``source`` as ``population.per_user`` asks: itself (``all``) or its users' most frequent items (``mode``)."""
    if per_user == "all":
        return source
    if per_user == "mode":
        return MostFrequentItemSource(source, seed)
    raise ValueError(f"population.per_user: got {per_user!r}; allowed: {list(PER_USER)}")
