"""Empirical privacy audits: the statistics, TrieHH (one round and whole runs of the
real protocol code) against its guarantee, a broken variant the audit must catch,
the exact LDP audit through the oracle layer, and the ``fedhh audit`` handlers."""

from __future__ import annotations

import argparse
import json
import math
import re

import numpy as np
import pytest
from scipy import stats

from fedhh.audits.triehh import (
    audit_round,
    audit_run,
    clopper_pearson,
    epsilon_lower_bound,
    estimate_probability,
    exact_round_epsilon,
    hockey_stick_epsilon,
    round_guarantee,
    simulate_runs,
)
from fedhh.errors import InputError
from fedhh.kernels.randomness import KeyedRandomness
from fedhh.privacy.triehh import TrieHHParameters, solve_triehh, triehh_delta, triehh_epsilon
from fedhh.protocols.triehh.client import respond
from fedhh.protocols.triehh.server import TrieHHServer
from simulations.audit_cli import add_audit_arguments

from .helpers import lowercase_codec, population_of

# n = 1000, L = 3, target (ε, δ) = (4, 1e-4): θ = 8, m = 92, one round at ε ≈ 1.33.
SMALL = solve_triehh(1000, 4.0, 1e-4, 3)
# The deliberately broken variant: a threshold of 1 publishes any sampled user's prefix.
BROKEN = TrieHHParameters(n_users=1000, max_rounds=3, theta=1, batch_size=100)
# The docs' reference setting (docs/privacy.md): n = 10^6, ε = 4, δ = 1e-12, L = 10 (θ = 15, m = 21,978).
REFERENCE = solve_triehh(1_000_000, 4.0, 1e-12, 10)


# statistics -------------------------------------------------------------------------
def test_clopper_pearson_matches_closed_forms() -> None:
    lower, upper = clopper_pearson(np.array([0, 10]), np.array([100, 10]), 0.05)
    assert upper[0] == pytest.approx(1 - 0.05 ** (1 / 100))
    assert lower[1] == pytest.approx(0.05 ** (1 / 10))
    assert lower[0] == 0.0 and upper[1] == 1.0


def test_clopper_pearson_covers_the_truth() -> None:
    """Each one-sided bound fails at most 5% of the time (binomial draws, fixed seed)."""
    hits = np.random.default_rng(3).binomial(400, 0.3, size=4000)
    lower, upper = clopper_pearson(hits, np.full(hits.size, 400), 0.05)
    assert np.mean(lower > 0.3) <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 4000)
    assert np.mean(upper < 0.3) <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 4000)


def test_hockey_stick_of_randomized_response_is_its_epsilon() -> None:
    epsilon = 1.3
    keep = math.exp(epsilon) / (1 + math.exp(epsilon))
    yes, no = np.array([keep, 1 - keep]), np.array([1 - keep, keep])
    assert hockey_stick_epsilon(yes, no, 0.0)[0] == pytest.approx(epsilon, abs=1e-9)
    # δ buys ε: solve keep - e^ε (1 - keep) = δ.
    assert hockey_stick_epsilon(yes, no, 0.1)[0] == pytest.approx(math.log((keep - 0.1) / (1 - keep)), abs=1e-9)
    assert hockey_stick_epsilon(np.array([0.5, 0.5]), np.array([1.0, 0.0]), 0.4)[0] == math.inf


def test_epsilon_lower_bound_needs_more_than_delta() -> None:
    assert epsilon_lower_bound(5, 1000, 0, 1000, 0.01, 0.05) == -math.inf  # 0.5% never clears δ = 1%
    assert epsilon_lower_bound(500, 1000, 0, 1000, 0.01, 0.05) > 4


