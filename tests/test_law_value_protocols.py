"""Law simulation (run.simulation = "law") against the users path for the protocols that report
whole values (MCM, Bitstogram, SPM), RAPPOR, and the central and exact baselines.

Two kinds of checks, as in ``test_law_protocols.py``, each shown able to fail:

* **Moments of one round**: every cell of a law sampler's response has the users path's exact
  mean and variance given the shard's items, within 5 standard errors over fixed seeds.  A
  user's contribution to a cell is its public index's indicator (bit position, cohort, segment
  pair: uniform, independent across users) times its report's, so its moments are the index's
  probability times the report's (written out below from each mechanism), summed over users.
* **Utility in distribution**: F1, recall@K, NCR and the found items' summed estimated counts
  over their summed true counts, over many seeds at modest populations, users path against law, by
  Welch's two-sample t-test on each metric, combined by Bonferroni: the law's samples are not
  told apart, and a law made deliberately wrong (its oracles' keep probability 5 % high) is.
  Small vocabularies, short items and small sketches keep the users path cheap.
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
from fedhh.oracles.hashing import hash_keys
from fedhh.protocols import get_protocol
from fedhh.protocols.common.value_reports import value_table
from fedhh.protocols.law import public_index_probabilities, public_index_table
from fedhh.protocols.spec import InvalidReply
from fedhh.protocols.spm.client import segment_keys, segment_pairs
from simulations.fast import run_fast

from .test_law_samplers import moments_agree
from .test_oracle_laws import user_moments

THRESHOLD = 1e-3  # family-wise level of the two-sample test over the metrics
METRICS = ("f1", "recall", "ncr", "scale")
SMALL = ["run.driver=fast", "population.source=zipf", "population.vocabulary=100", "population.item_length=3",
         "protocol.max_length=3", "run.shards=1", "run.top_k=8", "protocol.top_k=8"]
REPLICATIONS = 2000

Law = Callable[..., object]


# -- utility in distribution ----------------------------------------------------------------------


def metrics(config: FedhhConfig, seed: int, law: Law | None = None) -> tuple[float, ...]:
    """F1, recall@K, NCR and the found items' summed estimated over summed true counts, of one run:
    by the fast driver, or driven by ``law`` on one counted shard."""
    experiment = Experiment(config.with_overrides({"run.seed": seed}))
    if law is None:
        run = run_fast(experiment, 1, "inprocess")
        result, counts = run.result, run.counts
    else:
        held = experiment.counted_shard(0, 1)
        result = drive(experiment.make_server(), lambda request: [law(request, held, experiment.randomness)])
        counts = held.counts()
    published = published_discoveries(result.discoveries)
    evaluation = experiment.evaluate(published, counts)
    found = evaluation["metrics"]
    pairs = np.array([(hit["estimated_count"], truth["true_count"]) for hit, truth in zip(published, evaluation["heavy_hitters"])
                      if truth["true_count"] > 0 and hit.get("estimated_count") is not None]).reshape(-1, 2)
    scale = float(pairs[:, 0].sum() / pairs[:, 1].sum()) if pairs.size else 0.0
    return found["f1"], found["recall_at_k"][str(found["top_k"])], found["ncr"], scale


def welch(first: np.ndarray, second: np.ndarray) -> list[float]:
    """Welch's p-value per metric (1 where both samples are one constant: nothing to tell apart)."""
    return [1.0 if np.ptp(np.r_[first[:, i], second[:, i]]) == 0 else
            float(stats.ttest_ind(first[:, i], second[:, i], equal_var=False).pvalue) for i in range(first.shape[1])]


def assert_law_agrees(config: FedhhConfig, wrong: Law, seeds: int) -> None:
    """Users against law: not told apart; users against the wrong law: told apart."""
    users = np.array([metrics(config.with_overrides({"run.simulation": "users"}), seed) for seed in range(seeds)])
    by_law = config.with_overrides({"run.simulation": "law"})
    law = np.array([metrics(by_law, seed) for seed in range(seeds)])
    off = np.array([metrics(by_law, seed, wrong) for seed in range(seeds)])
    same, apart = welch(users, law), welch(users, off)
    assert min(same) > THRESHOLD / len(METRICS), dict(zip(METRICS, same))
    assert min(apart) < THRESHOLD / len(METRICS), dict(zip(METRICS, apart))


