"""Sketch oracles ([Cormode21] §4, §7.5): privacy, the Count-Mean variance
derivation, heavy hitters over 64-bit keys, and input validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedhh.oracles import Histogram, key_items, make_oracle
from fedhh.oracles.direct import DirectReports
from fedhh.oracles.sketches import SketchOracle, SketchReports
from fedhh.oracles.unary import UnaryReports

Z = 5.0


def sketch_output_space(sketch: SketchOracle, inner_space: object) -> SketchReports:
    size = len(inner_space)
    rows = np.repeat(np.arange(sketch.rows), size)
    return SketchReports(rows, inner_space.take(np.tile(np.arange(size), sketch.rows)))


@pytest.mark.parametrize(
    ("name", "options", "inner_space"),
    [
        ("count-mean", {"rows": 3, "width": 3, "inner": "grr"}, DirectReports(np.arange(3))),
        (
            "count-sketch",
            {"rows": 2, "width": 2, "inner": "oue"},
            UnaryReports(np.packbits(((np.arange(16)[:, None] >> np.arange(4)) & 1).astype(bool), axis=1)),
        ),
    ],
)
def test_sketch_reports_are_exactly_epsilon_ldp(name: str, options: dict, inner_space: object) -> None:
    """Every (row, inner report) for every input of a 6-value domain: the worst
    ratio is e^ε and each input's probabilities sum to one."""
    epsilon = 1.3
    sketch = make_oracle(name, epsilon=epsilon, domain=6, **options)
    space = sketch_output_space(sketch, inner_space)
    probabilities = np.stack([sketch.report_probabilities(v, space) for v in range(6)])
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-12)
    worst = float((probabilities.max(axis=0) / probabilities.min(axis=0)).max())
    assert math.exp(epsilon) * (1 - 1e-9) <= worst <= math.exp(epsilon) * (1 + 1e-12)


@pytest.mark.parametrize(
    ("name", "options", "shard_path"),
    [
        ("cms", {}, False),
        ("cms", {}, True),
        ("hcms", {}, False),
        ("count-mean", {"inner": "grr"}, False),
        ("count-mean", {"inner": "olh"}, False),
    ],
)
def test_count_mean_is_unbiased_with_the_derived_variance(name: str, options: dict, shard_path: bool) -> None:
    """1,000 runs, each with fresh hash functions (the derivation averages over
    them), 4 rows of width 8, on 3,000 Zipf users over 24 values.  Means within
    5 theoretical standard errors; mean MSE within 5 empirical standard errors
    of the derived variance.  ``shard_path``: OUE rows as Binomial counts."""
    domain, users, runs = 24, 3_000, 1_000
    weights = np.arange(1, domain + 1, dtype=float) ** -1.1
    counts = np.random.default_rng(1).multinomial(users, weights / weights.sum())
    values = np.repeat(np.arange(domain, dtype=np.uint64), counts)
    truth = Histogram.from_dense(counts)
    candidates = np.arange(domain)
    rng = np.random.default_rng(2)
    errors = np.empty((runs, domain))
    for run in range(runs):
        sketch = make_oracle(name, epsilon=2.0, domain=domain, rows=4, width=8, seed=run, **options)
        if shard_path:
            statistics = sketch.randomize_aggregate(values, rng)
        else:
            statistics = sketch.aggregate(sketch.randomize(values, rng))
        errors[run] = sketch.estimate(statistics, candidates) - counts
    predicted = sketch.variance(candidates, truth)
    assert np.abs(errors.mean(axis=0) / np.sqrt(predicted / runs)).max() <= Z
    mse = (errors**2).mean(axis=1)
    assert abs(mse.mean() - predicted.mean()) <= Z * mse.std(ddof=1) / math.sqrt(runs)


