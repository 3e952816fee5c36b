"""Keyed per-user randomness: independent of batching, and uniform."""

from __future__ import annotations

import numpy as np
from scipy import stats

from fedhh.randomness import KeyedRandomness, OsRandom, SecureRandomness


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
