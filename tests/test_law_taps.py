"""TAPS by law (run.simulation = "law") against the users path.

As in ``test_law_protocols.py``, each check is shown able to fail:

* **Moments of one round**: every party's support counts and reporters, cell by cell, have the
  users path's exact mean and variance given each party's items (a user of the party is in the
  level with the level's probability, then sends one report through the oracle), within 5
  standard errors over fixed seeds; and the split of a shard across parties has the
  multivariate hypergeometric's moments.
* **Utility in distribution**: F1, recall@K, NCR and the found items' summed estimated over summed
  true counts over many seeds, users path against law (one shard across every party of a Zipf
  population), by Welch's test on each metric combined by Bonferroni: the law is not told apart,
  a law whose oracle keeps the truth 5 % more often is.
* A law run at 10^9 users finishes and finds the top words; the replies of shards pass the checks
  of a server that cannot trust its nodes; a population of parties with their own laws refuses
  shards across parties.
"""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pytest

from fedhh.config import ConfigError, load_config
from fedhh.data.counted import counted_users
from fedhh.experiment import Experiment
from fedhh.kernels.randomness import KeyedRandomness
from fedhh.protocols import get_protocol
from fedhh.protocols.common.prefix_encoding import PrefixEncoding
from fedhh.protocols.prefix_search.law import level_probabilities
from fedhh.protocols.prefix_search.oracles import level_oracle
from fedhh.protocols.spec import InvalidReply
from fedhh.protocols.taps.client import level_bounds
from fedhh.protocols.taps.law import party_parts
from simulations.fast import run_fast

from .test_law_runs import BILLION, TOP_WORDS, law_config
from .test_law_samplers import moments_agree
from .test_law_value_protocols import SMALL, assert_law_agrees, olh_five_percent_up, replaced
from .test_oracle_laws import user_support_moments

LANGUAGES = [
    'protocol.name="taps"',
    'population.languages="en,fr,de,es"',
    "population.vocabulary=300",
    "run.simulation=law",
]
REPLICATIONS = 2000
LAW = get_protocol("taps").law


# -- moments of one round ---------------------------------------------------------------------------


def round_moments(request, part, vocabulary, codec) -> tuple[np.ndarray, np.ndarray]:
    """The users path's exact mean and variance of one party's support counts (then its reporters):
    each of its users independently in the level (probability ``share``), then one report."""
    encoding = PrefixEncoding(request.encoding, codec)
    oracle = level_oracle(request.oracle, request.epsilon, encoding.domain(request.length), request.oracle_seed, 0, 0)
    keys = encoding.prefix_keys(vocabulary, request.length)
    share = level_probabilities(level_bounds(request.levels))[request.level]
    values, inverse = np.unique(keys, return_inverse=True)
    holders = np.bincount(inverse, weights=np.append(part.holders, part.users_without_items), minlength=values.size)
    start, stop = int(request.candidate_bounds[part.party]), int(request.candidate_bounds[part.party + 1])
    per_value = [user_support_moments(oracle, int(v), request.candidates[start:stop]) for v in values]
    mean = sum(h * share * first for h, (first, _) in zip(holders, per_value))
    variance = sum(h * (share * second - (share * first) ** 2) for h, (first, second) in zip(holders, per_value))
    return mean, np.maximum(variance, 0.0)


@pytest.mark.parametrize("oracle", ["olh", "grr"])
def test_a_level_has_the_exact_moments_in_every_party(oracle: str) -> None:
    """Four parties of their own languages, a shard each (level 1, then level 2 after the server
    absorbed level 1): every party's support counts and reporters."""
    config = load_config(
        None,
        [
            *LANGUAGES,
            "population.users=4000",
            "run.shards=4",
            f"protocol.tree_oracle={oracle}",
            "privacy.epsilon=2",
            "protocol.kept_per_level=4",
            "protocol.candidate_cap=64",
        ],
    )
    experiment = Experiment(config)
    server = experiment.make_server()
    shards = [experiment.counted_shard(i, 4) for i in range(4)]
    first = server.next_request()
    server.absorb(get_protocol("taps").response_type.combine([experiment.answer(first, s) for s in shards]))
    for request in (first, server.next_request()):
        for party, shard in enumerate(shards):
            draws = []
            for seed in range(REPLICATIONS):
                fresh = counted_users(experiment.source, shard.first_user, shard.stop_user, experiment.seed)
                response = LAW(request, fresh, KeyedRandomness(seed))
                start, stop = int(request.candidate_bounds[party]), int(request.candidate_bounds[party + 1])
                assert not np.delete(response.reporters, party).any()
                draws.append(np.append(response.counts[start:stop], response.reporters[party]))
            part = SimpleNamespace(holders=shard.holders, users_without_items=shard.users_without_items, party=party)
            mean, variance = round_moments(request, part, experiment.source.vocabulary, experiment.codec)
            assert moments_agree(np.array(draws), mean, variance), (request.level, party)
            assert not moments_agree(np.array(draws), 1.05 * mean, variance), (request.level, party)


