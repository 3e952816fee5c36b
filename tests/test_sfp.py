"""SFP: planted words reassembled from their fragments and light ones not, unbiased full-word
counts with the sketch's variance, the exact ε of a user's two reports, refusals, and
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
from fedhh.kernels.randomness import KeyedRandomness
from fedhh.oracles.histogram import Histogram
from fedhh.oracles.sketches import SketchReports
from fedhh.protocols import plan
from fedhh.protocols.sfp.client import respond
from fedhh.protocols.sfp.encoding import vocabulary_values
from fedhh.protocols.sfp.server import SFPParameters, SFPServer
from simulations.fast import run_fast

SMALL_RUN = [
    'protocol.name="sfp"', 'population.source="zipf"', "population.users=30000", "population.vocabulary=2000",
    "population.item_length=4", "population.zipf_exponent=1.3", "protocol.max_length=4", "privacy.epsilon=8.0",
    "protocol.fragment_sketch_rows=8", "protocol.fragment_sketch_width=256", "run.seed=9", "run.top_k=5",
]

# Shares of n = 60,000 users holding six-letter words: three fragments of two letters.  With HCMS at
# ε = 4 per report a fragment's count estimate has a noise of about 440 users (20,000 reporters per
# position, scaled by 3) and the noise level over 186,624 (fragment, hash) pairs is z = 4.4 times
# that, about 3% of n: "apples" and "orange" hold 5x and 3x as many users, "grapes" and "banana" 1/15.
PLANTED = {"apples": 0.15, "orange": 0.10, "grapes": 0.002, "banana": 0.002}
N_USERS, POOL = 60_000, 5_000
CODEC = ItemCodec(get_alphabet("lowercase"), 1, 6)


@pytest.fixture(scope="module")
def planted_population() -> Shard:
    return planted(PLANTED)


def planted(shares: dict[str, float]) -> Shard:
    """The planted words, the rest spread over random six-letter words (about 9 users each)."""
    generator = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    pool = sorted({"".join(generator.choice(letters, 6)) for _ in range(2 * POOL)} - set(shares))[: POOL - len(shares)]
    items = [item for item, share in shares.items() for _ in range(int(share * N_USERS))]
    items += generator.choice(pool, N_USERS - len(items)).tolist()
    vocabulary, _ = Vocabulary.encode(sorted(set(items)), CODEC)
    index = {item: i for i, item in enumerate(vocabulary.items)}
    return Shard.single_item(vocabulary, 0, np.array([index[item] for item in items]))


def planted_server(seed: int, oracle: str = "hcms", word_pass: bool = True) -> SFPServer:
    return SFPServer(SFPParameters(N_USERS, 8.0, 2, 0.5, word_pass, 64, 32, oracle, 8, 1024), CODEC, seed)


def test_heavy_words_are_reassembled_light_ones_are_not_and_counts_are_unbiased(planted_population: Shard) -> None:
    """In each of 16 runs the heavy words are reassembled and nothing else is (the hash keeps the
    fragments of "apples" and "orange" apart); the full-word estimates average to the truth within
    4 standard errors of the count-mean sketch's variance formula, and spread as it predicts."""
    runs = 16
    counts: dict[str, list[float]] = {item: [] for item in PLANTED}
    others: list[str] = []
    # Seeds 16..31: since SFP's draws come from RangeRandom, seed 2 of 0..15 reassembles one pool word
    # (estimate 2) from kept collision fragments whose hash matches; seeds 16..55 do so in none of 40 runs.
    for run in range(16, 16 + runs):
        server = planted_server(run)
        randomness = KeyedRandomness(run)
        result = drive(server, lambda request: [respond(request, planted_population, randomness)])
        for found in result.discoveries:
            (counts[found.item] if found.item in counts else others).append(found.estimated_count)  # type: ignore[arg-type]
    assert len(counts["apples"]) == len(counts["orange"]) == runs
    assert counts["grapes"] == counts["banana"] == [] and others == []
    vocabulary = planted_population.vocabulary
    _, words = vocabulary_values(server.fragments, vocabulary)
    truth = Histogram.of(words[planted_population.item_of_user])
    oracle = server._request.word_oracle()
    for item in ("apples", "orange"):
        key = words[vocabulary.items.index(item)]
        variance = float(oracle.variance(np.array([key]), truth)[0])
        estimates = np.array(counts[item])
        assert abs(estimates.mean() - PLANTED[item] * N_USERS) < 4 * math.sqrt(variance / runs)
        assert abs(estimates.var(ddof=1) / variance - 1) < 4 * math.sqrt(2 / (runs - 1))


