"""Bitstogram: its Hashtogram oracle against its derivation and the exact LDP audit, Lemma 4.2 in
spirit (heavy values recovered bit by bit and estimated without bias, light ones not), and
invariance to sharding and transport; bad settings refused naming the key."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from fedhh.audits.ldp import audit_oracle
from fedhh.config import ConfigError, load_config
from fedhh.data.items import ItemCodec, get_alphabet
from fedhh.data.population import Shard, Vocabulary
from fedhh.errors import InputError
from fedhh.experiment import Experiment
from fedhh.oracles import make_oracle
from fedhh.oracles.histogram import Histogram
from fedhh.protocols import plan
from fedhh.protocols.bitstogram.client import respond
from fedhh.protocols.bitstogram.nodes import check_reply
from fedhh.protocols.bitstogram.parameters import BitstogramParameters
from fedhh.protocols.bitstogram.plan import discovery_probability
from fedhh.protocols.bitstogram.server import BitstogramServer
from fedhh.protocols.spec import InvalidReply

from .helpers import flower_matches_fast, one_and_seven_shards, planted_runs

SMALL_RUN = [
    'protocol.name="bitstogram"', 'population.source="zipf"', "population.users=30000", "population.vocabulary=2000",
    "population.item_length=4", "population.zipf_exponent=1.5", "protocol.max_length=4", "privacy.epsilon=8.0",
    "run.seed=9", "run.top_k=5",
]



# -- the Hashtogram oracle ----------------------------------------------------------------------------


def test_hashtogram_mean_is_unbiased_with_the_derived_variance_collisions_included() -> None:
    """8 buckets, 2 rows: collisions dominate the variance, so the collision term of the derivation
    is what is checked.  Means within 4 standard errors; variances within 20% (the sample variance
    of a heavy-tailed estimate spreads more than the chi-square's 3%, so 6 of its deviations)."""
    values = np.repeat(np.arange(5, dtype=np.uint64), [800, 400, 200, 100, 500])
    candidates = np.arange(7, dtype=np.uint64)  # 5 and 6: held by nobody
    trials = 3000
    estimates = np.empty((trials, candidates.size))
    for trial in range(trials):
        oracle = make_oracle("hashtogram", epsilon=3.0, domain=1 << 40, rows=2, width=8, seed=trial)
        estimates[trial] = oracle.estimate(oracle.aggregate(oracle.randomize(values, np.random.default_rng(trial))), candidates)
    truth = Histogram.of(values)
    variance = oracle.variance(candidates, truth)
    counts = truth.lookup(candidates)
    assert np.all(np.abs(estimates.mean(axis=0) - counts) < 4 * np.sqrt(variance / trials))
    ratio = estimates.var(axis=0, ddof=1) / variance
    assert np.all(np.abs(ratio - 1) < 0.2), ratio
    base, _ = oracle.per_user_variance()
    assert variance[-1] > 2 * values.size * base  # collisions matter here: the check has power


def test_hashtogram_median_costs_pi_over_two_and_identity_hash_has_no_collisions() -> None:
    epsilon, trials = 1.0, 300
    values = np.repeat(np.arange(3, dtype=np.uint64), [6000, 3000, 1000])
    candidates = np.arange(4, dtype=np.uint64)
    medians, identity = np.empty((trials, 4)), np.empty((trials, 4))
    for trial in range(trials):
        rng = np.random.default_rng(trial)
        wide = make_oracle("hashtogram", epsilon=epsilon, domain=1 << 40, rows=9, width=1 << 12, seed=trial, estimator="median")
        medians[trial] = wide.estimate(wide.aggregate(wide.randomize(values, rng)), candidates)
        exact = make_oracle("hashtogram", epsilon=epsilon, domain=4, rows=1, width=4, seed=trial)
        identity[trial] = exact.estimate(exact.aggregate(exact.randomize(values, rng)), candidates)
    assert not exact.hashed and exact.collision == 0.0
    truth = np.array([6000, 3000, 1000, 0])
    for oracle, estimates in ((wide, medians), (exact, identity)):
        other, same = oracle.per_user_variance()
        variance = (values.size - truth) * other + truth * same
        assert np.all(np.abs(estimates.mean(axis=0) - truth) < 4 * np.sqrt(variance / trials))
        ratio = estimates.var(axis=0, ddof=1) / variance
        assert np.all(np.abs(ratio - 1) < 5 * math.sqrt(2 / trials)), (oracle, ratio)
    assert wide.per_user_variance()[0] == pytest.approx(math.pi / 2 * exact.per_user_variance()[0] / (1 - 2**-12) ** 2)


@pytest.mark.parametrize(("domain", "rows", "width"), [(12, 2, 4), (8, 1, 8)])  # hashed; the (channel, bit) oracle
def test_hashtogram_randomizer_is_exactly_epsilon_ldp(domain: int, rows: int, width: int) -> None:
    audit = audit_oracle("hashtogram", 1.3, domain, samples=3000, rows=rows, width=width)
    assert audit.exhaustive and not audit.violated
    assert audit.epsilon_lower == pytest.approx(1.3)
    assert audit.distinct_reports == rows * width * 2
    stricter = audit_oracle("hashtogram", 1.3, domain, samples=3000, rows=rows, width=width, claimed_epsilon=1.2)
    assert stricter.violated  # the audit can fail


def test_privacy_report_splits_epsilon_in_halves_and_the_planner_is_registered() -> None:
    report = Experiment(load_config(None, SMALL_RUN)).privacy
    assert (report.epsilon, report.delta) == (8.0, 0.0)
    assert report.parameters["split"] == {"(channel, bit) pair at a uniformly chosen bit position": 4.0, "full value": 4.0}
    planned = plan("bitstogram", n_users=1_000_000, epsilon=4.0, value_bits=50)
    assert planned["buckets"] == 1024 and planned["discovery_rate"]["0.01"] < planned["discovery_rate"]["0.002"] + 1


# -- Lemma 4.2 in spirit ------------------------------------------------------------------------------

PLANTED = {"apple": 0.12, "mango": 0.09, "kiwis": 0.002, "figgy": 0.002}


@pytest.fixture(scope="module")
def planted_population() -> Shard:
    """100,000 users: four planted words, the rest spread over 10,000 random words (about 8 users each)."""
    n_users = 100_000
    generator = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    pool = sorted({"".join(generator.choice(letters, 5)) for _ in range(15_000)} - set(PLANTED))[:10_000]
    items = [item for item, share in PLANTED.items() for _ in range(int(share * n_users))]
    items += generator.choice(pool, n_users - len(items)).tolist()
    vocabulary, _ = Vocabulary.encode(sorted(set(items)), ItemCodec(get_alphabet("lowercase"), 1, 5))
    index = {item: i for i, item in enumerate(vocabulary.items)}
    return Shard.single_item(vocabulary, 0, np.array([index[item] for item in items]))


def test_heavy_values_are_found_light_ones_are_not_and_counts_are_unbiased(planted_population: Shard) -> None:
    """ε = 8, m = 25 bits, T = 512.  The planner's worst case (every bit contested) gives the heavy
    words a discovery chance above 0.99 each, so they are found in every one of 40 runs; the light
    words (0.2%: 200 users, 0.5 standard deviations of the final estimate, the threshold being 3.5)
    never pass it.  Values held by nobody pass with 0.1 expected per run: at most 12 in 40 runs
    (Poisson(4) exceeds 12 with probability 0.001).  The heavy words' final counts average to the
    truth within 4 standard errors, with the spread the median-over-rows oracle predicts (a sample
    standard deviation of 40 runs is within 0.6..1.5 of it with probability above 0.999)."""
    n_users, runs = planted_population.n_users, 40
    params = BitstogramParameters(n_users, 8.0, 25, 512, 9, 32)
    assert min(discovery_probability(params, PLANTED[w]) for w in ("apple", "mango")) > 0.99
    assert discovery_probability(params, PLANTED["kiwis"]) < 1e-3
    found = planted_runs(
        lambda run: BitstogramServer(params, planted_population.vocabulary.codec, run), respond, planted_population, PLANTED, range(runs)
    )
    counts, others, server = found.counts, found.others, found.server
    assert len(counts["apple"]) == len(counts["mango"]) == runs
    assert counts["kiwis"] == counts["figgy"] == [] and others <= 12
    other, _ = server.request.final_oracle().per_user_variance()
    predicted_sd = math.sqrt(n_users * other)
    for item in ("apple", "mango"):
        estimates = np.array(counts[item])
        assert abs(estimates.mean() - PLANTED[item] * n_users) < 4 * predicted_sd / math.sqrt(runs)
        assert 0.6 < estimates.std(ddof=1) / predicted_sd < 1.5


# -- invariance, front door, refusals -------------------------------------------------------------------


def test_one_and_seven_shards_give_the_same_run() -> None:
    discoveries = one_and_seven_shards(SMALL_RUN, whole_trace=False)
    assert [item for item, _ in discoveries][:2] == ["vcby", "hbnc"]  # the two heaviest of this population


def test_flower_simulation_matches_the_fast_driver(tmp_path: Path) -> None:
    found, rounds = flower_matches_fast(SMALL_RUN, tmp_path / "out")
    assert len(found) >= 2 and rounds == 1


def test_a_reply_no_honest_node_can_send_is_refused() -> None:
    experiment = Experiment(load_config(None, SMALL_RUN))
    server = experiment.make_server()
    request = server.next_request()
    shard = experiment.build_shard(0, 1)
    node = SimpleNamespace(first_user=shard.first_user, users=shard.n_users)
    honest = respond(request, shard, experiment.randomness)
    check_reply(request, honest, node, server)
    forged = replace(honest, bit_sums=honest.bit_sums * 3)
    with pytest.raises(InvalidReply, match="signed sums"):
        check_reply(request, forged, node, server)
    with pytest.raises(InvalidReply, match="bit_users"):
        check_reply(request, replace(honest, bit_users=honest.bit_users[::-1].copy()), node, server)


@pytest.mark.parametrize(
    ("setting", "error", "message"),
    [
        ("protocol.buckets=1000", ConfigError, r"protocol.buckets: got 1000; must be 0 or a power of two"),
        ("protocol.hashtogram_rows=-1", ConfigError, r"protocol.hashtogram_rows: got -1"),
        ("protocol.buckets=1048576", InputError, r"protocol.hashtogram_rows x protocol.buckets"),
        ("privacy.epsilon=200.0", InputError, r"privacy.epsilon"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(setting: str, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        Experiment(load_config(None, [*SMALL_RUN, setting])).make_server()
