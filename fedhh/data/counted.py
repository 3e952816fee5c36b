"""A shard as a law simulation holds it: how many of its users hold each item, not the users.

A round's aggregate is a sum of independent user reports, so given how many
users hold each item it can be drawn from its exact law without drawing a
user (``run.simulation = "law"``, :mod:`fedhh.protocols.law`).  A
:class:`CountedShard` is what that needs of a shard's users ``[first_user,
first_user + n_users)``:

* ``holders[i]``: the users whose one item is ``i`` (a user holding one
  distinct item, whatever its local count);
* ``types``: the users holding several distinct items, grouped by the items
  and local counts they hold (:class:`UserTypes`), each type with its number
  of users; a user draws its item from its own type's local frequencies;
* the rest hold nothing encodable.

Where the counts come from (:func:`counted_users`): for a sampled
population of one item a user (wordfreq, Zipf, language parties) they are
drawn directly, ``Multinomial(users, item law)`` for each range of users of
one law (a language party's users have its language's; with a deny list,
the law with the denied items' mass moved to holding nothing:
:mod:`fedhh.data.deny_list`), so no user is built and memory is
O(vocabulary) for any number of users; for a file, a dataset, or several
items a user, the users are built a chunk at a time and counted (their own
items, O(users) time once, O(vocabulary + types) memory).  Drawn counts are
keyed by the shard's range: their law is the users' law, their sample
depends on the shards (the users' own items do not).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..kernels.randomness import KeyedRandomness
from .deny_list import DeniedItemsSource
from .population import (
    SHARE_BITS,
    TRUTH_CHUNK_USERS,
    PopulationCounts,
    PopulationSource,
    Shard,
    Vocabulary,
    distinct_rows,
)
from .sources import SampledSource

COUNTS_PURPOSE = "law.population"


@dataclass(frozen=True)
class UserTypes:
    """Users holding several distinct items, one entry per distinct (items, local counts).

    Type ``t`` holds ``item_ids[offsets[t] : offsets[t + 1]]`` with local
    counts ``item_counts[...]``; ``users[t]`` users have it.
    """

    offsets: np.ndarray  # int64 [T + 1]
    item_ids: np.ndarray  # int64
    item_counts: np.ndarray  # int64, > 0
    users: np.ndarray  # int64 [T]

    @classmethod
    def none(cls) -> UserTypes:
        empty = np.zeros(0, dtype=np.int64)
        return cls(np.zeros(1, dtype=np.int64), empty, empty, empty)

    @property
    def size(self) -> int:
        return int(self.users.size)

    @property
    def lengths(self) -> np.ndarray:
        """Distinct items of each type."""
        return np.diff(self.offsets)

    @property
    def type_of_entry(self) -> np.ndarray:
        return np.repeat(np.arange(self.size), self.lengths)

    def shares(self) -> np.ndarray:
        """Each entry's local frequency: the probability that a user of its type picks it."""
        totals = np.add.reduceat(self.item_counts, self.offsets[:-1]) if self.size else np.zeros(0)
        return self.item_counts / totals[self.type_of_entry]

    def holders(self, vocabulary_size: int) -> np.ndarray:
        """Per item, the users of these types holding it."""
        return np.bincount(
            self.item_ids, weights=self.users[self.type_of_entry].astype(np.float64), minlength=vocabulary_size
        ).astype(np.int64)

    def weight_units(self, vocabulary_size: int) -> np.ndarray:
        """Per item, the sum over these users of its local share, in ``2**-SHARE_BITS`` units
        (as :meth:`fedhh.data.population.Shard.counts` rounds each user's share)."""
        if not self.size:
            return np.zeros(vocabulary_size, dtype=np.int64)
        totals = np.add.reduceat(self.item_counts, self.offsets[:-1])[self.type_of_entry]
        units = np.rint(self.item_counts * float(1 << SHARE_BITS) / totals).astype(np.int64)
        weighted = units * self.users[self.type_of_entry]
        result = np.zeros(vocabulary_size, dtype=np.int64)
        np.add.at(result, self.item_ids, weighted)
        return result

    @classmethod
    def combine(cls, parts: list[UserTypes]) -> UserTypes:
        """The types of the union of disjoint sets of users (equal types merged)."""
        parts = [part for part in parts if part.size]
        if not parts:
            return cls.none()
        if len(parts) == 1:
            return parts[0]
        offsets = [parts[0].offsets]
        for part in parts[1:]:
            offsets.append(part.offsets[1:] + offsets[-1][-1])
        joined = cls(
            np.concatenate(offsets),
            np.concatenate([p.item_ids for p in parts]),
            np.concatenate([p.item_counts for p in parts]),
            np.concatenate([p.users for p in parts]),
        )
        return joined.merged()

    def merged(self) -> UserTypes:
        """Equal types as one entry, their users added up."""
        width = int(self.lengths.max(initial=0))
        table = np.full((self.size, 2 * width), -1, dtype=np.int64)
        column = np.arange(self.item_ids.size) - self.offsets[self.type_of_entry]
        table[self.type_of_entry, column] = self.item_ids
        table[self.type_of_entry, width + column] = self.item_counts
        first, inverse = distinct_rows(table)
        users = np.bincount(inverse, weights=self.users.astype(np.float64), minlength=first.size).astype(np.int64)
        return _types_from_table(table[first], width, users)


