"""Sketch oracles ([Cormode21] §4, §7.5): privacy, the Count-Mean variance
derivation, heavy hitters over 64-bit keys, and input validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedhh.oracles import Histogram, key_items, make_oracle
from fedhh.oracles.direct import DirectReports
from fedhh.oracles.sketches import SketchOracle, SketchReports
from fedhh.oracles.unary import SPARSE_MAX_Q, UnaryReports
from fedhh.randomness import KeyedRandomness

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


ZIPF_DOMAIN, ZIPF_USERS = 24, 3_000


def zipf_users() -> tuple[np.ndarray, np.ndarray, Histogram]:
    """3,000 users over 24 values with Zipf(1.1) weights: (counts, one value per user, truth)."""
    weights = np.arange(1, ZIPF_DOMAIN + 1, dtype=float) ** -1.1
    counts = np.random.default_rng(1).multinomial(ZIPF_USERS, weights / weights.sum())
    return counts, np.repeat(np.arange(ZIPF_DOMAIN, dtype=np.uint64), counts), Histogram.from_dense(counts)


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
    domain, runs = ZIPF_DOMAIN, 1_000
    counts, values, truth = zipf_users()
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


def test_count_mean_over_sparse_oue_rows_is_unbiased_with_the_derived_variance() -> None:
    """The shard path with range randomness at ε = 4 (inner OUE rows through the sparse sampler):
    as above, 1,000 runs of 3,000 Zipf users over 24 values, each run its own seed."""
    domain, users, runs = ZIPF_DOMAIN, ZIPF_USERS, 1_000
    counts, values, truth = zipf_users()
    candidates = np.arange(domain)
    errors = np.empty((runs, domain))
    for run in range(runs):
        sketch = make_oracle("cms", epsilon=4.0, domain=domain, rows=4, width=8, seed=run)
        assert sketch.inner.q <= SPARSE_MAX_Q
        statistics = sketch.randomize_aggregate(values, KeyedRandomness(run).for_range("cms", 1, 0, users))
        errors[run] = sketch.estimate(statistics, candidates) - counts
    predicted = sketch.variance(candidates, truth)
    assert np.abs(errors.mean(axis=0) / np.sqrt(predicted / runs)).max() <= Z
    mse = (errors**2).mean(axis=1)
    assert abs(mse.mean() - predicted.mean()) <= Z * mse.std(ddof=1) / math.sqrt(runs)


@pytest.mark.parametrize("name", ["cms", "hcms"])
def test_grouped_sketch_statistics_choose_rows_as_randomize_and_split_exactly(name: str) -> None:
    """Each group's reports per row are those ``randomize`` puts in that row (the rows are its
    first call), and the groups' statistics of one range are the sums of those of 7 ranges."""
    users, rows = 2 * 4096 + 300, 4
    sketch = make_oracle(name, epsilon=4.0, domain=1 << 64, rows=rows, width=32)
    values = np.random.default_rng(3).integers(0, 1 << 62, users, dtype=np.uint64)
    groups = np.random.default_rng(4).integers(-1, 3, users)
    source = KeyedRandomness(6)
    whole = sketch.randomize_aggregate_groups(values, groups, 3, source.for_range("s", 1, 50, users))
    chosen = sketch.randomize(values, source.for_range("s", 1, 50, users)).rows
    for group, statistics in enumerate(whole):
        np.testing.assert_array_equal([row.n_users for row in statistics.rows],
                                      np.bincount(chosen[groups == group], minlength=rows))
    cuts = [0, 10, 4000, 4096, 5000, 8192, 8200, users]
    pieces = [sketch.randomize_aggregate_groups(values[a:b], groups[a:b], 3, source.for_range("s", 1, 50 + a, b - a))
              for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    for group in range(3):
        total = pieces[0][group]
        for piece in pieces[1:]:
            total = total + piece[group]
        for mine, theirs in zip(sketch.to_flat(total), sketch.to_flat(whole[group]), strict=True):
            np.testing.assert_array_equal(mine, theirs)


def test_supports_are_the_inner_supports_of_each_rows_symbols() -> None:
    """``supports`` (several statistics, the candidates hashed once for every row) gives, per
    statistics, row ``j``'s inner support of ``symbols(j, candidate)`` (and of its mirror, signed),
    whether it decodes symbol by symbol (7 candidates) or whole rows (100)."""
    for name, options in (("cms", {}), ("count-sketch", {"inner": "olh"})):
        sketch = make_oracle(name, epsilon=2.0, domain=1 << 64, rows=5, width=16, **options)
        values = np.random.default_rng(8).integers(0, 1 << 62, 900, dtype=np.uint64)
        statistics = [sketch.aggregate(sketch.randomize(values[part], np.random.default_rng(9)))
                      for part in (slice(0, 300), slice(300, 900))]
        for candidates in (values[:7], values[:100]):
            for support, stats in zip(sketch.supports(statistics, candidates), statistics, strict=True):
                for row, row_stats in enumerate(stats.rows):
                    own = sketch.symbols(np.full(candidates.size, row), candidates)
                    halves = [own] if not sketch.signed else [own, (own + np.uint64(16)) % np.uint64(32)]
                    for half, symbols in enumerate(halves):
                        expected = sketch.inner.support(row_stats, symbols).counts
                        np.testing.assert_array_equal(support.counts[row, half], expected)
                np.testing.assert_array_equal(support.n_users, [row.n_users for row in stats.rows])


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


@pytest.mark.parametrize(("name", "options"), [("cms", {}), ("hcms", {}), ("count-median", {}), ("count-sketch", {})])
def test_estimates_of_several_statistics_are_exactly_their_estimates_one_by_one(name: str, options: dict) -> None:
    """``estimates`` reads each row's inner estimates decoded once per symbol: the very floats of
    ``estimate_support(support(...))`` (whole rows, 600 candidates) and of the per-symbol path (5)."""
    sketch = make_oracle(name, epsilon=3.0, domain=1 << 64, rows=6, width=64, **options)
    values = np.random.default_rng(10).integers(0, 1 << 62, 2_000, dtype=np.uint64)
    statistics = [sketch.aggregate(sketch.randomize(values[part], np.random.default_rng(11)))
                  for part in (slice(0, 700), slice(700, 2_000))]
    for candidates in (values[:600], values[:5]):
        for together, stats in zip(sketch.estimates(statistics, candidates), statistics, strict=True):
            np.testing.assert_array_equal(together, sketch.estimate_support(sketch.support(stats, candidates)))
