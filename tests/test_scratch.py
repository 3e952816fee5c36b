"""Scratch arrays: lent to one borrower at a time, reused after, one pool per thread."""

from __future__ import annotations

import threading

import numpy as np

from fedhh.kernels.scratch import borrowed


def test_a_released_array_is_lent_again_and_a_nested_borrow_gets_its_own() -> None:
    with borrowed((100, np.int64), (100, bool)) as (first, flags):
        assert first.shape == (100,) and first.dtype == np.int64 and flags.dtype == bool
        with borrowed((100, np.int64), (100, bool)) as (nested, _):
            assert not np.shares_memory(first, nested)
    with borrowed((100, np.int64), (100, bool)) as (again, _):
        assert again is first or again is nested
    with borrowed((101, np.int64)) as (other_size,):
        assert not np.shares_memory(other_size, first) and not np.shares_memory(other_size, nested)


def test_each_thread_has_its_own_pool() -> None:
    with borrowed((64, np.float64)) as (mine,):
        pass
    seen: list[np.ndarray] = []

    def borrow() -> None:
        with borrowed((64, np.float64)) as (theirs,):
            seen.append(theirs)

    worker = threading.Thread(target=borrow)
    worker.start()
    worker.join()
    assert len(seen) == 1 and not np.shares_memory(seen[0], mine)