@pytest.mark.parametrize("words", [1, 3])
def test_a_shard_across_parties_splits_as_a_uniform_draw(words: int) -> None:
    """A shard of a Zipf population across four parties: the parts add up to the shard and hold
    their parties' users, and each part's holders of each item (the one-item holders, and the users
    of every type holding it: a linear image of the split) have the moments of a multivariate
    hypergeometric split of the shard's users by what they hold."""
    config = load_config(
        None,
        [
            *SMALL,
            "protocol.name=taps",
            "population.users=3000",
            "protocol.parties=4",
            f"population.words_per_user={words}",
            "run.simulation=law",
        ],
    )
    experiment = Experiment(config)
    shard = counted_users(experiment.source, 500, 2600, experiment.seed)  # 250, 750, 750, 350 users of parties 0..3
    bounds = np.array([0, 750, 1500, 2250, 3000])
    sizes = [250, 750, 750, 350]
    size = shard.vocabulary.size
    draws: dict[int, list[np.ndarray]] = {party: [] for party in range(4)}
    for seed in range(REPLICATIONS):
        fresh = counted_users(experiment.source, 500, 2600, experiment.seed)
        parts = party_parts(fresh, bounds, KeyedRandomness(seed))
        assert [p.n_users for p in parts] == sizes
        assert [p.first_user for p in parts] == [500, 750, 1500, 2250]
        assert np.array_equal(sum(p.holders for p in parts), shard.holders)
        assert np.array_equal(sum(p.types.holders(size) for p in parts), shard.types.holders(size))
        for party, part in enumerate(parts):
            draws[party].append(np.append(part.holders + part.types.holders(size), part.users_without_items))
    # classes: each item's one-item holders, each type, nobody; a class adds to the items it holds
    image = np.zeros((size + 1, size + shard.types.size + 1))
    image[np.arange(size), np.arange(size)] = 1.0
    image[shard.types.item_ids, size + shard.types.type_of_entry] = 1.0
    image[size, -1] = 1.0
    colors = np.concatenate((shard.holders, shard.types.users, [shard.users_without_items])).astype(np.float64)
    shares, total = colors / colors.sum(), colors.sum()
    for party, drawn in enumerate(sizes):
        finite = drawn * (total - drawn) / (total - 1)
        mean = drawn * image @ shares
        variance = finite * (image**2 @ shares - (image @ shares) ** 2)
        assert moments_agree(np.array(draws[party]), mean, variance), party
        assert not moments_agree(np.array(draws[party]), 1.05 * mean, variance), party


# -- utility in distribution ----------------------------------------------------------------------


def test_taps_law_and_users_agree_in_distribution() -> None:
    """OLH at e^ε = 3.6 (g = 5); the wrong law's oracle has the same g and a 5 % higher p."""
    epsilon = math.log(3.6)
    config = load_config(
        overrides=[
            *SMALL,
            "protocol.name=taps",
            "population.users=50000",
            f"privacy.epsilon={epsilon}",
            "protocol.kept_per_level=8",
        ]
    )
    assert_law_agrees(config, replaced(LAW, epsilon=olh_five_percent_up(epsilon)), seeds=200)


# -- whole runs, shards, refusals ------------------------------------------------------------------


def test_a_billion_users_run_by_law_finds_the_top_words() -> None:
    experiment = Experiment(law_config('protocol.name="taps"', "run.shards=2"))
    run = run_fast(experiment, 2, "inprocess")
    document = experiment.finish(run.result, run.timing, "fast/inprocess", counts=run.counts)
    assert document["n_users"] == BILLION and document["simulation"] == "law"
    assert TOP_WORDS <= {hit["item"] for hit in document["heavy_hitters"]}
    assert sum(document["params"]["party_users"]) == BILLION


