"""Keyed per-user randomness: independent of batching, and uniform."""

from __future__ import annotations

import numpy as np
from scipy import stats

from fedhh.randomness import (
    GRID_USERS,
    KeyedRandomness,
    OsRandom,
    RangeRandom,
    SecureRandomness,
    derive_key,
    keyed_range_words,
    splitmix64,
)


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


def test_a_users_words_are_the_same_in_one_call_or_many() -> None:
    """``UserRandom.words``: a user's ``j``-th word does not depend on how many calls drew it,
    nor on its batch, and is the word ``random`` turns into its ``j``-th uniform."""
    source = KeyedRandomness(9)
    once = source.for_users("w", 1, np.arange(500)).words(7)
    part = source.for_users("w", 1, np.arange(100, 300))
    np.testing.assert_array_equal(np.hstack([part.words(3), part.words(1), part.words(3)]), once[100:300])
    uniforms = source.for_users("w", 1, np.arange(500)).random((500, 7))
    np.testing.assert_array_equal(uniforms, (once >> np.uint64(11)).astype(np.float64) / 2.0**53)


def test_range_draws_of_a_user_do_not_depend_on_the_range() -> None:
    """``for_range``: each call is a keyed range draw of its own, so any range (inside Philox blocks,
    across them) gives each user the draws of the whole population's, call by call."""
    source = KeyedRandomness(13)
    everyone = source.for_range("r", 2, 0, 2 * GRID_USERS + 50)
    assert isinstance(everyone, RangeRandom)
    whole = [everyone.words(3), everyone.integers(0, 10), everyone.words(1), everyone.random()]
    for first, count in ((0, 1), (GRID_USERS - 2, 9), (7, 2 * GRID_USERS + 43)):
        part = source.for_range("r", 2, first, count)
        piece = [part.words(3), part.integers(0, 10), part.words(1), part.random()]
        for mine, theirs in zip(piece, whole, strict=True):
            np.testing.assert_array_equal(mine, theirs[first : first + count])
    key = derive_key(13, "r", 2)
    assert np.array_equal(RangeRandom(key, 0, 10).words(3), whole[0][:10])
    assert not np.any(source.for_range("r", 3, 0, 100).words(3) == whole[0][:100])
    assert not np.any(everyone.words(3)[:100] == whole[0][:100])  # a later call: fresh words
    assert isinstance(SecureRandomness().for_range("d", 1, 5, 4), OsRandom)


def test_range_draws_are_uniform() -> None:
    draws = KeyedRandomness(17).for_range("ks", 1, 123, 100_000)
    assert stats.kstest(draws.random(), "uniform").pvalue > 1e-4
    assert stats.chisquare(np.bincount(draws.integers(0, 6), minlength=6)).pvalue > 1e-4


def test_a_ranges_call_keys_number_its_calls() -> None:
    """``next_call_key`` is call ``j``'s key, ``splitmix64(key XOR j)``, and consumes the call: a
    sampler drawing from its own keyed streams keeps the calls after it where they were."""
    key = derive_key(2, "calls", 1)
    draws = RangeRandom(key, 4_100, 30)
    assert draws.first_user == 4_100
    assert [draws.next_call_key() for _ in range(2)] == [splitmix64(key ^ np.uint64(j)) for j in range(2)]
    np.testing.assert_array_equal(draws.words(2), keyed_range_words(splitmix64(key ^ np.uint64(2)), 4_100, 30, 2))
