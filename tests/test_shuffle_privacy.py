"""The shuffle model: Feldman, McMillan and Talwar's numerical bound, its inverse, exact lower bounds of
shuffled randomized response and Monte Carlo ones of shuffled RR and OLH reports, and the shuffled
guarantee of the LDP protocols' runs.  The bound against its authors' published values:
``tests/test_shuffle_published.py``."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import mpmath
import numpy as np
import pytest
from scipy import stats

from fedhh.errors import InputError
from fedhh.oracles.base import FrequencyOracle
from fedhh.oracles.direct import DirectEncoding
from fedhh.oracles.local_hashing import OptimisedLocalHashing
from fedhh.privacy.ledger import Ledger
from fedhh.privacy.shuffle import (
    Crowd,
    analytic_epsilon,
    shuffle_accountant,
    shuffle_guarantee,
    shuffled_delta,
    shuffled_epsilon,
    solve_epsilon0,
)
from fedhh.protocols import get_protocol, split_budget
from tests.helpers import lowercase_codec


def clones_delta(epsilon: float, epsilon0: float, n_users: int) -> float:
    """The bound's δ summed term by term in 40-digit arithmetic: every (c, k) of the pair P, Q of
    [FMT21] Theorem 3.2, with no threshold, no tail formula and no window."""
    mpmath.mp.dps = 40
    p, growth = mpmath.e ** (-epsilon0), mpmath.e ** epsilon
    q = mpmath.e ** epsilon0 / (mpmath.e ** epsilon0 + 1)
    total = mpmath.mpf(0)
    for c in range(n_users):
        weight = mpmath.binomial(n_users - 1, c) * p**c * (1 - p) ** (n_users - 1 - c)

        def half(j: int, c: int = c) -> mpmath.mpf:
            return mpmath.binomial(c, j) / mpmath.mpf(2) ** c if 0 <= j <= c else mpmath.mpf(0)

        for k in range(c + 2):
            first = q * half(k - 1) + (1 - q) * half(k)
            second = (1 - q) * half(k - 1) + q * half(k)
            total += weight * max(first - growth * second, 0)
    return float(total)


@pytest.mark.parametrize(("epsilon", "epsilon0", "n_users"), [
    (0.5, 1.0, 50), (0.8, 2.0, 150), (0.2, 0.5, 120), (1.5, 4.0, 150), (0.05, 0.3, 120),
])
def test_the_vectorised_delta_is_the_term_by_term_sum(epsilon: float, epsilon0: float, n_users: int) -> None:
    assert shuffled_delta(epsilon, epsilon0, n_users) == pytest.approx(clones_delta(epsilon, epsilon0, n_users),
                                                                       rel=1e-9, abs=1e-15)


def test_one_user_is_randomized_response() -> None:
    """No clones: the pair is binary randomized response at ε0, whose δ(ε) is q - e^ε (1 - q)."""
    q = math.exp(2.0) / (math.exp(2.0) + 1)
    assert shuffled_delta(1.0, 2.0, 1) == pytest.approx(q - math.e * (1 - q), rel=1e-12)
    assert shuffled_epsilon(2.0, 1, 1e-9) == pytest.approx(2.0, rel=1e-5)


def test_limits_and_the_closed_form() -> None:
    """Never above ε0; falls with n as 1/sqrt(n) for large n; never above Theorem 3.1's closed form."""
    previous = math.inf
    for n_users in (10**4, 10**5, 10**6, 10**7, 10**8):
        epsilon = shuffled_epsilon(2.0, n_users, 1e-10)
        assert epsilon < min(previous, 2.0)
        closed = analytic_epsilon(2.0, n_users, 1e-10)
        assert closed is not None and epsilon <= closed
        previous = epsilon
    ratio = shuffled_epsilon(1.0, 4 * 10**8, 1e-8) / shuffled_epsilon(1.0, 10**8, 1e-8)
    assert 0.45 < ratio < 0.55
    assert analytic_epsilon(4.0, 1000, 1e-12) is None  # outside ε0 <= ln(n / (16 ln(4/δ)))
    assert shuffled_epsilon(0.5, 10**6, 1e-12) < 0.5 / 20


