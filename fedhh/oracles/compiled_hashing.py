"""The local-hashing decodes (OLH/BLH supports, FLH table sums) as compiled loops.

OLH's server tests every (report, candidate) pair, ``O(n |C|)`` work that is
most of a PEM run; numpy evaluates it in three passes over a block of 32-bit
words (multiply, add, compare) and a reduction, each pass a trip through
memory.  These loops make the same integer operations in registers, a
block of reports (:data:`REPORT_BLOCK`, in the first-level cache) against
four candidates at a time, with the compiler's SIMD lanes over the
reports; FLH's decode sums its table at each function's bucket without
the numpy path's ``k' x |C|`` blocks of hashes.  The counts are integers,
so they equal the numpy path's bit for bit (:mod:`fedhh.oracles.hashing`
keeps that path as the fallback and as the tests' oracle).

Importing this module imports numba; :func:`fedhh.oracles.hashing.compiled_kernels`
does so only when a decode needs it.  The functions release the GIL and
start no threads of their own (numba's ``parallel`` is off): the callers
split a large decode over the cores as they do numpy passes.  The machine
code is cached on disk (``cache=True``): in ``$NUMBA_CACHE_DIR`` if set,
else beside this file in ``__pycache__`` when that is writable, else in the
user's cache folder (``~/.cache/numba``), so a process loads it instead of
compiling it; when no such folder can be written each process compiles
them once on first use instead.
"""

from __future__ import annotations

import numba
import numpy as np

from ..kernels.compiled import compile_cached

REPORT_BLOCK = 2048  # reports (12 bytes each) held in cache while every candidate is tested against them
_TILE = 4  # candidates tested per pass over a block: each report word loaded once for four pairs


@numba.njit(nogil=True, inline="always")
def _hits(multipliers: np.ndarray, shifted: np.ndarray, widths: np.ndarray, key: np.uint32) -> np.uint32:
    """How many reports of a block support one candidate key."""
    hits = np.uint32(0)
    for i in range(multipliers.size):
        hits = np.uint32(hits + (np.uint32(multipliers[i] * key + shifted[i]) < widths[i]))
    return hits


@numba.njit(nogil=True, inline="always")
def _hits4(
    multipliers: np.ndarray,
    shifted: np.ndarray,
    widths: np.ndarray,
    key0: np.uint32,
    key1: np.uint32,
    key2: np.uint32,
    key3: np.uint32,
) -> tuple[np.uint32, np.uint32, np.uint32, np.uint32]:
    """:func:`_hits` of four candidate keys in one pass over the block."""
    hits0 = hits1 = hits2 = hits3 = np.uint32(0)
    for i in range(multipliers.size):
        multiplier, offset, width = multipliers[i], shifted[i], widths[i]
        hits0 = np.uint32(hits0 + (np.uint32(multiplier * key0 + offset) < width))
        hits1 = np.uint32(hits1 + (np.uint32(multiplier * key1 + offset) < width))
        hits2 = np.uint32(hits2 + (np.uint32(multiplier * key2 + offset) < width))
        hits3 = np.uint32(hits3 + (np.uint32(multiplier * key3 + offset) < width))
    return hits0, hits1, hits2, hits3


@compile_cached
def count_local_hash_supports(
    multipliers: np.ndarray, shifted: np.ndarray, widths: np.ndarray, keys: np.ndarray
) -> np.ndarray:
    """Per candidate key, the reports ``(multiplier, shifted, width)`` (contiguous uint32 arrays)
    with ``(multiplier * key + shifted) mod 2**32 < width``, as int64: what
    :func:`fedhh.oracles.hashing.count_supports` counts, for one block of its work."""
    counts = np.zeros(keys.size, dtype=np.int64)
    tiled = keys.size - keys.size % _TILE
    for first in range(0, multipliers.size, REPORT_BLOCK):
        # slices, not index ranges: the compiler then sees unit-stride words and vectorises
        block_multipliers = multipliers[first : first + REPORT_BLOCK]
        block_shifted = shifted[first : first + REPORT_BLOCK]
        block_widths = widths[first : first + REPORT_BLOCK]
        for j in range(0, tiled, _TILE):
            hits0, hits1, hits2, hits3 = _hits4(
                block_multipliers, block_shifted, block_widths, keys[j], keys[j + 1], keys[j + 2], keys[j + 3]
            )
            counts[j] += hits0
            counts[j + 1] += hits1
            counts[j + 2] += hits2
            counts[j + 3] += hits3
        for j in range(tiled, keys.size):
            counts[j] += _hits(block_multipliers, block_shifted, block_widths, keys[j])
    return counts


@compile_cached
def sum_table_at_buckets(
    cells: np.ndarray, multipliers: np.ndarray, offsets: np.ndarray, g: np.uint64, mixed_keys: np.ndarray
) -> np.ndarray:
    """Per mixed candidate key ``c``, ``sum_j cells[j g + H_j(c)]`` with ``H_j`` the 64-bit hash
    of ``(multipliers[j], offsets[j])`` into ``[0, g)`` (:func:`fedhh.oracles.hashing.hash_expanded`;
    its one-shift form for ``g = 2**b`` is the same number): FLH's support of a block of
    candidates, as int64."""
    counts = np.zeros(mixed_keys.size, dtype=np.int64)
    for j in range(multipliers.size):
        multiplier, offset = multipliers[j], offsets[j]
        row = np.uint64(j) * g
        for c in range(mixed_keys.size):
            z = multiplier * mixed_keys[c] + offset
            counts[c] += cells[row + (((z >> np.uint64(32)) * g) >> np.uint64(32))]
    return counts
