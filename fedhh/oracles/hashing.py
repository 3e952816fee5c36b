"""Seeded hash families ``[0, 2**64) -> [0, g)`` evaluated in numpy.

Local hashing (BLH, OLH, FLH) and the sketches need, per seed, a hash that
behaves like a random function on the domain, cheap enough that the server
can evaluate it for every (report, candidate) pair.  Every key is first
mixed once with SplitMix64 (a bijection, so distinct keys stay distinct),
making consecutive integers look random, and a 64-bit seed expands into an
odd multiplier ``a`` and an offset ``b``.  Then:

* 64-bit family (FLH, sketches): ``z = a * mixed + b (mod 2**64)``, bucket
  ``(top32(z) * g) >> 32``; the pair ``(z(v), z(v'))`` for ``v != v'`` is
  uniform up to O(2**-32);
* 32-bit family (BLH, OLH: :func:`local_hash`): the top 32 bits of ``a``,
  ``b`` and the mixed key, ``z = a * key + b (mod 2**32)``, bucket
  ``(z * g) >> 32``.  Two values collide with probability ``1/g`` up to
  O(g / 2**32), plus 2**-32 for keys equal in their top 32 bits (the
  reference code of [Cormode21] hashes values to 32 bits with xxhash too).

Either way ``P[h(v) = h(v')] = 1/g`` to the precision the variance formulas
use.  Privacy never depends on hash quality: the seed is drawn independently
of the value.

Why this shape: the bucket of ``z`` depends only on its top bits, so "report
``(seed, y)`` supports ``v``" is the single unsigned comparison ``(z(v) -
start_y) mod 2**w < width_y``.  OLH's server must test every (report,
candidate) pair, so its family uses 32-bit words: a multiply, an add and a
compare per pair at half the memory traffic of 64-bit words, which is about
twice as fast (see :func:`count_supports`).

Large decodes run compiled loops instead of numpy passes
(:mod:`fedhh.oracles.compiled_hashing`, with numba): the same integer
operations, so the same counts, several times faster.  ``FEDHH_NUMBA``
chooses: unset or ``auto``, compiled for decodes of at least
:data:`COMPILED_PAIRS` (report, candidate) pairs (a smaller one costs less
in numpy than loading the compiled code, once per process); ``1``, compiled for
every decode; ``0``, numpy only.  Where numba fails to import, every
decode takes the numpy path.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType

import numpy as np

from fedhh.errors import InputError
from fedhh.kernels.randomness import splitmix64

from .numba_setting import compiled_module

_OFFSET_STREAM = np.uint64(0xD1B54A32D192ED03)
_BLOCK_PAIRS = 1 << 18  # (report, candidate) pairs per numpy pass: 1 MB of 32-bit words, about L2
_WIDE = 2048  # from this many candidates a block row holds candidates, below it reports
_WIDE_TASK = 8192  # candidates per task of a wide decode
_NARROW_TASK = 1 << 16  # reports per task of a narrow decode
_THREADED_WORK = 1 << 24  # decodes this large are split over the cores
MAX_RANGE = 1 << 31
COMPILED_PAIRS = 1 << 28  # (report, candidate) pairs from which an OLH decode is compiled


def mix_keys(keys: np.ndarray | np.integer) -> np.ndarray:
    """Bijectively scramble uint64 keys so structured domains hash like random ones."""
    return splitmix64(np.asarray(keys, dtype=np.uint64))


def expand_seeds(seeds: np.ndarray | np.integer) -> tuple[np.ndarray, np.ndarray]:
    """The (odd multiplier, offset) pair that a 64-bit seed names."""
    seeds = np.asarray(seeds, dtype=np.uint64)
    multipliers = splitmix64(seeds) | np.uint64(1)
    offsets = splitmix64(seeds ^ _OFFSET_STREAM)
    return multipliers, offsets


def hash_expanded(multipliers: np.ndarray, offsets: np.ndarray, mixed_keys: np.ndarray, g: int) -> np.ndarray:
    """Buckets in ``[0, g)`` of mixed keys under already-expanded seeds (broadcasting).

    For ``g = 2**b`` the bucket ``(top32(z) * g) >> 32`` is the top ``b`` bits of ``z``: one
    shift instead of a shift, a multiply and a shift."""
    with np.errstate(over="ignore"):
        z = np.multiply(multipliers, mixed_keys, dtype=np.uint64)  # one new array, then in place: sketches
        z += offsets  # hash every candidate in every row, millions of keys a decode
    g = int(g)
    if g >= 2 and g & (g - 1) == 0:
        z >>= np.uint64(65 - g.bit_length())
        return z
    z >>= np.uint64(32)
    z *= np.uint64(g)
    z >>= np.uint64(32)
    return z


def hash_keys(seeds: np.ndarray | np.integer, keys: np.ndarray | np.integer, g: int) -> np.ndarray:
    """Buckets in ``[0, g)`` of raw keys under the functions named by ``seeds``."""
    check_range_size(g)
    return hash_expanded(*expand_seeds(seeds), mix_keys(keys), g)


def check_range_size(g: int) -> None:
    if not 2 <= g <= MAX_RANGE:
        raise InputError(f"hash range g must be in [2, 2**31], got {g}")


def local_hash_parameters(seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 32-bit (odd multiplier, offset) pair that each 64-bit seed names."""
    multipliers, offsets = expand_seeds(seeds)
    return (multipliers >> np.uint64(32)).astype(np.uint32) | np.uint32(1), (offsets >> np.uint64(32)).astype(np.uint32)