def olh_five_percent_up(epsilon: float) -> float:
    """The ε at which OLH has the same ``g`` as at ``epsilon`` and a 5 % higher ``p``."""
    right = make_oracle("olh", epsilon=epsilon, domain=1 << 20)
    keep = 1.05 * right.p
    wrong = math.log(keep * (right.g - 1) / (1 - keep))
    assert make_oracle("olh", epsilon=wrong, domain=1 << 20).g == right.g
    return wrong


def bit_five_percent_up(epsilon: float) -> float:
    """The ε whose ``e^ε / (1 + e^ε)`` (a Hadamard bit's or a RAPPOR bit's keep probability) is 5 % above ``epsilon``'s."""
    keep = 1.05 * math.exp(epsilon) / (1 + math.exp(epsilon))
    return math.log(keep / (1 - keep))


def replaced(law: Law, **fields: float) -> Law:
    """``law`` answering a request whose ``fields`` are replaced (its oracles' ε)."""
    return lambda request, held, randomness: law(dataclasses.replace(request, **fields), held, randomness)


def test_mcm_law_and_users_agree_in_distribution() -> None:
    """OLH at e^ε = 3.6 for both reports (ε/2 each)."""
    part = math.log(3.6)
    wrong = olh_five_percent_up(part)
    config = load_config(overrides=SMALL + ["population.users=20000", "protocol.name=mcm", f"privacy.epsilon={2 * part}"])
    assert_law_agrees(config, replaced(get_protocol("mcm").law, bit_epsilon=wrong, final_epsilon=wrong), seeds=60)


def test_bitstogram_law_and_users_agree_in_distribution() -> None:
    """Hashtogram bits at ε/2 each, the channels' pairs and the hashed whole values."""
    config = load_config(overrides=SMALL + ["population.users=20000", "protocol.name=bitstogram", "privacy.epsilon=4"])
    wrong = bit_five_percent_up(2.0)
    assert_law_agrees(config, replaced(get_protocol("bitstogram").law, bit_epsilon=wrong, final_epsilon=wrong), seeds=60)


def test_spm_law_and_users_agree_in_distribution() -> None:
    """OLH at e^ε = 3.6 for the three reports (ε/3 each), short segments."""
    part = math.log(3.6)
    config = load_config(overrides=SMALL + ["population.users=10000", "protocol.name=spm", "protocol.segment_bits=5",
                                            f"privacy.epsilon={3 * part}"])
    assert_law_agrees(config, replaced(get_protocol("spm").law, epsilon=olh_five_percent_up(part)), seeds=40)


def test_rappor_law_and_users_agree_in_distribution() -> None:
    """Bloom filters of 64 bits, 2 hashes, 8 cohorts; top-k reporting."""
    config = load_config(overrides=SMALL + ["population.users=20000", "protocol.name=rappor", "privacy.epsilon=4",
                                            "protocol.bloom_bits=64", "protocol.cohorts=8", "protocol.report=top_k"])
    # each bit at ε/2h = 1: the wrong law's bits keep with a 5 % higher probability
    wrong = 2 * 2 * bit_five_percent_up(1.0)
    assert_law_agrees(config, replaced(get_protocol("rappor").law, epsilon=wrong), seeds=40)


def test_central_law_and_users_agree_in_distribution() -> None:
    """Users holding several items each send one; the wrong law drops 5 % of the senders."""
    config = load_config(overrides=SMALL + ["population.users=5000", "population.words_per_user=3",
                                            "protocol.name=central", "privacy.epsilon=1"])
    law = get_protocol("central").law

    def dropping(request: object, held: CountedShard, randomness: KeyedRandomness) -> object:
        reply = law(request, held, randomness)
        return dataclasses.replace(reply, counts=np.maximum(np.rint(0.95 * reply.counts), 1).astype(np.int64))

    assert_law_agrees(config, dropping, seeds=60)