def test_without_the_word_report_the_whole_budget_goes_to_the_fragments(planted_population: Shard) -> None:
    server = planted_server(3, word_pass=False)
    result = drive(server, lambda request: [respond(request, planted_population, KeyedRandomness(3))])
    assert [d.item for d in result.discoveries] == ["apples", "orange"]
    assert result.privacy.parameters["split"] == {"fragment with the word's 8-bit hash": 8.0}
    assert abs(result.discoveries[0].estimated_count - 9000) < 5 * 300  # mean of three fragments at ε = 8


def test_the_plan_places_the_planted_words_on_either_side_of_the_fragment_threshold() -> None:
    planned = plan("sfp", n_users=N_USERS, epsilon=8.0, max_length=6, oracle="hcms", rows=8, width=1024)
    threshold = planned["fragment_threshold_count"] / N_USERS
    assert planned["positions"] == 3 and planned["pairs_per_position"] == 27**2 * 256
    assert PLANTED["orange"] > 2 * threshold and PLANTED["grapes"] < threshold / 5
    with pytest.raises(InputError, match="protocol.fragment_length"):
        plan("sfp", n_users=N_USERS, epsilon=8.0, max_length=6, fragment_length=4)


@dataclass(frozen=True)
class UserReports:
    """All a user sends: its position (public), its fragment report and its word report."""

    positions: np.ndarray
    fragment: SketchReports
    word: SketchReports

    def __len__(self) -> int:
        return int(self.positions.size)


