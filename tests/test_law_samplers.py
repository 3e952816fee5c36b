"""The exact samplers of a law simulation (fedhh.kernels.laws) against numpy's own below 10^9 and
against the exact moments of their laws above it; each test is shown able to fail on a sampler
with a small, deliberate error.

Tolerances: a sample mean of R draws is within 5 standard errors of the law's mean, and a
sample variance within 5 of its own standard errors (from the sample's fourth moment), over
every cell at once (fixed seeds).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats

from fedhh.kernels.laws import fair_binomial, hypergeometric, multivariate_hypergeometric, subset_count
from fedhh.kernels.randomness import derive_key

SE = 5.0


def moments_agree(draws: np.ndarray, mean: np.ndarray, variance: np.ndarray) -> bool:
    """Every column's sample mean and variance within :data:`SE` standard errors of the law's."""
    draws = np.asarray(draws, dtype=np.float64)
    replications = draws.shape[0]
    centred = draws - draws.mean(axis=0)
    sample_variance = centred.var(axis=0, ddof=1)
    fourth = (centred**4).mean(axis=0)
    mean_error = np.abs(draws.mean(axis=0) - mean) / np.sqrt(np.maximum(variance, 1e-300) / replications)
    variance_error = np.abs(sample_variance - variance) / np.sqrt(np.maximum(fourth - sample_variance**2, 1e-300) / replications)
    fixed = variance == 0
    if np.any(fixed & (np.abs(draws - mean) > 0).any(axis=0)):
        return False
    return bool(np.all(mean_error[~fixed] < SE) and np.all(variance_error[~fixed] < SE))


def hypergeometric_moments(colors: np.ndarray, draws: int) -> tuple[np.ndarray, np.ndarray]:
    total = float(colors.sum())
    share = colors / total
    return draws * share, draws * share * (1 - share) * (total - draws) / (total - 1)


def thinned_without_removal(rng: np.random.Generator, colors: np.ndarray, draws: int) -> np.ndarray:
    """A wrong sampler: independent binomials at rate draws / N, not conditioned to size draws."""
    return rng.binomial(colors, draws / colors.sum())


@pytest.mark.parametrize("scale", [1, 10**8, 10**11])  # numpy's own sampler, and thinning above 10^9
def test_multivariate_hypergeometric_has_the_exact_moments(scale: int) -> None:
    colors = np.array([5, 1, 30, 0, 64]) * scale
    draws = int(colors.sum() * 3 // 10)
    rng = np.random.default_rng(11)
    sample = np.array([multivariate_hypergeometric(rng, colors, draws) for _ in range(4000)])
    assert np.all(sample.sum(axis=1) == draws) and np.all(sample <= colors)
    assert moments_agree(sample, *hypergeometric_moments(colors, draws))
    wrong = np.array([thinned_without_removal(rng, colors, draws) for _ in range(4000)])
    assert not moments_agree(wrong, *hypergeometric_moments(colors, draws))


def test_thinning_with_more_classes_than_surplus_has_the_exact_moments() -> None:
    """Above 10^9 with more classes than the thinning's surplus, the surplus is removed one chosen
    object at a time (the other path: a hypergeometric draw of it, as above)."""
    colors = np.repeat(np.array([1, 3, 10, 40]), 500) * 10**6
    draws = 200
    rng = np.random.default_rng(13)
    sample = np.array([multivariate_hypergeometric(rng, colors, draws) for _ in range(4000)])
    assert np.all(sample.sum(axis=1) == draws)
    grouped = sample.reshape(4000, 4, 500).sum(axis=2)  # the four sizes of class, 500 classes each
    mean, variance = hypergeometric_moments(colors.reshape(4, 500).sum(axis=1), draws)
    assert moments_agree(grouped, mean, variance)
    wrong = np.array([thinned_without_removal(rng, colors, draws) for _ in range(4000)]).reshape(4000, 4, 500)
    assert not moments_agree(wrong.sum(axis=2), mean, variance)


def test_thinning_agrees_with_numpy_in_distribution() -> None:
    """Below 10^9 both samplers apply: the thinned draw (forced) and numpy's give the same law
    (chi-square over the outcomes of a small urn)."""
    from fedhh.kernels import laws

    colors, draws = np.array([3, 2, 4]), 4
    rng = np.random.default_rng(5)
    thinned = [tuple(laws._thinned(rng, colors, int(colors.sum()), draws)) for _ in range(20000)]
    exact = [tuple(rng.multivariate_hypergeometric(colors, draws)) for _ in range(20000)]
    outcomes = sorted(set(thinned) | set(exact))
    table = np.array([[thinned.count(o) for o in outcomes], [exact.count(o) for o in outcomes]])
    assert stats.chi2_contingency(table).pvalue > 1e-4


def test_hypergeometric_above_numpys_limit() -> None:
    rng = np.random.default_rng(3)
    good, bad, draws = 3 * 10**9, 7 * 10**9, 123_456
    sample = np.array([[hypergeometric(rng, good, bad, draws)] for _ in range(3000)])
    mean, variance = hypergeometric_moments(np.array([good, bad]), draws)
    assert moments_agree(sample, mean[:1], variance[:1])


@pytest.mark.parametrize("population", [1_000, 3 * 10**9])
def test_subset_counts_are_one_uniform_subset(population: int) -> None:
    """Any cut of the ids into ranges counts the same keyed subset: the ranges add up to its size,
    one range's count is hypergeometric, and two cuts of one key agree on their common ranges."""
    size = population // 7
    cuts = np.array([0, population // 5, population // 2, population // 2 + 1, population])
    counts = []
    for seed in range(600):
        key = derive_key(seed, "test.subset")
        parts = [subset_count(key, population, size, a, b) for a, b in zip(cuts[:-1], cuts[1:])]
        assert sum(parts) == size
        assert subset_count(key, population, size, 0, population // 2) == parts[0] + parts[1]
        counts.append(parts)
    widths = np.diff(cuts)
    mean, variance = hypergeometric_moments(widths, size)
    assert moments_agree(np.array(counts), mean, variance)
    off = max(1, int(0.5 * np.sqrt(variance[0])))  # a sampler that moves half a standard deviation between two ranges
    assert not moments_agree(np.array(counts) + np.array([off, -off, 0, 0]), mean, variance)


def test_fair_binomial_is_exact_at_every_word_count() -> None:
    trials = np.array([0, 1, 63, 64, 65, 128, 129, 4095, 4097, 10**9])
    rng = np.random.default_rng(8)
    sample = np.array([fair_binomial(rng, trials) for _ in range(6000)])
    assert np.all((sample >= 0) & (sample <= trials))
    assert moments_agree(sample, trials / 2, trials / 4)
    biased: Callable[[np.ndarray], np.ndarray] = lambda n: rng.binomial(n, 0.51)  # noqa: E731
    assert not moments_agree(np.array([biased(trials) for _ in range(6000)]), trials / 2, trials / 4)
