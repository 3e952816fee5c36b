"""RAPPOR: planted heavy hitters found and light ones not, unbiased counts with the predicted
spread, the exact ε of the Bloom-filter randomiser, the candidate dictionary, refusals, and
invariance to sharding and transport."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from fedhh.audits.ldp import audit_reports
from fedhh.config import ConfigError, load_config
from fedhh.data.items import ItemCodec, get_alphabet
from fedhh.data.population import Shard, Vocabulary
from fedhh.driving import drive
from fedhh.errors import InputError
from fedhh.experiment import Experiment
from fedhh.kernels.bernoulli_bytes import REFINEMENT_WORDS
from fedhh.kernels.randomness import KeyedRandomness
from fedhh.protocols import plan
from fedhh.protocols.rappor.analysis import count_noise
from fedhh.protocols.rappor.client import respond
from fedhh.protocols.rappor.encoding import BloomEncoder, vocabulary_keys
from fedhh.protocols.rappor.parameters import POPULATION_DICTIONARY_NOTE
from fedhh.protocols.rappor.server import RapporParameters, RapporServer, solve_normal
from simulations.fast import run_fast
from tests.helpers import planted_runs

SMALL_RUN = [
    'protocol.name="rappor"', 'population.source="zipf"', "population.users=30000", "population.vocabulary=2000",
    "population.item_length=4", "population.zipf_exponent=1.3", "protocol.max_length=4", "privacy.epsilon=6.0",
    "protocol.bloom_bits=64", "protocol.cohorts=64", "run.seed=9", "run.top_k=5",
]

# Shares of n = 60,000 users.  With ε = 8, h = 2 (bits at ε/4) and 5,000 candidates a count's noise
# is about 155 users and Bonferroni's z about 4.4, so an item needs about 680 users (1.1%) to be
# reported half the time: the heavy ones hold 18x and 11x that noise level, the light ones 0.4x.
PLANTED = {"apple": 0.05, "mango": 0.03, "kiwis": 0.001, "figgy": 0.001}
N_USERS, POOL = 60_000, 5_000
CODEC = ItemCodec(get_alphabet("lowercase"), 1, 5)


@pytest.fixture(scope="module")
def planted_population() -> Shard:
    """The planted words, the rest spread over random five-letter words (about 10 users each)."""
    generator = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    pool = sorted({"".join(generator.choice(letters, 5)) for _ in range(2 * POOL)} - set(PLANTED))[: POOL - len(PLANTED)]
    items = [item for item, share in PLANTED.items() for _ in range(int(share * N_USERS))]
    items += generator.choice(pool, N_USERS - len(items)).tolist()
    vocabulary, _ = Vocabulary.encode(sorted(set(items)), CODEC)
    index = {item: i for i, item in enumerate(vocabulary.items)}
    return Shard.single_item(vocabulary, 0, np.array([index[item] for item in items]))


def planted_server(shard: Shard, seed: int, epsilon: float = 8.0) -> RapporServer:
    server = RapporServer(RapporParameters(shard.n_users, epsilon, 64, 2, 128, ""), CODEC, seed)
    server.offer_vocabulary(shard.vocabulary)
    return server


def test_heavy_items_are_found_light_ones_are_not_and_counts_are_unbiased(planted_population: Shard) -> None:
    """In each of 12 runs (seeds: hash functions, cohorts, noise) the heavy words are reported and
    the light ones are not; false discoveries are at most Bonferroni's 5% per run; the estimates
    average to the truth within 4 standard errors and spread as the randomisation predicts."""
    runs = 12
    found = planted_runs(
        lambda run: planted_server(planted_population, run), respond, planted_population, PLANTED, range(runs)
    )
    counts, others = found.counts, found.others
    assert len(counts["apple"]) == len(counts["mango"]) == runs
    assert counts["kiwis"] == counts["figgy"] == []
    assert others <= 3  # Poisson(at most 0.05 x 12) exceeds 3 with probability below 1e-4
    predicted_sd = count_noise(N_USERS, 8.0, 2)
    for item in ("apple", "mango"):
        estimates = np.array(counts[item])
        assert abs(estimates.mean() - PLANTED[item] * N_USERS) < 4 * estimates.std(ddof=1) / math.sqrt(runs)
        # the randomisation's noise, plus a little from the light words' bits: chi-square spread of 12 runs
        assert 0.5 < estimates.std(ddof=1) / predicted_sd < 1.6


def test_the_plan_places_the_planted_words_on_either_side_of_the_threshold() -> None:
    """The planner's count for a half-time report, from the noise formula and Bonferroni's z,
    is what the runs above see: the heavy words far above it, the light ones far below."""
    planned = plan("rappor", n_users=N_USERS, epsilon=8.0, bloom_bits=64, bloom_hashes=2, cohorts=128, candidates=POOL)
    assert planned["count_standard_deviation"] == pytest.approx(count_noise(N_USERS, 8.0, 2))
    share = planned["share_found_half_the_time"]
    assert PLANTED["mango"] > 2 * share and PLANTED["kiwis"] < share / 5
    with pytest.raises(InputError, match="protocol.bloom_bits"):
        plan("rappor", n_users=N_USERS, epsilon=8.0, bloom_bits=16, cohorts=128, candidates=POOL)


@dataclass(frozen=True)
class BloomReports:
    """What a user sends: its cohort (public, drawn independently of the value) and its bits."""

    cohorts: np.ndarray
    bits: np.ndarray

    def __len__(self) -> int:
        return int(self.cohorts.size)


def test_the_bloom_filter_randomiser_is_exactly_epsilon_ldp() -> None:
    """Every report of 6 candidates (8-bit filters, 2 hashes, 2 cohorts) is enumerated: the worst
    ratio is e^ε up to the 32-bit thresholds, never above (two candidates with disjoint bits), and a
    smaller claim is refuted."""
    epsilon, domain, samples = 1.5, 6, 20_000
    encoder = BloomEncoder(epsilon, 8, 2, 2, hash_seed=11)
    vocabulary, _ = Vocabulary.encode(["ab", "ba", "cd", "dc", "ef", "fe"], CODEC)
    keys = vocabulary_keys(vocabulary)
    rng = np.random.default_rng(0)
    values = np.repeat(np.arange(domain), samples)
    cohorts = rng.integers(0, encoder.cohorts, values.size)
    byte_draws = rng.integers(0, 1 << 64, size=(values.size, encoder.byte_draw_words), dtype=np.uint64)
    hash_draws = rng.integers(0, 1 << 64, size=(values.size, encoder.hash_draw_words), dtype=np.uint64)

    def refine(undecided: np.ndarray) -> np.ndarray:
        return rng.integers(0, 1 << 64, size=(undecided.size, REFINEMENT_WORDS), dtype=np.uint64)

    masks = encoder.filter_masks(encoder.positions(keys[values], cohorts), np.ones(values.size, bool))
    packed = encoder.randomize(*masks, byte_draws, hash_draws, refine)
    bits = encoder.unpack(packed)
    reports = BloomReports(cohorts, bits)

    def probabilities(value: int, given: BloomReports) -> np.ndarray:
        filters = encoder.filters(np.full(len(given), keys[value]), given.cohorts, np.ones(len(given), bool))
        return encoder.report_probabilities(filters, given.bits) / encoder.cohorts

    audit = audit_reports("rappor", domain, epsilon, samples, reports, probabilities)
    assert audit.exhaustive and not audit.violated
    assert audit.epsilon_lower == pytest.approx(epsilon, rel=1e-8) and audit.epsilon_lower <= epsilon
    assert audit_reports("rappor", domain, 0.9 * epsilon, samples, reports, probabilities).violated


def test_a_dictionary_file_replaces_the_population_vocabulary(tmp_path: Path) -> None:
    """Only dictionary words can be found; the default (the population's vocabulary) is named
    as outside what a deployment has, in the privacy report's coverage."""
    experiment = Experiment(load_config(None, SMALL_RUN))
    default = run_fast(experiment, 1, "inprocess").result
    assert POPULATION_DICTIONARY_NOTE in default.privacy.coverage.not_covered
    top = [d.item for d in default.discoveries]
    assert len(top) >= 2
    dictionary = tmp_path / "words.txt"
    dictionary.write_text("\n".join([top[1], "zzzz", "qqqq"]) + "\n", encoding="utf-8")
    chosen = Experiment(load_config(None, [*SMALL_RUN, f'protocol.candidates="{dictionary}"']))
    result = run_fast(chosen, 1, "inprocess").result
    assert [d.item for d in result.discoveries] == [top[1]]
    assert POPULATION_DICTIONARY_NOTE not in result.privacy.coverage.not_covered
    assert result.params["candidates"] == 3


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        (["protocol.bloom_bits=16", "protocol.cohorts=64"], "protocol.bloom_bits"),  # 1,024 bits < 2,000 candidates
        (['protocol.candidates="/nonexistent/words.txt"'], "protocol.candidates"),
        (["protocol.bloom_hashes=0"], "protocol.bloom_hashes"),
        (["privacy.epsilon=200.0"], "privacy.epsilon"),
        (['protocol.report="best"'], "protocol.report"),
        (['protocol.report="top_k"', "protocol.top_k=0"], "protocol.top_k"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(settings: list[str], key: str) -> None:
    with pytest.raises((ConfigError, InputError), match=key):
        Experiment(load_config(None, [*SMALL_RUN, *settings]))


@pytest.mark.parametrize(("report", "top_k", "key"), [("top-k", 5, "protocol.report"), ("top_k", 0, "protocol.top_k")])
def test_bad_report_settings_are_refused_by_the_parameters_too(report: str, top_k: int, key: str) -> None:
    with pytest.raises(InputError, match=key):
        RapporParameters(N_USERS, 8.0, 64, 2, 128, "", report=report, top_k=top_k)


def test_the_default_reports_exactly_the_significant_candidates(planted_population: Shard) -> None:
    """Without protocol.report, what is reported is every regressed candidate whose estimate clears
    Bonferroni's level, best first, and nothing else; naming the default changes nothing."""
    server = planted_server(planted_population, 5)
    result = drive(server, lambda request: [respond(request, planted_population, KeyedRandomness(5))])
    regression = server._regression
    assert regression is not None
    clears = regression.estimates > regression.threshold * regression.errors
    expected = sorted(zip(regression.estimates[clears].tolist(), regression.candidates[clears].tolist()), reverse=True)
    assert [(d.estimated_count, planted_population.vocabulary.items.index(d.item)) for d in result.discoveries] == expected
    assert {d.item for d in result.discoveries} >= {"apple", "mango"}
    assert result.trace[0].values["significant"] == len(result.discoveries) and "reported" not in result.trace[0].values
    named = RapporServer(RapporParameters(N_USERS, 8.0, 64, 2, 128, "", report="significant"), CODEC, 5)
    named.offer_vocabulary(planted_population.vocabulary)
    again = drive(named, lambda request: [respond(request, planted_population, KeyedRandomness(5))])
    assert run_view(again) == run_view(result)


def test_top_k_reports_the_k_best_estimates_whatever_their_significance(planted_population: Shard) -> None:
    """protocol.report = top_k: exactly K candidates, best estimate first, the heavy words leading,
    although only the heavy ones are significant; the privacy report is the default's."""
    k = 7
    default = planted_server(planted_population, 5)
    significant = drive(default, lambda request: [respond(request, planted_population, KeyedRandomness(5))])
    server = RapporServer(RapporParameters(N_USERS, 8.0, 64, 2, 128, "", report="top_k", top_k=k), CODEC, 5)
    server.offer_vocabulary(planted_population.vocabulary)
    result = drive(server, lambda request: [respond(request, planted_population, KeyedRandomness(5))])
    estimates = [d.estimated_count for d in result.discoveries]
    assert len(result.discoveries) == k > len(significant.discoveries)
    assert estimates == sorted(estimates, reverse=True)
    assert [d.item for d in result.discoveries[:2]] == ["apple", "mango"]
    assert result.trace[0].values["reported"] == k and result.params["report"] == "top_k"
    assert result.privacy.to_dict() == significant.privacy.to_dict()


def run_view(result) -> list[tuple[str, float | None]]:  # noqa: ANN001
    return [(d.item, d.estimated_count) for d in result.discoveries]


def test_one_and_seven_shards_and_flower_give_the_same_run(tmp_path: Path) -> None:
    from simulations.flower import run_flower_simulation

    config = load_config(None, SMALL_RUN)
    one = run_fast(Experiment(config), 1, "inprocess").result
    seven = run_fast(Experiment(config), 7, "inprocess").result
    assert len(one.discoveries) >= 3 and run_view(one) == run_view(seven)
    document = run_flower_simulation(config, 2, output_dir=tmp_path / "out")
    assert [(h["item"], h["estimated_count"]) for h in document["heavy_hitters"]] == run_view(one)
    assert document["rounds"][0]["nodes_answered"] == 2


def test_the_normal_equations_give_the_estimates_and_the_inverse_diagonal() -> None:
    """β and diag((XᵀX)⁻¹) against numpy's inverse; with two identical columns (candidates sharing
    every bit) the pseudo-inverse gives the twins the same estimate."""
    rng = np.random.default_rng(4)
    design = rng.integers(0, 2, size=(300, 12)).astype(np.float64)  # 0/1, as the regression's, exact arithmetic
    target = rng.standard_normal(300)
    beta, diagonal = solve_normal(design.T @ design, design.T @ target)
    inverse = np.linalg.inv(design.T @ design)
    assert np.allclose(beta, inverse @ design.T @ target) and np.allclose(diagonal, np.diag(inverse))
    twins = np.column_stack([design, design[:, 0]])
    beta, diagonal = solve_normal(twins.T @ twins, twins.T @ target)
    assert beta[0] == pytest.approx(beta[-1]) and np.all(np.isfinite(diagonal))
    assert np.allclose(twins @ beta, design @ np.linalg.lstsq(design, target, rcond=None)[0])