# -- moments of one round ---------------------------------------------------------------------------


def test_public_index_split_is_multinomial() -> None:
    """Each value's reporters over a public index of 7 values: multinomial moments, for values of
    fewer reporters than indexes (drawn reporter by reporter) and of more (one multinomial)."""
    reporters = np.array([0, 1, 3, 6, 7, 40])
    share = public_index_probabilities(7)
    draws = np.array([public_index_table(np.random.default_rng(seed), reporters, 7).ravel() for seed in range(4000)])
    mean = np.outer(reporters, share).ravel()
    assert_moments(draws, mean, np.outer(reporters, share * (1 - share)).ravel())
    assert np.array_equal(draws.reshape(-1, 6, 7).sum(axis=2), np.broadcast_to(reporters, (4000, 6)))




def first_request(protocol: str, extra: list[str], users: int = 3000) -> tuple[Experiment, CountedShard, object]:
    config = load_config(overrides=[*SMALL, f"population.users={users}", "run.simulation=law", f"protocol.name={protocol}",
                                    *extra])
    experiment = Experiment(config)
    shard = experiment.counted_shard(0, 1)
    return experiment, shard, experiment.make_server().next_request()


def law_draws(protocol: str, request: object, experiment: Experiment, flatten: Callable[[object], np.ndarray],
              replications: int = REPLICATIONS) -> np.ndarray:
    """The law's responses to ``request`` over ``replications`` seeds, flattened, each from fresh
    counts (nothing kept from another seed)."""
    law = get_protocol(protocol).law
    n = experiment.n_users
    return np.array([flatten(law(request, counted_users(experiment.source, 0, n, 0), KeyedRandomness(seed)))
                     for seed in range(replications)])


def reporters_of(shard: CountedShard) -> np.ndarray:
    """Users reporting each value of the value table (the empty value last), one item a user."""
    return np.append(shard.holders, shard.users_without_items)