def test_the_bisection_brackets_the_bound() -> None:
    epsilon = shuffled_epsilon(3.0, 10**5, 1e-9)
    assert shuffled_delta(epsilon, 3.0, 10**5) <= 1e-9
    assert shuffled_delta(epsilon * (1 - 1e-4), 3.0, 10**5) > 1e-9 * (1 - 1e-3)


def hockey_stick(first: np.ndarray, second: np.ndarray, epsilon: float) -> float:
    return float(np.maximum(first - math.exp(epsilon) * second, 0).sum())


def exact_epsilon(first: np.ndarray, second: np.ndarray, delta: float) -> float:
    """The smallest ε with both hockey-stick divergences at most δ (bisection, from above)."""
    low, high = 0.0, 50.0
    for _ in range(80):
        middle = (low + high) / 2
        if max(hockey_stick(first, second, middle), hockey_stick(second, first, middle)) <= delta:
            high = middle
        else:
            low = middle
    return high


def shuffled_histogram(report_laws: list[np.ndarray]) -> np.ndarray:
    """The exact law of the histogram of independent reports over k values (a k-1 dimensional array of
    the first k-1 counts), by convolving the users' report laws one by one."""
    k = report_laws[0].size
    law = np.zeros((len(report_laws) + 1,) * (k - 1))
    law[(0,) * (k - 1)] = 1.0
    for user in report_laws:
        grown = law * user[k - 1]
        for value in range(k - 1):
            grown += np.roll(law, 1, axis=value) * user[value]
        law = grown
    return law.ravel()


def grr(value: int, k: int, epsilon0: float) -> np.ndarray:
    law = np.full(k, 1.0 / (math.exp(epsilon0) + k - 1))
    law[value] = math.exp(epsilon0) / (math.exp(epsilon0) + k - 1)
    return law


@pytest.mark.parametrize(("k", "n_users", "epsilon0", "delta"), [(2, 40, 1.0, 1e-3), (2, 60, 2.0, 1e-4),
                                                                 (3, 25, 1.0, 1e-3), (3, 30, 2.0, 1e-2)])
def test_exact_shuffled_randomized_response_stays_under_the_bound(
    k: int, n_users: int, epsilon0: float, delta: float
) -> None:
    """A lower bound on the shuffled mechanism's ε: the exact law of the histogram of n users' k-ary
    randomized response reports, for the neighbouring datasets where user 1 holds 0 or 1 and every other
    user the same value (the other values' every split for k = 2), enumerated exactly."""
    claimed = shuffled_epsilon(epsilon0, n_users, delta)
    worst = 0.0
    others_splits = range(n_users) if k == 2 else [0, n_users - 1]
    for zeros in others_splits:  # `zeros` others hold value 0, the rest value k - 1
        others = [grr(0, k, epsilon0)] * zeros + [grr(k - 1, k, epsilon0)] * (n_users - 1 - zeros)
        first = shuffled_histogram([grr(0, k, epsilon0), *others])
        second = shuffled_histogram([grr(1, k, epsilon0), *others])
        worst = max(worst, exact_epsilon(first, second, delta))
    assert worst <= claimed
    assert worst > 0.3 * claimed  # the enumeration sees the loss: the bound is not vacuous


