"""Users, their items, and the deterministic split of users into shards.

A population is stored at the level of its vocabulary: the distinct items are
encoded once (:class:`Vocabulary`), and each user holds item ids with local
counts in CSR form (:class:`Shard`).  A round's work is then a ``bincount``
over item ids followed by an aggregation over the vocabulary, which is far
smaller than the population.

Users have global ids ``0..n-1``; shard ``s`` of ``S`` holds the contiguous
range ``[floor(s n / S), floor((s + 1) n / S))``, so any shard count covers
the same users with the same ids.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InputError
from ..resources import require_population_memory
from .items import EncodingReport, ItemCodec
from .prefixes import PrefixIndex, row_keys


def check_shard_count(n_users: int, num_shards: int) -> int:
    """Refuse a split of ``n_users`` into ``num_shards`` that leaves a shard without users.

    An empty shard would be a SuperNode or Ray actor with nothing to answer,
    and each shard costs a fixed time per round whatever it holds; the
    upper bound for all runs, :data:`fedhh.schema.MAX_SHARDS`, is part of the
    config's validation.
    """
    if num_shards < 1:
        raise InputError(f"run.shards: must be >= 1, got {num_shards}")
    if num_shards > n_users:
        raise InputError(
            f"run.shards: {num_shards:,} shards for a population of {n_users:,} users would leave "
            f"shards without users; use at most {n_users:,}"
        )
    return num_shards


def shard_bounds(n_users: int, shard_index: int, num_shards: int) -> tuple[int, int]:
    """Global user-id range ``[start, stop)`` of one shard."""
    if num_shards < 1:
        raise InputError(f"run.shards: must be >= 1, got {num_shards}")
    if not 0 <= shard_index < num_shards:
        raise InputError(f"shard index must be in 0..{num_shards - 1}, got {shard_index}")
    return shard_index * n_users // num_shards, (shard_index + 1) * n_users // num_shards


SHARE_BITS = 32  # a user's local share of an item, in units of 2**-SHARE_BITS


@dataclass(frozen=True)
class PopulationCounts:
    """True counts of a set of users: additive, so a population's are the sum of its shards'.

    Per vocabulary item, ``weight_units`` is the sum over users of the
    item's local share of the user's items (TrieHH Algorithm 3's population
    frequency, the expected votes if everyone voted) in fixed point, and
    ``holders`` the users holding it.  Integer units make the sum exact, so
    the truth is the same bit for bit whichever shards or chunks it was
    added up from (a float sum would depend on the grouping); a share is
    exact for one item per user and within ``2**-33`` otherwise.
    """

    users: int
    weight_units: np.ndarray  # int64 [V]
    holders: np.ndarray  # int64 [V]
    users_without_items: int

    @property
    def frequency(self) -> np.ndarray:
        """Per item, the population frequency (times n) as a float."""
        return self.weight_units / float(1 << SHARE_BITS)

    def __add__(self, other: PopulationCounts) -> PopulationCounts:
        if not isinstance(other, PopulationCounts):
            return NotImplemented
        if other.holders.shape != self.holders.shape:
            raise ValueError(
                f"PopulationCounts: vocabularies differ ({self.holders.size} vs {other.holders.size} items)"
            )
        return PopulationCounts(
            self.users + other.users,
            self.weight_units + other.weight_units,
            self.holders + other.holders,
            self.users_without_items + other.users_without_items,
        )

    @classmethod
    def combine(cls, parts: Iterable[PopulationCounts]) -> PopulationCounts:
        """The counts of the union of disjoint sets of users."""
        total: PopulationCounts | None = None
        for part in parts:
            total = part if total is None else total + part
        if total is None:
            raise ValueError("combine needs at least one set of counts")
        return total


DISTINCT_CHUNK_BYTES = 1 << 20  # bytes of rows compared at once when finding the distinct ones


def distinct_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(row_keys(rows), return_index=True, return_inverse=True)[1:]``: each distinct
    row's first index, in the order of the rows' keys, and each row's distinct index.

    The same answer without numpy's copies of the keys (a sorted copy of every row, then one of
    the distinct rows: twice the rows' memory at once): the keys are ordered by index, and
    neighbours compared a bounded chunk of rows at a time.
    """
    keys = row_keys(rows)  # rows as opaque byte strings: exact, and many times faster than unique(axis=0)
    order = np.argsort(keys, kind="stable")
    starts = np.ones(order.size, dtype=bool)
    chunk = max(1, DISTINCT_CHUNK_BYTES // max(keys.dtype.itemsize, 1))
    for start in range(1, order.size, chunk):
        stop = min(start + chunk, order.size)
        starts[start:stop] = keys[order[start:stop]] != keys[order[start - 1 : stop - 1]]
    inverse = np.empty(order.size, dtype=np.int64)
    inverse[order] = np.cumsum(starts) - 1
    return order[starts], inverse


@dataclass
class Vocabulary:
    """The distinct items of a population, encoded as symbol rows.

    ``items[i]`` is the text of item id ``i`` and ``rows[i]`` its symbol row.
    Prefix lookups per depth are built lazily and cached: every round at
    depth ``d`` of every protocol reuses them.
    """

    items: list[str]
    rows: np.ndarray
    codec: ItemCodec
    encoding: EncodingReport
    key_order: np.ndarray | None = field(default=None, repr=False)  # item ids by row key, if known
    _prefix_index: PrefixIndex | None = field(default=None, repr=False)

    @property
    def size(self) -> int:
        return len(self.items)

    @property
    def prefixes(self) -> PrefixIndex:
        if self._prefix_index is None:
            self._prefix_index = PrefixIndex(self.rows, key_order=self.key_order)
        return self._prefix_index

    @classmethod
    def encode(cls, candidates: list[str], codec: ItemCodec) -> tuple[Vocabulary, np.ndarray]:
        """Encode candidate items into a vocabulary of distinct symbol rows.

        Returns the vocabulary and, per candidate, its item id, or ``-1``
        when the codec dropped it.  Candidates that encode to the same row
        (possible only under truncation) share one item id.
        """
        encoded = codec.encode(candidates)
        first, inverse = distinct_rows(encoded.rows)
        order = np.argsort(first, kind="stable")  # keep the candidates' order
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        item_id = np.full(len(candidates), -1, dtype=np.int64)
        item_id[np.flatnonzero(encoded.kept)] = rank[inverse]
        chosen = first[order]
        # distinct candidates (the usual case) keep their rows: no copy of the largest array
        rows = encoded.rows if np.array_equal(chosen, np.arange(encoded.rows.shape[0])) else encoded.rows[chosen]
        kept_texts = [candidates[i] for i in np.flatnonzero(encoded.kept).tolist()]
        if codec.overlong == "truncate":
            items = codec.decode_rows(rows)
        else:
            items = [kept_texts[i] for i in first[order].tolist()]
        # the distinct rows came sorted by key: item rank[u] has the u-th key, which the prefix index
        # would otherwise sort again
        return cls(items, rows, codec, encoded.report, key_order=rank), item_id


@dataclass
class Shard:
    """A contiguous range of users with their items (CSR over item ids).

    ``item_offsets[u] : item_offsets[u + 1]`` are the entries of local user
    ``u`` (global id ``first_user + u``) in ``item_ids`` / ``item_counts``.
    A user with no entry holds nothing encodable and never votes.
    """

    vocabulary: Vocabulary
    first_user: int
    item_offsets: np.ndarray
    item_ids: np.ndarray
    item_counts: np.ndarray

    def __post_init__(self) -> None:
        if self.item_offsets.ndim != 1 or self.item_offsets.size < 1:
            raise ValueError("item_offsets must be a 1-D array with n_users + 1 entries")
        if self.item_ids.shape != self.item_counts.shape:
            raise ValueError("item_ids and item_counts must have the same shape")
        if np.any(self.item_counts <= 0):
            raise ValueError("item counts (local frequencies) must be positive")

    @property
    def n_users(self) -> int:
        return int(self.item_offsets.size - 1)

    @functools.cached_property
    def one_item_per_user(self) -> bool:
        """Every user holds at most one item, once: no local-frequency draw is needed."""
        return bool(np.all(np.diff(self.item_offsets) <= 1) and np.all(self.item_counts == 1))

    @functools.cached_property
    def item_of_user(self) -> np.ndarray:
        """Each local user's item id, ``-1`` for none (shards of one item per user only): one
        gather answers "what do these users hold", where the CSR arrays need three."""
        if not self.one_item_per_user:
            raise ValueError("item_of_user: some users of this shard hold several items")
        items = np.full(self.n_users, -1, dtype=np.int32 if self.vocabulary.size < 1 << 31 else np.int64)
        items[np.diff(self.item_offsets) > 0] = self.item_ids
        return items

    @property
    def stop_user(self) -> int:
        return self.first_user + self.n_users

    @property
    def users_without_items(self) -> int:
        """Users holding nothing encodable (they never vote; an LDP user reports the empty value)."""
        return int(self.n_users - np.count_nonzero(np.diff(self.item_offsets)))

    @classmethod
    def single_item(cls, vocabulary: Vocabulary, first_user: int, item_ids: np.ndarray) -> Shard:
        """One item per user; ``item_ids < 0`` marks users holding nothing."""
        holds = item_ids >= 0
        offsets = np.concatenate(([0], np.cumsum(holds, dtype=np.int64)))
        ids = item_ids[holds].astype(np.int64)
        # every count is 1: a read-only view of one value instead of n copies of it
        shard = cls(vocabulary, first_user, offsets, ids, np.broadcast_to(np.int64(1), ids.shape))
        shard.one_item_per_user = True  # known by construction: skip the check over every user
        return shard

    @classmethod
    def from_pairs(
        cls,
        vocabulary: Vocabulary,
        first_user: int,
        n_users: int,
        local_users: np.ndarray,
        item_ids: np.ndarray,
    ) -> Shard:
        """Build from (local user, item id) occurrences; repeats become counts."""
        keep = item_ids >= 0
        key = local_users[keep].astype(np.int64) * max(vocabulary.size, 1) + item_ids[keep]
        unique_key, counts = np.unique(key, return_counts=True)
        users = unique_key // max(vocabulary.size, 1)
        offsets = np.searchsorted(users, np.arange(n_users + 1), side="left").astype(np.int64)
        ids = unique_key % max(vocabulary.size, 1)
        return cls(vocabulary, first_user, offsets, ids, counts.astype(np.int64))

    def slice(self, start: int, stop: int) -> Shard:
        """The users with global ids in ``[start, stop)`` (a sub-shard)."""
        lo, hi = start - self.first_user, stop - self.first_user
        if not 0 <= lo <= hi <= self.n_users:
            raise ValueError(f"users [{start}, {stop}) are not all in this shard")
        a, b = self.item_offsets[lo], self.item_offsets[hi]
        return Shard(
            self.vocabulary,
            start,
            self.item_offsets[lo : hi + 1] - a,
            self.item_ids[a:b],
            self.item_counts[a:b],
        )

    def counts(self) -> PopulationCounts:
        """This shard's true counts (evaluation only; see :class:`PopulationCounts`)."""
        size = self.vocabulary.size
        holders = np.bincount(self.item_ids, minlength=size).astype(np.int64)
        without = self.users_without_items
        if self.one_item_per_user:
            return PopulationCounts(self.n_users, holders << SHARE_BITS, holders, without)
        cumulative = np.concatenate(([0], np.cumsum(self.item_counts)))
        totals = np.diff(cumulative[self.item_offsets])
        owner = np.repeat(np.arange(self.n_users), np.diff(self.item_offsets))
        units = np.rint(self.item_counts * float(1 << SHARE_BITS) / totals[owner]).astype(np.int64)
        # Two bincounts of 16-bit halves: float64 sums of each are exact up to 2**37 users.
        high = np.bincount(self.item_ids, weights=units >> 16, minlength=size)
        low = np.bincount(self.item_ids, weights=units & 0xFFFF, minlength=size)
        weight_units = (high.astype(np.int64) << 16) + low.astype(np.int64)
        return PopulationCounts(self.n_users, weight_units, holders, without)


class SingleItemShard(Shard):
    """A shard whose users hold at most one item each, kept as one array of item ids.

    ``item_of_user[u]`` is local user ``u``'s item id, ``-1`` for none: 4
    bytes a user, where the CSR form needs about 20 (an int64 offset and id
    per user).  Populations loaded from disk (:mod:`fedhh.data.store`)
    and sampled ones of one word a user (:mod:`fedhh.data.sources`) are held this
    way, so a shard of 10^8 users takes 400 MB, what its file column takes;
    the CSR arrays are derived only if a caller asks for them.
    """

    def __init__(self, vocabulary: Vocabulary, first_user: int, item_of_user: np.ndarray) -> None:
        if item_of_user.ndim != 1:
            raise ValueError("item_of_user must be a 1-D array of item ids (-1 for none)")
        self.vocabulary = vocabulary
        self.first_user = first_user
        self.__dict__["item_of_user"] = item_of_user  # the cached property's slot: the array itself
        self.__dict__["one_item_per_user"] = True

    @property
    def n_users(self) -> int:
        return int(self.item_of_user.size)

    @property
    def users_without_items(self) -> int:
        return int(np.count_nonzero(self.item_of_user < 0))

    @functools.cached_property
    def item_offsets(self) -> np.ndarray:  # type: ignore[override]
        return np.concatenate(([0], np.cumsum(self.item_of_user >= 0, dtype=np.int64)))

    @functools.cached_property
    def item_ids(self) -> np.ndarray:  # type: ignore[override]
        return self.item_of_user[self.item_of_user >= 0].astype(np.int64)

    @functools.cached_property
    def item_counts(self) -> np.ndarray:  # type: ignore[override]
        return np.broadcast_to(np.int64(1), self.item_ids.shape)

    def slice(self, start: int, stop: int) -> SingleItemShard:
        lo, hi = start - self.first_user, stop - self.first_user
        if not 0 <= lo <= hi <= self.n_users:
            raise ValueError(f"users [{start}, {stop}) are not all in this shard")
        return SingleItemShard(self.vocabulary, start, self.item_of_user[lo:hi])

    def counts(self) -> PopulationCounts:
        # shifted by one so that "no item" is bin 0: one bincount, no copy of the held items
        holders = np.bincount(self.item_of_user + 1, minlength=self.vocabulary.size + 1).astype(np.int64)
        return PopulationCounts(self.n_users, holders[1:] << SHARE_BITS, holders[1:], int(holders[0]))


TRUTH_CHUNK_USERS = 1 << 20  # users built at a time when the truth is counted without shards


class PopulationSource(ABC):
    """A population of ``n_users`` users over a fixed, encoded vocabulary."""

    n_users: int
    vocabulary: Vocabulary

    @abstractmethod
    def build_users(self, start: int, stop: int) -> Shard:
        """The users with global ids ``[start, stop)``, with their items."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """What this population is, for the result file: only what the
        configuration and public data determine."""

    def describe_data(self) -> dict[str, Any]:
        """What only the users' own data determine (evaluation only: no guarantee covers it)."""
        return {}

    def require_memory(self, items_per_user: int) -> None:
        """Refuse a population this machine cannot hold (:mod:`fedhh.resources`)."""
        require_population_memory(self.n_users, items_per_user)

    def build_shard(self, shard_index: int, num_shards: int) -> Shard:
        """The users of one shard, with their items."""
        return self.build_users(*shard_bounds(self.n_users, shard_index, num_shards))

    def build_all(self) -> Shard:
        return self.build_users(0, self.n_users)

    def population_counts(self) -> PopulationCounts:
        """The true counts of every user, for a process that holds no shard (a Flower server).

        The users are built a chunk at a time and only their counts kept, so
        memory stays that of one chunk however large the population; a
        driver that holds shards adds up theirs instead and hands the sum
        to :meth:`fedhh.experiment.Experiment.finish`.
        """
        return PopulationCounts.combine(
            self.build_users(start, min(start + TRUTH_CHUNK_USERS, self.n_users)).counts()
            for start in range(0, self.n_users, TRUTH_CHUNK_USERS)
        )
