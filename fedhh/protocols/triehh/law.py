"""TrieHH's law sampler: a shard's votes drawn from their exact law given its item counts.

A round samples ``m`` of the ``n`` users uniformly without replacement and
each sampled user votes for its item's depth-``r`` prefix when that prefix
extends the trie.  Given what a shard's users hold:

* **How many of the shard's users are sampled.**  When the request lists
  the sampled ids (a users-mode request), those in the shard's range; in a
  law simulation the request names only ``m``, and the sample is the keyed
  uniform ``m``-subset of :func:`~fedhh.kernels.laws.subset_count`, whose
  count in the shard's range every shard and the server work out alike.
  Given that count ``k``, the shard's sampled users are a uniform
  ``k``-subset of its users.
* **Their votes, one item a user.**  The users fall into classes: the
  holders of an item whose depth-``r`` prefix is candidate ``c`` (one class
  per candidate), and everyone who votes for nothing (no item, an item ended
  before symbol ``r``, a prefix off the trie).  A uniform ``k``-subset's
  counts per class are one multivariate hypergeometric draw
  (:func:`~fedhh.kernels.laws.multivariate_hypergeometric`, exact for any
  total): the votes per candidate.
* **Several items a user (Algorithm 3).**  The classes are the one-item
  users' classes as above plus one class per user type
  (:class:`~fedhh.data.counted.UserTypes`); each sampled user of a type then
  picks one of its items with probability its local frequency, anew each
  round and independently of the others: ``Multinomial(sampled of the type,
  shares)``, and each picked item votes for its prefix's candidate.

Every step is the law of the users path (sampling without replacement, a
choice per sampled user keyed by its id and the round), so the votes have
exactly its distribution; the draws come from generators keyed by (seed,
round, shard).  Unit sizes change nothing here: prefixes are rows of the
vocabulary's symbols, whatever a symbol holds.
"""

from __future__ import annotations

import numpy as np

from ...data.counted import CountedShard
from ...kernels.laws import multivariate_hypergeometric, subset_count
from ...kernels.randomness import KeyedRandomness, derive_key
from ..law import shard_generator, split_types
from .messages import TrieHHRequest, TrieHHResponse

SAMPLE_PURPOSE = "triehh.law-sample"
VOTES_PURPOSE = "triehh.law-votes"


def sampled_in_range(seed: int, request: TrieHHRequest, first_user: int, users: int, population: int) -> int:
    """How many of the users ``[first_user, first_user + users)`` round ``request.round`` samples."""
    if request.sampled.size or request.sample_size == 0:
        low, high = np.searchsorted(request.sampled, [first_user, first_user + users])
        return int(high - low)
    key = derive_key(seed, SAMPLE_PURPOSE, request.round)
    return subset_count(key, population, int(request.sample_size), first_user, first_user + users)


def law(request: TrieHHRequest, counts: CountedShard, randomness: KeyedRandomness) -> TrieHHResponse:
    """A shard's votes for depth-``round`` prefixes, drawn from their law (module docstring)."""
    depth = request.round
    sampled = sampled_in_range(randomness.seed, request, counts.first_user, counts.n_users, counts.population_users)
    prefixes = counts.vocabulary.prefixes
    candidate_rows, candidate_of_prefix = prefixes.extending(depth, request.parents)
    _, item_to_prefix = prefixes.at(depth)
    candidates = candidate_rows.shape[0]
    candidate_of_item = candidate_of_prefix[item_to_prefix]
    candidate_of_item = np.where(candidate_of_item >= 0, candidate_of_item, candidates)  # the last class: no vote
    classes = np.bincount(candidate_of_item, weights=counts.holders.astype(np.float64), minlength=candidates + 1)
    classes = np.rint(classes).astype(np.int64)  # exact: float64 sums of integers below 2**53
    classes[candidates] += counts.users_without_items
    rng = shard_generator(randomness, VOTES_PURPOSE, depth, counts)
    types = counts.types
    drawn = multivariate_hypergeometric(rng, np.concatenate((classes, types.users)), sampled)
    votes = drawn[:candidates].copy()
    if types.size:
        picked = split_types(rng, drawn[candidates + 1 :], types.offsets, types.shares())
        votes += np.bincount(
            candidate_of_item[types.item_ids], weights=picked.astype(np.float64), minlength=candidates + 1
        )[:candidates].astype(np.int64)
    voted = np.flatnonzero(votes)
    return TrieHHResponse(
        round=depth,
        sampled_users=sampled,
        responding_users=int(votes.sum()),
        prefixes=candidate_rows[voted],
        votes=votes[voted],
    )
