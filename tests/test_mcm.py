"""MCM ([Wang19] §III-D with §VI-A's OLH, k^1.5 channels and top-k): heavy values recovered bit by
bit and estimated without bias, light ones not, exact ε/2 reports, invariance to sharding and
transport, bad settings refused naming the key."""

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
from fedhh.protocols import plan
from fedhh.protocols.mcm.client import respond
from fedhh.protocols.mcm.parameters import MCMParameters, mcm_parameters
from fedhh.protocols.mcm.plan import discovery_probability
from fedhh.protocols.mcm.server import MCMServer

from .helpers import flower_matches_fast, one_and_seven_shards, planted_runs

SMALL_RUN = [
    'protocol.name="mcm"', 'population.source="zipf"', "population.users=30000", "population.vocabulary=2000",
    "population.item_length=4", "population.zipf_exponent=1.5", "protocol.max_length=4", "privacy.epsilon=8.0",
    "run.seed=9", "run.top_k=5", "protocol.top_k=8",
]
PLANTED = {"apple": 0.12, "mango": 0.09, "kiwis": 0.0005, "figgy": 0.0005}


@pytest.fixture(scope="module")
def planted_population() -> Shard:
    """100,000 users: four planted words, the rest spread over 10,000 random words (about 8 users each)."""
    n_users = 100_000
    generator = np.random.default_rng(2)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    pool = sorted({"".join(generator.choice(letters, 5)) for _ in range(15_000)} - set(PLANTED))[:10_000]
    items = [item for item, share in PLANTED.items() for _ in range(int(share * n_users))]
    items += generator.choice(pool, n_users - len(items)).tolist()
    vocabulary, _ = Vocabulary.encode(sorted(set(items)), ItemCodec(get_alphabet("lowercase"), 1, 5))
    index = {item: i for i, item in enumerate(vocabulary.items)}
    return Shard.single_item(vocabulary, 0, np.array([index[item] for item in items]))


def test_heavy_values_are_found_light_ones_are_not_and_counts_are_unbiased(planted_population: Shard) -> None:
    """ε = 8 (ε/2 = 4 per report), m = 25 bits, h = 256 channels, k = 4.  At each bit position apple
    and mango have 480 and 360 holders among 4,000 reporters, against an OLH standard deviation of
    about 18 per pair estimate and a background of about 16 users per channel and position: every
    bit is recovered unless the two share a channel (probability 1/256 a run), so each is found in
    at least 18 of 20 runs (3 or more collisions: probability below 1e-4).  The light words (50
    users, 2 per position) are never recovered.  Final counts average to the truth within 4
    standard errors, with OLH's predicted spread (the sample standard deviation of about 20 runs
    is within 0.5..1.6 of it with probability above 0.999)."""
    n_users, runs = planted_population.n_users, 20
    params = MCMParameters(n_users, 8.0, 25, 256, 4)
    assert min(discovery_probability(params, PLANTED[w]) for w in ("apple", "mango")) > 0.98  # the planner agrees
    assert discovery_probability(params, PLANTED["kiwis"]) < 1e-3
    found = planted_runs(
        lambda run: MCMServer(params, planted_population.vocabulary.codec, run), respond, planted_population, PLANTED, range(runs)
    )
    counts, server = found.counts, found.server
    assert min(len(counts["apple"]), len(counts["mango"])) >= runs - 2
    assert counts["kiwis"] == counts["figgy"] == []
    other, same = server.final_oracle.per_user_variance()
    for item in ("apple", "mango"):
        holders = PLANTED[item] * n_users
        predicted_sd = math.sqrt((n_users - holders) * other + holders * same)
        estimates = np.array(counts[item])
        assert abs(estimates.mean() - holders) < 4 * predicted_sd / math.sqrt(estimates.size)
        assert 0.5 < estimates.std(ddof=1) / predicted_sd < 1.6


def test_channels_default_to_k_to_the_one_and_a_half_and_the_planner_is_registered() -> None:
    planned = plan("mcm", n_users=1_000_000, epsilon=4.0, value_bits=50)
    assert planned["channels"] == 182 and planned["discovery_rate"]["0.01"] > planned["discovery_rate"]["0.005"]
    assert mcm_parameters({"channels": 0, "top_k": 32}, 4.0, 1000, 50).channels == 182  # ceil(32^1.5)
    assert mcm_parameters({"channels": 0, "top_k": 1}, 4.0, 1000, 50).channels == 2


def test_every_report_is_exactly_its_share_of_epsilon() -> None:
    report = Experiment(load_config(None, SMALL_RUN)).privacy
    assert (report.epsilon, report.delta) == (8.0, 0.0)
    assert report.parameters["split"] == {"(channel, bit) pair at a uniformly chosen bit position": 4.0, "full value": 4.0}
    audit = audit_oracle("olh", 4.0, 16, samples=200)  # the (channel, bit) report of 8 channels
    assert audit.exhaustive and not audit.violated and audit.epsilon_lower == pytest.approx(4.0)
    assert audit_oracle("olh", 4.0, 16, samples=200, claimed_epsilon=3.9).violated


def test_one_and_seven_shards_give_the_same_run() -> None:
    discoveries = one_and_seven_shards(SMALL_RUN)
    assert [item for item, _ in discoveries][:2] == ["vcby", "hbnc"]  # the two heaviest


def test_flower_simulation_matches_the_fast_driver(tmp_path: Path) -> None:
    found, rounds = flower_matches_fast(SMALL_RUN, tmp_path / "out")
    assert len(found) >= 2 and rounds == 2


@pytest.mark.parametrize(
    ("setting", "error", "message"),
    [
        ("protocol.channels=1", ConfigError, r"protocol.channels: got 1; must be 0 or in 2..65,536"),
        ("protocol.top_k=0", ConfigError, r"protocol.top_k: got 0"),
        ("privacy.epsilon=200.0", InputError, r"privacy.epsilon"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(setting: str, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        Experiment(load_config(None, [*SMALL_RUN, setting])).make_server()
