"""RAPPOR's device side: each user's randomised Bloom filter of its item, summed per cohort."""

from __future__ import annotations

import numpy as np

from ...data.population import Shard
from ...kernels.bernoulli_bytes import REFINEMENT_WORDS
from ...kernels.packed_counts import group_bit_counts
from ...kernels.randomness import RandomnessSource
from .encoding import FilterMasks, user_cohorts, user_items, vocabulary_keys
from .messages import RapporRequest, RapporResponse
from .parameters import REFINE_PURPOSE, REPORT_PURPOSE


def respond(request: RapporRequest, shard: Shard, randomness: RandomnessSource) -> RapporResponse:
    """Every user of the shard sends its randomised Bloom filter; the shard adds them up per cohort.

    What each user does (a device is a shard of one user, ``u`` its global
    id): its cohort is ``c = public_index(cohort_seed, u, cohorts)`` and its
    item's key is ``key_rows`` of the item's symbol row of ``fedhh.data.items``
    (``max_symbols + 1`` entries: the symbols, the end symbol 0, then
    padding -1).  Its Bloom filter has ``m = bloom_bits`` bits, of which the
    ``h = bloom_hashes`` bits ``hash64(σ_(c h + j), key, m)``, ``j = 0 ..
    h - 1``, are set, with ``σ_i = splitmix64(hash_seed + i)``; none is set
    when the user holds no item.  Bit ``b`` is reported set, independently
    for every bit, with probability ``p' = T_p / 2^32`` if the filter sets it
    and ``q' = T_q / 2^32`` if not, where ``T_p = floor(p 2^32)`` and ``T_q =
    ceil(q 2^32)``, ``p = e^(ε/2h) / (e^(ε/2h) + 1)``, ``q = 1 - p`` (ε =
    ``epsilon``): rounding ``p`` down and ``q`` up keeps the report ε-LDP
    exactly.  (A fresh uniform 32-bit integer below the threshold is such a
    bit; fedhh's simulated users draw the same law from fewer random bits,
    ``BloomEncoder.randomize``.)

    The reply: ``ones[c m + b]`` is the number of the node's cohort-``c``
    reports with bit ``b`` set, ``reporters[c]`` the number of its
    cohort-``c`` users; ``sampled_users = responding_users`` = the number of
    users.
    """
    encoder = request.encoder()
    items = user_items(shard, randomness)
    filters = FilterMasks(encoder, vocabulary_keys(shard.vocabulary), shard.n_users)
    ones = np.zeros((request.cohorts, 64 * encoder.report_words), dtype=np.int64)
    reporters = np.zeros(request.cohorts, dtype=np.int64)
    for first in range(0, shard.n_users, encoder.users_per_block):
        block = slice(first, first + encoder.users_per_block)
        users, first_global = items[block].size, shard.first_user + first
        cohorts = user_cohorts(request.cohort_seed, request.cohorts, np.arange(first_global, first_global + users))
        draws = randomness.for_range(REPORT_PURPOSE, request.round, first_global, users)
        byte_draws, hash_draws = draws.words(encoder.byte_draw_words), draws.words(encoder.hash_draw_words)

        def refine(refined: np.ndarray, first_draw: int = first_global * encoder.report_bytes) -> np.ndarray:
            """Keyed by the draw's global number, ``user * report_bytes + byte``: the same in any range."""
            return randomness.for_users(REFINE_PURPOSE, request.round, refined + first_draw).words(REFINEMENT_WORDS)

        reports = encoder.randomize(*filters.of(items[block], cohorts), byte_draws, hash_draws, refine)
        ones += group_bit_counts(reports, cohorts, request.cohorts)
        reporters += np.bincount(cohorts, minlength=request.cohorts)
    return RapporResponse(
        round=request.round,
        sampled_users=shard.n_users,
        responding_users=shard.n_users,
        ones=ones[:, : request.bloom_bits].ravel(),
        reporters=reporters,
    )
