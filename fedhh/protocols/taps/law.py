"""TAPS's law sampler: a shard's support counts, per party, drawn from their law given its item counts.

``run.simulation = "law"`` (:mod:`fedhh.protocols.law`).  Given what a
shard's users hold (:class:`~fedhh.data.counted.CountedShard`):

* **Parties.**  Party ``p`` holds the global ids ``[party_bounds[p],
  party_bounds[p + 1])``.  A shard inside one party is that party's part.
  A shard across several parties splits its counts over its parties' id
  ranges by one uniform draw: a multivariate hypergeometric split of its
  users (by what they hold: each item's holders, each type of several
  items, those holding nothing), range by range, once per run and shard.
  That is the users' law when the shard's users are exchangeable -- drawn
  from one law, as a generated population without ``population.languages``
  is; for other populations the config requires shards that stay within a
  party (``run.shards`` a multiple of ``protocol.parties``, which puts the
  shards' bounds on the parties').
* **Which item each user reports**, once per run: its one item, or, holding
  several, one drawn by local frequency
  (:func:`~fedhh.protocols.law.reported_holders`); users without an item
  report the empty value.
* **Levels.**  A user's level is a public uniform keyed by its global id,
  compared with ``levels`` equal bounds, independently for every user, as
  in PEM: each item's reporters in a party split over the levels as
  ``Multinomial(reporters, level probabilities)``
  (:func:`~fedhh.protocols.prefix_search.law.level_probabilities`), drawn
  once per run and party part, kept between rounds.
* **A level round**: for every party, its level members' prefixes of the
  level's length (the items' prefix keys weighted by their members) through
  the oracle's support law on that party's candidates
  (:func:`~fedhh.oracles.laws.support_law`), as the users path counts them
  with ``randomize_support``.

Exact wherever the oracle's law is: GRR exactly, OLH and BLH for an ideal
hash (:mod:`fedhh.oracles.laws`).
"""

from __future__ import annotations

import numpy as np

from ...data.counted import CountedShard, UserTypes
from ...kernels.laws import multivariate_hypergeometric
from ...kernels.randomness import KeyedRandomness
from ...oracles.laws import support_law
from ..common.prefix_encoding import PrefixEncoding
from ..law import reported_holders, shard_generator
from ..prefix_search.law import level_probabilities
from ..prefix_search.oracles import level_oracle
from .client import level_bounds
from .messages import PartyLevelRequest, PartySupport

PARTIES_PURPOSE = "taps.law-parties"
LEVELS_PURPOSE = "taps.law-levels"
REPORTS_PURPOSE = "taps.law-reports"


def party_parts(counts: CountedShard, party_bounds: np.ndarray, randomness: KeyedRandomness) -> list[CountedShard]:
    """The shard's users in each party, one :class:`CountedShard` a party (empty where the shard
    holds none of its users), split once per run and shard (module docstring)."""
    bounds = np.asarray(party_bounds, dtype=np.int64)
    key = (PARTIES_PURPOSE, randomness.seed, bounds.tobytes())
    if key in counts.memo:
        return counts.memo[key]
    starts = np.clip(bounds[:-1], counts.first_user, counts.stop_user)
    stops = np.clip(bounds[1:], counts.first_user, counts.stop_user)
    sizes = (stops - starts).astype(np.int64)
    whole = np.flatnonzero(sizes == counts.n_users)
    if whole.size:  # the shard lies in one party: its counts are that party's
        parts = [counts if p == whole[0] else _empty(counts, int(starts[p])) for p in range(sizes.size)]
    else:
        parts = _split(counts, starts, sizes, shard_generator(randomness, PARTIES_PURPOSE, 0, counts))
    counts.memo[key] = parts
    return parts


def _empty(counts: CountedShard, first_user: int) -> CountedShard:
    """No users at ``first_user``."""
    holders = np.zeros(counts.vocabulary.size, dtype=np.int64)
    return CountedShard(counts.vocabulary, first_user, 0, holders, UserTypes.none(), counts.population_users)


def _split(counts: CountedShard, starts: np.ndarray, sizes: np.ndarray, rng: np.random.Generator) -> list[CountedShard]:
    """``counts`` split into consecutive ranges of ``sizes`` users: each range a uniform subset of
    the users left, by what they hold (items, types, nothing)."""
    size = counts.vocabulary.size
    left = np.concatenate((counts.holders, counts.types.users, [counts.users_without_items])).astype(np.int64)
    parts = []
    for first, users in zip(starts.tolist(), sizes.tolist(), strict=True):
        taken = multivariate_hypergeometric(rng, left, int(users))
        left = left - taken
        types = counts.types
        if types.size:
            kept = np.flatnonzero(taken[size : size + types.size])
            lengths = types.lengths[kept]
            offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
            entries = np.repeat(types.offsets[kept] - offsets[:-1], lengths) + np.arange(int(offsets[-1]))
            types = UserTypes(
                offsets,
                types.item_ids[entries],
                types.item_counts[entries],
                taken[size : size + types.size][kept],
            )
        parts.append(CountedShard(counts.vocabulary, first, int(users), taken[:size], types, counts.population_users))
    return parts


def party_level_holders(
    part: CountedShard, levels: int, randomness: KeyedRandomness, partition_seed: int
) -> np.ndarray:
    """``[V + 1, levels]``: how many of a party part's reporters of each item (the last row: the
    empty value) each level holds, drawn once per run and part."""
    key = (LEVELS_PURPOSE, randomness.seed, int(partition_seed), levels)
    if key not in part.memo:
        rng = shard_generator(randomness, LEVELS_PURPOSE, 0, part)
        split = rng.multinomial(reported_holders(part, randomness), level_probabilities(level_bounds(levels)))
        split = split.astype(np.int64)
        split.flags.writeable = False
        part.memo[key] = split
    return part.memo[key]


def law(request: PartyLevelRequest, counts: CountedShard, randomness: KeyedRandomness) -> PartySupport:
    """A shard's support counts of every party's candidates at one level, drawn from their law."""
    encoding = PrefixEncoding(request.encoding, counts.vocabulary.codec)  # type: ignore[arg-type]
    oracle = level_oracle(request.oracle, request.epsilon, encoding.domain(request.length), request.oracle_seed, 0, 0)
    keys = encoding.prefix_keys(counts.vocabulary, request.length)
    support = np.zeros(request.candidates.size, dtype=np.int64)
    reporters = np.zeros(request.parties, dtype=np.int64)
    for party, part in enumerate(party_parts(counts, request.party_bounds, randomness)):
        if part.n_users == 0:
            continue
        members = party_level_holders(part, request.levels, randomness, request.partition_seed)[:, request.level]
        start, stop = int(request.candidate_bounds[party]), int(request.candidate_bounds[party + 1])
        rng = shard_generator(randomness, REPORTS_PURPOSE, request.round, part)
        drawn = support_law(oracle, keys, members, request.candidates[start:stop], rng)
        support[start:stop] = np.asarray(drawn.counts).reshape(-1)
        reporters[party] = int(members.sum())
    reporting = int(reporters.sum())
    return PartySupport(
        round=request.round,
        sampled_users=reporting,
        responding_users=reporting,
        counts=support,
        reporters=reporters,
    )
