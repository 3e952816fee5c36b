"""The two baselines every comparison needs: ``exact`` (no privacy, the ceiling) and ``central``
(a curator's noisy histogram above a threshold, the central model at the same (ε, δ)).

* ``exact`` publishes the true top K: F1 = 1 against the evaluation's truth, with one word per
  user and with several; it says plainly that it has no guarantee, and a ledger refuses it.
* ``central`` meets its (ε, δ): its scale and threshold are the theorem's formulas, the release
  probability of an item one user adds is δ, an empirical audit of the real mechanism stays below
  the claim (and catches a mechanism whose noise or threshold is wrong), a ledger re-derives its
  guarantee; and it beats every LDP protocol's F1 at equal ε on the default population.
* Both run on the fast driver with any number of shards and on Flower, with the same result.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

from fedhh.audits.central import audit_central
from fedhh.config import load_config
from fedhh.errors import InputError
from fedhh.experiment import Experiment
from fedhh.metrics import f1_at_k
from fedhh.privacy.central import central_guarantee, gaussian_delta, solve_central
from fedhh.privacy.ledger import Ledger, LedgerError
from fedhh.protocols import PROTOCOLS
from fedhh.protocols.central.plan import count_released_with, plan_central, release_probability
from fedhh.protocols.central.server import noisy_counts, released
from simulations.cli import main
from simulations.fast import run_fast

from .helpers import flower_matches_fast, one_and_seven_shards

# The default population (wordfreq, one word per user) at a modest size, K = k = 32.
DEFAULT_POPULATION = ["population.users=200000", "protocol.top_k=32", "run.top_k=32", 'run.driver="fast"', "run.seed=1"]
SMALL = ['population.source="zipf"', "population.users=20000", "population.vocabulary=500", "population.item_length=4",
         "protocol.max_length=4", "protocol.top_k=20", "run.top_k=20", "privacy.delta=1e-9", "run.seed=3"]
LDP_PROTOCOLS = sorted(name for name, spec in PROTOCOLS.items() if spec.budget is not None)


def run(settings: list[str], shards: int = 1) -> tuple[Experiment, dict]:
    experiment = Experiment(load_config(None, settings))
    fast = run_fast(experiment, shards, "inprocess")
    return experiment, experiment.finish(fast.result, fast.timing, "fast/inprocess", counts=fast.counts)


# -- exact --------------------------------------------------------------------------------------


@pytest.mark.parametrize("words", [1, 3])
def test_exact_finds_the_true_top_k(words: int) -> None:
    experiment, document = run([*DEFAULT_POPULATION, 'protocol.name="exact"', f"population.words_per_user={words}",
                                "population.users=50000"], shards=3)
    truth = experiment.truth()
    metrics = document["evaluation"]["metrics"]
    assert [hit["item"] for hit in document["heavy_hitters"]] == truth.top(32)
    assert metrics["f1"] == metrics["precision"] == metrics["ncr"] == 1.0
    counts = {hit["item"]: hit["estimated_count"] for hit in document["heavy_hitters"]}
    assert counts == {item: float(truth.frequency[truth.index_of[item]]) for item in truth.top(32)}
    assert metrics["count_error"]["top_k"] == {"items": 32, "without_estimate": 0, "mae": 0.0, "rmse": 0.0,
                                                "relative_error": 0.0}


def test_exact_says_it_has_no_guarantee_and_no_ledger_charges_it(tmp_path: Path) -> None:
    experiment = Experiment(load_config(None, [*SMALL, 'protocol.name="exact"']))
    report = experiment.privacy
    assert report.model.startswith("no guarantee") and not report.has_guarantee
    assert (report.epsilon, report.delta) == (math.inf, 1.0) and report.coverage is not None
    assert report.coverage.covered == () and "no privacy guarantee covers any field" in report.coverage.not_covered[0]
    ledger = tmp_path / "ledger.json"
    for charge in (lambda: Ledger(ledger).record(report, "exact"), lambda: Ledger(ledger).preview(report)):
        with pytest.raises(LedgerError, match=r"privacy.ledger: this run has no privacy guarantee \(no guarantee: exact"):
            charge()
    output = tmp_path / "out"
    settings = [*SMALL, 'protocol.name="exact"', 'run.driver="fast"', f'privacy.ledger="{ledger}"']
    assert main(["run", *[f"--set={s}" for s in settings], "--quiet", "--output", str(output)]) == 2
    assert not ledger.exists() and not output.exists()


# -- central: its (ε, δ) ------------------------------------------------------------------------


@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 1e-12), (4.0, 1e-9), (0.3, 1e-7)])
def test_central_laplace_scale_and_threshold_are_the_theorem_s(epsilon: float, delta: float) -> None:
    params = solve_central(10**6, epsilon, delta, "laplace")
    assert params.scale == pytest.approx(1 / epsilon, rel=1e-15)
    assert params.threshold == pytest.approx(1 + math.log(1 / (2 * delta)) / epsilon, rel=1e-15)
    # an item no one else holds, sent by the one added user, is released with probability exactly δ
    assert release_probability(params, 1) == pytest.approx(delta, rel=1e-9)
    assert params.guarantee == pytest.approx((epsilon, delta), rel=1e-12)
    report = params.report()
    assert report.model.startswith("central") and report.adjacency.startswith("user-level")
    assert central_guarantee(report.parameters) == (report.epsilon, report.delta)


@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 1e-12), (4.0, 1e-9), (0.3, 1e-7)])
def test_central_gaussian_sigma_and_threshold_are_the_theorem_s(epsilon: float, delta: float) -> None:
    params = solve_central(10**6, epsilon, delta, "gaussian")
    sigma = params.scale

    def balle_wang(s: float) -> float:  # Theorem 8 of Balle and Wang (2018), sensitivity 1, with scipy.stats
        return float(norm.cdf(1 / (2 * s) - epsilon * s) - math.exp(epsilon) * norm.cdf(-1 / (2 * s) - epsilon * s))

    assert balle_wang(sigma) <= delta / 2 * (1 + 1e-6) and balle_wang(sigma * (1 - 1e-6)) > delta / 2
    assert gaussian_delta(sigma, epsilon) == pytest.approx(balle_wang(sigma), rel=1e-6)
    assert params.threshold == pytest.approx(1 + sigma * norm.isf(delta / 2), rel=1e-12)
    assert release_probability(params, 1) == pytest.approx(delta / 2, rel=1e-9)
    spent_epsilon, spent_delta = params.guarantee
    assert spent_epsilon == epsilon and spent_delta <= delta * (1 + 1e-9) and spent_delta == pytest.approx(delta)


def test_central_refuses_a_delta_not_below_one_over_n_and_a_bad_noise() -> None:
    with pytest.raises(InputError, match=r"privacy.delta: δ = 0.001 is not below 1/n = 1/1,000"):
        solve_central(1000, 1.0, 1e-3)
    with pytest.raises(InputError, match=r"protocol.noise: got 'uniform'; allowed values: \['laplace', 'gaussian'\]"):
        solve_central(1000, 1.0, 1e-9, "uniform")
    with pytest.raises(InputError, match="protocol.noise"):
        load_config(None, ['protocol.name="central"', 'protocol.noise="cauchy"'])


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_an_audit_of_the_real_mechanism_stays_below_the_claim(noise: str) -> None:
    """At δ = 0.02 (n = 20) every event is frequent enough to measure: the audit's lower bounds on ε and on
    δ (95% together, 200,000 draws per population) must not exceed the claim, and they come close to it."""
    params = solve_central(20, 1.0, 0.02, noise)
    audit = audit_central(params, trials=200_000, seed=5)
    assert not audit.violated
    assert audit.epsilon_lower <= 1.0 and audit.delta_lower <= 0.02
    assert audit.epsilon_lower > (0.9 if noise == "laplace" else 0.6)  # Laplace's loss is exactly ε above τ
    assert audit.delta_lower > (0.018 if noise == "laplace" else 0.008)  # δ (Gaussian: δ/2) from the threshold


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_the_audit_catches_a_mechanism_that_spends_more_than_it_claims(noise: str) -> None:
    params = solve_central(20, 1.0, 0.02, noise)
    half_noise = audit_central(dataclasses.replace(params, scale=params.scale / 2), claim=params.guarantee)
    low_threshold = audit_central(dataclasses.replace(params, threshold=1 + (params.threshold - 1) / 3),
                                  claim=params.guarantee)
    assert half_noise.violated and half_noise.epsilon_lower > 1.5
    assert low_threshold.violated and low_threshold.delta_lower > 0.05


def test_a_ledger_re_derives_central_runs_and_composes_them_with_triehh(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    central = Experiment(load_config(None, [*SMALL, 'protocol.name="central"'])).privacy
    triehh = Experiment(load_config(None, [*SMALL, 'protocol.name="triehh"', "privacy.epsilon=8"])).privacy
    Ledger(path).record(central, "central-1")
    total = Ledger(path).record(triehh, "triehh-1").composition  # one adjacency: user-level add/remove
    assert total is not None and total.runs == 2 and total.basic_epsilon == pytest.approx(4.0 + triehh.epsilon)
    document = json.loads(path.read_text(encoding="utf-8"))
    document["runs"][0]["report"]["epsilon"] = 1.0  # a smaller ε than its noise and threshold give
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(LedgerError, match=r"disagree with its own parameters"):
        Ledger(path).summary()


def test_central_plan_gives_the_threshold_and_the_chance_of_each_frequency(capsys: pytest.CaptureFixture[str]) -> None:
    plan = plan_central(10**6, 1.0, 1e-12)
    params = solve_central(10**6, 1.0, 1e-12)
    assert plan["threshold"] == params.threshold and plan["count_released_half"] == pytest.approx(params.threshold)
    assert release_probability(params, count_released_with(params, 0.9)) == pytest.approx(0.9)
    assert plan["discovery_rate"]["0.0005"] == 1.0  # 500 users against τ = 28
    assert main(["plan", "central", "--users", "1000000", "--epsilon", "1", "--delta", "1e-12", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["threshold"] == pytest.approx(params.threshold)


# -- central: what it finds ---------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [4.0, 8.0])
def test_central_beats_every_ldp_protocol_at_equal_epsilon_on_the_default_population(epsilon: float) -> None:
    """The default population (wordfreq) at 200,000 users, k = K = 32: the curator's F1 is above every
    ε-LDP protocol's at the same ε (one run each on one population)."""
    source = None
    scores = {}
    for name in ["central", *LDP_PROTOCOLS]:
        config = load_config(None, [*DEFAULT_POPULATION, f'protocol.name="{name}"', f"privacy.epsilon={epsilon}"])
        experiment = Experiment(config, source=source)
        source = experiment.source
        fast = run_fast(experiment, 1, "inprocess")
        scores[name] = f1_at_k({d.item for d in fast.result.discoveries}, experiment.truth(fast.counts), 32)
    assert len(LDP_PROTOCOLS) >= 7 and scores["central"] >= 0.95
    assert all(scores["central"] > scores[name] for name in LDP_PROTOCOLS), scores


