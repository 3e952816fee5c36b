"""``hash_expanded``'s buckets: ``(top32(a x + b) x g) >> 32`` for every range size, the one-shift
path of a power of two included (the buckets of every sketch, FLH and Hashtogram depend on it)."""

from __future__ import annotations

import numpy as np
import pytest

from fedhh.oracles.hashing import expand_seeds, hash_expanded, mix_keys


@pytest.mark.parametrize("g", [2, 3, 64, 1000, 1024, 1 << 20, (1 << 31) - 1, 1 << 31])
def test_buckets_are_the_top_32_bits_scaled_to_the_range(g: int) -> None:
    generator = np.random.default_rng(g)
    multipliers, offsets = expand_seeds(generator.integers(0, 1 << 63, (5, 1), dtype=np.uint64))
    keys = mix_keys(np.concatenate([np.arange(100, dtype=np.uint64), np.array([(1 << 64) - 1], dtype=np.uint64)]))
    with np.errstate(over="ignore"):
        top = (multipliers * keys + offsets) >> np.uint64(32)
    expected = [(int(t) * g) >> 32 for t in top.ravel()]
    buckets = hash_expanded(multipliers, offsets, keys, np.int64(g))
    assert buckets.dtype == np.uint64 and buckets.shape == (5, 101)
    assert buckets.ravel().tolist() == expected
    assert int(buckets.max()) < g
