"""The Hadamard oracles' fast paths give exactly what the plain ones give: the transform as two
matrix products against the stage-by-stage butterflies, and HM's statistics from integer
bincounts against the per-report sign sums (per group, too), HM(1)'s one-draw randomised response
against its law, and the radix-sorted order against numpy's stable argsort."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedhh.kernels.randomness import KeyedRandomness, UserRandom
from fedhh.oracles import hadamard_mechanism, make_oracle, walsh_hadamard
from fedhh.oracles.base import Support, stable_order
from fedhh.oracles.histogram import Histogram
from fedhh.oracles.sketches import SketchOracle
from fedhh.oracles.walsh_hadamard import fwht, hadamard_parity


def butterflies(values: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> np.ndarray:
    with monkeypatch.context() as patch:
        patch.setattr(walsh_hadamard, "_KRONECKER_MAX", 0)
        return fwht(values)


@pytest.mark.parametrize("bits", range(0, 16))
def test_matrix_product_transform_equals_the_butterflies(bits: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every length up to 2^15 (the products stop at 2^12), with leading axes, and values up to
    the float64-exact limit and beyond it (where the butterflies take over)."""
    size = 1 << bits
    rng = np.random.default_rng(bits)
    for shape in ((size,), (3, size), (2, 2, size)):
        for limit in (3, 10**6, (1 << 53) // size, 1 << 60):
            values = rng.integers(-limit, limit, shape, endpoint=True)
            transformed = fwht(values)
            assert transformed.dtype == values.dtype and transformed.shape == values.shape
            np.testing.assert_array_equal(transformed, butterflies(values, monkeypatch))
    for dtype in (np.int32, np.uint32, np.float64):  # narrow, unsigned (wrapping) and float input keep their paths
        values = rng.integers(0, 100, size).astype(dtype)
        np.testing.assert_array_equal(fwht(values), butterflies(values, monkeypatch))


def test_the_int64_extremes_fall_back_to_the_butterflies(monkeypatch: pytest.MonkeyPatch) -> None:
    values = np.array([np.iinfo(np.int64).min, 0, 0, 0, 1, 2, 3, 4], dtype=np.int64)
    np.testing.assert_array_equal(fwht(values), butterflies(values, monkeypatch))


@pytest.mark.parametrize("coefficients", [1, 3])
@pytest.mark.parametrize("dense", [True, False])
def test_hm_statistics_are_the_sums_of_the_reported_signs(
    coefficients: int, dense: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    oracle = make_oracle("hm", epsilon=2.0, domain=1000, coefficients=coefficients)
    rng = np.random.default_rng(coefficients)
    reports = oracle.randomize(rng.integers(0, 1000, 20_000), rng)
    expected = np.zeros(oracle.rows, dtype=np.int64)
    np.add.at(expected, reports.indices.ravel().astype(np.intp), oracle._signs(reports).ravel())
    if not dense:
        monkeypatch.setattr(hadamard_mechanism, "_DENSE_INDICES", 0)
    statistics = oracle.aggregate(reports)
    np.testing.assert_array_equal(statistics.coefficients.to_dense(oracle.rows), expected)
    assert statistics.n_users == 20_000


def test_hm_refuses_indices_outside_its_rows() -> None:
    oracle = make_oracle("hm", epsilon=2.0, domain=1000)
    reports = oracle.randomize(np.arange(10), np.random.default_rng(0))
    bad = hadamard_mechanism.HadamardMechanismReports(reports.indices + np.uint64(oracle.rows), reports.words)
    with pytest.raises(ValueError, match=r"reports.indices must be in \[0, 1024\)"):
        oracle.aggregate(bad)


@pytest.mark.parametrize("coefficients", [1, 3])
@pytest.mark.parametrize("dense", [True, False])
def test_hm_grouped_statistics_are_each_groups_device_reports(
    coefficients: int, dense: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One bincount over (group, index) gives exactly each group's aggregate of the device reports
    drawn from the same per-user streams; users of group -1 are drawn but counted nowhere."""
    oracle = make_oracle("hm", epsilon=2.0, domain=1000, coefficients=coefficients)
    values = np.random.default_rng(5).integers(0, 1000, 9_000)
    groups = np.random.default_rng(6).integers(-1, 4, 9_000)
    randomness, users = KeyedRandomness(3), np.arange(100, 9_100)
    reports = oracle.randomize(values, randomness.for_users("hm", 0, users))
    if not dense:
        monkeypatch.setattr(hadamard_mechanism, "_DENSE_INDICES", 0)
    grouped = oracle.randomize_aggregate_groups(values, groups, 4, randomness.for_users("hm", 0, users))
    for group, statistics in enumerate(grouped):
        expected = oracle.aggregate(reports.take(np.flatnonzero(groups == group)))
        np.testing.assert_array_equal(
            statistics.coefficients.to_dense(oracle.rows), expected.coefficients.to_dense(oracle.rows)
        )
        assert statistics.n_users == expected.n_users == np.count_nonzero(groups == group)


@pytest.mark.parametrize("epsilon", [0.5, 4.0])
def test_hm1_reports_its_coefficient_flipped_with_the_randomised_response_probability(epsilon: float) -> None:
    """HM(1)'s one-draw randomised response: the sign is kept with ``p = e^ε / (e^ε + 1)``,
    whatever the index (within 5 binomial sd over 200,000 users, and per half of the indices)."""
    oracle = make_oracle("hm", epsilon=epsilon, domain=64)
    n = 200_000
    values = np.random.default_rng(1).integers(0, 64, n)
    for rng in (np.random.default_rng(2), KeyedRandomness(4).for_range("hm", 0, 12_345, n)):
        reports = oracle.randomize(values, rng)
        true = hadamard_parity(reports.indices[:, 0], values.astype(np.uint64))
        kept = reports.words.astype(bool) == true
        p = math.exp(epsilon) / (math.exp(epsilon) + 1)
        low = reports.indices[:, 0] < oracle.rows // 2
        for part in (np.ones(n, dtype=bool), low, ~low):
            share, count = kept[part].mean(), int(part.sum())
            assert abs(share - p) < 5 * math.sqrt(p * (1 - p) / count)


@pytest.mark.parametrize("bound", [1, 2, 16, 256, 257, 65_536, 65_537])
def test_stable_order_is_the_stable_argsort(bound: int) -> None:
    keys = np.random.default_rng(bound).integers(0, bound, 50_000)
    np.testing.assert_array_equal(stable_order(keys, bound), np.argsort(keys, kind="stable"))


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 8.0, 40.0])
@pytest.mark.parametrize("domain", [2, 1000, 1 << 20])
def test_hm1_per_user_draws_are_the_index_and_flip_of_uniform_below_and_random(epsilon: float, domain: int) -> None:
    """HM(1)'s integer routes for per-user randomness (the index by ``integers`` with an integer
    size, the flip by an integer threshold on ``random``'s word) draw exactly the numbers of the
    plain formula -- ``uniform_below`` then ``random() >= p`` -- and consume the same draws."""
    oracle = hadamard_mechanism.HadamardMechanism(epsilon, domain)
    values = np.random.default_rng(domain).integers(0, domain, 6000).astype(np.uint64)
    randomness = KeyedRandomness(11)
    for make in (lambda: randomness.for_users("hm1", 0, np.arange(50, 6050)),
                 lambda: randomness.for_range("hm1", 0, 3000, 6000)):
        fast, plain = make(), make()
        index, negative = oracle._one_coefficient(values, fast)
        plain_index = hadamard_mechanism.uniform_below(plain, (values.size,), oracle.rows)
        plain_negative = hadamard_parity(plain_index, values) ^ (plain.random(values.size) >= oracle.keep_probability)
        assert index.dtype == np.uint64
        np.testing.assert_array_equal(index, plain_index)
        np.testing.assert_array_equal(negative, plain_negative)
        np.testing.assert_array_equal(fast.words(1), plain.words(1))  # the next draw: the same calls were made


def test_hm1_flip_threshold_matches_the_float_comparison_at_its_edge() -> None:
    """``w >> 11 >= ceil(p 2^53)`` exactly when ``(w >> 11) 2^-53 >= p``, on both sides of the threshold."""
    for epsilon in (0.5, 3.0, 9.0):
        oracle = hadamard_mechanism.HadamardMechanism(epsilon, 8)
        threshold = oracle._flip_threshold
        for top in (threshold - 2, threshold - 1, threshold, threshold + 1):
            assert (top * 2.0**-53 >= oracle.keep_probability) == (top >= threshold)
            for low_bits in (0, 1, (1 << 11) - 1):  # the words behind it, compared unshifted
                word = np.uint64((top << 11) | low_bits)
                assert (word >= oracle._flip_word_threshold) == (top >= threshold)


def test_hm1_never_flips_when_the_keep_probability_rounds_to_one() -> None:
    """At ε = 40, ``p = e^ε / (e^ε + 1)`` is 1.0 in float64: no uniform reaches it, no sign is flipped."""
    oracle = hadamard_mechanism.HadamardMechanism(40.0, 8)
    assert oracle.keep_probability == 1.0 and oracle._flip_word_threshold is None
    values = np.arange(8, dtype=np.uint64).repeat(50)
    reports = oracle.randomize(values, UserRandom(np.uint64(3), np.arange(values.size)))
    np.testing.assert_array_equal(reports.words, hadamard_parity(reports.indices[:, 0], values))


@pytest.mark.parametrize("size", [1, 8, 1024])
def test_a_histogram_of_an_owned_dense_vector_is_the_one_from_dense(size: int) -> None:
    """HM's grouped statistics keep their dense sign sums (``Histogram.of_owned_dense``): every
    reading -- keys, counts, total, lookups, sums, dense forms of any fitting size -- is
    ``Histogram.from_dense``'s, and the dense form is a copy (writing it changes nothing)."""
    rng = np.random.default_rng(size)
    for dense in (rng.integers(-3, 4, size), np.zeros(size, dtype=np.int64), rng.integers(0, 2, size) * 5):
        owned, plain = Histogram.of_owned_dense(dense.copy()), Histogram.from_dense(dense)
        for read in (lambda h: h.keys, lambda h: h.counts, lambda h: h.total, lambda h: h.sum_of_squares(),
                     lambda h: h.lookup(np.arange(size + 3, dtype=np.uint64)), lambda h: (h + plain).keys,
                     lambda h: (h + plain).counts, lambda h: h.to_dense(size), lambda h: h.to_dense(size + 5)):
            np.testing.assert_array_equal(read(owned), read(plain))
        assert owned.keys.dtype == np.uint64 and owned.counts.dtype == np.int64
        owned.to_dense(size)[:] += 1
        np.testing.assert_array_equal(owned.to_dense(size), dense)
        if plain.keys.size:
            with pytest.raises(ValueError, match="does not fit"):
                owned.to_dense(int(plain.keys[-1]))


@pytest.mark.parametrize("coefficients", [1, 2])
@pytest.mark.parametrize("sketch_rows", [1, 16, 5])
def test_sketch_shard_statistics_are_its_one_group_statistics(coefficients: int, sketch_rows: int) -> None:
    """A sketch's ``randomize_aggregate`` with per-user randomness (rows as the inner groups, no
    group array built) gives exactly ``randomize_aggregate_groups`` with every user in group 0."""
    inner = hadamard_mechanism.HadamardMechanism(4.0, 64, coefficients)
    sketch = SketchOracle(inner, 5000, sketch_rows, 64, seed=3)
    values = np.random.default_rng(sketch_rows).integers(0, 5000, 3000).astype(np.uint64)
    randomness = KeyedRandomness(5)
    for make in (lambda n: randomness.for_users("sketch", 1, np.arange(7, 7 + n)),
                 lambda n: randomness.for_range("sketch", 1, 100, n)):
        for users in (values, values[:0]):
            fast = sketch.randomize_aggregate(users, make(users.size))
            plain = sketch.randomize_aggregate_groups(users, np.zeros(users.size, dtype=np.int64), 1, make(users.size))[0]
            for got, expected in zip(sketch.to_flat(fast), sketch.to_flat(plain), strict=True):
                np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("width", [64, 1000])
def test_sketch_supports_from_one_transform_of_all_rows_are_each_rows_support(signed: bool, width: int) -> None:
    """Decoding every row of an HM sketch in one transform (``dense_supports``) gives each row's own
    ``support`` of the candidates' symbols, the same integers (also past the float-exact limit of
    the products, where the transform takes the butterflies)."""
    inner = hadamard_mechanism.HadamardMechanism(2.0, width * (1 + signed))
    sketch = SketchOracle(inner, 3000, 8, width, estimator="mean", signed=signed, seed=1)
    rng = np.random.default_rng(width)
    statistics = [sketch.randomize_aggregate(rng.integers(0, 3000, 4000).astype(np.uint64), rng) for _ in range(2)]
    huge = hadamard_mechanism.HadamardMechanismStatistics(Histogram.from_dense(np.full(inner.rows, 1 << 50)), 1)
    statistics.append(type(statistics[0])((huge,) + statistics[0].rows[1:]))
    candidates = np.arange(3000, dtype=np.uint64)
    symbols = sketch._candidate_symbols(candidates)
    for stats, support in zip(statistics, sketch.supports(statistics, candidates), strict=True):
        for row, row_stats in enumerate(stats.rows):
            for half in range(1 + signed):
                expected = inner.support(row_stats, symbols[row, half].astype(np.uint64)).counts
                np.testing.assert_array_equal(support.counts[row, half], expected)


@pytest.mark.parametrize("signed", [False, True])
def test_a_hadamard_sketch_decodes_a_few_candidates_from_one_transform_of_every_row(signed: bool) -> None:
    """Few candidates (not whole rows): the support read from ``dense_supports`` (every row at once) is
    each row's own inner support of the candidates' symbols (and mirrors, signed), the same integers."""
    width = 1024
    inner = hadamard_mechanism.HadamardMechanism(2.0, width * (1 + signed))
    oracle = SketchOracle(inner, 5000, rows=8, width=width, signed=signed, seed=4)
    values = np.random.default_rng(8).integers(0, 50, 4000).astype(np.uint64)
    statistics = oracle.randomize_aggregate(values, KeyedRandomness(3).for_range("test", 0, 0, values.size))
    candidates = np.array([0, 1, 2, 3, 49, 777, 4999], dtype=np.uint64)
    support = oracle.support(statistics, candidates)
    symbols = oracle._candidate_symbols(candidates)
    for row, row_statistics in enumerate(statistics.rows):
        for half, half_symbols in enumerate(symbols[row]):
            expected = oracle.inner.support(row_statistics, half_symbols.astype(np.uint64)).counts
            np.testing.assert_array_equal(support.counts[row, half], expected)
    assert support.counts.dtype == np.int64 and np.abs(support.counts).sum() > 0


@pytest.mark.parametrize("signed", [False, True])
def test_a_hadamard_sketch_estimates_every_row_at_once_as_row_by_row(signed: bool) -> None:
    """HM's estimate divides each count by ``t bias`` alone, so a sketch of HM rows estimates all its
    rows in one division: the same floats as each row's inner estimate with its own report count."""
    width = 256
    inner = hadamard_mechanism.HadamardMechanism(3.0, width * (1 + signed))
    oracle = SketchOracle(inner, 3000, rows=6, width=width, signed=signed, seed=2)
    values = np.random.default_rng(4).integers(0, 40, 3000).astype(np.uint64)
    statistics = oracle.randomize_aggregate(values, KeyedRandomness(6).for_range("test", 0, 0, values.size))
    support = oracle.support(statistics, np.arange(60, dtype=np.uint64))
    rows = np.array([[inner.estimate_support(Support(counts, support.n_users[row]))
                      for counts in halves] for row, halves in enumerate(support.counts)])
    np.testing.assert_array_equal(oracle.estimate_support(support), oracle._combine(rows, support.n_users))
