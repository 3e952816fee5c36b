"""The Walsh-Hadamard matrix ``H[j, x] = (-1) ** popcount(j & x)`` and its fast transform.

Both Hadamard oracles decode by summing ``H[j, x]`` over reports: one entry
at a time when the domain is too large to materialise (``hadamard_signs``),
or all at once with the fast transform when it fits (``fwht``).
"""

from __future__ import annotations

import functools

import numpy as np

from ..kernels.blas import single_blas_thread

_PAIR_BLOCK = 1 << 20
_KRONECKER_MAX = 1 << 12  # longest transform done as two matrix products (sides of at most 64): from 2^13 on
# OpenBLAS goes multi-threaded and, on a busy machine, several times slower than the butterflies
_FLOAT_EXACT = 1 << 53


def hadamard_parity(rows: np.ndarray | np.integer, columns: np.ndarray | np.integer) -> np.ndarray:
    """True where ``H[rows, columns] = -1`` (broadcasting), without forming the matrix."""
    return (np.bitwise_count(np.bitwise_and(rows, columns, dtype=np.uint64)) & np.uint8(1)).view(bool)


def hadamard_signs(rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """``H[rows, columns]`` as int8 (broadcasting), without forming the matrix."""
    return (1 - 2 * hadamard_parity(rows, columns).astype(np.int8)).astype(np.int8)


def fwht(values: np.ndarray) -> np.ndarray:
    """Unnormalised fast Walsh-Hadamard transform along the last axis.

    ``fwht(t)[..., x] = sum_j H[j, x] * t[..., j]``; the last axis must be a
    power of two.  Integer input stays exact.

    Lengths up to :data:`_KRONECKER_MAX` of signed integers go through two small
    matrix products: ``H_{ab} = H_a (x) H_b``, so with ``t`` viewed as an
    ``a x b`` matrix the transform is ``H_a t H_b`` -- a few BLAS calls
    instead of ``log2`` of the length passes in numpy, several times faster.
    They run in float64, which is exact when every partial
    sum is an integer below ``2^53``: guaranteed when ``max |t| x length`` is.
    """
    values = np.asarray(values)
    size = values.shape[-1]
    if size & (size - 1):
        raise ValueError(f"fwht: length must be a power of two, got {size}")
    if 4 <= size <= _KRONECKER_MAX and np.issubdtype(values.dtype, np.signedinteger) and values.size:
        if max(-int(values.min()), int(values.max())) * size < _FLOAT_EXACT:
            high = _hadamard_matrix(1 << (size.bit_length() - 1) // 2)
            low = _hadamard_matrix(size // high.shape[0])
            blocks = values.reshape(*values.shape[:-1], high.shape[0], low.shape[0]).astype(np.float64)
            with single_blas_thread():
                transformed = high @ blocks @ low
            return np.rint(transformed).astype(values.dtype).reshape(values.shape)
    result = np.array(values, copy=True)
    leading = result.shape[:-1]
    half = 1
    while half < size:
        pairs = result.reshape(*leading, size // (2 * half), 2, half)
        left = pairs[..., 0, :].copy()
        pairs[..., 0, :] += pairs[..., 1, :]
        pairs[..., 1, :] = left - pairs[..., 1, :]
        half *= 2
    return result


@functools.lru_cache(maxsize=16)
def _hadamard_matrix(size: int) -> np.ndarray:
    """``H`` of ``size x size`` as float64 (read-only; at most ``sqrt`` of :data:`_KRONECKER_MAX` a side)."""
    index = np.arange(size, dtype=np.uint64)
    matrix = 1.0 - 2.0 * hadamard_parity(index[:, None], index[None, :])
    matrix.flags.writeable = False
    return matrix


def signed_sums(keys: np.ndarray, weights: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """``sum_i weights[i] * H[keys[i], c]`` for every column ``c``, in cache-sized blocks.

    The sparse counterpart of ``fwht`` for index spaces too large to hold.
    """
    keys = np.asarray(keys, dtype=np.uint64)
    weights = np.asarray(weights, dtype=np.int64)
    columns = np.asarray(columns, dtype=np.uint64)
    totals = np.zeros(columns.shape[0], dtype=np.int64)
    if keys.size == 0 or columns.size == 0:
        return totals
    column_block = min(columns.shape[0], 4096)
    key_block = max(1, _PAIR_BLOCK // column_block)
    for first_column in range(0, columns.shape[0], column_block):
        cols = columns[first_column : first_column + column_block]
        block = np.zeros(cols.shape[0], dtype=np.int64)
        for first_key in range(0, keys.shape[0], key_block):
            part = slice(first_key, first_key + key_block)
            signs = hadamard_signs(keys[part, None], cols[None, :]).astype(np.float64)
            # float64 products of integers below 2**53 are exact, and BLAS is fast
            with single_blas_thread():
                block += np.rint(weights[part].astype(np.float64) @ signs).astype(np.int64)
        totals[first_column : first_column + column_block] = block
    return totals