def _types_from_table(table: np.ndarray, width: int, users: np.ndarray) -> UserTypes:
    """Types from rows ``[item ids..., counts...]`` padded with -1."""
    held = table[:, :width] >= 0
    offsets = np.concatenate(([0], np.cumsum(held.sum(axis=1), dtype=np.int64)))
    return UserTypes(offsets, table[:, :width][held], table[:, width:][held], users.astype(np.int64))


@dataclass(frozen=True)
class CountedShard:
    """The users ``[first_user, first_user + n_users)`` of a population of ``population_users``,
    by what they hold (module docstring)."""

    vocabulary: Vocabulary
    first_user: int
    n_users: int
    holders: np.ndarray  # int64 [V]: users whose one item is i
    types: UserTypes  # users holding several distinct items
    population_users: int  # users of the whole population (a law sampler splits a round's sample by range)
    # what law samplers derive once per run and keep between rounds (a split of the users drawn once),
    # under keys naming everything it depends on
    memo: dict[tuple[object, ...], Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.holders.shape != (self.vocabulary.size,):
            raise ValueError(f"holders must have one entry per item ({self.vocabulary.size}), got {self.holders.shape}")
        if self.users_without_items < 0:
            raise ValueError(f"the counts hold more users than the shard's {self.n_users}")

    @property
    def stop_user(self) -> int:
        return self.first_user + self.n_users

    @property
    def one_item_per_user(self) -> bool:
        return self.types.size == 0

    @property
    def users_without_items(self) -> int:
        return int(self.n_users - self.holders.sum() - self.types.users.sum())

    def counts(self) -> PopulationCounts:
        """The shard's true counts, the same as its users' (:meth:`fedhh.data.population.Shard.counts`)."""
        size = self.vocabulary.size
        holders = self.holders + self.types.holders(size)
        units = (self.holders << SHARE_BITS) + self.types.weight_units(size)
        return PopulationCounts(self.n_users, units, holders, self.users_without_items)

    @classmethod
    def of_shard(cls, shard: Shard, population_users: int) -> CountedShard:
        """The counts of a shard's users (of a population of ``population_users``)."""
        size = shard.vocabulary.size
        if shard.one_item_per_user:
            held = np.asarray(shard.item_of_user)
            holders = np.bincount(held[held >= 0], minlength=size).astype(np.int64)
            return cls(shard.vocabulary, shard.first_user, shard.n_users, holders, UserTypes.none(), population_users)
        lengths = np.diff(shard.item_offsets)
        single = np.flatnonzero(lengths == 1)
        holders = np.bincount(shard.item_ids[shard.item_offsets[single]], minlength=size).astype(np.int64)
        several = np.flatnonzero(lengths > 1)
        if several.size == 0:
            return cls(shard.vocabulary, shard.first_user, shard.n_users, holders, UserTypes.none(), population_users)
        width = int(lengths[several].max())
        table = np.full((several.size, 2 * width), -1, dtype=np.int64)
        owner = np.repeat(np.arange(several.size), lengths[several])
        starts = np.repeat(shard.item_offsets[several], lengths[several])
        column = np.arange(owner.size) - np.repeat(np.cumsum(lengths[several]) - lengths[several], lengths[several])
        entries = starts + column
        table[owner, column] = shard.item_ids[entries]
        table[owner, width + column] = shard.item_counts[entries]
        first, inverse = distinct_rows(table)
        users = np.bincount(inverse, minlength=first.size)
        types = _types_from_table(table[first], width, users)
        return cls(shard.vocabulary, shard.first_user, shard.n_users, holders, types, population_users)

    @classmethod
    def combine(cls, parts: list[CountedShard]) -> CountedShard:
        """The counts of consecutive ranges of users, as one range."""
        ordered = sorted(parts, key=lambda part: part.first_user)
        for before, after in itertools.pairwise(ordered):
            if before.stop_user != after.first_user:
                raise ValueError("combine needs consecutive ranges of users")
        return cls(
            ordered[0].vocabulary,
            ordered[0].first_user,
            sum(part.n_users for part in ordered),
            np.asarray(np.sum([part.holders for part in ordered], axis=0, dtype=np.int64)),
            UserTypes.combine([part.types for part in ordered]),
            ordered[0].population_users,
        )


def counted_users(source: PopulationSource, start: int, stop: int, seed: int) -> CountedShard:
    """The users ``[start, stop)`` of ``source`` as counts (module docstring): drawn from the item
    law for a sampled population of one item a user (each range of one law, such as a language
    party's, keyed by the seed and the range, so every process holding or checking the shard draws
    the same counts), else counted from the users, built
    :data:`~fedhh.data.population.TRUTH_CHUNK_USERS` at a time."""
    ranges = source.range_laws(start, stop) if isinstance(source, (SampledSource, DeniedItemsSource)) else None
    if ranges is not None and stop > start:
        drawn = []
        for first, last, law in ranges:
            rng = KeyedRandomness(seed).generator(COUNTS_PURPOSE, first, last)
            holders = rng.multinomial(last - first, law).astype(np.int64)[1:]  # entry 0: users holding nothing
            drawn.append(
                CountedShard(source.vocabulary, first, last - first, holders, UserTypes.none(), source.n_users)
            )
        return CountedShard.combine(drawn)
    return CountedShard.combine(
        [
            CountedShard.of_shard(source.build_users(first, min(first + TRUTH_CHUNK_USERS, stop)), source.n_users)
            for first in range(start, max(stop, start + 1), TRUTH_CHUNK_USERS)
        ]
    )