# TrieHH: the model and the real code agree ----------------------------------------
def test_one_round_vote_count_is_the_hypergeometric_draw_the_round_audit_uses() -> None:
    """The real server and client, round 1: votes for the target prefix ~ Hypergeom(n, c, m)."""
    n_users, holders, batch = 300, 20, 60
    population = population_of(["zz"] * holders + ["a"] * (n_users - holders), lowercase_codec(2))
    params = TrieHHParameters(n_users, population.vocabulary.codec.max_rounds, 1, batch)
    votes = []
    for seed in range(3000):
        server = TrieHHServer(params, population.vocabulary.codec, seed)
        response = respond(server.next_request(), population, KeyedRandomness(seed))
        counts = dict(zip(map(tuple, response.prefixes.tolist()), response.votes.tolist()))
        votes.append(sum(v for prefix, v in counts.items() if population.vocabulary.codec.decode_symbols(prefix) == "z"))
    observed = np.bincount(votes, minlength=holders + 1)
    expected = stats.hypergeom.pmf(np.arange(holders + 1), n_users, holders, batch) * len(votes)
    pooled = expected >= 5  # chi-square on the cells with enough mass, the tails pooled
    observed_cells = np.append(observed[pooled], observed[~pooled].sum())
    expected_cells = np.append(expected[pooled], expected[~pooled].sum())
    assert stats.chisquare(observed_cells, expected_cells).pvalue > 1e-3
    shifted = stats.hypergeom.pmf(np.arange(holders + 1), n_users, holders + 3, batch) * len(votes)
    shifted_cells = np.append(shifted[pooled], shifted[~pooled].sum())
    assert stats.chisquare(observed_cells, shifted_cells * observed.sum() / shifted_cells.sum()).pvalue < 1e-6


def test_whole_runs_reach_the_depths_the_product_of_rounds_predicts() -> None:
    """Rounds sample independently, so P(depth >= j) = p^j with p = P(Hypergeom >= θ)."""
    holders, runs = 60, 3000
    depths = simulate_runs(SMALL, holders, False, np.arange(runs))
    p = stats.hypergeom.sf(SMALL.theta - 1, SMALL.n_users, holders, SMALL.batch_size)
    assert 0.05 < p < 0.95  # a regime where the test has power
    reach = p ** np.arange(SMALL.max_rounds + 1)
    expected = (reach - np.append(reach[1:], 0.0)) * runs
    observed = np.bincount(depths, minlength=SMALL.max_rounds + 1)
    keep = expected >= 5
    assert stats.chisquare(observed[keep], expected[keep] * observed[keep].sum() / expected[keep].sum()).pvalue > 1e-3
    with_target = simulate_runs(SMALL, holders, True, np.arange(runs))
    assert with_target.mean() > depths.mean()  # the extra holder helps the path


# TrieHH: the audit against the guarantee -------------------------------------------
def test_round_audit_stays_below_the_guarantee_and_measures_something() -> None:
    audit = audit_round(SMALL, SMALL.delta, trials=200_000, seed=1)
    assert audit.claimed_epsilon == pytest.approx(triehh_epsilon(1000, SMALL.batch_size, SMALL.theta, 1))
    assert 0.02 < audit.epsilon_lower <= audit.claimed_epsilon and not audit.violated
    for event in audit.events:  # the Monte Carlo bound never exceeds the exact value of its pair
        assert event.epsilon_lower <= event.epsilon_exact + 1e-9
    assert audit.epsilon_exact <= audit.claimed_epsilon


def test_exact_one_round_epsilon_respects_the_theorem_across_parameters() -> None:
    """Over every holder count, the single-prefix round stays within Theorem 1 (L = 1)."""
    for n_users in (300, 3000):
        for theta in (4, 6, 10):
            for rate in (0.3 / theta, 0.9 / (theta + 1)):
                params = TrieHHParameters(n_users, 5, theta, max(theta, int(rate * n_users)))
                if params.theorem_violations():
                    continue
                worst, _ = exact_round_epsilon(params, triehh_delta(theta))
                assert 0 <= worst <= round_guarantee(params), (n_users, theta, rate)


def test_run_audit_with_the_real_protocol_stays_below_the_guarantee() -> None:
    audit = audit_run(SMALL, SMALL.delta, trials=1000, seed=2)
    assert audit.scope == "run" and audit.claimed_epsilon == SMALL.epsilon
    assert audit.epsilon_lower <= audit.claimed_epsilon and not audit.violated
    assert audit.epsilon_exact is not None and 0 < audit.epsilon_exact <= SMALL.epsilon
    assert all(event.trials == 1000 for event in audit.events)  # the event is fixed from the model: every run measures


