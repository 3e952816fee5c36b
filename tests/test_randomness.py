"""Keyed per-user randomness: independent of batching, and uniform."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedhh.kernels.randomness import (
    GRID_USERS,
    KeyedRandomness,
    OsRandom,
    RangeRandom,
    SecureRandomness,
    UserRandom,
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
    whole = source.for_range("bits", 2, 0, 3 * GRID_USERS + 77).words(5)
    for first, count in ((0, 1), (GRID_USERS - 3, 7), (5, 2 * GRID_USERS + 11), (3 * GRID_USERS, 77)):
        np.testing.assert_array_equal(source.for_range("bits", 2, first, count).words(5), whole[first : first + count])
    assert not np.any(source.for_range("bits", 3, 0, 100).words(5) == whole[:100])
    assert not np.any(KeyedRandomness(12).for_range("bits", 2, 0, 100).words(5) == whole[:100])


def test_range_words_are_uniform_bits() -> None:
    """Every bit of 64,000 words is set with frequency 1/2 (within 5 sd), and 32-bit halves pass a
    Kolmogorov-Smirnov test; the device source is never repeatable."""
    words = KeyedRandomness(5).for_range("bits", 1, 1_000, 16_000).words(4).ravel()
    ones = ((words[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).sum(axis=0)
    assert np.all(np.abs(ones - words.size / 2) < 5 * np.sqrt(words.size / 4))
    halves = words.view(np.uint32).astype(np.float64) / 2.0**32
    assert stats.kstest(halves, "uniform").pvalue > 1e-4
    device = SecureRandomness()
    assert not np.array_equal(device.for_range("d", 1, 0, 4).words(2), device.for_range("d", 1, 0, 4).words(2))


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


def _documented_range_words(key: np.uint64, first_user: int, n_users: int, columns: int) -> np.ndarray:
    """The layout :func:`keyed_range_words` documents, one user at a time: user ``u``'s row is the
    words ``[r c, (r + 1) c)`` of the Philox-4x64 stream keyed ``(key, u // GRID_USERS)``."""
    rows = []
    for user in range(first_user, first_user + n_users):
        block, row = divmod(user, GRID_USERS)
        stream = np.random.Philox(key=np.array([key, block], dtype=np.uint64))
        rows.append(stream.random_raw((row + 1) * columns)[row * columns :])
    return np.array(rows, dtype=np.uint64).reshape(n_users, columns)


def test_range_words_follow_the_documented_layout_bit_for_bit() -> None:
    key = derive_key(11, "layout", 2)
    ranges = [(0, 5, 3), (GRID_USERS - 3, 7, 5), (2 * GRID_USERS - 1, GRID_USERS + 2, 1), (17, 1, 4),
              (3 * GRID_USERS, 2, 2), (GRID_USERS - 1, 1, 7)]
    for first_user, n_users, columns in ranges:
        words = keyed_range_words(key, first_user, n_users, columns)
        assert words.shape == (n_users, columns) and words.dtype == np.uint64
        np.testing.assert_array_equal(words, _documented_range_words(key, first_user, n_users, columns))
    assert keyed_range_words(key, 5, 0, 3).shape == (0, 3)


def test_power_of_two_integers_are_the_float_formulas_integers() -> None:
    """``integers`` takes a power-of-two span from the word's top bits: the same integers as the
    documented ``floor(uniform x span)`` on the same words."""
    ids = np.arange(30_000, dtype=np.int64) * 7 + 3
    key = derive_key(5, "cohorts", 0)
    for low, span in [(0, 1), (0, 2), (0, 32), (4, 1 << 20), (-3, 1 << 52)]:
        drawn = UserRandom(key, ids).integers(low, low + span)
        uniforms = UserRandom(key, ids).random()
        np.testing.assert_array_equal(drawn, low + np.floor(uniforms * span).astype(np.int64))
        ranged = RangeRandom(key, GRID_USERS - 100, 300).integers(low, low + span)
        np.testing.assert_array_equal(ranged, low + np.floor(RangeRandom(key, GRID_USERS - 100, 300).random() * span).astype(np.int64))


def _splitmix64_int(x: int) -> int:
    """SplitMix64's finaliser on one Python integer (the reference for the vectorised one)."""
    mask = (1 << 64) - 1
    z = (x + 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def test_user_words_follow_the_documented_formula_bit_for_bit() -> None:
    """Word ``j`` of user ``id`` is ``splitmix64(splitmix64(id XOR key) + j)``, in one-column calls
    and wider ones alike."""
    key = derive_key(3, "formula", 1)
    ids = np.array([0, 1, 77, 2**40 + 5, 2**63 - 1], dtype=np.int64)
    draws = UserRandom(key, ids)
    words = np.hstack([draws.words(1), draws.words(3), draws.words(1)])
    expected = [[_splitmix64_int((_splitmix64_int(int(i) ^ int(key)) + j) % (1 << 64)) for j in range(5)] for i in ids]
    np.testing.assert_array_equal(words, np.array(expected, dtype=np.uint64))
    assert int(splitmix64(np.uint64(12345))) == _splitmix64_int(12345)


def test_a_batch_of_ranges_draws_each_ranges_own_words() -> None:
    """``for_ranges``: every call's rows are the rows the ranges' own ``for_range`` draw gives,
    one range after the other (the device randomness only counts the users)."""
    source, ranges = KeyedRandomness(5), ((4_000, 200), (8_192 + 3, 5), (20_000, 0), (12_288, 4_096))
    batch = source.for_ranges("batch", 2, ranges)
    alone = [source.for_range("batch", 2, first, n) for first, n in ranges]
    assert batch.n_users == sum(n for _, n in ranges) and batch.ranges == ranges
    for columns in (1, 3):
        np.testing.assert_array_equal(batch.words(columns), np.vstack([draws.words(columns) for draws in alone]))
    np.testing.assert_array_equal(batch.integers(0, 16, batch.n_users), np.concatenate([d.integers(0, 16, d.n_users) for d in alone]))
    assert SecureRandomness().for_ranges("batch", 2, ranges).words(2).shape == (batch.n_users, 2)
    with pytest.raises(ValueError, match="first_user and n_users must be >= 0"):
        RangeRandom.over_ranges(np.uint64(1), ((5, -1),))


def test_integers_with_plain_or_array_bounds_are_the_scaled_uniforms() -> None:
    """Python-int bounds (checks in Python) and numpy bounds draw ``low + floor(u (high - low))`` of the
    user's uniform ``u``, for power-of-two spans (the word's top bits) and others (scaled floats)."""
    ids = np.arange(40, 3040)
    for low, high in ((0, 16), (0, 1024), (5, 21), (0, 3), (-7, 1000), (3, 1 << 52)):
        expected = low + np.floor(UserRandom(np.uint64(9), ids).random() * float(high - low)).astype(np.int64)
        plain = UserRandom(np.uint64(9), ids).integers(low, high, size=ids.size)
        wrapped = UserRandom(np.uint64(9), ids).integers(np.int64(low), np.array(high), size=ids.size)
        for drawn in (plain, wrapped):
            np.testing.assert_array_equal(drawn, expected)
            assert drawn.dtype == np.int64
    for low, high in ((4, 4), (0, (1 << 52) + 1)):
        with pytest.raises(ValueError, match="integers"):
            UserRandom(np.uint64(9), ids).integers(low, high)