def shuffled_losses(oracle: FrequencyOracle, n_users: int, trials: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Draws of the privacy loss of the shuffled reports of ``n_users`` users, by ``oracle``'s own randomizer,
    for the neighbouring datasets where the target holds value 0 (P) or 1 (Q) and every other user value 1.

    The shuffle shows the multiset of the reports; with the others' reports independent draws of R(1), its
    likelihood ratio is ``P(y) / Q(y) = mean_i R(0)(y_i) / R(1)(y_i)`` over the n reports, exact for any
    randomizer whose report probabilities are known (``report_probabilities``): O(n) per draw where
    enumeration is exponential.  Returns ``log P/Q`` at draws from P and ``log Q/P`` at draws from Q."""
    rng = np.random.default_rng(seed)

    def ratios(values: np.ndarray) -> np.ndarray:
        reports = oracle.randomize(values, rng)
        return oracle.report_probabilities(0, reports) / oracle.report_probabilities(1, reports)

    others = ratios(np.ones(trials * (n_users - 1), dtype=np.int64)).reshape(trials, n_users - 1).sum(axis=1)
    from_p = np.log((others + ratios(np.zeros(trials, dtype=np.int64))) / n_users)
    from_q = -np.log((others + ratios(np.ones(trials, dtype=np.int64))) / n_users)
    return from_p, from_q


def epsilon_lower_confidence(losses: tuple[np.ndarray, ...], delta: float, grid: np.ndarray, z: float) -> float:
    """The largest ε of ``grid`` whose estimated δ(ε) = E[(1 - e^(ε - loss))+] (both directions) exceeds
    ``delta`` by more than ``z`` standard errors (the spread of the draws' terms over their square root):
    a lower confidence bound on the mechanism's ε at ``delta``, above it only if an estimate is ``z``
    standard errors off (the normal tail, 3e-5 at z = 4, per grid point)."""
    seen = 0.0
    for loss in losses:
        terms = np.maximum(1.0 - np.exp(grid[:, None] - loss[None, :]), 0.0)
        error = terms.std(axis=1) / math.sqrt(loss.size)
        above = grid[terms.mean(axis=1) - z * error > delta]
        seen = max(seen, float(above.max(initial=0.0)))
    return seen


@pytest.mark.parametrize(("oracle", "seen_share"), [(DirectEncoding(2.0, 2), 0.4),
                                                   (OptimisedLocalHashing(2.0, 64), 0.2)])
def test_monte_carlo_shuffled_reports_stay_under_the_bound(oracle: FrequencyOracle, seen_share: float) -> None:
    """A lower bound beyond enumeration's reach: 1,000 users of binary randomized response and of OLH (fedhh's
    own randomizers, OLH with its real hash family), 20,000 draws of the shuffled reports' privacy loss with
    a fixed seed.  The ε whose estimated δ exceeds the target by 4 standard errors lies under the bound."""
    n_users, delta = 1000, 1e-3
    claimed = shuffled_epsilon(oracle.epsilon, n_users, delta)
    seen = epsilon_lower_confidence(shuffled_losses(oracle, n_users, 20_000, seed=11), delta,
                                    np.linspace(0.0, oracle.epsilon, 401)[1:], z=4.0)
    assert seen <= claimed
    assert seen > seen_share * claimed  # the draws see the loss: the check is not vacuous


def test_solved_local_epsilon_meets_the_target_and_is_the_largest() -> None:
    for target, n_users, delta in [(1.0, 10**5, 1e-8), (0.3, 10**6, 1e-10), (2.0, 2000, 1e-6)]:
        local = solve_epsilon0(target, n_users, delta)
        assert shuffled_epsilon(local, n_users, delta) <= target < local
        assert shuffled_epsilon(local * 1.001, n_users, delta) > target


def test_several_messages_compose_and_groups_count() -> None:
    split = split_budget("treehist", 4.0)
    level, full = (name for name, _ in split.parts)
    crowds = (Crowd((level,), "a level", (0.25,) * 4), Crowd((full,), "everyone"))
    guarantee = shuffle_guarantee(split, crowds, 10**6, 1e-10)
    alone = [shuffled_epsilon(2.0, 10**6 // 4, 1e-10), shuffled_epsilon(2.0, 10**6, 1e-10)]
    assert guarantee.epsilon > sum(alone)  # a smaller δ each and the smallest level's lower bound
    assert guarantee.epsilon < 1.1 * sum(alone)
    assert guarantee.messages[0].users < 10**6 // 4 < guarantee.messages[0].users + 5 * math.sqrt(10**6 / 4) * 2
    assert guarantee.messages[0].users == stats.binom.ppf(1e-11, 10**6, 0.25) - 1  # δ/10, the user's own group
    with pytest.raises(ValueError, match="budget split"):
        shuffle_guarantee(split, crowds[:1], 10**6, 1e-10)


def build(protocol: str, **privacy: object):  # noqa: ANN201 -- the protocol's server
    section = {"epsilon": 1.0, "delta": 1e-9, "ledger": "", "max_epsilon": 0.0, "model": "shuffle", **privacy}
    return get_protocol(protocol).build_server(section, 200_000, lowercase_codec(), 0)


@pytest.mark.parametrize("protocol", ["pem", "treehist", "spm", "sfp", "mcm", "bitstogram", "rappor"])
def test_a_shuffled_target_is_met(protocol: str) -> None:
    server = build(protocol)
    report = server.guarantee()
    local = server.privacy_report()
    assert report.epsilon <= 1.0 < local.epsilon
    assert report.delta == 1e-9
    assert report.shuffle is not None and report.shuffle["local_epsilon"] == local.epsilon
    assert shuffle_accountant(report.parameters) == (report.epsilon, report.delta)


def test_the_local_model_reports_the_shuffled_guarantee_beside_the_local_one() -> None:
    server = build("pem", model="local", epsilon=4.0)
    report = server.guarantee()
    assert report.epsilon == 4.0
    assert report.shuffle is not None and 0 < report.shuffle["epsilon"] < 1.0
    triehh = build("triehh", model="local", epsilon=4.0, delta=1e-12).guarantee()
    assert triehh.shuffle is not None and triehh.shuffle["epsilon"] is None and "LDP" in triehh.shuffle["reason"]


def test_a_ledger_charges_the_shuffled_guarantee(tmp_path) -> None:  # noqa: ANN001 -- pytest's tmp_path
    report = build("pem").guarantee()
    ledger = Ledger(tmp_path / "ledger.json")
    ledger.record(report, "day-1")
    charged = ledger.record(report, "day-2")
    assert charged.composition is not None and charged.composition.runs == 2
    assert charged.composition.epsilon <= 2 * report.epsilon + 1e-9


@pytest.mark.parametrize(("protocol", "privacy", "field"), [
    ("triehh", {}, "privacy.model"),
    ("central", {}, "privacy.model"),
    ("pem", {"delta": 1e-5}, "privacy.delta"),
    ("pem", {"epsilon": 1e-9}, "privacy.epsilon"),
    ("pem", {"delta": 1e-15}, "privacy.delta"),
])
def test_targets_that_cannot_be_met_are_refused(protocol: str, privacy: dict, field: str) -> None:
    with pytest.raises(InputError, match=rf"^{field}:"):
        build(protocol, **privacy)


def test_plans_report_the_shuffled_guarantee(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from simulations.cli import main

    assert main(["plan", "treehist", "--users", "1000000", "--epsilon", "4", "--json"]) == 0
    shuffled = json.loads(capsys.readouterr().out)["shuffle"]
    assert shuffled["local_epsilon"] == 4.0 and 0 < shuffled["epsilon"] < 0.5 and shuffled["delta"] == 1e-12
    assert [message["epsilon0"] for message in shuffled["messages"]] == [2.0, 2.0]
    assert main(["plan", "pem", "--users", "1000000", "--epsilon", "4"]) == 0
    assert "shuffled central (ε, δ)" in capsys.readouterr().out
    assert main(["plan", "triehh", "--users", "1000000", "--epsilon", "4", "--delta", "1e-12", "--max-rounds", "10",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["shuffle"]["epsilon"] is None


@pytest.mark.parametrize("protocol", ["pem", "treehist", "bitstogram", "spm", "mcm", "rappor", "sfp", "taps"])
def test_every_ldp_plan_shows_its_shuffled_guarantee_in_one_row(
    protocol: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every LDP plan's table and JSON carry the shuffled (ε, δ): the crowds its planner names (RAPPOR's
    cohorts, SFP's fragment positions) are in its privacy report, and the table shows one row for it."""
    import json

    from simulations.cli import main

    assert main(["plan", protocol, "--users", "1000000", "--epsilon", "4", "--json"]) == 0
    shuffled = json.loads(capsys.readouterr().out)["shuffle"]
    assert shuffled["local_epsilon"] == 4.0 and shuffled["delta"] == 1e-12
    assert shuffled["epsilon"] is None or 0 < shuffled["epsilon"] <= 4.0  # never above the local ε
    assert main(["plan", protocol, "--users", "1000000", "--epsilon", "4"]) == 0
    table = capsys.readouterr().out
    assert table.count("shuffled central (ε, δ)") == 1 and "shuffle, " not in table


def test_a_run_the_shuffle_model_cannot_serve_is_refused_before_anything_is_written(
    tmp_path, capsys: pytest.CaptureFixture[str]  # noqa: ANN001 -- pytest's tmp_path
) -> None:
    from simulations.cli import main

    output = tmp_path / "run"
    assert main(["run", "--set", "run.driver=fast", "--set", "run.backend=inprocess", "--set", "population.users=1000",
                 "--set", "population.vocabulary=100", "--set", "privacy.model=shuffle", "--quiet",
                 "--output", str(output)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "privacy.model: 'shuffle' amplifies ε-LDP reports; triehh" in error
    assert not output.exists()


def test_the_numbers_docs_privacy_states() -> None:
    """The table and the PEM example of docs/privacy.md, "The shuffle model"."""
    table = [(10**4, 1.03, None), (10**6, 0.087, 0.269), (10**8, 0.0082, 0.030), (10**9, 0.0025, 0.0097)]
    for n_users, numerical, closed in table:
        assert shuffled_epsilon(4.0, n_users, 1e-12) == pytest.approx(numerical, rel=0.02)
        assert analytic_epsilon(4.0, n_users, 1e-12) == (None if closed is None else pytest.approx(closed, rel=0.02))
    server = build("pem")
    assert server.privacy_report().epsilon == pytest.approx(6.10, abs=0.005)
    assert server.guarantee().shuffle["messages"][0]["users"] == 64_000  # type: ignore[index]


def test_groups_that_change_with_the_local_epsilon_still_meet_the_target(monkeypatch: pytest.MonkeyPatch) -> None:
    """PEM's optimizer picks its groups from ε: at n = 20,000, δ = 1e-8, a shuffled ε = 2 has no local ε
    whose groups solve back to it, and the bisection over servers built at each trial ε serves it."""
    from fedhh.config import load_config
    from fedhh.experiment import item_codec
    from fedhh.privacy import shuffle

    config = load_config(overrides=["protocol.name=pem", "population.users=20000", "privacy.model=shuffle",
                                    "privacy.epsilon=2", "privacy.delta=1e-8"])
    calls: list[float] = []
    bisection = shuffle.largest_local_epsilon
    monkeypatch.setattr("fedhh.protocols.spec.largest_local_epsilon",
                        lambda *args: calls.append(args[3]) or bisection(*args))  # a spy: the real bisection runs
    server = get_protocol("pem").build_server(config.privacy, 20_000, item_codec(config), 0, config["protocol"])
    report = server.guarantee()
    assert calls, "the groups settled: this case no longer exercises the bisection"
    assert report.epsilon <= 2.0 < server.privacy_report().epsilon


GUARANTEE_OF_A_RUN = """
import json, sys
import fedhh
from fedhh.config import config_from_flat
result = fedhh.run(config_from_flat({"protocol.name": sys.argv[1], "population.users": 3000,
                                     "population.vocabulary": 500}))
print(json.dumps({"shuffle": result.document["privacy"]["shuffle"],
                  "imported": sorted(name for name in ("scipy.stats", "dp_accounting") if name in sys.modules)}))
"""


@pytest.mark.parametrize("protocol", ["pem", "treehist"])  # one message; several, composed by dp-accounting
def test_a_guarantee_read_back_from_the_cache_folder_is_the_one_computed(tmp_path: Path, protocol: str) -> None:
    """A later process reads the guarantee back (no scipy.stats, no dp-accounting imported), float for
    float what a process without the cache computes."""

    def run(cache_dir: str) -> dict:
        completed = subprocess.run(
            [sys.executable, "-c", GUARANTEE_OF_A_RUN, protocol],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "FEDHH_CACHE_DIR": cache_dir},
        )
        assert completed.returncode == 0, completed.stderr
        return json.loads(completed.stdout.strip().splitlines()[-1])

    computed = run("")  # caching off
    first, second = run(str(tmp_path)), run(str(tmp_path))
    assert computed["imported"] == first["imported"] and "scipy.stats" in computed["imported"]
    assert [path.name.split("-")[0] for path in tmp_path.glob("shuffle-*")] == ["shuffle"]
    assert second["imported"] == []
    assert first["shuffle"] == computed["shuffle"] and second["shuffle"] == computed["shuffle"]
    assert json.dumps(second["shuffle"]) == json.dumps(computed["shuffle"])  # every float, to its last digit
