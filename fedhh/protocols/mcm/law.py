"""MCM's law sampler: a shard's OLH support counts drawn from their law given its item counts.

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
* **The bits round**: the users of position ``l`` holding item ``v`` report
  the pair ``2 H(v) + v[l]`` (``H``: the public channel hash, evaluated as
  the users path does) through OLH; the support counts of the ``2h`` pairs
  are drawn from OLH's law (:func:`~fedhh.oracles.laws.support_law`).
* **The final round**: every user's key through OLH, the candidates'
  support counts from OLH's law.

The two reports of a user are independent (separate randomness), and so
are the rounds.  Exact given the counts for an **ideal random hash** in OLH
(the pairs' supports independent given a report, each ``1/g`` for a value
the user does not hold, :mod:`fedhh.oracles.laws`); the real 32-bit hash
family's collisions are not modelled.
"""

from __future__ import annotations

import numpy as np

from ...data.counted import CountedShard
from ...kernels.randomness import KeyedRandomness
from ...oracles import make_oracle
from ...oracles.hashing import hash_keys
from ...oracles.laws import support_law
from ..common.prefix_encoding import PrefixEncoding
from ..common.value_reports import value_table
from ..law import public_index_table, reported_holders, shard_generator
from .messages import MCMRequest, MCMResponse
from .parameters import BITS, FINAL, ORACLE

REPORTS_PURPOSE = "mcm.law-reports"


def law(request: MCMRequest, counts: CountedShard, randomness: KeyedRandomness) -> MCMResponse:
    """A shard's answer to an MCM round, drawn from its law (module docstring)."""
    if request.mode not in (BITS, FINAL):
        raise ValueError(f"request.mode: got {request.mode!r}; allowed: {[BITS, FINAL]}")
    bits, keys = value_table(counts.vocabulary, request.value_bits)
    reporters = reported_holders(counts, randomness)  # [V + 1]: the empty value last, as in the table
    rng = shard_generator(randomness, REPORTS_PURPOSE, request.round, counts)
    if request.mode == FINAL:
        encoding = PrefixEncoding("bits", counts.vocabulary.codec)
        oracle = make_oracle(ORACLE, epsilon=request.final_epsilon, domain=encoding.domain(request.value_bits))
        support = support_law(oracle, keys, reporters, request.candidates, rng)
        cells, senders = support.counts, np.array([counts.n_users])
    else:
        channels = hash_keys(np.uint64(request.channel_seed), keys, request.channels).astype(np.int64)
        oracle = make_oracle(ORACLE, epsilon=request.bit_epsilon, domain=2 * request.channels)
        pairs = np.arange(2 * request.channels, dtype=np.uint64)
        by_position = public_index_table(rng, reporters, request.value_bits)  # [V + 1, m]
        rows = []
        for position in range(request.value_bits):  # a loop over bit positions, vectorised over the items
            values = (2 * channels + bits[:, position]).astype(np.uint64)
            rows.append(support_law(oracle, values, by_position[:, position], pairs, rng).counts)
        cells, senders = np.concatenate(rows), by_position.sum(axis=0)
    return MCMResponse(
        round=request.round,
        sampled_users=counts.n_users,
        responding_users=counts.n_users,
        counts=np.asarray(cells, dtype=np.int64),
        reporters=np.asarray(senders, dtype=np.int64),
    )
