"""Every oracle's law (fedhh.oracles.laws) has the per-user path's exact per-cell moments.

A cell of a shard's statistics (or support counts) is a sum over its users of one user's
contribution, independent across users, so its mean and variance are sums over the values of
``count x`` one user's mean and variance.  Those are written out below from each oracle's
mechanism (what ``randomize`` draws: :func:`user_moments`), and checked once against the
per-user path itself (``test_the_moments_are_the_per_user_paths``); the law's draws then match
them cell by cell within 5 standard errors (fixed seeds), and the draws of a law whose ε is
off (its keep probability about 5 % high) do not.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedhh.oracles import make_oracle
from fedhh.oracles.base import FrequencyOracle
from fedhh.oracles.count_sketch_hadamard import CountSketchHadamard
from fedhh.oracles.direct import DirectEncoding
from fedhh.oracles.fast_local_hashing import FastLocalHashing
from fedhh.oracles.hadamard_mechanism import HadamardMechanism
from fedhh.oracles.hadamard_response import HadamardResponse
from fedhh.oracles.hashing import hash_expanded, mix_keys
from fedhh.oracles.hashtogram import Hashtogram
from fedhh.oracles.laws import has_derived_law, statistics_law, support_law
from fedhh.oracles.local_hashing import LocalHashing
from fedhh.oracles.sketches import SketchOracle
from fedhh.oracles.unary import UnaryEncoding
from fedhh.oracles.walsh_hadamard import hadamard_signs

from .test_law_samplers import moments_agree

VALUES = np.array([0, 1, 2, 3, 5, 9], dtype=np.uint64)
COUNTS = np.array([300, 200, 100, 50, 20, 5])
CANDIDATES = np.array([0, 1, 3, 4, 9, 9, 12], dtype=np.uint64)  # one repeated, some held by nobody
REPLICATIONS = 2000

STATISTICS = [
    ("grr", 16, {}), ("oue", 16, {}), ("sue", 16, {}), ("flh", 16, {"hash_functions": 8}),
    ("count-sketch-hadamard", 16, {"rows": 3, "width": 16}), ("hashtogram", 16, {"rows": 2, "width": 16}),
    ("hashtogram", 64, {"rows": 3, "width": 8}), ("hm", 16, {}), ("hm", 16, {"coefficients": 3}),
    ("hr", 16, {}), ("cms", 64, {"rows": 4, "width": 8}), ("hcms", 64, {"rows": 4, "width": 8}),
    ("count-mean", 64, {"rows": 3, "width": 8, "inner": "grr"}),
    ("count-sketch", 64, {"rows": 3, "width": 4, "inner": "oue"}),
]
SUPPORTS = [
    ("olh", 1 << 64, {}), ("blh", 1 << 40, {}), ("grr", 1 << 12, {}), ("oue", 64, {}),
    ("cms", 1 << 40, {"rows": 4, "width": 64}), ("count-sketch", 1 << 40, {"rows": 3, "width": 8, "inner": "olh"}),
]


def user_moments(oracle: FrequencyOracle, value: int) -> tuple[np.ndarray, np.ndarray]:
    """One user's mean and mean square contribution to every flat cell (then the reporters)."""
    if isinstance(oracle, SketchOracle):
        rows = oracle.rows
        first, second, reporters = [], [], np.full(rows, 1.0 / rows)
        for row in range(rows):
            symbol = int(oracle.symbols(np.array([row]), np.array([value], dtype=np.uint64))[0])
            inner_first, inner_second = user_moments(oracle.inner, symbol)
            first.append(inner_first[:-1] / rows)
            second.append(inner_second[:-1] / rows)
        return np.concatenate([*first, reporters]), np.concatenate([*second, reporters])
    if isinstance(oracle, (DirectEncoding, UnaryEncoding)):
        share = np.where(np.arange(oracle.domain) == value, oracle.p, oracle.q)
        return np.append(share, 1.0), np.append(share, 1.0)
    if isinstance(oracle, FastLocalHashing):
        functions, g = oracle.hash_functions, oracle.g
        own = hash_expanded(oracle.multipliers, oracle.offsets, mix_keys(np.array([value], dtype=np.uint64)), g)
        share = np.full((functions, g), (1 - oracle.p) / (g - 1))
        share[np.arange(functions), own.astype(np.intp)] = oracle.p
        return np.append(share.ravel() / functions, 1.0), np.append(share.ravel() / functions, 1.0)
    if isinstance(oracle, HadamardResponse):
        outputs, size = oracle.outputs, oracle.block_size
        block, position = (int(x[0]) for x in oracle._locate(np.array([value], dtype=np.uint64)))
        anywhere = 2 * oracle.blocks / oracle.normaliser
        share = np.full(outputs, anywhere / outputs)
        offsets = np.arange(size, dtype=np.uint64)
        positive = hadamard_signs(offsets, np.uint64(position)) > 0
        share[block * size : (block + 1) * size] += (1 - anywhere) * positive / (size / 2)
        return np.append(share, 1.0), np.append(share, 1.0)
    if isinstance(oracle, (CountSketchHadamard, Hashtogram)):
        blocks = oracle.hashes if isinstance(oracle, CountSketchHadamard) else oracle.rows
        width, cells = oracle.width, blocks * oracle.width
        index = np.arange(blocks)
        if isinstance(oracle, CountSketchHadamard):
            column, negative = oracle.cells(index, np.uint64(value))
        else:
            column, negative = oracle.buckets(index, np.uint64(value)), np.zeros(blocks, dtype=bool)
        sign = np.where(negative, -1.0, 1.0)[:, None]
        rows = np.arange(width, dtype=np.uint64)[None, :]
        first = oracle.bias * sign * hadamard_signs(rows, column[:, None].astype(np.uint64)) / cells
        reporters = np.full(blocks, 1.0 / blocks)
        return np.append(first.ravel(), reporters), np.append(np.full(cells, 1.0 / cells), reporters)
    if isinstance(oracle, HadamardMechanism):
        t, rows = oracle.coefficients, oracle.rows
        signs = hadamard_signs(np.arange(rows, dtype=np.uint64), np.uint64(value))
        first = t * oracle.bias * signs / rows
        second = np.full(rows, t / rows + t * (t - 1) * oracle.pair_correlation / rows**2)
        return np.append(first, 1.0), np.append(second, 1.0)
    raise TypeError(f"no per-user moments written for {oracle!r}")