def test_the_round_audit_is_informative_at_the_reference_setting() -> None:
    """The loss lives where a round passes with probability ~4e-11 (c = 71): plain draws never
    see it, and the bound was 0 in every row while the exact one-round ε is 0.195.  Drawn
    with 683 holders and weighted back, 2 x 10^5 draws give a relative half-width of the
    Bernstein bounds of about sqrt(2 x 7.3 x ln(160) / 2e5) + small = 2%, so the bound sits
    near 0.195 - 2 x 0.02 = 0.155, with a sampling spread of about 0.01: 0.12 is 3 spreads below."""
    worst, holders = exact_round_epsilon(REFERENCE, REFERENCE.delta)
    assert holders == 71 and worst == pytest.approx(0.1953, abs=1e-4)
    audit = audit_round(REFERENCE, REFERENCE.delta, trials=200_000, seed=7, holders=[holders])
    (event,) = audit.events
    assert event.event == "prefix added (>= θ votes)" and event.proposal_holders == 683
    assert 0.12 < audit.epsilon_lower < event.epsilon_exact == pytest.approx(worst)
    exact_without, exact_with = stats.hypergeom.sf(14, 10**6, 71, REFERENCE.batch_size), stats.hypergeom.sf(14, 10**6 + 1, 72, REFERENCE.batch_size)
    assert event.probability_without == pytest.approx(exact_without, rel=0.05)  # unbiased: about 4 standard errors
    assert event.probability_with == pytest.approx(exact_with, rel=0.05)


def test_importance_sampled_runs_of_the_real_protocol_estimate_the_exact_depth_probabilities() -> None:
    """Whole runs drawn with more holders and weighted by their rounds' vote counts estimate
    P(depth >= 1) under c holders without bias (relative variance ~4: 2,000 runs give a
    standard error of 4.5%; 20% is four of them); the confidence bounds hold the exact value."""
    params = solve_triehh(1000, 4.0, 1e-4, 2)
    (event,) = audit_run(params, params.delta, trials=2000, seed=3, holders=[18]).events
    assert event.event == "trie depth along the target's path >= 1" and event.proposal_holders > 18
    exact_without = stats.hypergeom.sf(params.theta - 1, 1000, 18, params.batch_size)
    exact_with = stats.hypergeom.sf(params.theta - 1, 1001, 19, params.batch_size)
    assert event.probability_without == pytest.approx(exact_without, rel=0.2)
    assert event.probability_with == pytest.approx(exact_with, rel=0.2)
    assert event.epsilon_lower <= event.epsilon_exact


def test_an_uninformative_run_audit_says_how_many_runs_it_needs(capsys: pytest.CaptureFixture[str]) -> None:
    status, _ = audit_cli(
        "triehh", "--users", "1000", "--epsilon", "4", "--delta", "1e-4", "--max-rounds", "2",
        "--holders", "18", "--trials", "20000", "--run-trials", "400",
    )
    output = " ".join(capsys.readouterr().out.split())
    assert status == 0
    assert "run: measured ε ≥ 0 " in output and "uninformative: no event measured on 400 runs" in output
    assert re.search(r"about --run-trials [\d,]+ would make it informative", output)


def test_estimates_check_their_bounds() -> None:
    """Bernstein bounds on weighted terms hold the mean of their own distribution (4,000 repetitions)."""
    rng = np.random.default_rng(11)
    weights = rng.uniform(0, 2.0, size=(4000, 300)) * (rng.random((4000, 300)) < 0.1)  # mean 0.1
    misses_low = misses_high = 0
    for row in weights:
        estimate = estimate_probability(row, 2.0, 0.05, weighted=True)
        misses_low += estimate.lower > 0.1
        misses_high += estimate.upper < 0.1
    assert misses_low <= 0.05 * 4000 and misses_high <= 0.05 * 4000


def test_the_audit_catches_a_threshold_of_one() -> None:
    """θ = 1 is outside Theorem 1: one sampled user publishes a prefix no one else holds.
    The formula, used anyway, would promise ε = L ln(1/(1 - γ)) ≈ 0.32 for the run."""
    formula_run = triehh_epsilon(BROKEN.n_users, BROKEN.batch_size, 1, BROKEN.max_rounds)
    one_round = audit_round(BROKEN, 1e-6, trials=100_000, seed=3)
    assert one_round.epsilon_lower > 5 > 10 * formula_run / BROKEN.max_rounds
    whole = audit_run(BROKEN, 1e-6, trials=4000, seed=4)
    assert whole.epsilon_lower > 2.5 > 5 * formula_run
    assert whole.events[0].holders == 0 and whole.events[0].probability_without == 0
    assert BROKEN.report().epsilon == math.inf and one_round.violated is False  # no guarantee, no claim to break
    assert whole.epsilon_lower > formula_run


