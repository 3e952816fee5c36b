"""The intervals of a report: Clopper-Pearson for rates over item-trials, the bootstrap over trials, the range below it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest

from simulations.sweep_intervals import (
    BOOTSTRAP,
    CLOPPER_PEARSON,
    CONFIDENCE,
    MIN_BOOTSTRAP_TRIALS,
    RANGE,
    binomial,
    over_trials,
)


def test_a_binomial_interval_is_clopper_pearson_and_never_of_zero_width() -> None:
    found, tried = np.array([0, 3, 12, 16, 1]), np.array([16, 4, 16, 16, 1])
    interval = binomial(found, tried, np.full(5, 4))
    for j in range(5):
        exact = binomtest(int(found[j]), int(tried[j])).proportion_ci(CONFIDENCE, method="exact")
        assert (interval.low[j], interval.high[j]) == pytest.approx((exact.low, exact.high), abs=1e-12)
    assert np.all(interval.high - interval.low > 0.15)  # every trial finding 12 of 16 items: 0.48 to 0.93
    assert interval.low[0] == 0 and interval.high[3] == 1 and list(interval.method) == [CLOPPER_PEARSON] * 5
    empty = binomial(np.array([0]), np.array([0]), np.array([0]))
    assert math.isnan(empty.mean[0]) and empty.method[0] == ""


def test_below_the_bootstrap_threshold_the_band_is_the_range_of_the_trials() -> None:
    values = np.full((MIN_BOOTSTRAP_TRIALS, 3), np.nan)
    values[:3, 0] = [0.0, 0.0, 0.3]
    values[:, 1] = np.linspace(0.5, 1.0, MIN_BOOTSTRAP_TRIALS)
    values[:1, 2] = [0.7]
    interval = over_trials(values)
    assert list(interval.method) == [RANGE, BOOTSTRAP, RANGE] and list(interval.trials) == [3, 10, 1]
    assert (interval.mean[0], interval.low[0], interval.high[0]) == pytest.approx((0.1, 0.0, 0.3))
    assert interval.low[2] == interval.mean[2] == interval.high[2] == 0.7
    assert 0.5 < interval.low[1] < interval.mean[1] < interval.high[1] < 1.0


def test_no_bootstrap_bound_leaves_the_range_of_the_data() -> None:
    """Shares piled up at 0 or 1 (a Student-t interval goes below 0 there)."""
    rng = np.random.default_rng(7)
    values = np.where(rng.random((12, 200)) < 0.9, 0.0, rng.random((12, 200)))
    values[:, :100] = 1 - values[:, :100]
    interval = over_trials(values)
    assert np.all(interval.low >= 0) and np.all(interval.high <= 1)
    assert np.all(interval.low <= interval.mean) and np.all(interval.mean <= interval.high)
    assert np.all(interval.low >= values.min(axis=0)) and np.all(interval.high <= values.max(axis=0))


@pytest.mark.parametrize("trials", [MIN_BOOTSTRAP_TRIALS, 30])
def test_the_bootstrap_interval_covers_the_mean_at_the_nominal_rate(trials: int) -> None:
    """2,000 samples of a skewed share (Beta(2, 5), mean 2/7), each its own column, the report's own
    resamples: the number of intervals covering 2/7 is binomial(2,000, 0.95) if the interval is
    right, so within 3.5 of its standard deviations (about 34) of 1,900."""
    reps = 2000
    values = np.random.default_rng(20250825 + trials).beta(2.0, 5.0, size=(trials, reps))
    interval = over_trials(values)
    assert set(interval.method) == {BOOTSTRAP}
    covered = int(np.sum((interval.low <= 2 / 7) & (2 / 7 <= interval.high)))
    sd = math.sqrt(reps * CONFIDENCE * (1 - CONFIDENCE))
    assert abs(covered - reps * CONFIDENCE) <= 3.5 * sd, covered


def test_the_bootstrap_is_reproducible() -> None:
    values = np.random.default_rng(3).random((15, 4))
    first, second = over_trials(values), over_trials(values.copy())
    assert np.array_equal(first.low, second.low) and np.array_equal(first.high, second.high)