def test_central_estimates_are_noisy_counts_of_one_item_per_user() -> None:
    """The released estimates differ from the counts of the items sent by the noise the server adds (the
    same draws as noisy_counts from the run's seed), and only counts above τ are released."""
    experiment, document = run([*SMALL, 'protocol.name="central"', "privacy.epsilon=2"])
    truth = experiment.truth()
    errors = [hit["estimated_count"] - float(truth.frequency[truth.index_of[hit["item"]]])
              for hit in document["heavy_hitters"]]
    assert len(errors) == 20 and all(hit["estimated_count"] > document["params"]["threshold"]
                                     for hit in document["heavy_hitters"])
    assert np.mean(np.abs(errors)) == pytest.approx(document["evaluation"]["metrics"]["count_error"]["found"]["mae"])
    assert 0 < np.mean(np.abs(errors)) < 4 * 0.5  # Laplace of scale 1/2: mean absolute error 1/2
    params = solve_central(20000, 2.0, 1e-9)
    count = math.ceil(params.threshold)  # released about half the time: the largest spread
    draws = noisy_counts(np.full(200_000, count), params, np.random.default_rng(0))
    expected = release_probability(params, count)
    assert released(draws, params).mean() == pytest.approx(expected, abs=5 * math.sqrt(expected * (1 - expected) / 2e5))
    assert np.std(draws) == pytest.approx(math.sqrt(2) / 2, rel=0.01)  # Laplace of scale b: sd √2 b


@pytest.mark.parametrize("name", ["central", "exact"])
def test_baselines_give_one_result_for_any_sharding_and_on_flower(name: str, tmp_path: Path) -> None:
    settings = [*SMALL, f'protocol.name="{name}"', "population.words_per_user=2"]
    assert len(one_and_seven_shards(settings)) == 20
    found, rounds = flower_matches_fast([*settings, 'run.driver="flower"'], tmp_path / "out")
    assert len(found) == 20 and rounds == 1


def test_fedhh_audit_central_prints_the_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "central", "--users", "20", "--epsilon", "1", "--delta", "0.02", "--trials", "50000",
                 "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["privacy"]["model"].startswith("central") and document["audit"]["violated"] is False
    assert 0.8 < document["audit"]["epsilon_lower"] <= 1.0 and document["audit"]["delta_lower"] <= 0.02
    assert main(["audit", "central", "--users", "20", "--epsilon", "1", "--delta", "0.5"]) == 2
    assert "privacy.delta: δ = 0.5 is not below 1/n" in capsys.readouterr().err
