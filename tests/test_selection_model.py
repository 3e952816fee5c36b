"""The order-statistics survival model of a level against a Monte Carlo of the same Gaussian model,
and the binning of a Zipf tail into entries."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import ndtri

from fedhh.protocols.prefix_search.pem_analysis import value_entries, zipf_frequencies
from fedhh.protocols.prefix_search.selection_model import LevelCandidates, noise_threshold, survival

DRAWS = 20_000
APPROXIMATION = 0.02  # the refined normal approximation and 12 quadrature nodes, measured below 0.015


def monte_carlo(level: LevelCandidates, kept: int, threshold: float | None, rng: np.random.Generator) -> np.ndarray:
    """Survival of each value entry by drawing every candidate's estimate and ranking them."""
    copies = level.multiplicity.astype(np.int64)
    means, sds = np.repeat(level.means, copies), np.repeat(level.sds, copies)
    presence = np.repeat(level.presence, copies)
    values = means + sds * rng.standard_normal((DRAWS, means.size))
    values[rng.random((DRAWS, means.size)) >= presence] = -np.inf
    extra = kept + 8  # only the largest zero-frequency estimates can matter
    spacing = rng.random((DRAWS, extra)) ** (1.0 / (level.zeros - np.arange(extra)))
    zeros = level.zero_sd * ndtri(np.cumprod(spacing, axis=1))
    estimates = np.concatenate([values, zeros], axis=1)
    if threshold is not None:
        estimates[estimates < threshold] = -np.inf
    rank = np.argsort(np.argsort(-estimates, axis=1), axis=1)
    survived = (rank < kept) & np.isfinite(estimates)
    per_copy = survived[:, : means.size].sum(axis=0) / np.maximum(DRAWS * presence, 1)
    owner = np.repeat(np.arange(level.means.size), copies)
    return np.bincount(owner, weights=per_copy) / copies


def zipf_level(n: int, variance_per_user: float, distinct: int, zeros: int) -> LevelCandidates:
    frequencies = zipf_frequencies(1.1, distinct)
    counts = n * frequencies
    sds = np.sqrt(n * variance_per_user + counts)
    return LevelCandidates(counts, sds, np.ones(distinct), np.ones(distinct), zeros, np.sqrt(n * variance_per_user))


@pytest.mark.parametrize(
    ("level", "kept", "threshold"),
    [
        (zipf_level(50_000, 0.72, 60, 964), 8, None),  # PEM near rank k: values compete with values
        (zipf_level(20_000, 1.5, 40, 200), 6, "noise"),  # TreeHist-like: threshold and a cap of 6
        (LevelCandidates([600.0, 450.0, 300.0], [150.0, 150.0, 150.0], [1, 3, 5], [1.0, 0.7, 0.4], 5_000, 150.0), 1, None),
    ],
    ids=["top-k", "threshold", "k=1, bins, presence"],
)
def test_survival_matches_a_monte_carlo_of_the_model(level: LevelCandidates, kept: int, threshold: str | None) -> None:
    cut = None if threshold is None else noise_threshold(level.zero_sd, level.means.size + level.zeros)
    analytic, _ = survival(level, kept, cut)
    measured = monte_carlo(level, kept, cut, np.random.default_rng(7))
    shown = measured[:12]
    tolerance = 4 * np.sqrt(shown * (1 - shown) / DRAWS) + APPROXIMATION
    assert np.all(np.abs(analytic[:12] - shown) <= tolerance), (analytic[:12], shown)
    assert np.any((shown > 0.1) & (shown < 0.9)), "a value in the transition makes the check informative"


def test_tail_bins_change_survival_by_little() -> None:
    """Binning the tail (one entry per bin of similar ranks) leaves the top values' survival as with
    every value on its own."""
    frequencies = zipf_frequencies(1.1, 800)
    n, zeros = 50_000, 31_968
    alone = LevelCandidates(n * frequencies, np.sqrt(n * 0.72 + n * frequencies), np.ones(800), np.ones(800), zeros,
                            np.sqrt(n * 0.72))
    entries = value_entries(frequencies, 24)
    assert entries.multiplicity.sum() == 800 and entries.size < 40
    assert entries.frequencies @ entries.multiplicity == pytest.approx(1.0)
    binned = LevelCandidates(n * entries.frequencies, np.sqrt(n * 0.72 + n * entries.frequencies),
                             entries.multiplicity, np.ones(entries.size), zeros, np.sqrt(n * 0.72))
    exact, _ = survival(alone, 8)
    approximate, _ = survival(binned, 8)
    np.testing.assert_allclose(approximate[:16], exact[:16], atol=0.005)
    assert 0.3 < exact[7] < 0.7
