"""TrieHH's privacy solver: the reference example, round trips, refusals."""

from __future__ import annotations

import math

import pytest

from fedhh.privacy.triehh import (
    PrivacyTargetError,
    TrieHHParameters,
    solve_triehh,
    triehh_delta,
    triehh_epsilon,
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
        assert n_users < 100_000  # only the smallest population may be refused
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
    ],
)
def test_targets_that_cannot_be_met_are_refused(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        solve_triehh(*args)


def test_the_refusal_names_the_failing_numbers() -> None:
    with pytest.raises(PrivacyTargetError) as error:
        solve_triehh(1000, 1.0, 1e-12, 10)
    assert "θ = 15" in str(error.value) and "m = " in str(error.value)
