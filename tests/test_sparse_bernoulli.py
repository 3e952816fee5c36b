"""The sparse Bernoulli grid: the law of independent Bernoulli(q) bits (per column, per user,
between neighbours), exactly the same bits for any split of the users into ranges, one call on
the range's randomness, and refusals naming the field."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fedhh.kernels import sparse_bernoulli
from fedhh.kernels.randomness import GRID_USERS, KeyedRandomness, RangeRandom, derive_key
from fedhh.kernels.sparse_bernoulli import grid_set_bits

Z = 5.0  # standard errors allowed in every statistical comparison
Q = 214_748_365 / 2**32  # a realised 32-bit probability near 0.05


def dense_grid(rng: RangeRandom, width: int, probability: float) -> np.ndarray:
    """The sampler's set bits as a dense ``(n_users, width)`` bool matrix."""
    grid = np.zeros((rng.n_users, width), dtype=bool)
    for first, positions in grid_set_bits(rng, width, probability):
        assert np.all(np.diff(positions) > 0)  # ascending, each bit once
        users, columns = np.divmod(positions, width)
        grid[first + users, columns] = True
    return grid


def test_the_grid_has_the_law_of_independent_bernoulli_bits() -> None:
    """20,000 users x 64 bits at q = 0.05: every column's count within 5 sd of Binomial(n, q); the
    set bits per user chi-square against Binomial(64, q) with the mean and variance within 5 standard
    errors; neighbouring bits (a user's last and the next user's first included) and bits 32 apart
    set together with probability q^2."""
    n, width = 20_000, 64
    grid = dense_grid(KeyedRandomness(1).for_range("grid", 1, 1_000, n), width, Q)
    column_counts = grid.sum(axis=0)
    assert np.abs(column_counts - n * Q).max() <= Z * math.sqrt(n * Q * (1 - Q))
    per_user = grid.sum(axis=1)
    law = stats.binom(width, Q)
    mean, variance = width * Q, width * Q * (1 - Q)
    assert abs(per_user.mean() - mean) <= Z * math.sqrt(variance / n)
    excess_kurtosis = (1 - 6 * Q * (1 - Q)) / variance
    variance_se = variance * math.sqrt(2 / (n - 1) + excess_kurtosis / n)
    assert abs(per_user.var(ddof=1) - variance) <= Z * variance_se
    edges = np.array([0, 1, 2, 3, 4, 5, 6, width + 1])
    observed = np.histogram(per_user, bins=edges)[0]
    expected = np.diff(law.cdf(edges - 1)) * n
    assert stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > 1e-6
    line = grid.ravel()
    for lag in (1, 32):
        pairs = line.size - lag
        together = int(np.count_nonzero(line[:-lag] & line[lag:]))
        assert abs(together - pairs * Q**2) <= Z * math.sqrt(pairs * Q**2 * (1 + 2 * Q))