def test_a_users_two_reports_are_exactly_epsilon_ldp() -> None:
    """Every report of 6 two-letter words (one-letter fragments, one-row two-bucket CMS sketches) is
    enumerated: the worst ratio is e^ε, the fragment's and the word's shares multiplied."""
    epsilon, samples = 2.0, 4000
    codec = ItemCodec(get_alphabet("lowercase"), 1, 2)
    server = SFPServer(SFPParameters(1000, epsilon, 1, 0.5, True, 8, 8, "cms", 1, 2), codec, 5)
    request = server.next_request()
    vocabulary, _ = Vocabulary.encode(["ab", "cd", "ef", "gh", "ij", "kl"], codec)
    fragment_keys, words = vocabulary_values(server.fragments, vocabulary)
    fragment_oracle, word_oracle = request.fragment_oracle(codec), request.word_oracle()
    rng = np.random.default_rng(0)
    values = np.repeat(np.arange(vocabulary.size), samples)
    positions = rng.integers(0, server.positions, values.size)
    reports = UserReports(
        positions,
        fragment_oracle.randomize(fragment_keys[values, positions], rng),
        word_oracle.randomize(words[values], rng),
    )

    def probabilities(value: int, given: UserReports) -> np.ndarray:
        fragment = np.empty(len(given))
        for position in range(server.positions):
            at = np.flatnonzero(given.positions == position)
            part = SketchReports(given.fragment.rows[at], given.fragment.inner.take(at))
            fragment[at] = fragment_oracle.report_probabilities(int(fragment_keys[value, position]), part)
        return fragment * word_oracle.report_probabilities(int(words[value]), given.word) / server.positions

    audit = audit_reports("sfp", vocabulary.size, epsilon, samples, reports, probabilities)
    assert audit.exhaustive and not audit.violated
    assert audit.epsilon_lower == pytest.approx(epsilon, rel=1e-9)
    assert audit_reports("sfp", vocabulary.size, 0.9 * epsilon, samples, reports, probabilities).violated


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        (["protocol.fragment_length=3"], "protocol.fragment_length"),  # 3 does not divide 4 symbols
        (["protocol.fragment_length=4"], "protocol.fragment_length"),  # 27^4 x 256 pairs: too many to enumerate
        (["protocol.fragment_share=0.0"], "protocol.fragment_share"),
        (["protocol.fragment_share=1.0"], "protocol.fragment_share"),
        (["protocol.fragment_sketch_rows=64", "protocol.fragment_sketch_width=65536"], "protocol.fragment_sketch_width"),
        (['protocol.fragment_oracle="olh"'], "protocol.fragment_oracle"),
        (['protocol.report="all"'], "protocol.report"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(settings: list[str], key: str) -> None:
    with pytest.raises((ConfigError, InputError), match=key):
        Experiment(load_config(None, [*SMALL_RUN, *settings]))


def test_a_bad_report_mode_is_refused_by_the_parameters_too() -> None:
    with pytest.raises(InputError, match="protocol.report"):
        SFPParameters(N_USERS, 8.0, 2, 0.5, True, 64, 32, "hcms", 8, 1024, report="top-k")


FRUITS = ("apples", "orange", "grapes", "banana", "cherry", "lemons", "melons", "papaya", "quince", "raisin",
          "tomato", "walnut")


def test_top_k_reports_the_best_words_whatever_their_noise() -> None:
    """Twelve words held by 4% of the users each, near SFP's noise level (about 3% here): by default
    only the fragments above it are kept and fewer than K = 8 words are reported; protocol.report =
    top_k keeps protocol.fragment_candidates pairs per position whatever their noise, assembles every
    word, and reports exactly K, best estimate first (every word the puzzle assembles when K is
    larger); the privacy report is the default's."""
    shard = planted({fruit: 0.04 for fruit in FRUITS})

    def run(report: str, fragments: int, words: int):  # noqa: ANN202
        params = SFPParameters(N_USERS, 8.0, 2, 0.5, True, fragments, words, "hcms", 8, 1024, report=report)
        return drive(SFPServer(params, CODEC, 3), lambda request: [respond(request, shard, KeyedRandomness(3))])

    default, top, every = run("significant", 64, 8), run("top_k", 64, 8), run("top_k", 64, 64)
    assert max(default.trace[0].values["fragments_kept"]) < 64 and top.trace[0].values["fragments_kept"] == [64, 64, 64]
    assert len(default.discoveries) < 8 and {d.item for d in default.discoveries} <= set(FRUITS)
    estimates = [d.estimated_count for d in top.discoveries]
    assert len(top.discoveries) == 8 and {d.item for d in top.discoveries} <= set(FRUITS)
    assert estimates == sorted(estimates, reverse=True)
    assert [d.item for d in every.discoveries[:8]] == [d.item for d in top.discoveries]
    assert len(every.discoveries) == every.trace[0].values["candidates"] < 64
    # every planted word is assembled and estimated above any word a hash collision assembles (near 0)
    assert {d.item for d in every.discoveries[: len(FRUITS)]} == set(FRUITS)
    assert top.params["report"] == "top_k" and default.params["report"] == "significant"
    assert top.privacy.to_dict() == default.privacy.to_dict()


def run_view(result) -> list[tuple[str, float | None]]:  # noqa: ANN001
    return [(d.item, d.estimated_count) for d in result.discoveries]


def test_one_and_seven_shards_and_flower_give_the_same_run(tmp_path: Path) -> None:
    from simulations.flower import run_flower_simulation

    config = load_config(None, SMALL_RUN)
    one = run_fast(Experiment(config), 1, "inprocess").result
    seven = run_fast(Experiment(config), 7, "inprocess").result
    assert len(one.discoveries) >= 2 and run_view(one) == run_view(seven)
    assert one.privacy.parameters["split"] == {"fragment with the word's 8-bit hash": 4.0, "full word": 4.0}
    document = run_flower_simulation(config, 2, output_dir=tmp_path / "out")
    assert [(h["item"], h["estimated_count"]) for h in document["heavy_hitters"]] == run_view(one)
    assert document["rounds"][0]["nodes_answered"] == 2