def local_hash_keys(keys: np.ndarray | np.integer) -> np.ndarray:
    """The 32-bit key the local-hashing family hashes: the top half of the mixed key."""
    return (mix_keys(keys) >> np.uint64(32)).astype(np.uint32)


def local_hash(seeds: np.ndarray, keys: np.ndarray | np.integer, g: int) -> np.ndarray:
    """Buckets in ``[0, g)`` of raw keys under the 32-bit functions named by ``seeds`` (broadcasting)."""
    check_range_size(g)
    multipliers, offsets = local_hash_parameters(seeds)
    with np.errstate(over="ignore"):
        z = multipliers * local_hash_keys(keys) + offsets
    return (z.astype(np.uint64) * np.uint64(g)) >> np.uint64(32)


def _bucket_starts(buckets: np.ndarray, g: int) -> np.ndarray:
    """First 32-bit value of ``z`` in each bucket (``2**32`` for bucket ``g``), as uint64."""
    buckets = np.asarray(buckets, dtype=np.uint64)
    return ((buckets << np.uint64(32)) + np.uint64(g - 1)) // np.uint64(g)


def count_supports(seeds: np.ndarray, buckets: np.ndarray, g: int, candidates: np.ndarray) -> np.ndarray:
    """For each candidate, how many local-hashing reports ``(seed, bucket)`` hash it into their bucket.

    One multiply, one add and one compare of 32-bit words per (report,
    candidate) pair, in blocks that stay in cache, with the hits of up to
    255 pairs summed as bytes; large decodes are split over the cores
    (numpy releases the GIL inside each pass).
    """
    check_range_size(g)
    multipliers, offsets = local_hash_parameters(np.asarray(seeds, dtype=np.uint64))
    starts = _bucket_starts(buckets, g)
    widths = (_bucket_starts(np.asarray(buckets, dtype=np.uint64) + np.uint64(1), g) - starts).astype(np.uint32)
    with np.errstate(over="ignore"):
        shifted = offsets - starts.astype(np.uint32)
    keys = local_hash_keys(candidates)
    reports = (multipliers, shifted, widths)
    pairs = multipliers.size * keys.size
    if pairs == 0:
        return np.zeros(keys.size, dtype=np.int64)
    kernels = compiled_kernels(pairs, COMPILED_PAIRS)
    count_wide = _count_wide if kernels is None else kernels.count_local_hash_supports
    count_narrow = _count_narrow if kernels is None else kernels.count_local_hash_supports
    if keys.size >= _WIDE:  # tasks: blocks of candidates against every report
        parts = slices(keys.size, _WIDE_TASK)
        return np.concatenate(map_blocks(lambda part: count_wide(*reports, keys[part]), parts, pairs))
    # tasks: blocks of reports against every candidate
    parts = slices(multipliers.size, _NARROW_TASK)
    results = map_blocks(lambda part: count_narrow(multipliers[part], shifted[part], widths[part], keys), parts, pairs)
    return typing.cast(np.ndarray, np.sum(results, axis=0, dtype=np.int64))


def compiled_kernels(work: int, threshold: int) -> ModuleType | None:
    """:mod:`fedhh.oracles.compiled_hashing` for a decode of ``work`` evaluations, or ``None``
    for the numpy path, as ``FEDHH_NUMBA`` chooses (see the module docstring); ``auto``
    compiles from ``threshold`` evaluations on."""
    return compiled_module("fedhh.oracles.compiled_hashing", work, threshold)


def slices(size: int, step: int) -> list[slice]:
    """``range(size)`` in consecutive slices of ``step``."""
    return [slice(first, first + step) for first in range(0, size, step)]


def map_blocks(task: Callable[[slice], np.ndarray], parts: list[slice], work: int) -> list[np.ndarray]:
    """``task`` over ``parts`` in order, on every available core when ``work`` (the pairs
    or hashes evaluated) is large enough to pay for threads: numpy releases the GIL in its
    passes, so blocks of a decode run in parallel."""
    workers = min(len(os.sched_getaffinity(0)), len(parts)) if work >= _THREADED_WORK else 1
    if workers <= 1:
        return [task(part) for part in parts]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(task, parts))


def _count_wide(multipliers: np.ndarray, shifted: np.ndarray, widths: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Hits per candidate of a block of many candidates: rows of reports, summed down the rows."""
    rows = min(255, max(1, _BLOCK_PAIRS // keys.size))
    z = np.empty((rows, keys.size), dtype=np.uint32)
    hits = np.empty((rows, keys.size), dtype=bool)
    partial = np.empty(keys.size, dtype=np.uint8)
    counts = np.zeros(keys.size, dtype=np.int64)
    with np.errstate(over="ignore"):
        for first in range(0, multipliers.size, rows):
            block = slice(first, first + rows)
            size = multipliers[block].size
            np.multiply(multipliers[block, None], keys[None, :], out=z[:size])
            np.add(z[:size], shifted[block, None], out=z[:size])
            np.less(z[:size], widths[block, None], out=hits[:size])
            np.add.reduce(hits[:size].view(np.uint8), axis=0, dtype=np.uint8, out=partial)
            counts += partial
    return counts


def _count_narrow(multipliers: np.ndarray, shifted: np.ndarray, widths: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Hits per candidate of few candidates: one row per candidate, summed along the reports."""
    columns = max(1, _BLOCK_PAIRS // keys.size)
    counts = np.zeros(keys.size, dtype=np.int64)
    with np.errstate(over="ignore"):
        for first in range(0, multipliers.size, columns):
            block = slice(first, first + columns)
            z = keys[:, None] * multipliers[None, block]
            z += shifted[None, block]
            counts += np.count_nonzero(z < widths[None, block], axis=1)
    return counts
