"""Sampling: the round sampler (exact size, sorted distinct ids, uniform over the subsets of
that size) and the guide-table inverse CDF that builds populations (the binary search's draws).

Chi-square tests with fixed seeds; each is shown able to fail by applying it
to a sampler with a small bias.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from fedhh.kernels.sampling import InverseCdf, uniform_subset

P_MIN = 1e-4  # a fixed-seed test that passes is far above this; the biased samplers are far below


def subset_frequencies(sampler, population: int, size: int, trials: int, seed: int) -> np.ndarray:  # noqa: ANN001
    """How often each ``size``-subset of ``range(population)`` comes out, in lexicographic order."""
    index = {subset: i for i, subset in enumerate(itertools.combinations(range(population), size))}
    generator = np.random.default_rng(seed)
    counts = np.zeros(len(index), dtype=np.int64)
    for _ in range(trials):
        counts[index[tuple(sampler(generator, population, size).tolist())]] += 1
    return counts


def drop_the_largest(generator: np.random.Generator, population: int, size: int) -> np.ndarray:
    """A biased sampler: one id too many, then the largest dropped (favours small ids)."""
    return uniform_subset(generator, population, size + 1)[:size]


@pytest.mark.parametrize(("population", "size"), [(8, 3), (7, 5)])  # the direct path, and the complement path
def test_every_subset_is_equally_likely(population: int, size: int) -> None:
    """Over all C(n, m) subsets (so every pairwise and higher inclusion probability at once)."""
    subsets = len(list(itertools.combinations(range(population), size)))
    counts = subset_frequencies(uniform_subset, population, size, 300 * subsets, seed=1)
    assert stats.chisquare(counts).pvalue > P_MIN
    biased = subset_frequencies(drop_the_largest, population, size, 300 * subsets, seed=1)
    assert stats.chisquare(biased).pvalue < P_MIN


def test_inclusion_is_uniform_at_triehh_sampling_rates() -> None:
    """n = 1,000,000, m = 20,323 (the default job): the sampled ids fall into 1,000 equal bins as
    a hypergeometric draw predicts, over 40 rounds; the variance factor (n - m) / (n - 1) of
    sampling without replacement is part of the statistic."""
    population, size, rounds, bins = 1_000_000, 20_323, 40, 1_000
    generator = np.random.default_rng(7)
    counts = np.zeros(bins, dtype=np.int64)
    for _ in range(rounds):
        sample = uniform_subset(generator, population, size)
        counts += np.bincount(sample * bins // population, minlength=bins)
    expected = rounds * size / bins
    statistic = float(np.sum((counts - expected) ** 2) / expected) * (population - 1) / (population - size)
    assert stats.chi2.sf(statistic, bins - 1) > P_MIN
    # The same statistic sees a sampler that avoids the last 0.2 % of the ids.
    shifted = np.zeros(bins, dtype=np.int64)
    for _ in range(rounds):
        sample = uniform_subset(generator, population - population // 500, size)
        shifted += np.bincount(sample * bins // population, minlength=bins)
    statistic = float(np.sum((shifted - expected) ** 2) / expected) * (population - 1) / (population - size)
    assert stats.chi2.sf(statistic, bins - 1) < P_MIN


@pytest.mark.parametrize(("population", "size"), [(10, 0), (10, 10), (1, 1), (1000, 999), (10**7, 203_237)])
def test_sample_is_sorted_distinct_and_exact(population: int, size: int) -> None:
    sample = uniform_subset(np.random.default_rng(3), population, size)
    assert sample.dtype == np.int64 and sample.size == size
    assert np.all(np.diff(sample) > 0)
    assert size == 0 or (sample[0] >= 0 and sample[-1] < population)


def test_same_generator_state_gives_the_same_sample() -> None:
    first = uniform_subset(np.random.default_rng(11), 5_000_000, 100_000)
    again = uniform_subset(np.random.default_rng(11), 5_000_000, 100_000)
    other = uniform_subset(np.random.default_rng(12), 5_000_000, 100_000)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_a_sample_larger_than_the_population_is_refused() -> None:
    with pytest.raises(ValueError, match=r"sample size must be in \[0, population = 5\], got 6"):
        uniform_subset(np.random.default_rng(0), 5, 6)


@pytest.mark.parametrize(
    "weights",
    [
        np.arange(1, 100_001, dtype=np.float64) ** -1.1,  # a long Zipf tail: many outcomes per guide cell
        np.ones(7),
        np.array([0.0, 3.0, 0.0, 0.0, 1.0, 0.0]),  # outcomes of probability 0 are never drawn
        np.array([1.0]),
    ],
)
def test_inverse_cdf_draws_exactly_what_a_binary_search_finds(weights: np.ndarray) -> None:
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    inverse = InverseCdf(cdf)
    uniforms = np.random.default_rng(5).random(200_000)
    inner = cdf[cdf < 1]  # every boundary, and the floats just around it
    edges = np.concatenate([[0.0, np.nextafter(1.0, 0.0)], inner, np.nextafter(inner, 0.0), np.nextafter(inner, 1.0)])
    for u in (uniforms, edges):
        np.testing.assert_array_equal(inverse(u), np.searchsorted(cdf, u, side="right"))
    assert set(np.unique(inverse(uniforms)).tolist()) <= set(np.flatnonzero(weights).tolist())
