"""TrieHH: the exact trie on a hand-checkable population, Algorithm 3's choice,
the worst-case discovery rate, and invariance to sharding and transport."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedhh.config import load_config
from fedhh.data.population import Shard, Vocabulary
from fedhh.driving import drive
from fedhh.experiment import Experiment
from fedhh.kernels.randomness import KeyedRandomness
from fedhh.privacy.triehh import TrieHHParameters, worst_case_discovery_rate
from fedhh.protocols.common.item_choice import choose_items
from fedhh.protocols.triehh.client import respond
from fedhh.protocols.triehh.server import TrieHHServer
from simulations.fast import run_fast

from .helpers import lowercase_codec, population_of


def run_triehh(shards: list[Shard], theta: int, batch_size: int, seed: int) -> TrieHHServer:
    codec = shards[0].vocabulary.codec
    n_users = sum(s.n_users for s in shards)
    server = TrieHHServer(TrieHHParameters(n_users, codec.max_rounds, theta, batch_size), codec, seed)
    randomness = KeyedRandomness(seed)
    drive(server, lambda request: [respond(request, shard, randomness) for shard in shards])
    return server


def star_sun_moon() -> Shard:
    return population_of(["star"] * 3 + ["sun"] * 4 + ["moon"] * 4 + ["cat", "dog", "owl", "sky"])


def test_hand_checkable_trie_when_everyone_votes() -> None:
    """The population of [Zhu20] Fig. 1 with every user sampled and θ = 4:
    's' (7 votes) and 'm' (4) grow, 'st' (3) does not, and exactly sun$ and moon$ complete."""
    server = run_triehh([star_sun_moon()], theta=4, batch_size=15, seed=0)
    result = server.result()
    assert sorted(d.item for d in result.discoveries) == ["moon", "sun"]
    assert [r.values["prefixes_added"] for r in result.trace] == [2, 2, 2, 2, 1]
    assert [r.server_view["votes_received"] for r in result.trace] == [15, 12, 8, 8, 4]  # round 2: s/m and 'sky'
    # The published trace carries only what the threshold let through.
    assert set(result.trace[0].to_dict()) == {
        "round", "sampled_users", "prefixes_added", "items_completed", "trie_size_per_depth"
    }
    assert result.trace[-1].values["trie_size_per_depth"] == [2, 2, 2, 2, 1]
    assert {d.item: d.support for d in result.discoveries} == {"sun": 4, "moon": 4}
    assert result.frequent_prefixes == []


def test_threshold_three_also_completes_star_and_reports_frequent_prefixes() -> None:
    population = population_of(["star"] * 3 + ["stab"] * 3 + ["sun"] * 4)
    result = run_triehh([population], theta=3, batch_size=10, seed=0).result()
    assert sorted(d.item for d in result.discoveries) == ["stab", "star", "sun"]
    population = population_of(["star"] * 3 + ["stab"] * 2 + ["stop"] * 2)
    result = run_triehh([population], theta=3, batch_size=7, seed=0).result()
    assert [d.item for d in result.discoveries] == ["star"]
    assert result.frequent_prefixes == []  # 'st' has the child 'sta'
    population = population_of(["stax"] * 2 + ["stab"] * 2 + ["stop"] * 2)
    result = run_triehh([population], theta=3, batch_size=6, seed=0).result()
    assert result.discoveries == [] and result.frequent_prefixes == ["sta"]
    assert result.stopped_because == "round 4 added no prefix"


def test_algorithm_3_picks_items_by_local_frequency() -> None:
    """Users holding a:1, b:2, c:3, d:4 choose them with probabilities 0.1..0.4 (chi-square)."""
    vocabulary, ids = Vocabulary.encode(["a", "b", "c", "d"], lowercase_codec())
    n_users = 40_000
    local_users = np.repeat(np.arange(n_users), 10)
    items = np.tile(np.repeat(ids, [1, 2, 3, 4]), n_users)
    shard = Shard.from_pairs(vocabulary, 0, n_users, local_users, items)
    _, chosen = choose_items(shard, np.arange(n_users), KeyedRandomness(5), "test", 1)
    observed = np.bincount(chosen, minlength=4)
    assert stats.chisquare(observed, n_users * np.array([0.1, 0.2, 0.3, 0.4])).pvalue > 1e-3
    # The same test rejects a uniform choice: it is able to fail.
    assert stats.chisquare(observed, n_users * np.full(4, 0.25)).pvalue < 1e-12


def isolated_item_population(holders: int, n_users: int, seed: int) -> Shard:
    """'zzzz' held by ``holders`` users; every other user holds a distinct
    string over 'a'..'x', so no other item shares a prefix with it."""
    generator = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwx"))
    others: set[str] = set()
    while len(others) < n_users - holders:
        others.add("".join(generator.choice(letters, 6)))
    return population_of(["zzzz"] * holders + sorted(others))


def discovery_rate(population: Shard, item: str, theta: int, batch_size: int, trials: int) -> float:
    found = sum(
        item in {d.item for d in run_triehh([population], theta, batch_size, seed).discovered()}
        for seed in range(trials)
    )
    return found / trials


def test_isolated_item_discovery_matches_the_worst_case_formula() -> None:
    """Proposition 1: P = P[Hypergeom(n, t, m) >= θ]^l with l = 5 rounds ('zzzz' + end)."""
    n_users, holders, theta, batch_size, trials = 2000, 60, 4, 200, 400
    population = isolated_item_population(holders, n_users, seed=0)
    predicted = float(worst_case_discovery_rate(holders, n_users, batch_size, theta, 5))
    assert 0.2 < predicted < 0.8  # a regime where the test has power
    measured = discovery_rate(population, "zzzz", theta, batch_size, trials)
    sd = np.sqrt(predicted * (1 - predicted) / trials)
    assert abs(measured - predicted) < 4 * sd, (measured, predicted)


def test_shared_prefixes_do_at_least_as_well_as_the_worst_case() -> None:
    n_users, holders, theta, batch_size, trials = 2000, 60, 4, 200, 300
    isolated = isolated_item_population(holders, n_users, seed=0)
    items = [isolated.vocabulary.items[i] for i in isolated.item_ids]
    items[holders : 2 * holders] = ["zzzy"] * holders  # a sibling sharing 'zzz'
    shared = population_of(items)
    predicted = float(worst_case_discovery_rate(holders, n_users, batch_size, theta, 5))
    measured = discovery_rate(shared, "zzzz", theta, batch_size, trials)
    sd = np.sqrt(predicted * (1 - predicted) / trials)
    assert measured > predicted + 3 * sd, (measured, predicted)


SMALL_RUN = [
    'population.source="zipf"', "population.users=30000", "population.vocabulary=3000",
    "population.item_length=5", "population.zipf_exponent=1.2", "protocol.max_length=6",
    "privacy.epsilon=8.0", "privacy.delta=1e-6", "run.seed=11", 'run.driver="fast"',
]


def discovery_and_trace(result) -> tuple[list[str], list[dict]]:  # noqa: ANN001
    return sorted(d.item for d in result.discoveries), [r.to_dict() for r in result.trace]


def test_one_and_seven_shards_give_the_same_run() -> None:
    experiment = Experiment(load_config(None, SMALL_RUN))
    one = run_fast(experiment, 1, "inprocess").result
    seven = run_fast(experiment, 7, "inprocess").result
    assert len(one.discoveries) >= 5
    assert discovery_and_trace(one) == discovery_and_trace(seven)


def test_algorithm_3_runs_are_shard_invariant_too() -> None:
    experiment = Experiment(load_config(None, SMALL_RUN + ["population.words_per_user=3"]))
    one = run_fast(experiment, 1, "inprocess").result
    seven = run_fast(experiment, 7, "inprocess").result
    assert len(one.discoveries) >= 5
    assert discovery_and_trace(one) == discovery_and_trace(seven)


def test_ray_actors_give_the_same_run_as_in_process() -> None:
    import ray

    experiment = Experiment(load_config(None, SMALL_RUN))
    try:
        via_ray = run_fast(experiment, 3, "ray")
    finally:
        ray.shutdown()
    assert via_ray.backend == "ray"
    # the actors' shards gave the truth: the whole population's counts
    np.testing.assert_array_equal(via_ray.counts.holders, experiment.source.build_all().counts().holders)
    in_process = run_fast(experiment, 1, "inprocess").result
    assert discovery_and_trace(via_ray.result) == discovery_and_trace(in_process)


def test_a_different_seed_gives_a_different_sample() -> None:
    base = Experiment(load_config(None, SMALL_RUN))
    other = Experiment(load_config(None, [*SMALL_RUN, "run.seed=12"]))
    first = base.make_server().next_request()
    second = other.make_server().next_request()
    assert not np.array_equal(first.sampled, second.sampled)
    assert first.sampled.size == base.make_server().params.batch_size


def test_responses_are_additive_across_any_split() -> None:
    population = star_sun_moon()
    server = TrieHHServer(TrieHHParameters(15, 9, 2, 15), population.vocabulary.codec, 0)
    request = server.next_request()
    whole = respond(request, population, KeyedRandomness(0))
    parts = [respond(request, population.slice(a, b), KeyedRandomness(0)) for a, b in [(0, 4), (4, 5), (5, 15)]]
    combined = type(whole).combine(parts)
    np.testing.assert_array_equal(combined.prefixes, whole.prefixes)
    np.testing.assert_array_equal(combined.votes, whole.votes)
    assert combined.responding_users == whole.responding_users == 15


def test_absorbing_the_wrong_round_is_refused() -> None:
    population = star_sun_moon()
    server = TrieHHServer(TrieHHParameters(15, 9, 2, 15), population.vocabulary.codec, 0)
    response = respond(server.next_request(), population, KeyedRandomness(0))
    server.absorb(response)
    with pytest.raises(ValueError, match="no request is pending"):
        server.absorb(response)
    server.next_request()
    with pytest.raises(ValueError, match="round 2 is pending"):
        server.absorb(response)
