"""Law simulation (run.simulation = "law") against the users path, protocol by protocol.

Two kinds of checks, each shown able to fail:

* **Moments of one round**: a law sampler's response, cell by cell, has the users path's exact
  mean and variance given the shard's items (TrieHH's votes: sampling without replacement of
  users and, holding several items, each sampled user's choice; a prefix search's level: each
  user in the level independently with its share, then one report through the level's oracle),
  within 5 standard errors over fixed seeds.
* **Utility in distribution**: F1, recall@K and NCR over many seeds (at least 60) at 10^5
  users, users path against law, by Welch's two-sample t-test on each metric, the three
  combined by Bonferroni (the samples differ when some metric's p-value is below
  ``THRESHOLD / 3``): the law's samples are not told apart, and a law made deliberately wrong
  in the test (TrieHH: 5 % more users sampled than asked; PEM, TreeHist: the oracle's keep
  probability 5 % high) is.  Small vocabularies and short items keep the users path cheap.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from fedhh.config import FedhhConfig, load_config
from fedhh.data.counted import CountedShard, counted_users
from fedhh.driving import drive
from fedhh.experiment import Experiment, published_discoveries
from fedhh.kernels.randomness import KeyedRandomness
from fedhh.oracles import make_oracle
from fedhh.protocols import get_protocol
from fedhh.protocols.prefix_search.law import level_probabilities
from fedhh.protocols.triehh.messages import TrieHHRequest
from fedhh.protocols.triehh.nodes import check_reply
from simulations.fast import run_fast

from .test_law_samplers import moments_agree
from .test_oracle_laws import user_moments, user_support_moments

THRESHOLD = 1e-3  # family-wise level of the two-sample test over the three metrics
METRICS = ("f1", "recall", "ncr")
SMALL = ["run.driver=fast", "population.source=zipf", "population.users=100000", "population.vocabulary=300",
         "population.item_length=4", "protocol.max_length=4", "run.shards=1"]
PREFIX = ["run.top_k=8", "protocol.top_k=8", "protocol.candidates_per_step=8", "protocol.encoding=symbols",
          "protocol.segment_length=1"]

Law = Callable[..., object]


def metrics(config: FedhhConfig, seed: int, law: Law | None = None) -> tuple[float, float, float]:
    """F1, recall@K and NCR of one run: by the fast driver, or driven by ``law`` on one counted shard."""
    experiment = Experiment(config.with_overrides({"run.seed": seed}))
    if law is None:
        run = run_fast(experiment, int(config["run"]["shards"]), "inprocess")
        result, counts = run.result, run.counts
    else:
        held = experiment.counted_shard(0, 1)
        result = drive(experiment.make_server(), lambda request: [law(request, held, experiment.randomness)])
        counts = held.counts()
    found = experiment.evaluate(published_discoveries(result.discoveries), counts)["metrics"]
    return found["f1"], found["recall_at_k"][str(found["top_k"])], found["ncr"]


def two_sample(config: FedhhConfig, wrong: Law, seeds: int) -> tuple[list[float], list[float]]:
    """Per metric, the p-value of users against law, and of users against the wrong law."""
    users = np.array([metrics(config.with_overrides({"run.simulation": "users"}), seed) for seed in range(seeds)])
    by_law = config.with_overrides({"run.simulation": "law"})
    law = np.array([metrics(by_law, seed) for seed in range(seeds)])
    off = np.array([metrics(by_law, seed, wrong) for seed in range(seeds)])
    return welch(users, law), welch(users, off)


def welch(first: np.ndarray, second: np.ndarray) -> list[float]:
    """Welch's p-value per metric (1 where both samples are one constant: nothing to tell apart)."""
    return [1.0 if np.ptp(np.r_[first[:, i], second[:, i]]) == 0 else
            float(stats.ttest_ind(first[:, i], second[:, i], equal_var=False).pvalue) for i in range(len(METRICS))]


def assert_told_apart(same: list[float], apart: list[float]) -> None:
    """The law is not told apart from the users path; the wrong law is."""
    assert min(same) > THRESHOLD / len(METRICS), dict(zip(METRICS, same))
    assert min(apart) < THRESHOLD / len(METRICS), dict(zip(METRICS, apart))


def oversampling(law: Law) -> Law:
    """TrieHH's law drawing 5 % more sampled users than the request asks."""
    return lambda request, held, randomness: law(
        dataclasses.replace(request, sample_size=round(1.05 * request.sample_size)), held, randomness)


def overkeeping(law: Law, level_epsilon: float, final_epsilon: float = 0.0) -> Law:
    """A prefix search's law whose oracle runs at ε's with a 5 % higher keep probability than asked."""
    return lambda request, held, randomness: law(
        dataclasses.replace(request, epsilon=level_epsilon, final_epsilon=final_epsilon), held, randomness)


