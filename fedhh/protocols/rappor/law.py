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
ITEMS_AT_ONCE = 1 << 12  # items split over the cohorts together (their split held at once)
PAIRS_AT_ONCE = 1 << 18  # (item, cohort) pairs hashed together


def law(request: RapporRequest, counts: CountedShard, randomness: KeyedRandomness) -> RapporResponse:
    """A shard's per-cohort bit counts, drawn from their law (module docstring)."""
    encoder = request.encoder()
    rng = shard_generator(randomness, REPORTS_PURPOSE, request.round, counts)
    reporting = reported_holders(counts, randomness)  # [V + 1]: users holding none last
    keys = vocabulary_keys(counts.vocabulary)
    m = encoder.bloom_bits
    summed = np.zeros(encoder.cohorts * m, dtype=np.float64)  # exact: sums of integers below 2**53
    reporters = np.zeros(encoder.cohorts, dtype=np.int64)
    for first in range(0, reporting.size, ITEMS_AT_ONCE):
        values, cohorts, split = split_by_public_index(rng, reporting[first : first + ITEMS_AT_ONCE], request.cohorts)
        reporters += np.bincount(cohorts, weights=split.astype(np.float64), minlength=request.cohorts).astype(np.int64)
        holding = values + first < keys.size  # the users holding no item set no bit
        summed += filter_bit_counts(encoder, keys[values[holding] + first], cohorts[holding], split[holding])
    set_bits = np.rint(summed).astype(np.int64).reshape(encoder.cohorts, m)
    p, q = encoder.probabilities
    ones = rng.binomial(set_bits, p) + rng.binomial(reporters[:, None] - set_bits, q)
    return RapporResponse(
        round=request.round,
        sampled_users=counts.n_users,
        responding_users=counts.n_users,
        ones=ones.astype(np.int64).ravel(),
        reporters=reporters,
    )


def filter_bit_counts(encoder: BloomEncoder, keys: np.ndarray, cohorts: np.ndarray, users: np.ndarray) -> np.ndarray:
    """``[C m]`` (flat, float64): how many of ``users[i]`` reporters of key ``keys[i]`` in cohort
    ``cohorts[i]`` have each cohort's bit set in their Bloom filter."""
    m = encoder.bloom_bits
    total = np.zeros(encoder.cohorts * m, dtype=np.float64)
    for first in range(0, keys.size, PAIRS_AT_ONCE):
        block = slice(first, first + PAIRS_AT_ONCE)
        positions = encoder.positions(keys[block], cohorts[block])  # [pairs, h]
        repeated = np.zeros(positions.shape, dtype=bool)  # a bit an earlier hash already set
        for j in range(1, positions.shape[1]):
            repeated[:, j] = np.any(positions[:, j : j + 1] == positions[:, :j], axis=1)
        cells = cohorts[block, None] * m + positions
        weights = np.where(repeated, 0.0, users[block, None].astype(np.float64))
        total += np.bincount(cells.ravel(), weights=weights.ravel(), minlength=total.size)
    return total
