"""TrieHH's privacy solver: the reference example, round trips, refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedhh.errors import InputError
from fedhh.privacy.triehh import (
    PrivacyTargetError,
    TrieHHParameters,
    hypergeometric_survival,
    solve_triehh,
    triehh_delta,
    triehh_epsilon,
    triehh_log_delta,
)


def test_reference_example() -> None:
    params = solve_triehh(1_000_000, 4.0, 1e-12, 10)
    assert (params.theta, params.batch_size) == (15, 21_978)
    assert params.epsilon <= 4.0 and params.delta <= 1e-12


@pytest.mark.parametrize("n_users", [50_000, 658_769, 1_000_000, 10_000_000])
@pytest.mark.parametrize("epsilon", [1.0, 4.0, 8.0])
@pytest.mark.parametrize("delta", [1e-6, 2.3e-12])
@pytest.mark.parametrize("rounds", [5, 11])
def test_solved_parameters_meet_the_target_and_are_tight(
    n_users: int, epsilon: float, delta: float, rounds: int
) -> None:
    try:
        params = solve_triehh(n_users, epsilon, delta, rounds)
    except PrivacyTargetError:
        # only the smallest population may be refused, or a δ that is not below 1/n
        assert n_users < 100_000 or delta * n_users >= 1
        return
    assert params.epsilon <= epsilon + 1e-12
    assert params.delta <= delta
    # θ is the smallest that works: θ - 1 breaks δ (or the e^(ε/L) - 1 floor)
    assert params.theta - 1 < 4 or triehh_delta(params.theta - 1) > delta or (
        params.theta - 1 < math.expm1(epsilon / rounds)
    )
    # m is the largest batch inside the budget: one more user exceeds ε
    assert triehh_epsilon(n_users, params.batch_size + 1, params.theta, rounds) > epsilon - 1e-9 or (
        params.batch_size + 1 > n_users
    )


def test_guarantee_of_given_parameters_round_trips() -> None:
    params = TrieHHParameters(n_users=1_000_000, max_rounds=10, theta=15, batch_size=21_978)
    again = solve_triehh(1_000_000, params.epsilon, params.delta, 10)
    assert (again.theta, again.batch_size) == (15, 21_978)


def test_parameters_outside_the_theorem_report_no_guarantee() -> None:
    params = TrieHHParameters(n_users=100, max_rounds=5, theta=3, batch_size=100)
    assert params.epsilon == math.inf and params.delta == 1.0
    assert "no guarantee" in params.report().model
    assert {"θ = 3 < 4", "θ·γ = 3 >= 1"} <= set(params.theorem_violations())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((1000, 1.0, 1e-12, 10), "Need at least"),
        ((1_000_000, 0.0, 1e-12, 10), "privacy.epsilon"),
        ((1_000_000, -1.0, 1e-12, 10), "privacy.epsilon"),
        ((1_000_000, math.inf, 1e-12, 10), "privacy.epsilon"),
        ((1_000_000, 4.0, 0.0, 10), "privacy.delta"),
        ((1_000_000, 4.0, 1.0, 10), "privacy.delta"),
        ((0, 4.0, 1e-12, 10), "population.users"),
        ((1_000_000, 4.0, 1e-12, 0), "max_rounds"),
        # numeric edges: a clear refusal, never an overflow or a division by zero
        ((1_000_000, 1e-300, 1e-12, 10), r"Need at least about 2\.\d+e\+303 users"),
        ((1_000_000, 5e-324, 1e-12, 10), "Need more than 1e308 users"),
        ((10**22, 4.0, 1e-12, 10), r"population.users: must be an integer in 1..9,007,199,254,740,992"),
        ((1e22, 4.0, 1e-12, 10), "population.users: must be an integer"),
        ((1_000_000, math.nan, 1e-12, 10), "privacy.epsilon"),
        ((1_000_000, True, 1e-12, 10), "privacy.epsilon"),
    ],
)
def test_targets_that_cannot_be_met_are_refused(args: tuple, message: str) -> None:
    with pytest.raises(InputError, match=message):
        solve_triehh(*args)


def test_a_huge_epsilon_is_met_at_the_sampling_limit() -> None:
    """ε = 1e308 overflowed e^(ε/L); the solver now reads 1 - e^(-ε/L) and caps m at n/(θ + 1)."""
    params = solve_triehh(1_000_000, 1e308, 1e-12, 10)
    assert (params.theta, params.batch_size) == (15, 1_000_000 // 16)
    assert params.epsilon == pytest.approx(10 * math.log(16)) and params.delta <= 1e-12


@pytest.mark.parametrize(("n_users", "delta"), [(21, 0.09), (100_000, 0.5), (100_000, 1e-5), (1_000_000, 1e-6)])
def test_a_target_delta_not_below_one_over_n_is_refused(n_users: int, delta: float) -> None:
    """δ >= 1/n is met by publishing one random user's data: no guarantee worth the name."""
    with pytest.raises(PrivacyTargetError, match=r"privacy.delta: .* not below 1/n"):
        solve_triehh(n_users, 8.0, delta, 5)
    below = 0.9 / n_users
    if n_users >= 10_000:  # enough users for θ(0.9/n) sampled users: the same n just below 1/n is accepted
        assert solve_triehh(n_users, 8.0, below, 5).delta <= below