def keep_five_percent_up(epsilon: float) -> float:
    """The ε whose ``e^ε / (1 + e^ε)`` (a Hadamard bit's keep probability) is 5 % above ``epsilon``'s."""
    keep = 1.05 * math.exp(epsilon) / (1 + math.exp(epsilon))
    return math.log(keep / (1 - keep))


# -- utility in distribution ----------------------------------------------------------------------


@pytest.mark.parametrize(("extra", "seeds"), [
    (["run.top_k=20", "privacy.epsilon=1"], 300),
    (["run.top_k=10", "privacy.epsilon=2", "population.words_per_user=3"], 150),
    (["run.top_k=10", "privacy.epsilon=1", "protocol.unit_size=2", "protocol.max_length=6",
      "population.item_length=6"], 300),
], ids=["one-item", "several-items", "unit-size-2"])
def test_triehh_law_and_users_agree_in_distribution(extra: list[str], seeds: int) -> None:
    config = load_config(overrides=SMALL + extra)
    same, apart = two_sample(config, oversampling(get_protocol("triehh").law), seeds)
    assert_told_apart(same, apart)


def test_pem_law_and_users_agree_in_distribution() -> None:
    """OLH at e^ε = 3.6 (g = 5): e^ε' = 3.958 keeps g = 5 and has a 5 % higher p."""
    epsilon, wrong = math.log(3.6), math.log(3.6 * 1.05 * 4 / (4 + 3.6 - 1.05 * 3.6))
    make = make_oracle("olh", epsilon=wrong, domain=1 << 64)
    assert make.g == 5 and math.isclose(make.p, 1.05 * 3.6 / 7.6)
    config = load_config(overrides=SMALL + PREFIX + ["protocol.name=pem", f"privacy.epsilon={epsilon}"])
    same, apart = two_sample(config, overkeeping(get_protocol("pem").law, wrong), seeds=200)
    assert_told_apart(same, apart)


def test_treehist_law_and_users_agree_in_distribution() -> None:
    """The count sketch of Hadamard bits, threshold selection, the final pass (ε/2 each)."""
    config = load_config(overrides=SMALL + PREFIX + ["protocol.name=treehist", "privacy.epsilon=2"])
    wrong = keep_five_percent_up(1.0)
    same, apart = two_sample(config, overkeeping(get_protocol("treehist").law, wrong, wrong), seeds=100)
    assert_told_apart(same, apart)


# -- moments of one round ---------------------------------------------------------------------------


def one_round(extra: list[str], seeds: int) -> tuple[Experiment, TrieHHRequest, list[np.ndarray]]:
    """Round 2 of TrieHH on a counted shard, by law, for many seeds (the trie's level fixed)."""
    config = load_config(overrides=[*SMALL[:-1], "run.simulation=law", "population.users=20000", *extra])
    experiment = Experiment(config)
    shard = experiment.counted_shard(0, 1)
    server = experiment.make_server()
    first = server.next_request()
    server.absorb(experiment.answer(first, shard))
    request = server.next_request()
    candidates = experiment.source.vocabulary.prefixes.extending(2, request.parents)[0]
    draws = []
    for seed in range(seeds):
        response = get_protocol("triehh").law(request, shard, KeyedRandomness(seed))
        votes = np.zeros(candidates.shape[0], dtype=np.int64)
        index = {row.tobytes(): i for i, row in enumerate(candidates)}
        for row, count in zip(response.prefixes, response.votes):
            votes[index[row.tobytes()]] = count
        draws.append(np.append(votes, response.sampled_users))
    return experiment, request, draws


def test_triehh_votes_have_the_exact_moments_one_item_a_user() -> None:
    """The votes for candidate c are hypergeometric: m draws from n users, N_c of them voting c."""
    experiment, request, draws = one_round([], 3000)
    prefixes = experiment.source.vocabulary.prefixes
    candidates, candidate_of_prefix = prefixes.extending(2, request.parents)
    shard = experiment.counted_shard(0, 1)
    voters = np.bincount(np.maximum(candidate_of_prefix[prefixes.at(2)[1]], 0), weights=shard.holders
                         * (candidate_of_prefix[prefixes.at(2)[1]] >= 0), minlength=candidates.shape[0])
    n, m = shard.n_users, request.sample_size
    share = voters / n
    mean = np.append(m * share, m)
    variance = np.append(m * share * (1 - share) * (n - m) / (n - 1), 0.0)
    assert moments_agree(np.array(draws), mean, variance)
    assert not moments_agree(np.array(draws) * 1.05, mean, variance)