def test_the_server_view_reveals_votes_the_trie_hides() -> None:
    """With no other holder, the target's lone vote never reaches θ (the trie is the same
    in D and D'), but the server's raw vote total counts it: that number is outside
    Theorem 1, which is why the published trace leaves it out."""
    trie = audit_run(SMALL, SMALL.delta, trials=4000, seed=5, holders=[0], observe="trie")
    trace = audit_run(SMALL, SMALL.delta, trials=20_000, seed=5, holders=[0], observe="server")
    assert trie.epsilon_lower == 0.0
    assert trace.epsilon_lower > SMALL.epsilon and trace.violated


def test_audits_are_reproducible_and_check_their_input() -> None:
    first = audit_round(SMALL, SMALL.delta, trials=20_000, seed=9)
    again = audit_round(SMALL, SMALL.delta, trials=20_000, seed=9)
    assert [e.probability_with for e in first.events] == [e.probability_with for e in again.events]
    with pytest.raises(InputError, match=r"holders: each must be in 0..999"):
        audit_round(SMALL, SMALL.delta, trials=100, seed=0, holders=[1000])
    with pytest.raises(ValueError, match="trials"):
        audit_round(SMALL, SMALL.delta, trials=1, seed=0)
    with pytest.raises(ValueError, match=r"observe: got 'votes'; allowed: \['trie', 'server'\]"):
        audit_run(SMALL, SMALL.delta, trials=10, seed=0, observe="votes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_rounds"):
        audit_run(TrieHHParameters(1000, 1, 7, 105), 1e-3, trials=10, seed=0)


# LDP: exact audit through the oracle layer ------------------------------------------
@pytest.mark.parametrize("name", ["grr", "sue", "oue", "olh", "hr", "hm", "flh"])
def test_ldp_randomizers_are_exactly_as_private_as_claimed(name: str) -> None:
    from fedhh.audits.ldp import audit_oracle

    audit = audit_oracle(name, 1.5, 8, samples=1500, seed=0)
    assert audit.epsilon_lower == pytest.approx(1.5, abs=1e-9)  # tight, and never above
    assert not audit.violated
    if audit.exhaustive:
        assert audit.delta_upper < 1e-12


def test_ldp_audit_enumerates_small_report_spaces_and_catches_an_overclaim() -> None:
    from fedhh.audits.ldp import audit_oracle

    grr = audit_oracle("grr", 2.0, 6, samples=500, seed=1)
    assert grr.exhaustive and grr.distinct_reports == 6 and grr.coverage == pytest.approx(1.0)
    overclaim = audit_oracle("grr", 2.0, 6, samples=500, seed=1, claimed_epsilon=1.5)
    assert overclaim.violated and overclaim.delta_upper > 0.05
    with pytest.raises(ValueError, match=r"domain: .*2..64"):
        audit_oracle("grr", 2.0, 100)


@pytest.mark.parametrize(("name", "label"), [("olh", "hash seed"), ("blh", "hash seed"), ("flh", "hash function")])
def test_local_hashing_is_audited_exactly_given_the_hash_function(name: str, label: str) -> None:
    """Sampled reports saw none of OLH's 2^64 seeds twice ("probability mass seen 0, δ <= 1"):
    given the hash function every bucket is enumerated, so ε and δ are exact for each."""
    from fedhh.audits.ldp import audit_oracle

    audit = audit_oracle(name, 2.0, 8, samples=300, seed=0)
    assert audit.conditional_on == label and audit.public_draws >= (256 if name == "flh" else 2400)
    assert audit.exhaustive and audit.coverage == 1.0
    assert audit.epsilon_lower == pytest.approx(2.0, abs=1e-9) and audit.delta_upper < 1e-12
    assert not audit.violated


