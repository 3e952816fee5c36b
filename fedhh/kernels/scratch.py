"""Reused scratch arrays for hot loops that would otherwise allocate fresh ones on every call.

Why: a fresh array of a few hundred KiB comes from the operating system
(``mmap``) and every page of it faults on first touch; for the sparse
sampler and its counting (:mod:`fedhh.kernels.sparse_bernoulli`,
:class:`fedhh.oracles.unary.UnaryEncoding`) those faults cost as much as
the logarithm and the division of the walk together.  Borrowed arrays keep
their pages.

Each thread has its own pool (simulated shards may run in threads), and an
array is lent to one borrower at a time: a nested borrow of the same shapes
gets new arrays, which then join the pool.  The pool holds, per thread, at
most as many sets of each shape as were ever borrowed at once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from numpy.typing import DTypeLike

_POOLS = threading.local()


@contextmanager
def borrowed(*shapes: tuple[int, DTypeLike]) -> Iterator[tuple[np.ndarray, ...]]:
    """Uninitialised 1-d arrays ``(size, dtype)`` each, lent for the ``with`` block (or a
    generator's life): their contents are whatever the previous borrower left."""
    key = tuple((int(size), np.dtype(dtype).str) for size, dtype in shapes)
    pool: dict[tuple, list[tuple[np.ndarray, ...]]] = _POOLS.__dict__.setdefault("free", {})
    free = pool.setdefault(key, [])
    arrays = free.pop() if free else tuple(np.empty(size, dtype=dtype) for size, dtype in key)
    try:
        yield arrays
    finally:
        free.append(arrays)