def user_support_moments(oracle: FrequencyOracle, value: int, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One user's mean and mean square contribution to every support count (then the reporters)."""
    if isinstance(oracle, SketchOracle):
        rows = oracle.rows
        read = oracle._candidate_symbols(candidates)  # (rows, halves, C)
        first = np.empty(read.shape)
        for row in range(rows):
            symbol = int(oracle.symbols(np.array([row]), np.array([value], dtype=np.uint64))[0])
            inner, _ = user_support_moments(oracle.inner, symbol, read[row].ravel().astype(np.uint64))
            first[row] = inner[:-1].reshape(read.shape[1:]) / rows
        reporters = np.full(rows, 1.0 / rows)
        return np.append(first.ravel(), reporters), np.append(first.ravel(), reporters)
    if isinstance(oracle, (LocalHashing, DirectEncoding, UnaryEncoding)):
        share = np.where(candidates == np.uint64(value), oracle.p, oracle.q)
        return np.append(share, 1.0), np.append(share, 1.0)
    raise TypeError(f"no per-user support moments written for {oracle!r}")


def cell_moments(per_user: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of every cell of the sum over users (``COUNTS`` of each value)."""
    mean = sum(count * first for count, (first, _) in zip(COUNTS, per_user))
    variance = sum(count * (second - first**2) for count, (first, second) in zip(COUNTS, per_user))
    return mean, np.maximum(variance, 0.0)


def flat_draws(oracle: FrequencyOracle, draw) -> np.ndarray:  # noqa: ANN001
    return np.array([np.concatenate(oracle.to_flat(draw())) for _ in range(REPLICATIONS)])


def support_draws(draw) -> np.ndarray:  # noqa: ANN001
    return np.array([np.concatenate([support.counts.ravel(), np.atleast_1d(support.n_users)])
                     for support in (draw() for _ in range(REPLICATIONS))])


@pytest.mark.parametrize(("name", "domain", "options"), STATISTICS, ids=[f"{n}-{d}-{o}" for n, d, o in STATISTICS])
def test_statistics_law_has_the_exact_cell_moments(name: str, domain: int, options: dict) -> None:
    oracle = make_oracle(name, epsilon=2.0, domain=domain, **options)
    assert has_derived_law(type(oracle))
    rng = np.random.default_rng(17)
    draws = flat_draws(oracle, lambda: statistics_law(oracle, VALUES, COUNTS, rng))
    assert moments_agree(draws, *cell_moments([user_moments(oracle, int(v)) for v in VALUES]))


@pytest.mark.parametrize(("name", "domain", "options"), SUPPORTS, ids=[f"{n}-{d}-{o}" for n, d, o in SUPPORTS])
def test_support_law_has_the_exact_moments(name: str, domain: int, options: dict) -> None:
    oracle = make_oracle(name, epsilon=2.0, domain=domain, **options)
    rng = np.random.default_rng(23)
    draws = support_draws(lambda: support_law(oracle, VALUES, COUNTS, CANDIDATES, rng))
    assert moments_agree(draws, *cell_moments([user_support_moments(oracle, int(v), CANDIDATES) for v in VALUES]))
    if not oracle.support_shape():
        repeated = np.flatnonzero(CANDIDATES == 9)
        assert np.all(draws[:, repeated[0]] == draws[:, repeated[1]])  # one count for a candidate listed twice


@pytest.mark.parametrize("epsilon", [0.5, 3.0])
def test_hadamard_response_blocks(epsilon: float) -> None:
    """One block below ε = 1, several above (the positive sets then differ per block)."""
    oracle = make_oracle("hr", epsilon=epsilon, domain=40)
    assert (oracle.blocks > 1) == (epsilon > 1)
    rng = np.random.default_rng(29)
    draws = flat_draws(oracle, lambda: statistics_law(oracle, VALUES, COUNTS, rng))
    assert moments_agree(draws, *cell_moments([user_moments(oracle, int(v)) for v in VALUES]))


def five_percent_off(name: str, domain: int, options: dict) -> FrequencyOracle:
    """The oracle at an ε whose keep probability is about 5 % above the one at ε = 2 (local
    hashing keeps its number of buckets)."""
    right = make_oracle(name, epsilon=2.0, domain=domain, **options)
    keep = getattr(right, "keep_probability", right.p if hasattr(right, "p") else None)
    for epsilon in np.linspace(2.0, 3.0, 2001):
        if isinstance(right, LocalHashing):
            wrong: FrequencyOracle = LocalHashing(float(epsilon), domain, right.g)
        else:
            wrong = make_oracle(name, epsilon=float(epsilon), domain=domain, **options)
        if getattr(wrong, "keep_probability", getattr(wrong, "p", 0.0)) >= 1.05 * keep:
            return wrong
    raise AssertionError("no ε found")


@pytest.mark.parametrize(("name", "domain", "options", "support"), [
    ("olh", 1 << 64, {}, True), ("grr", 16, {}, False), ("count-sketch-hadamard", 16, {"rows": 3, "width": 16}, False),
])
def test_a_law_five_percent_off_fails_these_tests(name: str, domain: int, options: dict, support: bool) -> None:
    """The checks above see a law whose keep probability is 5 % too high."""
    oracle = make_oracle(name, epsilon=2.0, domain=domain, **options)
    off = five_percent_off(name, domain, options)
    rng = np.random.default_rng(31)
    if support:
        draws = support_draws(lambda: support_law(off, VALUES, COUNTS, CANDIDATES, rng))
        truth = cell_moments([user_support_moments(oracle, int(v), CANDIDATES) for v in VALUES])
    else:
        draws = flat_draws(oracle, lambda: statistics_law(off, VALUES, COUNTS, rng))
        truth = cell_moments([user_moments(oracle, int(v)) for v in VALUES])
    assert not moments_agree(draws, *truth)


@pytest.mark.parametrize(("name", "domain", "options"), [STATISTICS[3], STATISTICS[4], STATISTICS[8], STATISTICS[9],
                                                         STATISTICS[13]])
def test_the_moments_are_the_per_user_paths(name: str, domain: int, options: dict) -> None:
    """The written-out moments are those of ``randomize_aggregate`` drawing every user."""
    oracle = make_oracle(name, epsilon=2.0, domain=domain, **options)
    users = np.repeat(VALUES, COUNTS)
    rng = np.random.default_rng(37)
    draws = flat_draws(oracle, lambda: oracle.randomize_aggregate(users, rng))
    assert moments_agree(draws, *cell_moments([user_moments(oracle, int(v)) for v in VALUES]))


def test_oracles_without_a_derived_law_draw_reports() -> None:
    """OLH's statistics are its reports: drawn per reporter from the counts, as many as the counts."""
    oracle = make_oracle("olh", epsilon=2.0, domain=1 << 64)
    statistics = statistics_law(oracle, VALUES, COUNTS, np.random.default_rng(1))
    assert len(statistics) == int(COUNTS.sum())
    assert math.isclose(np.mean(statistics.buckets < oracle.g), 1.0)
