"""Frequency oracles: exact ε-LDP, unbiasedness and variance against theory,
federated decoding, large domains, shard invariance and input validation.

Statistical tolerances: a Monte Carlo mean of ``R`` independent repetitions
is compared with theory at 5 standard errors, the standard error being the
theoretical one (means) or the empirical one of the repetitions (MSE).  With
fixed seeds every test is deterministic; 5 standard errors leave a false
alarm probability below 1e-6 per comparison should the seeds change.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from fedhh.errors import InputError
from fedhh.kernels.randomness import GRID_USERS, KeyedRandomness, UserRandom, derive_key
from fedhh.oracles import Histogram, hadamard_mechanism, hadamard_response, key_items, key_rows, make_oracle
from fedhh.oracles.base import FrequencyOracle
from fedhh.oracles.direct import DirectEncoding, DirectReports
from fedhh.oracles.fast_local_hashing import FastLocalHashing, FastLocalHashReports
from fedhh.oracles.hadamard_mechanism import HadamardMechanism, HadamardMechanismReports
from fedhh.oracles.hadamard_response import HadamardResponse, HadamardResponseReports
from fedhh.oracles.hashing import count_supports, hash_keys, local_hash
from fedhh.oracles.local_hashing import LocalHashing, LocalHashReports
from fedhh.oracles.registry import ORACLE_NAMES
from fedhh.oracles.unary import SPARSE_MAX_Q, UnaryEncoding, UnaryReports
from fedhh.oracles.walsh_hadamard import fwht, hadamard_signs, signed_sums

Z = 5.0  # standard errors allowed in every statistical comparison


# ---------------------------------------------------------------- helpers
def output_space(oracle: FrequencyOracle) -> object:
    """Every report the oracle can emit (for OLH/BLH: all buckets of 64 fixed seeds)."""
    if isinstance(oracle, DirectEncoding):
        return DirectReports(np.arange(oracle.domain))
    if isinstance(oracle, UnaryEncoding):
        words = np.arange(1 << oracle.domain)[:, None] >> np.arange(oracle.domain)
        return UnaryReports(np.packbits((words & 1).astype(bool), axis=1))
    if isinstance(oracle, FastLocalHashing):
        functions, buckets = np.divmod(np.arange(oracle.hash_functions * oracle.g), oracle.g)
        return FastLocalHashReports(functions, buckets)
    if isinstance(oracle, LocalHashing):
        seeds = np.random.default_rng(0).integers(0, 2**63, 64, dtype=np.uint64)
        return LocalHashReports(np.repeat(seeds, oracle.g), np.tile(np.arange(oracle.g), 64))
    if isinstance(oracle, HadamardResponse):
        return HadamardResponseReports(np.arange(oracle.outputs))
    if isinstance(oracle, HadamardMechanism):
        t, rows = oracle.coefficients, oracle.rows
        tuples = np.stack(np.meshgrid(*[np.arange(rows)] * t, indexing="ij"), axis=-1).reshape(-1, t)
        words = 1 << t
        return HadamardMechanismReports(np.repeat(tuples, words, axis=0), np.tile(np.arange(words), len(tuples)))
    raise AssertionError(f"no output space for {oracle!r}")


def report_matrix(oracle: FrequencyOracle, space: object) -> np.ndarray:
    """``P[v, r]`` = probability of report ``r`` given value ``v``, for every value."""
    return np.stack([oracle.report_probabilities(v, space) for v in range(oracle.domain)])


def assert_reports_equal(left: object, right: object) -> None:
    assert type(left) is type(right)
    for field in dataclasses.fields(left):
        a, b = getattr(left, field.name), getattr(right, field.name)
        if dataclasses.is_dataclass(a):
            assert_reports_equal(a, b)
        else:
            np.testing.assert_array_equal(a, b)


def concatenate(reports: list[object]) -> object:
    first = reports[0]
    fields = {}
    for field in dataclasses.fields(first):
        parts = [getattr(r, field.name) for r in reports]
        fields[field.name] = concatenate(parts) if dataclasses.is_dataclass(parts[0]) else np.concatenate(parts)
    return type(first)(**fields)


def zipf_values(domain: int, users: int, exponent: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    weights = np.arange(1, domain + 1, dtype=float) ** -exponent
    counts = np.random.default_rng(seed).multinomial(users, weights / weights.sum())
    return np.repeat(np.arange(domain, dtype=np.uint64), counts), counts


SMALL_DOMAIN_ORACLES = [
    ("grr", {}, 1.0),
    ("grr", {}, 3.0),
    ("sue", {}, 1.0),
    ("oue", {}, 2.0),
    ("blh", {}, 1.0),
    ("olh", {}, 3.0),
    ("flh", {"hash_functions": 7}, 2.0),
    ("hr", {}, 0.8),
    ("hr", {}, 3.0),
    ("hm", {}, 1.5),
    ("hm", {"coefficients": 2}, 2.5),
]


# ---------------------------------------------------------------- privacy
@pytest.mark.parametrize(("name", "options", "epsilon"), SMALL_DOMAIN_ORACLES)
def test_worst_case_ratio_is_exactly_e_to_the_epsilon(name: str, options: dict, epsilon: float) -> None:
    """Enumerate every report for every input of a 5-value domain: the largest
    ratio P[r | v] / P[r | v'] is e^ε, attained (all these mechanisms are tight)."""
    oracle = make_oracle(name, epsilon=epsilon, domain=5 if name not in ("sue", "oue") else 4, **options)
    space = output_space(oracle)
    probabilities = report_matrix(oracle, space)
    assert np.all(probabilities > 0)
    worst = float((probabilities.max(axis=0) / probabilities.min(axis=0)).max())
    assert worst <= math.exp(epsilon) * (1 + 1e-12)
    if isinstance(oracle, UnaryEncoding):  # tight at its realised 32-bit p' <= p and q' >= q, a hair below e^ε
        assert worst == pytest.approx(oracle.p * (1 - oracle.q) / (oracle.q * (1 - oracle.p)), rel=1e-12)
        assert worst >= math.exp(epsilon) * (1 - 1e-8)
    else:
        assert worst >= math.exp(epsilon) * (1 - 1e-9)
    totals = probabilities.sum(axis=1)
    if isinstance(oracle, LocalHashing) and not isinstance(oracle, FastLocalHashing):
        totals = totals * 2.0**64 / 64  # each enumerated seed has probability 2**-64
    np.testing.assert_allclose(totals, 1.0, rtol=1e-12)


ENUMERABLE = [case for case in SMALL_DOMAIN_ORACLES if case[0] not in ("blh", "olh")]


@pytest.mark.parametrize(("name", "options", "epsilon"), ENUMERABLE)
def test_randomize_follows_the_enumerated_distribution(name: str, options: dict, epsilon: float) -> None:
    """Chi-square goodness of fit of 30,000 reports of one value against the
    exact distribution the privacy audit enumerated (links the audit to the code)."""
    oracle = make_oracle(name, epsilon=epsilon, domain=5 if name not in ("sue", "oue") else 4, **options)
    space = output_space(oracle)
    expected = oracle.report_probabilities(2, space)
    users = 30_000
    reports = oracle.randomize(np.full(users, 2), np.random.default_rng(3))
    observed = np.zeros(len(expected))
    index = {tuple(np.atleast_1d(row)): i for i, row in enumerate(_report_rows(space))}
    for row in _report_rows(reports):
        observed[index[tuple(np.atleast_1d(row))]] += 1
    assert stats.chisquare(observed, expected * users).pvalue > 1e-6


def _report_rows(reports: object) -> list[np.ndarray]:
    columns = [np.asarray(getattr(reports, f.name)).reshape(len(reports), -1) for f in dataclasses.fields(reports)]
    return list(np.concatenate(columns, axis=1).astype(np.int64))


@pytest.mark.parametrize("name", ["blh", "olh"])
def test_local_hashing_keeps_the_hashed_value_with_probability_p(name: str) -> None:
    oracle = make_oracle(name, epsilon=2.0, domain=1 << 40)
    users = 50_000
    reports = oracle.randomize(np.full(users, 12345), np.random.default_rng(4))
    hashed = local_hash(reports.seeds, np.uint64(12345), oracle.g)
    kept = np.mean(hashed == reports.buckets)
    se = math.sqrt(oracle.keep_probability * (1 - oracle.keep_probability) / users)
    assert abs(kept - oracle.keep_probability) <= Z * se
    shifts = (reports.buckets.astype(np.int64) - hashed.astype(np.int64)) % oracle.g
    if oracle.g > 2:
        others = np.bincount(shifts[shifts != 0], minlength=oracle.g)[1:]
        assert stats.chisquare(others).pvalue > 1e-6


def test_reference_variance_table() -> None:
    """The per-user variance at f_v = 0 matches REFERENCE.md for the pure oracles."""
    for epsilon in (0.5, 1.0, 2.0, 4.0):
        e = math.exp(epsilon)
        d = 100
        expected = {
            "grr": (e + d - 2) / (e - 1) ** 2,
            "sue": math.exp(epsilon / 2) / (math.exp(epsilon / 2) - 1) ** 2,
            "oue": 4 * e / (e - 1) ** 2,
            "blh": (e + 1) ** 2 / (e - 1) ** 2,
        }
        for name, value in expected.items():
            oracle = make_oracle(name, epsilon=epsilon, domain=d)
            # unary encodings realise p and q as 32-bit thresholds, under 2^-32 away (exact test below)
            tolerance = 1e-7 if isinstance(oracle, UnaryEncoding) else 1e-12
            assert oracle.per_user_variance()[0] == pytest.approx(value, rel=tolerance)
        olh = make_oracle("olh", epsilon=epsilon, domain=d)
        assert olh.g == round(e) + 1
        exact = (e + olh.g - 1) ** 2 / ((olh.g - 1) * (e - 1) ** 2)
        assert olh.per_user_variance()[0] == pytest.approx(exact, rel=1e-12)
        assert olh.per_user_variance()[0] == pytest.approx(4 * e / (e - 1) ** 2, rel=0.1)


@pytest.mark.parametrize("name", ["sue", "oue"])
@pytest.mark.parametrize("epsilon", [1e-6, 0.5, 1.0, 4.0, 50.0])
def test_unary_thresholds_round_towards_less_privacy_loss(name: str, epsilon: float) -> None:
    """``p' = floor(p 2^32) / 2^32`` and ``q' = ceil(q 2^32) / 2^32`` (``p'`` at most ``1 - 2^-32``):
    each within 2^-32 of the ideal, on the private side, and what the variance uses."""
    oracle = make_oracle(name, epsilon=epsilon, domain=10)
    assert isinstance(oracle, UnaryEncoding)
    ideal_p, ideal_q = oracle.bit_probabilities(epsilon)
    t_p, t_q = oracle.thresholds
    assert (oracle.p, oracle.q) == (t_p / 2**32, t_q / 2**32)
    assert ideal_p - 2**-32 < oracle.p <= ideal_p and ideal_q <= oracle.q < ideal_q + 2**-32
    assert oracle.p * (1 - oracle.q) / (oracle.q * (1 - oracle.p)) <= math.exp(epsilon)
    gap = (oracle.p - oracle.q) ** 2
    assert oracle.per_user_variance() == (oracle.q * (1 - oracle.q) / gap, oracle.p * (1 - oracle.p) / gap)


# ---------------------------------------------------------------- accuracy
MONTE_CARLO = [
    ("grr", {}),
    ("sue", {}),
    ("oue", {}),
    ("blh", {}),
    ("olh", {}),
    ("flh", {"hash_functions": 20}),
    ("hr", {}),
    ("hm", {}),
    ("hm", {"coefficients": 3}),
]


@pytest.mark.parametrize("epsilon", [1.0, 4.0])
@pytest.mark.parametrize(("name", "options"), MONTE_CARLO)
def test_estimates_are_unbiased_with_the_predicted_variance(name: str, options: dict, epsilon: float) -> None:
    """1,500 independent runs on a fixed Zipf population of 4,000 users over 16 values.

    Unbiased: each value's mean error is within 5 theoretical standard errors.
    Variance: the mean over runs of the domain MSE is within 5 empirical
    standard errors of the predicted mean variance.  FLH draws its public
    functions afresh each run, since its formula averages over that choice.
    """
    domain, users, runs = 16, 4_000, 1_500
    values, counts = zipf_values(domain, users, 1.1, seed=1)
    truth = Histogram.from_dense(counts)
    candidates = np.arange(domain)
    rng = np.random.default_rng(2)
    errors = np.empty((runs, domain))
    for run in range(runs):
        run_options = {**options, "seed": run} if name == "flh" else options
        oracle = make_oracle(name, epsilon=epsilon, domain=domain, **run_options)
        errors[run] = oracle.estimate(oracle.aggregate(oracle.randomize(values, rng)), candidates) - counts
    predicted = oracle.variance(candidates, truth)
    z_means = errors.mean(axis=0) / np.sqrt(predicted / runs)
    assert np.abs(z_means).max() <= Z
    mse = (errors**2).mean(axis=1)
    assert abs(mse.mean() - predicted.mean()) <= Z * mse.std(ddof=1) / math.sqrt(runs)


@pytest.mark.parametrize("name", ["sue", "oue"])
def test_unary_shard_counts_have_the_per_user_distribution(name: str) -> None:
    """Both unary paths give counts distributed as Binomial(n_v, p) + Binomial(n - n_v, q):
    chi-square of each path against that exact law, for the heaviest and a light value."""
    domain, users, runs = 8, 1_000, 1_500
    values, counts = zipf_values(domain, users, 1.1, seed=5)
    oracle = make_oracle(name, epsilon=1.5, domain=domain)
    rng = np.random.default_rng(6)
    bit_path = np.array([oracle.aggregate(oracle.randomize(values, rng)).counts for _ in range(runs)])
    shard_path = np.array([oracle.randomize_aggregate(values, rng).counts for _ in range(runs)])
    for value in (0, domain - 1):
        support = np.arange(users + 1)
        holders = stats.binom.pmf(support, counts[value], oracle.p)
        others = stats.binom.pmf(support, users - counts[value], oracle.q)
        law = np.convolve(holders, others)[: users + 1]
        for sample in (bit_path[:, value], shard_path[:, value]):
            edges = np.r_[0, np.searchsorted(np.cumsum(law), np.linspace(0.1, 0.9, 9)), users + 1]
            edges = np.unique(edges)
            observed = np.histogram(sample, bins=edges)[0]
            expected = np.add.reduceat(law, edges[:-1]) * runs
            assert stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > 1e-6
    # and the two paths agree on every value's mean and variance
    theory_var = counts * oracle.p * (1 - oracle.p) + (users - counts) * oracle.q * (1 - oracle.q)
    difference = bit_path.mean(axis=0) - shard_path.mean(axis=0)
    assert np.all(np.abs(difference) <= Z * np.sqrt(2 * theory_var / runs))
    ratio = bit_path.var(axis=0, ddof=1) / shard_path.var(axis=0, ddof=1)
    assert np.all(np.abs(np.log(ratio)) <= Z * math.sqrt(4 / runs))


@pytest.mark.parametrize(("name", "epsilon", "domain"), [("oue", 3.0, 8), ("sue", 6.0, 8), ("oue", 4.0, 6)])
def test_sparse_shard_counts_have_the_device_law(name: str, epsilon: float, domain: int) -> None:
    """With range randomness and ``q' <= SPARSE_MAX_Q`` the counts come from the sparse sampler
    (a different sample from ``randomize``'s, of the same law): 1,500 runs, each under its own
    seed, chi-square of the heaviest and a light value against Binomial(n_v, p') + Binomial(n - n_v,
    q'), and every value's mean and variance within 5 standard errors of that law (rows of a power
    of two bits and of another width)."""
    users, runs = 1_000, 1_500
    values, counts = zipf_values(domain, users, 1.1, seed=5)
    oracle = make_oracle(name, epsilon=epsilon, domain=domain)
    assert oracle.q <= SPARSE_MAX_Q
    sample = np.array([oracle.randomize_aggregate(values, KeyedRandomness(run).for_range("sparse", 1, 3, users)).counts
                       for run in range(runs)])
    support = np.arange(users + 1)
    for value in (0, domain - 1):
        law = np.convolve(stats.binom.pmf(support, counts[value], oracle.p),
                          stats.binom.pmf(support, users - counts[value], oracle.q))[: users + 1]
        edges = np.unique(np.r_[0, np.searchsorted(np.cumsum(law), np.linspace(0.1, 0.9, 9)), users + 1])
        observed = np.histogram(sample[:, value], bins=edges)[0]
        expected = np.add.reduceat(law, edges[:-1]) * runs
        assert stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > 1e-6
    mean = counts * oracle.p + (users - counts) * oracle.q
    variance = counts * oracle.p * (1 - oracle.p) + (users - counts) * oracle.q * (1 - oracle.q)
    assert np.all(np.abs(sample.mean(axis=0) - mean) <= Z * np.sqrt(variance / runs))
    assert np.all(np.abs(np.log(sample.var(axis=0, ddof=1) / variance)) <= Z * math.sqrt(2 / (runs - 1)))


def test_sparse_shard_counts_do_not_depend_on_the_split_into_ranges_or_groups() -> None:
    """1 range against 7 (cut inside and across the sampler's blocks), grouped with users of
    group -1: every group's counts are the sum of its pieces'; a group's counts are the same when
    every other user is put in group -1 (drawn, not counted); the groups sum to the ungrouped
    counts; with the dense path (q' above SPARSE_MAX_Q) the split changes nothing either."""
    users, groups_count = 3 * GRID_USERS + 123, 3
    source = KeyedRandomness(21)
    values = np.random.default_rng(1).integers(0, 40, users).astype(np.uint64)
    groups = np.random.default_rng(2).integers(-1, groups_count, users)
    cuts = [0, 1, 2_000, GRID_USERS, GRID_USERS + 1, 2 * GRID_USERS + 5, 3 * GRID_USERS, users]
    for epsilon in (4.0, 1.0):
        oracle = make_oracle("oue", epsilon=epsilon, domain=40)
        first = 777

        def grouped(a: int, b: int, labels: np.ndarray = groups) -> list[np.ndarray]:
            stats_ = oracle.randomize_aggregate_groups(values[a:b], labels[a:b], groups_count,
                                                       source.for_range("split", 1, first + a, b - a))
            return [np.r_[s.counts, s.n_users] for s in stats_]

        whole = grouped(0, users)
        pieces = [grouped(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
        for group in range(groups_count):
            np.testing.assert_array_equal(sum(piece[group] for piece in pieces), whole[group])
            assert whole[group][-1] == np.count_nonzero(groups == group)
        alone = np.where(groups == 1, 1, -1)
        np.testing.assert_array_equal(grouped(0, users, alone)[1], whole[1])
        everyone = np.zeros(users, dtype=np.int64)
        ungrouped = oracle.randomize_aggregate(values, source.for_range("split", 1, first, users))
        np.testing.assert_array_equal(grouped(0, users, everyone)[0], np.r_[ungrouped.counts, users])



def test_sparse_columns_of_a_wide_row_have_the_device_means_and_variances() -> None:
    """SFP's rows (OUE, 1,024 bits, ε = 4), users in 3 groups, a third of them holding value 7: every
    group's column ``x`` counts ``Binomial(n_gx, p') + Binomial(n_g - n_gx, q')`` -- each column's
    z-score within 5.5 (3,072 columns), and their mean square within 5 sd of 1 (the variances),
    so neither the own column (at p') nor any rotated other column (at q') is off."""
    users, domain, n_groups = 60_000, 1024, 3
    oracle = make_oracle("oue", epsilon=4.0, domain=domain)
    generator = np.random.default_rng(17)
    values = np.where(generator.random(users) < 1 / 3, 7, generator.integers(0, domain, users)).astype(np.uint64)
    groups = generator.integers(0, n_groups, users)
    sampled = oracle.randomize_aggregate_groups(values, groups, n_groups, KeyedRandomness(5).for_range("wide", 1, 999, users))
    z = []
    for group, statistics in enumerate(sampled):
        holders = np.bincount(values[groups == group].astype(np.intp), minlength=domain)
        members = int(np.count_nonzero(groups == group))
        assert statistics.n_users == members
        mean = holders * oracle.p + (members - holders) * oracle.q
        variance = holders * oracle.p * (1 - oracle.p) + (members - holders) * oracle.q * (1 - oracle.q)
        z.append((statistics.counts - mean) / np.sqrt(variance))
    z = np.concatenate(z)
    assert np.abs(z).max() <= 5.5
    assert abs(np.mean(z**2) - 1) <= Z * math.sqrt(2 / z.size)


@pytest.mark.parametrize("domain", [40, 64, 2])
def test_sparse_counts_are_the_walks_bits_with_each_users_own_bit(domain: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sparse path's counts, exactly: the grid's set bits (``grid_pieces`` on the same call,
    ``d - 1`` slots a user, blocks leading with a uniform per user) laid densely, slot ``c`` of a
    user holding ``v`` in column ``(v + 1 + c) mod d``, and each user's own bit at ``v`` (its
    leading 32-bit uniform below ``T_p``), summed per group -- with short pieces, so pieces and
    blocks cut through the users (a domain of a power of two, another, and the smallest: one slot
    a user)."""
    from fedhh.kernels import sparse_bernoulli

    monkeypatch.setattr(sparse_bernoulli, "MAX_DRAW", 97)
    users, n_groups, first = 2 * GRID_USERS + 77, 3, GRID_USERS - 500
    oracle = make_oracle("oue", epsilon=4.0, domain=domain)
    values = np.random.default_rng(3).integers(0, domain, users).astype(np.uint64)
    groups = np.random.default_rng(4).integers(-1, n_groups, users)
    key = derive_key(9, "exact", 1)
    from fedhh.kernels.randomness import RangeRandom

    sampled = oracle.randomize_aggregate_groups(values, groups, n_groups, RangeRandom(key, first, users))
    reference = RangeRandom(key, first, users)
    uniforms = np.full(users, -1, dtype=np.int64)
    slots = np.zeros((users, domain - 1), dtype=bool)
    for start, positions, _, leading in sparse_bernoulli.grid_pieces(reference, domain - 1, oracle.q, leading=True):
        slots.reshape(-1)[start * (domain - 1) + positions] = True
        if leading is not None:
            uniforms[start : start + leading.size] = leading
    assert uniforms.min() >= 0  # every user's uniform, once
    own = uniforms < oracle.thresholds[0]
    bits = np.zeros((users, domain), dtype=bool)
    columns = (values.astype(np.int64)[:, None] + 1 + np.arange(domain - 1)) % domain
    bits[np.arange(users)[:, None], columns] = slots
    bits[np.arange(users), values.astype(np.intp)] = own
    for group, statistics in enumerate(sampled):
        np.testing.assert_array_equal(statistics.counts, bits[groups == group].sum(axis=0))
        assert statistics.n_users == np.count_nonzero(groups == group)
    assert slots.sum() > 0.9 * users * (domain - 1) * oracle.q


GROUPED = [
    ("grr", {}, 50),
    ("oue", {}, 20),
    ("olh", {}, 1 << 64),
    ("flh", {"hash_functions": 64}, 1 << 64),
    ("hr", {}, 1000),
    ("hm", {"coefficients": 2}, 50),
    ("cms", {"rows": 4, "width": 16}, 1 << 64),
    ("hcms", {"rows": 4, "width": 16}, 1 << 64),
]


@pytest.mark.parametrize(("name", "options", "domain"), GROUPED)
def test_grouped_statistics_default_to_each_groups_share_of_the_reports(name: str, options: dict, domain: int) -> None:
    """Without the sparse sampler (per-user randomness, or an oracle without one) group ``g``'s
    statistics are exactly those of ``aggregate(randomize(values).take(users of g))``."""
    oracle = make_oracle(name, epsilon=4.0, domain=domain, **options)
    values = np.random.default_rng(15).integers(0, min(domain, 1 << 62), 600, dtype=np.uint64)
    groups = np.random.default_rng(16).integers(-1, 3, 600)
    key, ids = derive_key(5, "grouped", 1), np.arange(600)
    grouped = oracle.randomize_aggregate_groups(values, groups, 3, UserRandom(key, ids))
    reports = oracle.randomize(values, UserRandom(key, ids))
    candidates = values[:25]
    for group, statistics in enumerate(grouped):
        expected = oracle.support(oracle.aggregate(reports.take(np.flatnonzero(groups == group))), candidates)
        actual = oracle.support(statistics, candidates)
        np.testing.assert_array_equal(actual.counts, expected.counts)
        np.testing.assert_array_equal(actual.n_users, expected.n_users)


@pytest.mark.parametrize(
    ("groups", "n_groups", "message"),
    [
        (np.zeros(9, dtype=np.int64), 3, r"groups must be 10 integers \(one per value\) in \[-1, 3\)"),
        (np.full(10, 0.5), 3, r"groups must be 10 integers"),
        (np.full(10, -2), 3, r"groups must be in \[-1, 3\), got values from -2 to -2"),
        (np.full(10, 3), 3, r"groups must be in \[-1, 3\), got values from 3 to 3"),
        (np.zeros(10, dtype=np.int64), 0, r"n_groups must be an integer >= 1, got 0"),
    ],
)
@pytest.mark.parametrize("name", ["oue", "cms", "grr"])
def test_bad_groups_are_refused_naming_the_field(groups: np.ndarray, n_groups: int, message: str, name: str) -> None:
    oracle = make_oracle(name, epsilon=4.0, domain=1 << 20)
    with pytest.raises(InputError, match=message):
        oracle.randomize_aggregate_groups(np.arange(10), groups, n_groups, KeyedRandomness(1).for_range("bad", 1, 0, 10))


# ---------------------------------------------------------------- federation
FEDERATED = [
    ("grr", {}, 50),
    ("grr", {}, 1 << 64),
    ("sue", {}, 50),
    ("oue", {}, 50),
    ("blh", {}, 1 << 64),
    ("olh", {}, 1 << 64),
    ("flh", {"hash_functions": 64}, 1 << 64),
    ("hr", {}, 50),
    ("hr", {}, 1 << 63),
    ("hm", {"coefficients": 2}, 50),
    ("hm", {"coefficients": 2}, 1 << 64),
    ("cms", {"rows": 4, "width": 32}, 1 << 64),
    ("hcms", {"rows": 4, "width": 32}, 1 << 64),
    ("count-sketch", {"rows": 4, "width": 32, "inner": "oue"}, 1 << 64),
]


@pytest.mark.parametrize(("name", "options", "domain"), FEDERATED)
def test_shard_supports_sum_to_the_central_estimate_exactly(name: str, options: dict, domain: int) -> None:
    """Three shards answer the candidate set with support counts; their sum
    decodes to exactly the estimate of the pooled statistics, and the pooled
    statistics are the sum of the shards'."""
    oracle = make_oracle(name, epsilon=3.0, domain=domain, **options)
    rng = np.random.default_rng(8)
    held = min(domain, 40)
    values = rng.integers(0, held, 3_000).astype(np.uint64)
    absent = rng.integers(1 << 40, 1 << 63, 10, dtype=np.uint64) if domain > 1 << 63 else []
    candidates = np.r_[np.arange(held, dtype=np.uint64), absent].astype(np.uint64)
    shards = [oracle.randomize(part, rng) for part in np.array_split(values, 3)]
    statistics = [oracle.aggregate(shard) for shard in shards]
    pooled = oracle.aggregate(concatenate(shards))
    summed = statistics[0] + statistics[1] + statistics[2]
    central = oracle.estimate(pooled, candidates)
    np.testing.assert_array_equal(central, oracle.estimate(summed, candidates))
    support = oracle.support(statistics[0], candidates)
    for shard_statistics in statistics[1:]:
        support = support + oracle.support(shard_statistics, candidates)
    np.testing.assert_array_equal(central, oracle.estimate_support(support))


@pytest.mark.parametrize("module", [hadamard_response, hadamard_mechanism])
def test_sparse_hadamard_decoding_equals_the_fast_transform(module: object, monkeypatch: pytest.MonkeyPatch) -> None:
    oracle = make_oracle("hr" if module is hadamard_response else "hm", epsilon=3.0, domain=300)
    rng = np.random.default_rng(9)
    statistics = oracle.aggregate(oracle.randomize(rng.integers(0, 300, 5_000), rng))
    dense = oracle.support(statistics, np.arange(300)).counts
    limit = "_DENSE_OUTPUTS" if module is hadamard_response else "_DENSE_INDICES"
    monkeypatch.setattr(module, limit, 0)
    np.testing.assert_array_equal(dense, oracle.support(statistics, np.arange(300)).counts)


def test_walsh_hadamard_helpers_match_the_matrix() -> None:
    size = 32
    matrix = hadamard_signs(np.arange(size, dtype=np.uint64)[:, None], np.arange(size, dtype=np.uint64)[None, :])
    assert np.array_equal(matrix @ matrix.T.astype(np.int64), size * np.eye(size, dtype=np.int64))
    vector = np.random.default_rng(10).integers(-50, 50, size)
    np.testing.assert_array_equal(fwht(vector), matrix.astype(np.int64) @ vector)
    keys = np.array([3, 7, 7, 30], dtype=np.uint64)
    weights = np.array([2, -1, 4, 5])
    np.testing.assert_array_equal(signed_sums(keys, weights, np.arange(size)), weights @ matrix[keys.astype(int)])


# ---------------------------------------------------------------- large domains
@pytest.mark.parametrize(
    ("name", "options"),
    [("grr", {}), ("olh", {}), ("flh", {"hash_functions": 2000}), ("hr", {}), ("hm", {"coefficients": 4})],
)
def test_strings_over_the_full_64_bit_domain(name: str, options: dict) -> None:
    """Items keyed to 64 bits, estimated as a candidate set (true items plus
    absent ones): every estimate is within 5 predicted standard deviations."""
    words = [f"item-{i:03d}-{'x' * i}" for i in range(30)]
    keys = key_items(words)
    weights = np.arange(1, 31, dtype=float) ** -1.1
    counts = np.random.default_rng(11).multinomial(100_000, weights / weights.sum())
    values = np.repeat(keys, counts)
    domain = (1 << 64) - 32 if name == "hr" else 1 << 64  # HR's 32 blocks at ε = 4 cost 32 values
    oracle = make_oracle(name, epsilon=4.0, domain=domain, **options)
    candidates = np.r_[keys, key_items([f"absent-{i}" for i in range(20)])]
    truth = Histogram.of(values)
    estimates = oracle.estimate(oracle.aggregate(oracle.randomize(values, np.random.default_rng(12))), candidates)
    deviations = (estimates - truth.lookup(candidates)) / np.sqrt(oracle.variance(candidates, truth))
    assert np.abs(deviations).max() <= Z


def test_item_keys_are_stable_and_distinct() -> None:
    keys = key_items(["moon", "mo", "moon", "", "mo\x00", b"moon", "ünïcode"])
    assert keys[0] == keys[2] == keys[5]
    assert len(set(keys[[0, 1, 3, 4, 6]].tolist())) == 5
    rows = np.array([[3, 4, 0, -1], [3, 4, 0, -1], [3, 5, 0, -1]])
    row_keys = key_rows(rows)
    assert row_keys[0] == row_keys[1] != row_keys[2]
    assert key_rows(rows[:, :3])[0] != row_keys[0]
    with pytest.raises(ValueError, match="items"):
        key_items(["ok", 3])  # type: ignore[list-item]


@pytest.mark.parametrize("family", [hash_keys, local_hash])  # FLH and sketches; BLH and OLH
def test_hash_family_is_uniform_and_pairwise_collides_at_one_over_g(family) -> None:  # noqa: ANN001
    """Over 200,000 seeds, consecutive keys fall in each of 7 buckets and
    collide with probability 1/7 (binomial and chi-square tolerances)."""
    seeds = np.random.default_rng(13).integers(0, 2**63, 200_000, dtype=np.uint64)
    g = 7
    first, second = family(seeds, np.uint64(0), g), family(seeds, np.uint64(1), g)
    assert stats.chisquare(np.bincount(first, minlength=g)).pvalue > 1e-6
    collisions = np.mean(first == second)
    assert abs(collisions - 1 / g) <= Z * math.sqrt((1 / g) * (1 - 1 / g) / seeds.size)


@pytest.mark.parametrize(("reports", "candidates", "g"), [(200_000, 20, 7), (3_000, 9_000, 56), (40_000, 3, 2)])
def test_local_hashing_supports_are_the_brute_force_counts(reports: int, candidates: int, g: int) -> None:
    """Both block layouts of :func:`count_supports` (few and many candidates) and its threads
    count exactly the reports whose function sends each candidate into their bucket."""
    generator = np.random.default_rng(14)
    seeds = generator.integers(0, 2**63, reports, dtype=np.uint64)
    buckets = generator.integers(0, g, reports)
    keys = generator.integers(0, 2**63, candidates, dtype=np.uint64)
    brute = sum(
        (local_hash(seeds[first : first + 1000, None], keys[None, :], g) == buckets[first : first + 1000, None]).sum(axis=0)
        for first in range(0, reports, 1000)
    )
    np.testing.assert_array_equal(count_supports(seeds, buckets, g, keys), brute)


# ---------------------------------------------------------------- sharding
SHARD_INVARIANT = [
    ("grr", {}, 3 << 60),
    ("sue", {}, 20),
    ("oue", {}, 20),
    ("olh", {}, 1 << 64),
    ("flh", {}, 1 << 64),
    ("hr", {}, 1000),
    ("hm", {"coefficients": 3}, 1 << 64),
    ("cms", {"rows": 4, "width": 16}, 1 << 64),
    ("count-sketch", {"rows": 4, "width": 16, "inner": "olh"}, 1 << 64),
]


@pytest.mark.parametrize(("name", "options", "domain"), SHARD_INVARIANT)
def test_keyed_user_randomness_makes_reports_independent_of_sharding(name: str, options: dict, domain: int) -> None:
    oracle = make_oracle(name, epsilon=2.0, domain=domain, **options)
    values = np.random.default_rng(15).integers(0, min(domain, 1 << 62), 600, dtype=np.uint64)
    key = derive_key(99, "oracle-test", 1)
    whole = oracle.randomize(values, UserRandom(key, np.arange(600)))
    parts = [oracle.randomize(values[s], UserRandom(key, np.arange(600)[s])) for s in (slice(0, 250), slice(250, 600))]
    assert_reports_equal(whole, concatenate(parts))


# ---------------------------------------------------------------- validation
@pytest.mark.parametrize("epsilon", [0, -1.0, float("nan"), float("inf"), 51.0, 1e308, 1e-300, 5e-7, True, "2"])
def test_bad_epsilon_is_rejected(epsilon: object) -> None:
    with pytest.raises(InputError, match=r"epsilon must be a number in \[1e-06, 50\]"):
        make_oracle("olh", epsilon=epsilon, domain=10)  # type: ignore[arg-type]


@pytest.mark.parametrize("domain", [1, 0, -5, 2.5, (1 << 64) + 1])
def test_bad_domain_is_rejected(domain: object) -> None:
    with pytest.raises(InputError, match=r"domain must be an integer in \[2, "):
        make_oracle("grr", epsilon=1.0, domain=domain)  # type: ignore[arg-type]


def test_domains_beyond_an_oracles_reach_name_its_limit() -> None:
    with pytest.raises(ValueError, match=r"domain must be an integer in \[2, 67108864\]"):
        make_oracle("oue", epsilon=1.0, domain=1 << 30)
    with pytest.raises(ValueError, match=r"domain must be an integer in \[2, 18446744073709551615\]"):
        make_oracle("hr", epsilon=1.0, domain=1 << 64)
    with pytest.raises(ValueError, match=r"domain must be an integer in \[2, 18446744073709551584\] for hr"):
        make_oracle("hr", epsilon=4.0, domain=(1 << 64) - 1)


@pytest.mark.parametrize("name", ["grr", "oue", "olh", "flh", "hr", "hm", "cms"])
@pytest.mark.parametrize(
    ("values", "message"),
    [
        (np.array([0, 10]), r"values must be in \[0, 10\), got 10"),
        (np.array([-1, 3]), r"values must be in \[0, 10\), got -1"),
        (np.array([0.5, 1.0]), r"values must be integers in \[0, 10\)"),
        (np.zeros((2, 2), dtype=int), r"values must be a 1-D array"),
    ],
)
def test_values_outside_the_domain_are_rejected(name: str, values: np.ndarray, message: str) -> None:
    options = {"rows": 2, "width": 4} if name == "cms" else {}
    oracle = make_oracle(name, epsilon=1.0, domain=10, **options)
    with pytest.raises(ValueError, match=message):
        oracle.randomize(values, np.random.default_rng(0))


def test_candidates_outside_the_domain_are_rejected() -> None:
    oracle = make_oracle("grr", epsilon=1.0, domain=10)
    statistics = oracle.aggregate(oracle.randomize(np.arange(10), np.random.default_rng(0)))
    with pytest.raises(ValueError, match=r"candidates must be in \[0, 10\), got 12"):
        oracle.estimate(statistics, np.array([1, 12]))


def test_mismatched_report_arrays_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"LocalHashReports: .*seeds=3, buckets=2"):
        LocalHashReports(np.arange(3), np.arange(2))
    with pytest.raises(ValueError, match=r"FastLocalHashReports: .*functions=2, buckets=3"):
        FastLocalHashReports(np.arange(2), np.arange(3))
    with pytest.raises(ValueError, match=r"HadamardMechanismReports: .*indices=4, words=3"):
        HadamardMechanismReports(np.zeros((4, 2)), np.arange(3))
    olh = make_oracle("olh", epsilon=1.0, domain=10)
    with pytest.raises(ValueError, match=r"olh: reports.buckets must be in \[0, 4\), got 9"):
        olh.aggregate(LocalHashReports(np.arange(2), np.array([1, 9])))
    with pytest.raises(ValueError, match=r"olh: reports must be LocalHashReports, got DirectReports"):
        olh.aggregate(DirectReports(np.arange(3)))
    hm = make_oracle("hm", epsilon=1.0, domain=10, coefficients=2)
    with pytest.raises(ValueError, match=r"hm: reports.indices must have 2 columns"):
        hm.aggregate(HadamardMechanismReports(np.zeros((4, 3)), np.zeros(4)))
    oue = make_oracle("oue", epsilon=1.0, domain=20)
    with pytest.raises(ValueError, match=r"oue: reports.bits must have 3 bytes per user"):
        oue.aggregate(UnaryReports(np.zeros((5, 2))))
    grr = make_oracle("grr", epsilon=1.0, domain=10)
    with pytest.raises(ValueError, match=r"rng: per-user randomness for 3 users but values has 2"):
        grr.randomize(np.arange(2), UserRandom(np.uint64(1), np.arange(3)))


def test_unknown_oracle_and_option_names_list_what_is_allowed() -> None:
    with pytest.raises(ValueError, match=r"unknown name 'rapor'; allowed: \[.*'olh'.*\]"):
        make_oracle("rapor", epsilon=1.0, domain=10)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['k'\]; allowed: \['hash_functions', 'seed', 'g'\]"):
        make_oracle("flh", epsilon=1.0, domain=10, k=5)
    with pytest.raises(ValueError, match=r"coefficients must be an integer \[1, 16\], got 0"):
        make_oracle("hm", epsilon=1.0, domain=10, coefficients=0)
    assert set(ORACLE_NAMES) >= {"grr", "de", "sue", "oue", "blh", "olh", "flh", "hr", "hm", "cms", "hcms"}


def test_flh_support_in_small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Candidates split over many tasks and functions over many cache blocks give the same counts
    (a sweep's PEM, k = 4, once failed when the candidates outgrew a cached hash table)."""
    from fedhh.oracles import fast_local_hashing

    oracle = make_oracle("flh", epsilon=2.0, domain=1 << 32, seed=3, hash_functions=16)
    values = np.random.default_rng(0).integers(0, 50, 2000).astype(np.uint64)
    statistics = oracle.aggregate(oracle.randomize(values, UserRandom(derive_key(1, "flh"), np.arange(2000))))
    candidates = np.arange(100, dtype=np.uint64)
    cached = oracle.support(statistics, candidates).counts
    monkeypatch.setattr(fast_local_hashing, "_CANDIDATES_PER_TASK", 7)
    monkeypatch.setattr(fast_local_hashing, "_BLOCK_ENTRIES", 10)
    assert np.array_equal(oracle.support(statistics, candidates).counts, cached)


CAPABILITY_OPTIONS = {"hm": {"coefficients": 3}, "hcms": {"rows": 4, "width": 8}, "count-sketch": {"rows": 3, "width": 8},
                      "count-sketch-hadamard": {"rows": 5, "width": 8}}


@pytest.mark.parametrize("name", ORACLE_NAMES)
def test_oracles_declare_the_shape_and_bound_of_their_support(name: str) -> None:
    """What a prefix search relies on without knowing an oracle's type: the support counts have the
    declared shape, one report moves no count by more than ``max_support()``, and the counts survive
    the trip through their flat travelling form (``restore_support``)."""
    domain = 4 if name in ("sue", "oue", "rappor") else 5
    oracle = make_oracle(name, epsilon=2.0, domain=domain, **CAPABILITY_OPTIONS.get(name, {}))
    candidates = np.arange(domain, dtype=np.uint64)
    values = np.random.default_rng(1).integers(0, domain, 300).astype(np.uint64)
    key = derive_key(2, name)
    for user in range(40):  # one report at a time: the bound is per report
        one = oracle.randomize(values[user : user + 1], UserRandom(key, np.array([user])))
        single = oracle.support(oracle.aggregate(one), candidates)
        assert int(np.abs(single.counts).max()) <= oracle.max_support()
    reports = oracle.randomize(values, UserRandom(key, np.arange(values.size)))
    support = oracle.support(oracle.aggregate(reports), candidates)
    assert support.counts.shape == (*oracle.support_shape(), domain)
    reporters = np.atleast_1d(support.n_users)
    assert reporters.shape == (oracle.support_reporters(),)
    restored = oracle.restore_support(support.counts.ravel(), reporters)
    np.testing.assert_array_equal(restored.counts, support.counts)
    np.testing.assert_array_equal(restored.n_users, support.n_users)
    if name == "hm":  # three signs per report: a single report can reach the declared bound
        assert oracle.max_support() == 3
