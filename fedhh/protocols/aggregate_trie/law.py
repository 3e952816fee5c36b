"""The aggregate-DP prefix tree's law sampler: a shard's level counts drawn from their exact law given
its item counts (``run.simulation = "law"``, :mod:`fedhh.protocols.law`).

A level samples each user independently with probability ``q`` (Poisson
sampling), and a sampled user adds 1 to the candidates its data selection
chooses.  Given what a shard's users hold
(:class:`~fedhh.data.counted.CountedShard`):

* **Users of one item.**  Every data-selection scheme counts that item's
  candidate (when its prefix is kept): the sampled holders of item ``i``
  are ``Binomial(holders_i, q)``, independently per item, and they add to
  the item's candidate.
* **Users of several items**, grouped by type (the items and local counts
  they hold, :class:`~fedhh.data.counted.UserTypes`): ``Binomial(users_t,
  q)`` of a type are sampled.  ``most_frequent`` and ``several`` choose the
  same candidates for every user of a type, so each adds that many; for
  ``random`` and ``weighted`` each sampled user draws one item
  independently, with probability its weight (1, or its local count) among
  the type's items it may choose (``choose_from``): the sampled users of a
  type split as ``Multinomial(sampled, weights)``
  (:func:`~fedhh.protocols.law.split_types`), and a drawn item adds to its
  candidate when its prefix is kept.
* Users holding nothing are sampled, ``Binomial(users, q)``, and add nothing.

Every step is the law of the users path (independent inclusion of each
user, an independent choice per sampled user), so the counts have exactly
its distribution; the draws come from a generator keyed by (seed, level,
shard).
"""

from __future__ import annotations

import numpy as np

from ...data.counted import CountedShard, UserTypes
from ...kernels.randomness import KeyedRandomness
from ..law import shard_generator, split_types
from .client import cached_candidates, extension_length, heaviest
from .extensions import ExtensionDomain
from .messages import LevelCounts, LevelRequest
from .parameters import EXTENDING, RANDOM, WEIGHTED

LAW_PURPOSE = "aggregate-trie.law"


def sampled(rng: np.random.Generator, users: np.ndarray | int, rate: float) -> np.ndarray:
    """``Binomial(users, rate)`` per entry (every user when ``rate`` is 1)."""
    users = np.asarray(users, dtype=np.int64)
    return users.copy() if rate >= 1 else np.asarray(rng.binomial(users, rate), dtype=np.int64)


def type_counts(
    request: LevelRequest, types: UserTypes, users: np.ndarray, candidate: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, int]:
    """(candidate, count) pairs the sampled ``users`` of each type add, and how many of them count."""
    cand = candidate[types.item_ids]
    entry_type = types.type_of_entry
    may = cand >= 0 if request.choose_from == EXTENDING else np.ones(cand.size, dtype=bool)
    if request.data_selection in (RANDOM, WEIGHTED):
        weight = np.where(may, 1.0 if request.data_selection == RANDOM else types.item_counts, 0.0)
        mass = np.bincount(entry_type, weights=weight, minlength=types.size)
        users = np.where(mass > 0, users, 0)
        shares = np.where(
            mass[entry_type] > 0, weight / np.where(mass > 0, mass, 1.0)[entry_type], 1.0 / types.lengths[entry_type]
        )
        picked = split_types(rng, users, types.offsets, shares)
        counted = cand >= 0
        return cand[counted], picked[counted], int(picked[counted].sum())
    owners, cands = heaviest(
        request.data_selection,
        request.contributions,
        entry_type[may],
        types.item_ids[may],
        types.item_counts[may],
        cand[may],
    )
    kept = cands >= 0
    responding = int(users[np.unique(owners[kept])].sum())
    return cands[kept], users[owners[kept]], responding


def law(request: LevelRequest, counts: CountedShard, randomness: KeyedRandomness) -> LevelCounts:
    """A shard's counts of the level's candidates, drawn from their law (module docstring)."""
    vocabulary = counts.vocabulary
    domain = ExtensionDomain(vocabulary.codec.symbol_ids, extension_length(request, vocabulary))
    candidate = cached_candidates(request, vocabulary, domain)
    size = max(request.parents.shape[0], 1) * domain.size
    rng = shard_generator(randomness, LAW_PURPOSE, request.round, counts)
    rate = request.sampling_rate
    holders = sampled(rng, counts.holders, rate)
    nobody = int(sampled(rng, counts.users_without_items, rate))
    counted = candidate >= 0
    totals = np.bincount(candidate[counted], weights=holders[counted], minlength=size)
    responding = int(holders[counted].sum())
    types = counts.types
    typed = sampled(rng, types.users, rate)
    if types.size:
        cands, adds, typed_responding = type_counts(request, types, typed, candidate, rng)
        totals += np.bincount(cands, weights=adds, minlength=size)
        responding += typed_responding
    totals = np.rint(totals).astype(np.int64)  # exact: float64 sums of integers below 2**53
    slots = np.flatnonzero(totals)
    parent, code = np.divmod(slots, domain.size)
    parents = request.parents if request.depth else np.zeros((1, 0), dtype=np.int64)
    return LevelCounts(
        round=request.round,
        sampled_users=int(holders.sum()) + nobody + int(typed.sum()),
        responding_users=responding,
        width=request.depth + domain.length,
        prefixes=np.concatenate([parents[parent], domain.rows(code)], axis=1).astype(np.int64),
        counts=totals[slots],
    )
