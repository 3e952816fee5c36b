"""A seeded hash family ``[0, 2**64) -> [0, g)`` evaluated in numpy.

Local hashing (BLH, OLH, FLH) and the sketches need, per seed, a hash that
behaves like a random function on the domain, cheap enough that the server
can evaluate it for every (report, candidate) pair.  The construction:

* every key is first mixed once with SplitMix64 (a bijection, so distinct
  keys stay distinct), making consecutive integers look random;
* a 64-bit seed expands into an odd multiplier ``a`` and an offset ``b``;
* ``z = a * mixed + b (mod 2**64)``; the bucket is ``(top32(z) * g) >> 32``.

On mixed keys the pair ``(z(v), z(v'))`` for ``v != v'`` is uniform up to
O(2**-32), so ``P[h(v) = h(v')] = 1/g`` to that precision, which is all the
variance formulas use.  Privacy never depends on hash quality: the seed is
drawn independently of the value.

Why this shape: the bucket of ``z`` depends only on its top 32 bits, so
"report ``(seed, y)`` supports ``v``" is the single unsigned comparison
``(z(v) - start_y) mod 2**64 < width_y``.  The server's inner loop is then a
multiply, an add and a compare per pair (see :func:`count_supports`).
"""

from __future__ import annotations

import numpy as np

from fedhh.errors import InputError
from fedhh.randomness import splitmix64

_OFFSET_STREAM = np.uint64(0xD1B54A32D192ED03)
_PAIR_BLOCK = 1 << 19  # reports x candidates evaluated per numpy pass
MAX_RANGE = 1 << 31


def mix_keys(keys: np.ndarray) -> np.ndarray:
    """Bijectively scramble uint64 keys so structured domains hash like random ones."""
    return splitmix64(np.asarray(keys, dtype=np.uint64))


def expand_seeds(seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (odd multiplier, offset) pair that a 64-bit seed names."""
    seeds = np.asarray(seeds, dtype=np.uint64)
    multipliers = splitmix64(seeds) | np.uint64(1)
    offsets = splitmix64(seeds ^ _OFFSET_STREAM)
    return multipliers, offsets


def _bucket_starts(buckets: np.ndarray, g: int) -> np.ndarray:
    """First 64-bit value of ``z`` whose top-32 bits fall in each bucket."""
    buckets = np.asarray(buckets, dtype=np.uint64)
    tops = ((buckets << np.uint64(32)) + np.uint64(g - 1)) // np.uint64(g)
    return tops << np.uint64(32)


def hash_expanded(multipliers: np.ndarray, offsets: np.ndarray, mixed_keys: np.ndarray, g: int) -> np.ndarray:
    """Buckets in ``[0, g)`` of mixed keys under already-expanded seeds (broadcasting)."""
    with np.errstate(over="ignore"):
        z = multipliers * mixed_keys + offsets
    return ((z >> np.uint64(32)) * np.uint64(g)) >> np.uint64(32)


def hash_keys(seeds: np.ndarray, keys: np.ndarray, g: int) -> np.ndarray:
    """Buckets in ``[0, g)`` of raw keys under the functions named by ``seeds``."""
    check_range_size(g)
    return hash_expanded(*expand_seeds(seeds), mix_keys(keys), g)


def check_range_size(g: int) -> None:
    if not 2 <= g <= MAX_RANGE:
        raise InputError(f"hash range g must be in [2, 2**31], got {g}")


def count_supports(seeds: np.ndarray, buckets: np.ndarray, g: int, candidates: np.ndarray) -> np.ndarray:
    """For each candidate, how many reports ``(seed, bucket)`` hash it into their bucket.

    Cost is one multiply, one add and one compare per (report, candidate)
    pair, done in blocks that stay in cache.
    """
    check_range_size(g)
    seeds = np.asarray(seeds, dtype=np.uint64)
    buckets = np.asarray(buckets, dtype=np.uint64)
    mixed = mix_keys(candidates)
    multipliers, offsets = expand_seeds(seeds)
    starts = _bucket_starts(buckets, g)
    widths = _bucket_starts(buckets + np.uint64(1), g) - starts
    with np.errstate(over="ignore"):
        shifted = offsets - starts
    counts = np.zeros(mixed.shape[0], dtype=np.int64)
    candidate_block = min(max(mixed.shape[0], 1), 8192)
    report_block = max(1, _PAIR_BLOCK // candidate_block)
    for first_candidate in range(0, mixed.shape[0], candidate_block):
        keys = mixed[first_candidate : first_candidate + candidate_block]
        block_counts = np.zeros(keys.shape[0], dtype=np.int64)
        for first_report in range(0, seeds.shape[0], report_block):
            part = slice(first_report, first_report + report_block)
            with np.errstate(over="ignore"):
                z = multipliers[part, None] * keys[None, :]
                z += shifted[part, None]
            block_counts += np.count_nonzero(z < widths[part, None], axis=0)
        counts[first_candidate : first_candidate + candidate_block] = block_counts
    return counts
