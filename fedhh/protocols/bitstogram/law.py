"""Bitstogram's law sampler: a shard's Hashtogram statistics drawn from their law given its item counts.

Given a shard's item counts:

* **Which value a user reports**, once per run: its item's, or, holding
  several, one item's drawn by local frequency
  (:func:`~fedhh.protocols.law.reported_holders`); a user holding none
  reports the empty value.
* **Bit positions.**  A user's position is a public uniform index keyed by its
  id, independent across users: an item's reporters split over the
  positions as ``Multinomial(reporters, 1/m each)``
  (:func:`~fedhh.protocols.law.public_index_table`, on the 2^-53 grid the
  users path draws on).
* **The (channel, bit) reports**: the users of position ``l`` holding item
  ``v`` report the pair ``2 h(v) + v[l]`` (``h``: the public channel hash,
  evaluated as the users path does) through the pairs' Hashtogram, whose
  statistics are drawn from its law (:func:`~fedhh.oracles.laws.statistics_law`:
  truthful reporters at their column with their sign, the others a fair
  sign, the uniform Hadamard row drawn bit by bit).
* **The whole-value reports**: every user's key through the hashed
  Hashtogram, the same way (each reporter's row uniform, ``Multinomial(n_v,
  1/R)``).

A user's two reports are independent (separate randomness).  Exact given
the counts, over the public channel and row hashes: no hash is assumed
ideal.  The cost is O(m T log T) for ``m`` bit positions and ``T``
channels, whatever the number of users.
"""

from __future__ import annotations

import numpy as np

from ...data.counted import CountedShard
from ...kernels.randomness import KeyedRandomness
from ...oracles.hashing import hash_keys
from ...oracles.hashtogram import HashtogramStatistics
from ...oracles.laws import statistics_law
from ..common.value_reports import value_table
from ..law import public_index_table, reported_holders, shard_generator
from .messages import BitstogramRequest, BitstogramResponse

REPORTS_PURPOSE = "bitstogram.law-reports"


def law(request: BitstogramRequest, counts: CountedShard, randomness: KeyedRandomness) -> BitstogramResponse:
    """A shard's two reports per user, summed, drawn from their law (module docstring)."""
    bits, keys = value_table(counts.vocabulary, request.value_bits)
    reporters = reported_holders(counts, randomness)  # [V + 1]: the empty value last, as in the table
    rng = shard_generator(randomness, REPORTS_PURPOSE, request.round, counts)
    channels = hash_keys(np.uint64(request.channel_seed), keys, request.buckets).astype(np.int64)
    by_position = public_index_table(rng, reporters, request.value_bits)  # [V + 1, m]
    bit_oracle = request.bit_oracle()
    bit_sums = np.zeros((request.value_bits, 2 * request.buckets), dtype=np.int64)
    for position in range(request.value_bits):  # a loop over bit positions, vectorised over the items
        pairs = (2 * channels + bits[:, position]).astype(np.uint64)
        statistics: HashtogramStatistics = statistics_law(bit_oracle, pairs, by_position[:, position], rng)  # type: ignore[assignment]
        bit_sums[position] = statistics.sums[0]
    final: HashtogramStatistics = statistics_law(request.final_oracle(), keys, reporters, rng)  # type: ignore[assignment]
    return BitstogramResponse(
        round=request.round,
        sampled_users=counts.n_users,
        responding_users=counts.n_users,
        bit_sums=bit_sums,
        bit_users=by_position.sum(axis=0),
        final_sums=final.sums.ravel(),
        final_users=final.users,
    )