@pytest.mark.parametrize("population", [['population.languages="en,fr,de,es"'], ["population.source=zipf"]])
def test_law_replies_pass_the_server_checks_across_shards(population: list[str]) -> None:
    """Every level of a law run on 8 shards (languages: two a party) or 3 (Zipf: across parties):
    each shard's reply passes the checks of a server that cannot trust its nodes, and a reply
    claiming one more reporter in a party than the node holds there is refused."""
    shards = 8 if "languages" in population[0] else 3
    config = load_config(
        None,
        [
            'protocol.name="taps"',
            "population.vocabulary=300",
            "population.users=20000",
            "run.simulation=law",
            f"run.shards={shards}",
            *population,
        ],
    )
    experiment = Experiment(config)
    spec = get_protocol("taps")
    server = experiment.make_server()
    held = [experiment.counted_shard(i, shards) for i in range(shards)]
    rounds = 0
    while (request := server.next_request()) is not None:
        replies = [experiment.answer(request, shard) for shard in held]
        for shard, reply in zip(held, replies):
            node = SimpleNamespace(first_user=shard.first_user, users=shard.n_users)
            spec.check_reply(request, reply, node, server)
            bounds = np.clip(request.party_bounds, shard.first_user, shard.stop_user)
            party = int(np.argmax(np.diff(bounds)))
            tampered = reply.reporters.copy()
            tampered[party] = int(np.diff(bounds)[party]) + 1
            with pytest.raises(InvalidReply, match="reporters"):
                spec.check_reply(request, dataclasses.replace(reply, reporters=tampered), node, server)
        server.absorb(spec.response_type.combine(replies))
        rounds += 1
    assert rounds == server.max_rounds and server.result().discoveries


@pytest.mark.parametrize("shards", ["3", '"auto"'])
def test_parties_of_their_own_laws_refuse_shards_across_parties(shards: str) -> None:
    with pytest.raises(ConfigError, match=r"run\.shards: .*multiple of protocol\.parties = 4"):
        load_config(None, [*LANGUAGES, f"run.shards={shards}"])
    load_config(None, [*LANGUAGES, "run.shards=8"])
    load_config(None, [*LANGUAGES, "run.shards=3", "run.simulation=users"])
    load_config(None, ['protocol.name="taps"', "run.simulation=law", "run.shards=3"])


def test_language_parties_draw_their_counts_from_each_language() -> None:
    """A law shard of language parties is drawn party by party from each language's law, without
    building a user: a shard across two parties holds, item by item, the two parties' expected
    counts (its users times each language's probability) within 5 standard deviations of the
    multinomial, and a party's law is what its built users draw (English users' counts of
    English-only and French-only words). Counting built users instead, as before, would take
    minutes at this size; a wrong party layout (one law for both) fails the per-item check."""
    config = load_config(None, [*LANGUAGES, "population.users=400000000", "run.shards=4"])
    source = Experiment(config).source
    start, stop = 50_000_000, 150_000_000  # half in party 0 (en), half in party 1 (fr)
    ranges = source.range_laws(start, stop)
    assert [(first, last) for first, last, _ in ranges] == [(start, 100_000_000), (100_000_000, stop)]
    english, french = ranges[0][2], ranges[1][2]
    counts = counted_users(source, start, stop, 7)
    expected = 50_000_000 * (english[1:] + french[1:])
    spread = np.sqrt(50_000_000 * (english[1:] * (1 - english[1:]) + french[1:] * (1 - french[1:])))
    assert counts.n_users == stop - start and counts.types.users.size == 0  # no user holds several items
    assert np.all(np.abs(counts.holders - expected) <= 5 * spread + 1e-9)
    assert np.abs(counts.holders - 100_000_000 * english[1:]).max() > 100 * spread.max()  # one law is far off
    built = source.build_users(0, 200_000)  # English users
    items = np.asarray(built.item_of_user)
    drawn = np.bincount(items[items >= 0], minlength=source.vocabulary.size)
    words = source.vocabulary.items
    for word in ("the", "de"):
        index = words.index(word)
        share = english[1 + index]
        assert abs(drawn[index] - 200_000 * share) <= 5 * math.sqrt(200_000 * share * (1 - share)) + 1, word