def test_a_users_bits_do_not_depend_on_the_range_that_holds_it() -> None:
    """One range of 2.5 blocks, starting inside a block, against pieces cut inside and on block
    boundaries."""
    source, width, first = KeyedRandomness(4), 48, GRID_USERS - 300
    n = 2 * GRID_USERS + 500
    whole = dense_grid(source.for_range("g", 2, first, n), width, Q)
    cuts = [0, 1, 299, 300, 301, GRID_USERS + 300, GRID_USERS + 777, n]
    pieces = [dense_grid(source.for_range("g", 2, first + a, b - a), width, Q)
              for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    np.testing.assert_array_equal(np.concatenate(pieces), whole)
    assert whole.sum() > 0.9 * n * width * Q  # not trivially empty


def test_the_walk_gives_the_same_bits_however_many_words_it_draws_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A block whose first draw falls short of its end draws again from the same stream: the
    bits are those of one long draw."""
    source, width, n = KeyedRandomness(8), 200, GRID_USERS + 10
    whole = dense_grid(source.for_range("w", 1, 0, n), width, Q)
    inside = dense_grid(source.for_range("w", 1, 150, n - 150), width, Q)  # a range starting inside a block
    monkeypatch.setattr(sparse_bernoulli, "MAX_DRAW", 7)
    np.testing.assert_array_equal(dense_grid(source.for_range("w", 1, 0, n), width, Q), whole)
    np.testing.assert_array_equal(dense_grid(source.for_range("w", 1, 150, n - 150), width, Q), inside)
    np.testing.assert_array_equal(inside, whole[150:])


def test_the_sampler_takes_one_call_of_the_range() -> None:
    key = derive_key(3, "calls", 1)
    sampled, fresh = RangeRandom(key, 10, 50), RangeRandom(key, 10, 50)
    grid_set_bits(sampled, 32, Q)  # consumed now, read or not
    fresh.words(1)
    np.testing.assert_array_equal(sampled.words(3), fresh.words(3))
    other = RangeRandom(derive_key(4, "calls", 1), 10, 50)
    assert not np.array_equal(dense_grid(RangeRandom(key, 10, 50), 32, Q), dense_grid(other, 32, Q))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ((0, Q), "width must be an integer >= 1"),
        ((8, 0.0), r"probability must be in \[2\^-32, 1\)"),
        ((8, 2.0**-33), r"probability must be in \[2\^-32, 1\)"),
        ((8, 1.0), r"probability must be in \[2\^-32, 1\)"),
    ],
)
def test_bad_arguments_name_the_field(arguments: tuple[int, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        grid_set_bits(KeyedRandomness(1).for_range("bad", 1, 0, 10), *arguments)


def test_only_keyed_range_randomness_is_accepted() -> None:
    with pytest.raises(TypeError, match="rng must be a RangeRandom, got Generator"):
        grid_set_bits(np.random.default_rng(0), 8, Q)  # type: ignore[arg-type]


def test_the_walk_is_the_running_sum_of_the_block_streams_gaps_exactly() -> None:
    """The positions, to the bit, are the module docstring's formula on one long draw of each
    block's stream: ``cumsum(floor(log(1 - k 2^-53) / log(1 - q)) + 1) - 1`` (scratch reuse, the
    pairwise running sum and the draws cut in pieces change nothing)."""
    key, width, n = derive_key(11, "formula", 2), 300, 2 * GRID_USERS + 77
    for first in (0, 1000):  # a range starting inside a block replays the block from its start
        rng = RangeRandom(key, first, n - first)
        call_key = RangeRandom(key, first, n - first).next_call_key()  # the walk's call: the range's first
        got = [(start, positions.copy()) for start, positions in grid_set_bits(rng, width, Q)]
        expected = []
        for block in range(-(-n // GRID_USERS)):
            length = min(n - block * GRID_USERS, GRID_USERS) * width
            uniforms = sparse_bernoulli.block_stream(call_key, block).random(int(length * Q * 1.5) + 1000)
            line = np.cumsum((np.log(1.0 - uniforms) / math.log1p(-Q) + 1.0).astype(np.int64)) - 1
            assert line[-1] >= length  # the draw covers the block
            line = line[line < length]
            skipped = max(first - block * GRID_USERS, 0) * width
            expected.append((max(block * GRID_USERS - first, 0), line[line >= skipped] - skipped))
        for start, positions in expected:
            pieces = [p for s, p in got if s == start]
            np.testing.assert_array_equal(np.concatenate(pieces), positions)
        assert sorted({s for s, _ in got}) == [s for s, _ in expected]


@pytest.mark.parametrize("size", [*range(1, 70), 4097, sparse_bernoulli.MAX_DRAW])
def test_the_running_sum_is_cumsum_to_the_bit(size: int) -> None:
    steps = np.random.default_rng(size).integers(-(2**40), 2**40, size)
    out, scratch = np.full(size, -1, dtype=np.int64), np.empty(size // 2 + 1, dtype=np.int64)
    assert sparse_bernoulli.running_sum(steps, out, scratch) is out
    np.testing.assert_array_equal(out, np.cumsum(steps))


def test_a_batch_of_ranges_has_each_ranges_own_bits() -> None:
    """``RangeRandom.over_ranges``: the grid of several ranges (one inside a block, one across a
    block boundary, an empty one) is their grids one under the other, to the bit."""
    key, width = derive_key(12, "ranges", 3), 40
    ranges = ((10, 300), (GRID_USERS - 50, 120), (3 * GRID_USERS, 0), (5 * GRID_USERS + 7, 9))
    batch = dense_grid(RangeRandom.over_ranges(key, ranges), width, Q)
    alone = np.vstack([dense_grid(RangeRandom(key, first, n), width, Q) for first, n in ranges])
    np.testing.assert_array_equal(batch, alone)
    assert batch.sum() > 0.5 * batch.size * Q


@pytest.mark.parametrize("threshold", [
    math.ceil(2**32 / (math.exp(4.0) + 1)),  # OUE's q' at ε = 4 (SFP's and TreeHist's sketches)
    math.ceil(2**32 / (math.exp(2.0) + 1)),
    math.ceil(2**32 / (math.exp(6.0) + 1)),
    214_748_365,  # Q
])
def test_every_tail_of_the_computed_gap_is_within_2_to_the_minus_52(threshold: int) -> None:
    """The module docstring's bound, exhaustively: at every ``k`` with ``(1 - q)^k >= 2^-53``, the
    grid points ``U = j 2^-53`` whose computed step ``floor(log U / log(1 - q) + 1)`` is at least
    ``k + 1`` are ``j <= J'_k``, and ``J'_k`` is within one of ``J_k = floor((1 - q)^k 2^53)``
    (exact, in integers): every tail ``P(G >= k)`` within ``2^-52`` of ``(1 - q)^k``."""
    q, keep = threshold / 2**32, 2**32 - threshold
    exact, power, k = [], 1, 0
    while True:
        k, power = k + 1, power * keep
        grid_points = (power << 53) >> (32 * k)  # floor((1 - q)^k 2^53), in integers
        if grid_points < 1:
            break
        exact.append(grid_points)
    bounds = np.array(exact, dtype=np.int64)
    lengths = np.arange(1, bounds.size + 1)
    window = np.arange(-8, 9)
    points = np.clip(bounds[:, None] + window, 1, 2**53)
    draws = ((2**53 - points) * 2.0**-53).ravel()  # the walk's k 2^-53, exactly
    steps = sparse_bernoulli.steps_from_uniforms(draws, math.log1p(-q), np.empty(draws.size, dtype=np.int64))
    at_least = steps.reshape(points.shape) >= lengths[:, None] + 1
    assert np.all(np.diff(at_least.astype(np.int8), axis=1) <= 0)  # the step falls as U grows
    assert np.all(at_least[:, 0] | (points[:, 0] == 1)) and not at_least[:, -1].any()  # the edge is inside the window
    computed = points[np.arange(bounds.size), at_least.sum(axis=1) - 1]  # J'_k: the last j with a step >= k + 1
    computed[~at_least.any(axis=1)] = 0
    assert np.abs(computed - bounds).max() <= 1
    assert bounds.size > 250


def test_leading_uniforms_and_bits_do_not_depend_on_the_range_that_holds_a_user() -> None:
    """``grid_pieces(..., leading=True)``: each user's leading 32-bit uniform (one per user, on its
    block's first piece) and its bits are the same in one range as in pieces cut inside and on
    block boundaries; the uniforms are uniform (mean within 5 standard errors)."""
    source, width, first = KeyedRandomness(6), 30, GRID_USERS - 200
    n = 2 * GRID_USERS + 300

    def grid(a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        bits, uniforms = np.zeros((b - a, width), dtype=bool), np.full(b - a, -1, dtype=np.int64)
        for start, positions, _, leading in sparse_bernoulli.grid_pieces(source.for_range("lead", 1, first + a, b - a),
                                                                         width, Q, leading=True):
            bits.reshape(-1)[start * width + positions] = True
            if leading is not None:
                assert np.all(uniforms[start : start + leading.size] == -1)  # once a user
                uniforms[start : start + leading.size] = leading
        return bits, uniforms

    whole_bits, whole_uniforms = grid(0, n)
    cuts = [0, 1, 199, 200, 201, GRID_USERS + 200, GRID_USERS + 900, n]
    pieces = [grid(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    np.testing.assert_array_equal(np.concatenate([bits for bits, _ in pieces]), whole_bits)
    np.testing.assert_array_equal(np.concatenate([uniforms for _, uniforms in pieces]), whole_uniforms)
    assert whole_uniforms.min() >= 0
    assert abs(whole_uniforms.mean() / 2**32 - 0.5) <= Z * math.sqrt(1 / 12 / n)
    assert whole_bits.sum() > 0.9 * n * width * Q