def summed(reporters: np.ndarray, per_user: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of every cell of the sum over users, from each value's user moments."""
    mean = sum(count * first for count, (first, _) in zip(reporters, per_user))
    variance = sum(count * (second - first**2) for count, (first, second) in zip(reporters, per_user))
    return np.asarray(mean), np.maximum(np.asarray(variance), 0.0)


def bernoulli_support(p: float, q: float, value: int, candidates: np.ndarray) -> np.ndarray:
    """A report's chance of supporting each candidate: ``p`` its own value, ``q`` any other."""
    return np.where(candidates == np.uint64(value), p, q)


def assert_moments(draws: np.ndarray, mean: np.ndarray, variance: np.ndarray) -> None:
    assert moments_agree(draws, mean, variance)
    assert not moments_agree(draws, 1.05 * mean, variance)  # a law 5 % off fails


def test_mcm_rounds_have_the_exact_moments() -> None:
    """Bits round: a user at position l (probability π_l) supports pair x with p or q; final
    round: every user's key supports each candidate with p or q."""
    experiment, shard, request = first_request("mcm", ["privacy.epsilon=2"])
    bits, keys = value_table(shard.vocabulary, request.value_bits)
    channels = hash_keys(np.uint64(request.channel_seed), keys, request.channels).astype(np.int64)
    oracle = make_oracle("olh", epsilon=request.bit_epsilon, domain=2 * request.channels)
    pairs = np.arange(2 * request.channels, dtype=np.uint64)
    share = public_index_probabilities(request.value_bits)
    per_user = []
    for v in range(keys.size):
        cells = np.concatenate([share[l] * bernoulli_support(oracle.p, oracle.q, 2 * channels[v] + bits[v, l], pairs)
                                for l in range(request.value_bits)])
        first = np.append(cells, share)
        per_user.append((first, first))  # every cell a Bernoulli
    draws = law_draws("mcm", request, experiment, lambda r: np.concatenate((r.counts, r.reporters)))
    assert_moments(draws, *summed(reporters_of(shard), per_user))

    candidates = keys[np.r_[0:5, keys.size - 1]]
    final = dataclasses.replace(request, mode="final", candidates=candidates)
    full = make_oracle("olh", epsilon=request.final_epsilon, domain=1 << request.value_bits)
    per_user = [(np.append(bernoulli_support(full.p, full.q, int(key), candidates), 1.0),) * 2 for key in keys]
    draws = law_draws("mcm", final, experiment, lambda r: np.concatenate((r.counts, r.reporters)))
    assert_moments(draws, *summed(reporters_of(shard), per_user))


def test_bitstogram_round_has_the_exact_moments() -> None:
    """A user at position l (probability π_l) adds its pair's Hashtogram contribution to row l; every
    user adds its key's to the whole-value statistics."""
    experiment, shard, request = first_request("bitstogram", ["privacy.epsilon=4"])
    bits, keys = value_table(shard.vocabulary, request.value_bits)
    channels = hash_keys(np.uint64(request.channel_seed), keys, request.buckets).astype(np.int64)
    bit_oracle, final_oracle = request.bit_oracle(), request.final_oracle()
    share = public_index_probabilities(request.value_bits)
    per_user = []
    for v in range(keys.size):
        firsts, seconds = [], []
        for l in range(request.value_bits):
            first, second = user_moments(bit_oracle, int(2 * channels[v] + bits[v, l]))
            firsts.append(share[l] * first[:-1])  # the row's sums; its reporters are the position's
            seconds.append(share[l] * second[:-1])
        final_first, final_second = user_moments(final_oracle, int(keys[v]))
        per_user.append((np.concatenate([*firsts, share, final_first]), np.concatenate([*seconds, share, final_second])))
    draws = law_draws("bitstogram", request, experiment,
                      lambda r: np.concatenate((r.bit_sums.ravel(), r.bit_users, r.final_sums, r.final_users)), 300)
    assert_moments(draws, *summed(reporters_of(shard), per_user))


def spm_request(mode: str) -> tuple[Experiment, CountedShard, object]:
    experiment, shard, request = first_request("spm", ["privacy.epsilon=3", "protocol.segment_bits=5"])
    bounds = request.bounds
    widths = np.diff(bounds)
    patterns = [np.array([0, 1, 3, (1 << w) - 1], dtype=np.uint64) for w in widths]  # a few of each segment
    return experiment, shard, dataclasses.replace(
        request, mode=mode, patterns=np.concatenate(patterns),
        pattern_offsets=np.r_[0, np.cumsum([p.size for p in patterns])].astype(np.int64))


def spm_support(request: object, width: int) -> tuple[float, float]:
    oracle = make_oracle("olh", epsilon=request.epsilon, domain=1 << width)
    return oracle.p, oracle.q


def test_spm_segments_round_has_the_exact_moments() -> None:
    """A user of pair P (probability 1/C(g,2)) supports pattern x of each of P's segments with p or q."""
    experiment, shard, request = spm_request("segments")
    bits, _ = value_table(shard.vocabulary, request.value_bits)
    values = segment_keys(bits, request.bounds)
    pairs = segment_pairs(request.segments)
    share = public_index_probabilities(pairs.shape[0])
    per_user = []
    for v in range(values.shape[0]):
        cells, reporters = [], []
        for segment in range(request.segments):
            width = int(request.bounds[segment + 1] - request.bounds[segment])
            inside = share[(pairs == segment).any(axis=1)].sum()
            p, q = spm_support(request, width)
            cells.append(inside * bernoulli_support(p, q, int(values[v, segment]), np.arange(1 << width, dtype=np.uint64)))
            reporters.append(inside)
        first = np.concatenate([*cells, reporters])
        per_user.append((first, first))
    draws = law_draws("spm", request, experiment, lambda r: np.concatenate((r.counts, r.reporters)))
    assert_moments(draws, *summed(reporters_of(shard), per_user))


def test_spm_pairs_round_has_the_exact_moments() -> None:
    """A user of pair (i, j) supports x of C_i and y of C_j independently: ``A^T B``'s cell is a
    Bernoulli of probability π_P P(x) P(y), a column sum one of π_P P(x)."""
    experiment, shard, request = spm_request("pairs")
    bits, _ = value_table(shard.vocabulary, request.value_bits)
    values = segment_keys(bits, request.bounds)
    pairs = segment_pairs(request.segments)
    share = public_index_probabilities(pairs.shape[0])
    per_user = []
    for v in range(values.shape[0]):
        cells = []
        for pair, (i, j) in enumerate(pairs):
            a, b = (bernoulli_support(*spm_support(request, int(request.bounds[s + 1] - request.bounds[s])),
                                      int(values[v, s]), request.patterns[request.pattern_offsets[s]:request.pattern_offsets[s + 1]])
                    for s in (i, j))
            cells += [share[pair] * np.outer(a, b).ravel(), share[pair] * a, share[pair] * b]
        first = np.concatenate([*cells, share])
        per_user.append((first, first))
    draws = law_draws("spm", request, experiment, lambda r: np.concatenate((r.counts, r.reporters)), 800)
    assert_moments(draws, *summed(reporters_of(shard), per_user))


def test_spm_rounds_read_the_same_reports() -> None:
    """The pairs round's column sums, added over the pairs holding a segment, are the segments
    round's counts of its patterns: the rounds read one set of reports, as devices do."""
    experiment, shard, request = spm_request("segments")
    law = get_protocol("spm").law
    randomness = KeyedRandomness(7)
    segments = law(request, shard, randomness)
    pairs = law(dataclasses.replace(request, mode="pairs"), shard, randomness)
    sizes = np.diff(request.pattern_offsets)
    widths = np.diff(request.bounds)
    totals = [np.zeros(size, dtype=np.int64) for size in sizes]
    position = 0
    for i, j in segment_pairs(request.segments):
        position += sizes[i] * sizes[j]
        totals[i] += pairs.counts[position : position + sizes[i]]
        totals[j] += pairs.counts[position + sizes[i] : position + sizes[i] + sizes[j]]
        position += sizes[i] + sizes[j]
    starts = np.r_[0, np.cumsum(1 << widths)]
    for segment, total in enumerate(totals):
        patterns = request.patterns[request.pattern_offsets[segment] : request.pattern_offsets[segment + 1]]
        assert np.array_equal(total, segments.counts[starts[segment] + patterns.astype(np.int64)])
    fresh = law(dataclasses.replace(request, mode="pairs"), counted_users(experiment.source, 0, experiment.n_users, 0),
                KeyedRandomness(8))
    assert not np.array_equal(fresh.counts, pairs.counts)  # another seed's reports differ


def test_rappor_round_has_the_exact_moments() -> None:
    """A user in cohort c (probability π_c) reports bit b set with p' where its filter sets it, q' else."""
    experiment, shard, request = first_request("rappor", ["privacy.epsilon=4", "protocol.bloom_bits=16",
                                                          "protocol.cohorts=8"])
    encoder = request.encoder()
    p, q = encoder.probabilities
    share = public_index_probabilities(request.cohorts)
    keys = experiment.source.vocabulary
    from fedhh.protocols.rappor.encoding import vocabulary_keys

    item_keys = vocabulary_keys(keys)
    per_user = []
    for v in range(item_keys.size + 1):
        cells = np.full((request.cohorts, request.bloom_bits), q)
        if v < item_keys.size:
            for cohort in range(request.cohorts):
                cells[cohort, encoder.positions(item_keys[v : v + 1], np.array([cohort]))[0]] = p
        first = np.append((share[:, None] * cells).ravel(), share)
        per_user.append((first, first))
    draws = law_draws("rappor", request, experiment, lambda r: np.concatenate((r.ones, r.reporters)))
    assert_moments(draws, *summed(reporters_of(shard), per_user))


def test_central_round_has_the_exact_moments() -> None:
    """Several items a user: a user sends item i with probability its share f_u(i)."""
    experiment, shard, request = first_request("central", ["population.words_per_user=3"])
    users = experiment.source.build_users(0, experiment.n_users)
    owner = np.repeat(np.arange(users.n_users), np.diff(users.item_offsets))
    totals = np.bincount(owner, weights=users.item_counts, minlength=users.n_users)
    share = users.item_counts / totals[owner]
    size = shard.vocabulary.size
    mean = np.bincount(users.item_ids, weights=share, minlength=size)
    variance = np.bincount(users.item_ids, weights=share * (1 - share), minlength=size)
    index = {row.tobytes(): i for i, row in enumerate(shard.vocabulary.rows.astype(np.int64))}

    def dense(reply: object) -> np.ndarray:
        counts = np.zeros(size + 1)
        for row, count in zip(reply.items, reply.counts):
            counts[index[row.tobytes()]] = count
        counts[size] = reply.responding_users
        return counts

    law = get_protocol("central").law
    draws = np.array([dense(law(request, CountedShard.of_shard(users, users.n_users), KeyedRandomness(seed)))
                      for seed in range(REPLICATIONS)])
    holding = float(np.count_nonzero(np.diff(users.item_offsets)))
    assert_moments(draws, np.append(mean, holding), np.append(variance, 0.0))


@pytest.mark.parametrize("extra", [[], ["population.words_per_user=3"]], ids=["one-item", "several-items"])
def test_exact_law_is_the_users_reply(extra: list[str]) -> None:
    """Nothing is random: the law's reply from a shard's counts is its users' reply, field by field."""
    experiment, _, request = first_request("exact", extra)
    users = experiment.source.build_users(0, experiment.n_users)
    law = get_protocol("exact").law(request, CountedShard.of_shard(users, users.n_users), KeyedRandomness(0))
    reply = get_protocol("exact").respond(request, users, KeyedRandomness(0))
    for field in dataclasses.fields(reply):
        assert np.array_equal(getattr(law, field.name), getattr(reply, field.name)), field.name


# -- shards and the untrusting server ---------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["mcm", "bitstogram", "spm", "rappor", "sfp", "central", "exact"])
def test_law_replies_pass_the_server_checks_across_shards(protocol: str) -> None:
    """Every round of a law run on three shards: each shard's reply passes the checks of a server
    that cannot trust its nodes (a law sampler draws how its users split over bit positions,
    cohorts, segment pairs or fragment positions, which the server then takes as any split of the
    node's users), and
    a reply claiming one user more than the node holds is refused."""
    extra = {"spm": ["protocol.segment_bits=5"], "rappor": ["protocol.bloom_bits=64"],
             "sfp": ["protocol.max_length=4", "population.item_length=4"]}.get(protocol, [])
    config = load_config(overrides=[*SMALL, "population.users=5000", "run.simulation=law", f"protocol.name={protocol}",
                                    "run.shards=3", *extra])
    experiment = Experiment(config)
    spec = get_protocol(protocol)
    server = experiment.make_server()
    shards = [experiment.counted_shard(i, 3) for i in range(3)]
    rounds = 0
    while (request := server.next_request()) is not None:
        replies = [experiment.answer(request, shard) for shard in shards]
        for shard, reply in zip(shards, replies):
            node = SimpleNamespace(first_user=shard.first_user, users=shard.n_users)
            spec.check_reply(request, reply, node, server)
            with pytest.raises(InvalidReply):
                spec.check_reply(request, reply, SimpleNamespace(first_user=shard.first_user, users=shard.n_users - 1), server)
        server.absorb(spec.response_type.combine(replies))
        rounds += 1
    assert rounds == server.max_rounds and server.result().discoveries