@pytest.mark.parametrize("target", [5e-324, 1e-320, 1e-310, 1e-300])
def test_delta_below_the_smallest_double_is_never_reported_as_zero(target: float) -> None:
    """δ = 5e-324 gave θ = 178, whose δ ≈ 4e-325 underflowed to 0.0: a claim of pure DP."""
    params = solve_triehh(10**9, 8.0, target, 10)
    exact = triehh_log_delta(params.theta)
    assert exact <= math.log(target)  # the target is met, in log space where nothing underflows
    report = params.report()
    assert report.delta > 0 and math.log(report.delta) >= exact  # an upper bound, never 0
    assert report.parameters["log_delta"] == exact
    assert report.delta <= max(target, math.ulp(0.0))


def test_the_refusal_names_the_failing_numbers() -> None:
    with pytest.raises(PrivacyTargetError) as error:
        solve_triehh(1000, 1.0, 1e-12, 10)
    assert "θ = 15" in str(error.value) and "m = " in str(error.value)


def test_the_hypergeometric_survival_is_scipy_stats_bit_for_bit() -> None:
    """Random populations up to 10^12 users, with holders, draws and thresholds at and beyond
    both ends of the support (where scipy.stats sets 1 or 0 itself), as arrays and as numbers."""
    from scipy.stats import hypergeom

    generator = np.random.default_rng(8)
    cases = [(0, 1, 0, 1), (0, 1, 1, 1), (-1, 5, 2, 2), (4, 5, 5, 5), (5, 5, 5, 5), (0, 5, 5, 5), (2, 10, 7, 6),
             (9, 10**6, 0, 1000), (9, 10**6, 10**6, 1000), (14, 10**9, 3_000, 10**7), (14, 10**12, 10**5, 10**9)]
    for total in [1, 2, 10, 1000, 10**6, 10**8, 10**9, 5 * 10**9, 10**12]:
        for _ in range(100):
            successes = int(generator.integers(0, total + 1)) if generator.random() < 0.5 else min(total, int(generator.integers(0, 100)))
            draws = int(generator.integers(0, total + 1)) if generator.random() < 0.5 else min(total, int(generator.integers(0, 10**6)))
            cases.append((int(generator.integers(-2, 50)), total, successes, draws))
    k, total, successes, draws = (np.array(column) for column in zip(*cases))
    expected = hypergeom.sf(k, total, successes, draws)
    assert 0 < np.mean((expected > 0) & (expected < 1)) < 1
    np.testing.assert_array_equal(hypergeometric_survival(k, total, successes, draws), expected)
    assert hypergeometric_survival(14, 10**6, 200, 21_978) == hypergeom.sf(14, 10**6, 200, 21_978)
