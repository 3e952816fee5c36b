"""RAPPOR's law sampler: a shard's per-cohort bit counts drawn from their law given its item counts.

Given a shard's item counts:

* **Which item a user reports**, once per run: its item, or, holding
  several, one drawn by local frequency
  (:func:`~fedhh.protocols.law.reported_holders`); a user holding none sends
  a filter with no bit set.
* **Cohorts.**  A user's cohort is a public uniform index keyed by its id,
  independent across users: an item's reporters split over the cohorts as
  ``Multinomial(reporters, 1/C each)``
  (:func:`~fedhh.protocols.law.split_by_public_index`, on the 2^-53 grid the
  users path draws on).
* **The bits.**  Every bit of every report is set independently, with the
  realised ``p'`` where the user's Bloom filter sets it and ``q'`` where not
  (:class:`~fedhh.protocols.rappor.encoding.BloomEncoder`).  So with
  ``s_cb`` of cohort ``c``'s ``N_c`` reporters whose filter sets bit ``b``
  (their items' bits in the cohort, hashed by the public hash functions as
  the users path hashes them; a bit two hashes name is set once), the
  reports with bit ``b`` set are ``Binomial(s_cb, p') + Binomial(N_c - s_cb,
  q')``, independently for every bit and cohort.

Exact given the counts, over the public hash functions: no hash is assumed
ideal.  The cost is O(min(V C, users) h + C m) for ``V`` items, ``C``
cohorts, ``h`` hash functions and ``m``-bit filters.
"""

from __future__ import annotations

import numpy as np

from ...data.counted import CountedShard
from ...kernels.randomness import KeyedRandomness
from ..law import reported_holders, shard_generator, split_by_public_index
from .encoding import BloomEncoder, vocabulary_keys
from .messages import RapporRequest, RapporResponse

REPORTS_PURPOSE = "rappor.law-reports"
PAIRS_AT_ONCE = 1 << 18  # (item, cohort) pairs hashed together


def law(request: RapporRequest, counts: CountedShard, randomness: KeyedRandomness) -> RapporResponse:
    """A shard's per-cohort bit counts, drawn from their law (module docstring)."""
    encoder = request.encoder()
    rng = shard_generator(randomness, REPORTS_PURPOSE, request.round, counts)
    by_cohort = split_by_public_index(rng, reported_holders(counts, randomness), request.cohorts)  # [V + 1, C]
    set_bits = filter_bit_counts(encoder, vocabulary_keys(counts.vocabulary), by_cohort[:-1])
    reporters = by_cohort.sum(axis=0)
    p, q = encoder.probabilities
    ones = rng.binomial(set_bits, p) + rng.binomial(reporters[:, None] - set_bits, q)
    return RapporResponse(
        round=request.round,
        sampled_users=counts.n_users,
        responding_users=counts.n_users,
        ones=ones.astype(np.int64).ravel(),
        reporters=reporters.astype(np.int64),
    )


def filter_bit_counts(encoder: BloomEncoder, keys: np.ndarray, by_cohort: np.ndarray) -> np.ndarray:
    """``[C, m]``: how many of each cohort's reporters have each bit set in their Bloom filter,
    ``by_cohort[v, c]`` reporters of item ``v`` (key ``keys[v]``) in cohort ``c``."""
    items, cohorts = np.nonzero(by_cohort)
    weights = by_cohort[items, cohorts].astype(np.float64)
    m = encoder.bloom_bits
    total = np.zeros(encoder.cohorts * m, dtype=np.float64)  # exact: sums of integers below 2**53
    for first in range(0, items.size, PAIRS_AT_ONCE):
        block = slice(first, first + PAIRS_AT_ONCE)
        positions = encoder.positions(keys[items[block]], cohorts[block])  # [pairs, h]
        repeated = np.zeros(positions.shape, dtype=bool)  # a bit an earlier hash already set
        for j in range(1, positions.shape[1]):
            repeated[:, j] = np.any(positions[:, j : j + 1] == positions[:, :j], axis=1)
        cells = cohorts[block, None] * m + positions
        total += np.bincount(cells.ravel(), weights=np.where(repeated, 0.0, weights[block, None]).ravel(),
                             minlength=total.size)
    return np.rint(total).astype(np.int64).reshape(encoder.cohorts, m)