def test_triehh_votes_have_the_exact_moments_several_items_a_user() -> None:
    """Algorithm 3: a sampled user votes c with probability f_u(c), its items' share voting c;
    Var = sum over users of (m/n) f(1 - f) + the variance of a without-replacement sample sum of f."""
    experiment, request, draws = one_round(["population.words_per_user=3"], 1500)
    prefixes = experiment.source.vocabulary.prefixes
    candidates, candidate_of_prefix = prefixes.extending(2, request.parents)
    users = experiment.source.build_users(0, experiment.n_users)
    owner = np.repeat(np.arange(users.n_users), np.diff(users.item_offsets))
    totals = np.bincount(owner, weights=users.item_counts, minlength=users.n_users)
    candidate = candidate_of_prefix[prefixes.at(2)[1]][users.item_ids]
    kept = candidate >= 0
    share = np.zeros((users.n_users, candidates.shape[0]))
    np.add.at(share, (owner[kept], candidate[kept]), users.item_counts[kept] / totals[owner[kept]])
    n, m = users.n_users, request.sample_size
    mean = m * share.mean(axis=0)
    within = (m / n) * (share * (1 - share)).sum(axis=0)
    between = m * (n - m) / (n - 1) * share.var(axis=0)
    assert moments_agree(np.array(draws)[:, :-1], mean, within + between)
    assert not moments_agree(np.array(draws)[:, :-1], mean, within)  # without the sampling's share: too small


def test_triehh_shards_split_one_sample() -> None:
    """The shards of a law round hold m sampled users between them, whatever the cut, and an
    untrusting server accepts each node's reply (it finds the same split from the seed)."""
    config = load_config(overrides=[*SMALL[:-1], "run.simulation=law", "run.shards=5"])
    experiment = Experiment(config)
    server = experiment.make_server()
    request = server.next_request()
    assert request.sampled.size == 0 and request.sample_size > 0
    shards = [experiment.counted_shard(i, 5) for i in range(5)]
    replies = [experiment.answer(request, shard) for shard in shards]
    assert sum(reply.sampled_users for reply in replies) == request.sample_size
    for shard, reply in zip(shards, replies):
        check_reply(request, reply, SimpleNamespace(first_user=shard.first_user, users=shard.n_users), server)


@pytest.mark.parametrize(("protocol", "oracle", "mode", "epsilon"), [
    ("pem", "olh", "level", 2), ("treehist", "auto", "level", 2), ("treehist", "auto", "final", 8),
])
def test_a_prefix_round_has_the_exact_moments(protocol: str, oracle: str, mode: str, epsilon: float) -> None:
    """A user of level l (probability its share) sends one report of its prefix through the level's
    oracle: cell moments are sum over items of holders x (share x mean, share x mean square) (the
    final pass: every user)."""
    config = load_config(overrides=[*SMALL[:-1], "run.simulation=law", "population.users=3000", *PREFIX,
                                    f"protocol.name={protocol}", f"protocol.oracle={oracle}", f"privacy.epsilon={epsilon}"])
    experiment = Experiment(config)
    server = experiment.make_server()
    request = server.next_request()
    if mode == "final":
        while request.mode != "final":
            server.absorb(experiment.answer(request, experiment.counted_shard(0, 1)))
            request = server.next_request()
    shard = experiment.counted_shard(0, 1)
    law = get_protocol(protocol).law
    draws = []
    for seed in range(2000):
        fresh = counted_users(experiment.source, 0, shard.n_users, 0)  # no split kept from another seed
        response = law(request, fresh, KeyedRandomness(seed))
        draws.append(np.concatenate((response.counts, response.reporters)))
    from fedhh.protocols.common.prefix_encoding import PrefixEncoding

    encoding = PrefixEncoding(request.encoding, experiment.codec)
    final = request.mode == "final"
    length = encoding.length if final else int(request.lengths[request.level])
    level_oracle = request.oracle_for(length, request.final_epsilon if final else request.epsilon, encoding)
    keys = encoding.prefix_keys(experiment.source.vocabulary, length)
    holders = np.append(shard.holders, shard.users_without_items)
    share = 1.0 if final else level_probabilities(request.level_bounds)[request.level]
    values, inverse = np.unique(keys, return_inverse=True)
    counts = np.bincount(inverse, weights=holders, minlength=values.size)
    per_value = [user_support_moments(level_oracle, int(v), request.candidates) if not level_oracle.flat_size()
                 else user_moments(level_oracle, int(v)) for v in values]
    mean = sum(c * share * first for c, (first, _) in zip(counts, per_value))
    variance = sum(c * (share * second - (share * first) ** 2) for c, (first, second) in zip(counts, per_value))
    assert moments_agree(np.array(draws), mean, np.maximum(variance, 0))
    assert not moments_agree(np.array(draws), 1.05 * mean, np.maximum(variance, 0)) or not np.any(mean)


def test_one_shot_collection_by_law() -> None:
    """PEM's one-shot form in a law simulation: the report table of every user, decoded as the users
    path's (the reports drawn from the counts)."""
    overrides = SMALL + PREFIX + ["protocol.name=pem", "protocol.collection=one-shot", "population.users=20000"]
    users = metrics(load_config(overrides=overrides + ["run.simulation=users"]), 0)
    law = metrics(load_config(overrides=overrides + ["run.simulation=law"]), 0)
    assert law[0] > 0.5 and users[0] > 0.5
