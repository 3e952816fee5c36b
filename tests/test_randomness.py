"""Keyed per-user randomness: independent of batching, and uniform."""

from __future__ import annotations

import numpy as np
from scipy import stats

from fedhh.randomness import GRID_USERS, KeyedRandomness, OsRandom, SecureRandomness


def test_a_users_draws_do_not_depend_on_its_batch() -> None:
    source = KeyedRandomness(7)
    everyone = source.for_users("test", 3, np.arange(1000))
    whole = np.column_stack([everyone.random(), everyone.integers(0, 10)])
    part = source.for_users("test", 3, np.arange(400, 700))
    piece = np.column_stack([part.random(), part.integers(0, 10)])
    np.testing.assert_array_equal(whole[400:700], piece)


def test_purpose_round_and_seed_change_the_draws() -> None:
    ids = np.arange(100)
    base = KeyedRandomness(1).for_users("a", 1, ids).random()
    for other in (KeyedRandomness(2).for_users("a", 1, ids), KeyedRandomness(1).for_users("b", 1, ids),
                  KeyedRandomness(1).for_users("a", 2, ids)):
        assert not np.allclose(base, other.random())


def test_keyed_uniforms_pass_a_kolmogorov_smirnov_test() -> None:
    draws = KeyedRandomness(3).for_users("ks", 1, np.arange(200_000)).random()
    assert stats.kstest(draws, "uniform").pvalue > 1e-4
    counts = np.bincount(KeyedRandomness(3).for_users("int", 1, np.arange(60_000)).integers(0, 6), minlength=6)
    assert stats.chisquare(counts).pvalue > 1e-4


def test_os_randomness_has_the_same_interface_and_is_not_repeatable() -> None:
    draws = SecureRandomness().for_users("device", 1, np.arange(4))
    assert isinstance(draws, OsRandom)
    first, second = draws.random(), draws.random()
    assert first.shape == (4,) and np.all((0 <= first) & (first < 1))
    assert not np.array_equal(first, second)


def test_range_words_of_a_user_do_not_depend_on_the_range() -> None:
    """Ranges that start and end inside Philox blocks and inside counter steps (5 words a user)
    give each user the row the whole population gives it; other keys give other words."""
    source = KeyedRandomness(11)
    whole = source.range_words("bits", 2, 0, 3 * GRID_USERS + 77, 5)
    for first, count in ((0, 1), (GRID_USERS - 3, 7), (5, 2 * GRID_USERS + 11), (3 * GRID_USERS, 77)):
        np.testing.assert_array_equal(source.range_words("bits", 2, first, count, 5), whole[first : first + count])
    assert not np.any(source.range_words("bits", 3, 0, 100, 5) == whole[:100])
    assert not np.any(KeyedRandomness(12).range_words("bits", 2, 0, 100, 5) == whole[:100])


def test_range_words_are_uniform_bits() -> None:
    """Every bit of 64,000 words is set with frequency 1/2 (within 5 sd), and 32-bit halves pass a
    Kolmogorov-Smirnov test; the device source is never repeatable."""
    words = KeyedRandomness(5).range_words("bits", 1, 1_000, 16_000, 4).ravel()
    ones = ((words[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).sum(axis=0)
    assert np.all(np.abs(ones - words.size / 2) < 5 * np.sqrt(words.size / 4))
    halves = words.view(np.uint32).astype(np.float64) / 2.0**32
    assert stats.kstest(halves, "uniform").pvalue > 1e-4
    device = SecureRandomness()
    assert not np.array_equal(device.range_words("d", 1, 0, 4, 2), device.range_words("d", 1, 0, 4, 2))