def test_conditional_audit_catches_a_leaky_bucket_and_a_value_dependent_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    from fedhh.audits.ldp import audit_oracle
    from fedhh.oracles.local_hashing import LocalHashing

    honest = LocalHashing.report_probabilities
    leaky_init = LocalHashing.__init__

    def keeps_too_often(self: LocalHashing, epsilon: float, domain: int, g: int) -> None:
        leaky_init(self, epsilon, domain, g)
        self.keep_probability = math.exp(2 * self.epsilon) / (math.exp(2 * self.epsilon) + self.g - 1)

    with monkeypatch.context() as patch:
        patch.setattr(LocalHashing, "__init__", keeps_too_often)
        leaky = audit_oracle("olh", 1.0, 4, samples=200, seed=1)
    assert leaky.violated and leaky.epsilon_lower == pytest.approx(2.0, abs=1e-9) and leaky.delta_upper > 0.05

    def seed_tells(self: LocalHashing, value: int, reports: object) -> np.ndarray:
        """Odd values draw odd seeds three times as often as even seeds."""
        odd_seed = (reports.seeds % 2).astype(np.float64)
        return honest(self, value, reports) * (np.where(odd_seed == 1, 1.5, 0.5) if value % 2 else 1.0)

    monkeypatch.setattr(LocalHashing, "report_probabilities", seed_tells)
    telling = audit_oracle("olh", 1.0, 4, samples=200, seed=1)
    assert not telling.exhaustive and telling.violated
    assert telling.epsilon_lower == pytest.approx(1.0 + math.log(2), abs=1e-9)  # the bucket's e^ε times the seed's 2


# the command-line handlers ------------------------------------------------------------
def audit_cli(*argv: str) -> tuple[int, object]:
    parser = argparse.ArgumentParser(prog="fedhh")
    add_audit_arguments(parser.add_subparsers(dest="command", required=True).add_parser("audit"))
    args = parser.parse_args(["audit", *argv])
    return args.func(args), args


def test_cli_audits_triehh_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    status, _ = audit_cli(
        "triehh", "--users", "1000", "--epsilon", "4", "--delta", "1e-4", "--max-rounds", "3",
        "--trials", "20000", "--run-trials", "200", "--json",
    )
    document = json.loads(capsys.readouterr().out)
    assert status == 0
    assert document["round"]["parameters"]["theta"] == SMALL.theta
    assert document["run"]["claimed_epsilon"] == pytest.approx(SMALL.epsilon)
    assert document["round"]["epsilon_lower"] <= document["round"]["claimed_epsilon"]
    assert document["exact_round_worst"]["epsilon"] <= document["round"]["claimed_epsilon"]


def test_cli_exits_one_when_a_randomizer_leaks_more_than_it_claims(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A deliberately broken GRR keeps its true value with the odds of 2ε while claiming ε."""
    from fedhh.oracles.direct import DirectEncoding

    honest_init = DirectEncoding.__init__

    def leaky_init(self: DirectEncoding, epsilon: float, domain: int) -> None:
        honest_init(self, epsilon, domain)
        denominator = math.exp(2 * self.epsilon) + self.domain - 1
        self.p, self.q = math.exp(2 * self.epsilon) / denominator, 1 / denominator

    status, _ = audit_cli("ldp", "--oracle", "grr", "--epsilon", "1", "--domain", "4", "--samples", "300", "--json")
    assert status == 0 and json.loads(capsys.readouterr().out)["violated"] is False
    monkeypatch.setattr(DirectEncoding, "__init__", leaky_init)
    status, _ = audit_cli("ldp", "--oracle", "grr", "--epsilon", "1", "--domain", "4", "--samples", "300", "--json")
    document = json.loads(capsys.readouterr().out)
    assert status == 1 and document["violated"] and document["epsilon_lower"] == pytest.approx(2.0)


def test_cli_names_the_options_it_needs() -> None:
    with pytest.raises(ValueError, match="--theta and --batch-size"):
        audit_cli("triehh", "--users", "1000", "--delta", "1e-4", "--max-rounds", "3", "--theta", "4")
    with pytest.raises(ValueError, match="--epsilon: required"):
        audit_cli("triehh", "--users", "1000", "--delta", "1e-4", "--max-rounds", "3")
