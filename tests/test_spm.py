"""SPM ([Wang19] §III-C with §VI-A's OLH and top-k): the pair estimator against its derivation,
heavy values found and estimated without bias, light ones not, exact ε/3 reports, invariance to
sharding and transport, bad settings refused naming the key."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from fedhh.audits.ldp import audit_oracle
from fedhh.config import ConfigError, load_config
from fedhh.data.items import ItemCodec, get_alphabet
from fedhh.data.population import Shard, Vocabulary
from fedhh.errors import InputError
from fedhh.experiment import Experiment
from fedhh.kernels.randomness import KeyedRandomness
from fedhh.protocols import plan
from fedhh.protocols.common.prefix_encoding import PrefixEncoding
from fedhh.protocols.spm.client import respond, segment_keys
from fedhh.protocols.spm.parameters import SPMParameters
from fedhh.protocols.spm.plan import stage_margins
from fedhh.protocols.spm.server import SPMServer

from .helpers import flower_matches_fast, one_and_seven_shards, planted_runs

SMALL_RUN = [
    'protocol.name="spm"', 'population.source="zipf"', "population.users=30000", "population.vocabulary=2000",
    "population.item_length=4", "population.zipf_exponent=1.5", "protocol.max_length=4", "privacy.epsilon=8.0",
    "run.seed=9", "run.top_k=5", "protocol.top_k=8", "protocol.segment_bits=7",
]
PLANTED = {"apple": 0.12, "mango": 0.09, "kiwis": 0.0005, "figgy": 0.0005}
EPSILON = 12.0  # ε/3 = 4 per report


@pytest.fixture(scope="module")
def planted_population() -> Shard:
    """50,000 users: four planted words, the rest spread over 10,000 random words (about 4 users each)."""
    n_users = 50_000
    generator = np.random.default_rng(1)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    pool = sorted({"".join(generator.choice(letters, 5)) for _ in range(15_000)} - set(PLANTED))[:10_000]
    items = [item for item, share in PLANTED.items() for _ in range(int(share * n_users))]
    items += generator.choice(pool, n_users - len(items)).tolist()
    vocabulary, _ = Vocabulary.encode(sorted(set(items)), ItemCodec(get_alphabet("lowercase"), 1, 5))
    index = {item: i for i, item in enumerate(vocabulary.items)}
    return Shard.single_item(vocabulary, 0, np.array([index[item] for item in items]))


def params(n_users: int, top_k: int = 4) -> SPMParameters:
    return SPMParameters(n_users, EPSILON, 25, 10, top_k)  # segments of 10, 10 and 5 bits: 3 pairs


def test_heavy_values_are_found_light_ones_are_not_and_counts_are_unbiased(planted_population: Shard) -> None:
    """k = 4.  The heavy words' 10-bit patterns stand 6,000 and 4,500 x 2/3 reporters above a
    background of about 70 users a pattern, with a standard deviation of about 50 (OLH at ε = 4
    over 33,000 reports): they are kept in every segment, pair and final stage in every one of 24
    runs.  The light words (25 users) are never among the reported 4.  The final counts average
    to the truth within 4 standard errors, with OLH's predicted spread (sample standard deviation
    of 24 runs within 0.55..1.5 of it with probability above 0.999)."""
    n_users, runs = planted_population.n_users, 24
    assert min(stage_margins(params(n_users), PLANTED["mango"]).values()) > 8  # the planner's view of mango
    found = planted_runs(
        lambda run: SPMServer(params(n_users), planted_population.vocabulary.codec, run), respond, planted_population, PLANTED, range(runs)
    )
    counts, server = found.counts, found.server
    assert len(counts["apple"]) == len(counts["mango"]) == runs
    assert counts["kiwis"] == counts["figgy"] == []
    for item in ("apple", "mango"):
        holders = PLANTED[item] * n_users
        other, same = server.oracle.per_user_variance()
        predicted_sd = math.sqrt((n_users - holders) * other + holders * same)
        estimates = np.array(counts[item])
        assert abs(estimates.mean() - holders) < 4 * predicted_sd / math.sqrt(runs)
        assert 0.55 < estimates.std(ddof=1) / predicted_sd < 1.5


def test_pair_estimates_are_unbiased(planted_population: Shard) -> None:
    """The joint count of (x, y) from two independent ε/3 reports, (ΣAB - qΣA - qΣB + n q^2)/(p - q)^2
    scaled by the number of pairs, minus the users holding both patterns, averages to 0 in every
    cell of C_0 x C_1 (4 standard errors of the 20 runs' own spread); apple's cell is among them."""
    codec = planted_population.vocabulary.codec
    bits = PrefixEncoding("bits", codec).units(planted_population.vocabulary)[planted_population.item_of_user]
    values = segment_keys(bits, np.array([0, 10, 20, 25]))
    errors, largest = [], []
    for run in range(20):
        server = SPMServer(params(planted_population.n_users), codec, run)
        randomness = KeyedRandomness(run)
        server.absorb(respond(server.next_request(), planted_population, randomness))
        first, second = server._patterns[0], server._patterns[1]  # C_0, C_1 as this run's segment stage kept them
        joint = server.pair_estimates(respond(server.next_request(), planted_population, randomness))[0, 1]
        truth = ((values[:, 0, None, None] == first[None, :, None]) & (values[:, 1, None, None] == second[None, None, :])).sum(axis=0)
        errors.append(joint - truth)
        largest.append(truth.max())
    errors = np.array(errors)
    assert set(largest) == {PLANTED["apple"] * planted_population.n_users}
    standard_error = errors.std(axis=0, ddof=1) / math.sqrt(len(errors))
    assert np.all(np.abs(errors.mean(axis=0)) < 4 * standard_error), errors.mean(axis=0) / standard_error


def test_the_planner_is_registered_and_longer_segments_mean_fewer_pairs() -> None:
    planned = plan("spm", n_users=1_000_000, epsilon=4.0, value_bits=50)
    assert (planned["segment_bits"], planned["segment_bounds"]) == (14, [0, 14, 28, 42, 50])
    assert planned["users_per_pair"] == pytest.approx(1_000_000 / 6)
    margins = planned["standard_deviations_above_absent"]
    assert margins["0.01"]["final"] == pytest.approx(2 * margins["0.005"]["final"])


def test_every_report_is_exactly_its_share_of_epsilon() -> None:
    report = Experiment(load_config(None, SMALL_RUN)).privacy
    assert report.epsilon == 8.0 and report.delta == 0.0
    assert list(report.parameters["split"].values()) == pytest.approx([8 / 3] * 3)
    audit = audit_oracle("olh", 8 / 3, 16, samples=200)  # a 4-bit segment's report
    assert audit.exhaustive and not audit.violated and audit.epsilon_lower == pytest.approx(8 / 3)
    assert audit_oracle("olh", 8 / 3, 16, samples=200, claimed_epsilon=2.5).violated


def test_one_and_seven_shards_give_the_same_run() -> None:
    discoveries = one_and_seven_shards(SMALL_RUN)
    assert [item for item, _ in discoveries][:3] == ["vcby", "hbnc", "cpmd"]  # the three heaviest


def test_flower_simulation_matches_the_fast_driver(tmp_path: Path) -> None:
    found, rounds = flower_matches_fast(SMALL_RUN, tmp_path / "out")
    assert len(found) >= 3 and rounds == 3


@pytest.mark.parametrize(
    ("setting", "error", "message"),
    [
        ("protocol.segment_bits=21", ConfigError, r"protocol.segment_bits: got 21; must be in 0..20"),
        ("protocol.segment_bits=20", InputError, r"protocol.segment_bits: 20 bits leave one segment"),
        ("privacy.epsilon=200.0", InputError, r"privacy.epsilon"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(setting: str, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        Experiment(load_config(None, [*SMALL_RUN, setting])).make_server()