def test_count_sketch_mean_is_unbiased() -> None:
    """Signed rows cancel collisions in expectation: the mean error of every
    value is within 5 empirical standard errors of zero over 600 hash draws."""
    domain, users, runs = 24, 3_000, 600
    weights = np.arange(1, domain + 1, dtype=float) ** -1.1
    counts = np.random.default_rng(3).multinomial(users, weights / weights.sum())
    values = np.repeat(np.arange(domain, dtype=np.uint64), counts)
    rng = np.random.default_rng(4)
    errors = np.empty((runs, domain))
    for run in range(runs):
        sketch = make_oracle("count-sketch", epsilon=2.0, domain=domain, rows=4, width=8, inner="oue",
                             estimator="mean", seed=run)
        errors[run] = sketch.estimate(sketch.aggregate(sketch.randomize(values, rng)), np.arange(domain)) - counts
    standard_errors = errors.std(axis=0, ddof=1) / math.sqrt(runs)
    assert np.abs(errors.mean(axis=0) / standard_errors).max() <= Z


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("cms", {}),
        ("hcms", {}),
        ("count-median", {}),
        ("count-min", {}),
        ("count-sketch", {}),
        ("count-mean", {"inner": "hr"}),
    ],
)
def test_sketches_find_the_heavy_hitters_of_a_64_bit_domain(name: str, options: dict) -> None:
    """500 URL-like items keyed to 64 bits, 200,000 Zipf(1.1) users, ε = 4,
    16 rows of width 1024: the three most frequent items are estimated as the
    three largest, and (count-mean) within 5 predicted deviations."""
    items = [f"https://site-{i}.example/{'p' * (i % 7)}" for i in range(500)]
    keys = key_items(items)
    weights = np.arange(1, 501, dtype=float) ** -1.1
    counts = np.random.default_rng(5).multinomial(200_000, weights / weights.sum())
    values = np.random.default_rng(6).permutation(np.repeat(keys, counts))
    sketch = make_oracle(name, epsilon=4.0, domain=1 << 64, rows=16, width=1024, **options)
    statistics = sketch.randomize_aggregate(values, np.random.default_rng(7))
    estimates = sketch.estimate(statistics, keys)
    assert set(np.argsort(estimates)[-3:]) == {0, 1, 2}
    if sketch.estimator == "mean" and not sketch.signed:
        truth = Histogram.of(values)
        deviations = (estimates - counts) / np.sqrt(sketch.variance(keys, truth))
        assert np.abs(deviations[:3]).max() <= Z


def test_bad_sketch_parameters_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"rows must be an integer \[1, 65536\], got 0"):
        make_oracle("cms", epsilon=1.0, domain=100, rows=0)
    with pytest.raises(ValueError, match=r"width must be an integer \[2, 2147483648\], got 1"):
        make_oracle("count-min", epsilon=1.0, domain=100, width=1)
    with pytest.raises(ValueError, match=r"estimator must be one of \['mean', 'median', 'min'\], got 'mode'"):
        make_oracle("count-sketch", epsilon=1.0, domain=100, estimator="mode")
    with pytest.raises(ValueError, match=r"estimator 'min' needs an unsigned sketch"):
        make_oracle("count-sketch", epsilon=1.0, domain=100, estimator="min")
    with pytest.raises(ValueError, match=r"inner must be one of \[.*'olh'.*\], got 'cms'"):
        make_oracle("count-mean", epsilon=1.0, domain=100, inner="cms")
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['estimator'\]"):
        make_oracle("count-mean", epsilon=1.0, domain=100, estimator="median")
    inner = make_oracle("oue", epsilon=1.0, domain=10)
    with pytest.raises(ValueError, match=r"inner oracle domain must be 16 \(width x 2\), got 10"):
        SketchOracle(inner, 100, rows=2, width=8, signed=True)
    median = make_oracle("count-median", epsilon=1.0, domain=100, rows=2, width=8)
    with pytest.raises(ValueError, match="closed-form variance exists for the unsigned count-mean sketch only"):
        median.variance(np.arange(3), Histogram.of(np.arange(3)))
