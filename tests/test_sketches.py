"""Sketch oracles ([Cormode21] §4, §7.5): privacy, the Count-Mean variance
derivation, heavy hitters over 64-bit keys, and input validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedhh.kernels.randomness import KeyedRandomness
from fedhh.oracles import Histogram, key_items, make_oracle
from fedhh.oracles.direct import DirectReports
from fedhh.oracles.sketches import SketchOracle, SketchReports
from fedhh.oracles.unary import SPARSE_MAX_Q, UnaryReports

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


# -- support counts sampled at the read cells alone (prefix searches' rounds with few candidates) ---------

HELD = np.array([11, 2_000_003, 5 << 40, 77, 123_456_789], dtype=np.uint64)  # the values users hold
ABSENT = np.arange(1_000, 1_012, dtype=np.uint64)  # candidates nobody holds


def draws_for(kind: str, call: int, users: int) -> object:
    """The draws of one independent call: range streams, or a Generator."""
    if kind == "generator":
        return np.random.default_rng(call)
    return KeyedRandomness(call).for_range("read-cells", 0, 0, users)


@pytest.mark.parametrize(("epsilon", "kind"), [(4.0, "range"), (1.0, "range"), (4.0, "generator")])
def test_support_sampled_at_the_read_cells_has_the_device_reports_law(epsilon: float, kind: str) -> None:
    """``randomize_support`` of a CMS (rows 4, width 8; ε = 4: the sparse sampler over range
    streams, ε = 1: dense bits, and a Generator's Binomial counts): given the rows the users
    draw (``randomize``'s first call), count ``(j, i)`` is a sum over row ``j``'s users of
    independent bits, 1 with probability ``p'`` for a user whose row-``j`` symbol is the
    candidate's and ``q'`` otherwise.  Over 400 independent calls the standardised counts of
    every distinct cell have mean 0 (within 5 / sqrt(400)) and their squares mean 1 (within 5
    standard errors); candidates sharing a row's symbol get the same count; cells whose symbol no
    user holds (they count only ``q'`` bits) are among those checked.  A dropped own bit would
    move a held cell's mean by ~15 sd."""
    users, calls = 3_000, 400
    sketch = make_oracle("cms", epsilon=epsilon, domain=1 << 64, rows=4, width=8, seed=2)
    values = np.repeat(HELD, [1_200, 800, 500, 300, 200])
    candidates = np.concatenate([HELD, ABSENT])
    symbols = sketch.symbols(np.arange(sketch.rows)[:, None], candidates[None, :]).astype(np.int64)  # (rows, C)
    held_symbols = sketch.symbols(np.arange(sketch.rows)[:, None], HELD[None, :]).astype(np.int64)
    assert any(not np.isin(symbols[j], held_symbols[j]).all() for j in range(sketch.rows))  # a cell nobody holds
    p, q = sketch.inner.p, sketch.inner.q
    z = []
    for call in range(calls):
        support = sketch.randomize_support(values, candidates, draws_for(kind, call, users))
        rows = draws_for(kind, call, users).integers(0, sketch.rows, size=users)
        own = sketch.symbols(rows, values).astype(np.int64)
        counts = support.counts[:, 0, :]
        np.testing.assert_array_equal(support.n_users, np.bincount(rows, minlength=sketch.rows))
        cells = []
        for j in range(sketch.rows):
            distinct, first = np.unique(symbols[j], return_index=True)
            np.testing.assert_array_equal(counts[j], counts[j, first][np.searchsorted(distinct, symbols[j])])
            holders = np.array([np.count_nonzero((rows == j) & (own == s)) for s in distinct])
            others = np.count_nonzero(rows == j) - holders
            mean, variance = holders * p + others * q, holders * p * (1 - p) + others * q * (1 - q)
            cells.append((counts[j, first] - mean) / np.sqrt(variance))
        z.append(np.concatenate(cells))
    z = np.array(z)  # [call, distinct cell]
    assert np.abs(z.mean(axis=0)).max() <= Z / math.sqrt(calls)
    squares = (z**2).ravel()
    assert abs(squares.mean() - 1) <= Z * squares.std(ddof=1) / math.sqrt(squares.size)


def test_support_sampled_at_the_read_cells_is_the_same_for_any_cut_into_ranges() -> None:
    """Each user's bits are its own (global id, call sequence): one range, the sum of 7 ranges cut
    inside and across the 4,096-user streams, and one batch of two ranges give the same counts;
    so do per-user streams cut in two."""
    users = 3 * 4096 + 500
    sketch = make_oracle("cms", epsilon=4.0, domain=1 << 64, rows=4, width=64, seed=5)
    values = np.random.default_rng(1).choice(np.concatenate([HELD, ABSENT]), users)
    candidates = np.concatenate([HELD[:3], ABSENT[:4]])
    source = KeyedRandomness(8)
    whole = sketch.randomize_support(values, candidates, source.for_range("s", 3, 90, users))
    cuts = [0, 1, 4000, 4006, 8192, 9000, 12_000, users]
    pieces = [sketch.randomize_support(values[a:b], candidates, source.for_range("s", 3, 90 + a, b - a))
              for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    total = pieces[0]
    for piece in pieces[1:]:
        total = total + piece
    np.testing.assert_array_equal(total.counts, whole.counts)
    np.testing.assert_array_equal(total.n_users, whole.n_users)
    batch = sketch.randomize_support(values, candidates, source.for_ranges("s", 3, ((90, 5000), (5090, users - 5000))))
    np.testing.assert_array_equal(batch.counts, whole.counts)
    ids = np.arange(users) * 3 + 1
    own_streams = sketch.randomize_support(values, candidates, source.for_users("s", 3, ids))
    halves = [sketch.randomize_support(values[part], candidates, source.for_users("s", 3, ids[part]))
              for part in (slice(0, 777), slice(777, users))]
    np.testing.assert_array_equal(halves[0].counts + halves[1].counts, own_streams.counts)
    assert int(whole.counts.sum()) != int(own_streams.counts.sum())  # different draws: the comparisons can fail


@pytest.mark.parametrize("name", ["hcms", "count-median"])
def test_support_of_other_sketches_is_the_support_of_their_statistics(name: str) -> None:
    """Over rows that are not unary, ``randomize_support`` is the support of
    ``randomize_aggregate``'s statistics, the same draws."""
    sketch = make_oracle(name, epsilon=4.0, domain=1 << 64, rows=4, width=32, seed=1)
    values = np.random.default_rng(2).choice(HELD, 5_000)
    candidates = np.concatenate([HELD, ABSENT])
    source = KeyedRandomness(3)
    sampled = sketch.randomize_support(values, candidates, source.for_range("s", 0, 0, values.size))
    statistics = sketch.randomize_aggregate(values, source.for_range("s", 0, 0, values.size))
    expected = sketch.support(statistics, candidates)
    np.testing.assert_array_equal(sampled.counts, expected.counts)
    np.testing.assert_array_equal(sampled.n_users, expected.n_users)


def test_support_sampled_at_the_read_cells_follows_each_call_s_candidates() -> None:
    """The read cells kept from one call serve the next only for the same candidates: after a call
    with other candidates (and with the first candidates' array changed in place), an oracle
    samples what a fresh one samples."""
    values = np.random.default_rng(4).choice(HELD, 3_000)
    first, second = np.concatenate([HELD, ABSENT]), HELD[:2].copy()
    source = KeyedRandomness(9)

    def sampled(sketch: SketchOracle, candidates: np.ndarray) -> np.ndarray:
        return sketch.randomize_support(values, candidates, source.for_range("s", 0, 0, values.size)).counts

    used = make_oracle("cms", epsilon=4.0, domain=1 << 64, rows=4, width=64, seed=6)
    sampled(used, first)
    first[:2] = second
    for candidates in (second, first):
        fresh = make_oracle("cms", epsilon=4.0, domain=1 << 64, rows=4, width=64, seed=6)
        np.testing.assert_array_equal(sampled(used, candidates), sampled(fresh, candidates))
