"""Per group, how many packed bit rows have each bit set: sorting once, then bit-sliced adding.

Why: RAPPOR's shard sums its users' reports per cohort.  Unpacked, a report
of ``m`` bits is ``m`` bytes to add; packed, it is ``m / 64`` words, and 64
bit columns are added at once by a carry-save adder on whole words: the
sum of two numbers held bit plane by bit plane (plane ``i``: bit ``i`` of
each column's count, 64 columns to a word) costs a few word operations per
plane.

The rows are sorted by group (a radix sort of small keys), laid out as a
``(width, groups)`` table per word with zero rows as padding, and halved
repeatedly: each step adds the second half of the table to the first, plane
by plane (contiguous blocks of memory), until 8 to 16 rows are left, whose
planes are unpacked and weighted by ``2^i``.  The counts are exact integers.
"""

from __future__ import annotations

import numpy as np

_WORD = np.dtype("<u8")  # bit b of a row: bit b % 64 of little-endian word b // 64


def group_bit_counts(rows: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """``(n_groups, 64 w)`` int64: per group, the rows with each bit set.

    ``rows``: ``(n, w)`` packed rows, bit ``b`` in bit ``b % 64`` of
    little-endian word ``b // 64``; ``groups``: each row's group in
    ``[0, n_groups)``.
    """
    rows = np.asarray(rows).view(_WORD)
    n, words = rows.shape
    if n == 0:
        return np.zeros((n_groups, 64 * words), dtype=np.int64)
    key_type = np.uint8 if n_groups <= 1 << 8 else np.uint16 if n_groups <= 1 << 16 else np.int64
    keys = np.asarray(groups).astype(key_type)
    order = np.argsort(keys, kind="stable")  # radix sort for keys of at most 16 bits
    sizes = np.bincount(keys, minlength=n_groups)
    starts = np.cumsum(sizes) - sizes
    halvings = max(0, int(sizes.max()).bit_length() - 4)  # leaves 8 to 16 rows to unpack
    width = -(-int(sizes.max()) // (1 << halvings)) * (1 << halvings)
    table = np.zeros((width, n_groups, words), dtype=_WORD)  # halved along axis 0: contiguous halves
    if 64 * n_groups <= n:  # long runs: copied run by run
        grouped = rows[order]
        for group, (start, size) in enumerate(zip(starts.tolist(), sizes.tolist(), strict=True)):
            table[:size, group] = grouped[start : start + size]
    else:
        sorted_keys = keys[order]
        table[np.arange(n) - starts[sorted_keys], sorted_keys] = rows[order]
    planes = [table]
    for _ in range(halvings):
        planes = add_halves(planes)
    counts = np.zeros((n_groups, 64 * words), dtype=np.int64)
    for weight, plane in enumerate(planes):
        bits = np.unpackbits(np.ascontiguousarray(plane).view(np.uint8), axis=-1, bitorder="little")
        counts += bits.sum(axis=0, dtype=np.int64) << weight
    return counts


def add_halves(planes: list[np.ndarray]) -> list[np.ndarray]:
    """The bit planes of ``first + second``, the halves of the tables along axis 0, written over
    the first halves (one more plane for the last carry)."""
    half = planes[0].shape[0] // 2
    scratch = np.empty_like(planes[0][:half])
    carry: np.ndarray | None = None
    total: list[np.ndarray] = []
    for plane in planes:
        first, second = plane[:half], plane[half:]
        both = first & second
        first ^= second  # the sum bit without the carry
        if carry is not None:
            np.bitwise_and(first, carry, out=scratch)
            both |= scratch
            first ^= carry
        total.append(first)
        carry = both
    assert carry is not None
    total.append(carry)
    return total
