"""TAPS, the target-aligning prefix tree: each user's one report is ε-LDP, the words common to the
parties' heads are found, one shard, several and Flower agree, and bad configs are refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedhh.config import load_config
from fedhh.data.sources import party_bounds, wordfreq_candidates
from fedhh.errors import InputError
from fedhh.experiment import Experiment
from simulations.fast import run_fast

from .helpers import flower_matches_fast, run_view

LANGUAGES = ["en", "fr", "de", "es"]
PARTIES = [
    'protocol.name="taps"',
    f'population.languages="{",".join(LANGUAGES)}"',
    "population.users=100000",
    "population.vocabulary=2000",
    "protocol.top_k=20",
    "run.top_k=20",
]


def run(overrides: list[str], shards: int = 1):
    return run_fast(Experiment(load_config(None, [*PARTIES, *overrides])), shards, "inprocess")


def test_each_user_reports_once_with_the_whole_epsilon() -> None:
    """The guarantee is ε-LDP per user by basic composition of one report: every round asks the
    oracle at ε, each user reports in at most one round (the parties' reporters over all rounds add
    up to the users), and the report states ε, δ = 0 in the local model."""
    config = load_config(None, [*PARTIES, "privacy.epsilon=2.5"])
    experiment = Experiment(config)
    server = experiment.make_server()
    from fedhh.driving import drive
    from fedhh.kernels.randomness import KeyedRandomness
    from fedhh.protocols.taps.client import respond

    shard = experiment.source.build_users(0, 100_000)
    randomness = KeyedRandomness(0)
    epsilons, reporters = set(), 0

    def answer(request):
        nonlocal reporters
        epsilons.add(request.epsilon)
        response = respond(request, shard, randomness)
        reporters += int(response.reporters.sum())
        return [response]

    drive(server, answer)
    assert epsilons == {2.5}
    assert reporters == 100_000
    report = server.privacy_report()
    assert (report.epsilon, report.delta) == (2.5, 0.0)
    assert "local" in report.model.lower()


def test_an_ended_word_is_estimated_from_every_level_since_it_ended() -> None:
    """Under consensus, "the" (3 characters of 5 bits, so ended from the level of 20 bits on) is
    estimated in the English party from the 7 levels since it ended: its last-level variance is the
    inverse of the sum of those levels' inverse variances (each the oracle's, scaled to the party),
    and its estimate is within 4 of those standard deviations of its true count."""
    from fedhh.driving import drive
    from fedhh.kernels.randomness import KeyedRandomness
    from fedhh.protocols.taps.client import respond

    experiment = Experiment(load_config(None, [*PARTIES, "privacy.epsilon=4"]))
    server = experiment.make_server()
    shard = experiment.source.build_users(0, 100_000)
    randomness = KeyedRandomness(0)
    drive(server, lambda request: [respond(request, shard, randomness)])
    lengths = server.describe()["prefix_lengths"]
    assert lengths[2] == 20 and len(lengths) == 9
    users = int(server.party_users[0])
    variances = [server.oracle(length).linear_variance(record.server_view["reporters"][0]).zero_count
                 * (users / record.server_view["reporters"][0]) ** 2 for length, record in zip(lengths, server.trace)]
    last = server._levels[-1][0]
    index = [server.encoding.decode(row) for row in last.rows].index("the")
    assert last.variances[index] == pytest.approx(1 / sum(1 / v for v in variances[2:]), rel=1e-9)
    items = np.asarray(shard.item_of_user)[:users]
    true_count = int(np.sum(items == shard.vocabulary.items.index("the")))
    assert abs(last.estimates[index] - true_count) <= 4 * np.sqrt(last.variances[index])


def test_parties_draw_from_their_own_language() -> None:
    """Party p's users hold words of language p: each party's 5 most common words are in its language's
    top 10 (and the languages' top 10s differ, so a wrong layout fails)."""
    experiment = Experiment(load_config(None, PARTIES))
    bounds = party_bounds(100_000, 4)
    for party, language in enumerate(LANGUAGES):
        shard = experiment.source.build_users(int(bounds[party]), int(bounds[party + 1]))
        items = np.asarray(shard.item_of_user)
        top = np.argsort(-np.bincount(items[items >= 0]), kind="stable")[:5]
        head = set(wordfreq_candidates(language, 2000, "lowercase")[0][:10])
        assert {shard.vocabulary.items[i] for i in top} <= head, language


def heads_in_common(size: int, parties: int) -> set[str]:
    """The words in the top ``size`` of at least ``parties`` of the languages."""
    heads = [set(wordfreq_candidates(language, 2000, "lowercase")[0][:size]) for language in LANGUAGES]
    return {word for word in set().union(*heads) if sum(word in head for head in heads) >= parties}


def test_taps_finds_the_words_common_to_the_parties_heads() -> None:
    """At ε = 4 with 400,000 users, every word in the top 10 of two or more languages is among the
    20 reported, in each of 3 seeds (their global frequencies, 0.9 % and more, are about 8 standard
    deviations of a consensus score above the 20th word's)."""
    common = heads_in_common(10, 2)
    assert common == {"a", "de", "en", "in", "la"}  # shared by French and Spanish; "a" and "in" beyond them
    for seed in range(3):
        found = {item for item, _ in run_view(run(["population.users=400000", "privacy.epsilon=4",
                                                    f"run.seed={seed}"]).result)}
        assert common <= found, sorted(common - found)


def test_any_shard_split_gives_the_same_result() -> None:
    """Parties are ranges of global user ids and every draw is keyed by (seed, round, user): one shard,
    several (cutting through the parties) and Flower's two nodes find the same items and estimates."""
    whole = run_view(run([]).result)
    assert whole
    assert run_view(run([], shards=7).result) == whole


@pytest.mark.timeout(600)
def test_flower_matches_the_fast_driver(tmp_path: Path) -> None:
    found, rounds = flower_matches_fast([*PARTIES, "population.users=20000"], tmp_path)
    assert found and rounds >= 2


@pytest.mark.parametrize(("overrides", "key"), [
    (['population.languages="en,fr,de"'], "population.languages"),  # 3 languages, 4 parties
    (['population.languages="en,en,fr,de"'], "population.languages"),
    (['population.languages="en,xx,fr,de"'], "population.languages"),
    (['population.source="zipf"'], "population.languages"),
    (["protocol.parties=1"], "protocol.parties"),
    (['protocol.consensus="vote"'], "protocol.consensus"),
    (["protocol.levels=2"], "protocol.levels"),
    (["population.users=20"], "population.users"),
])
def test_bad_config_is_refused_naming_the_key(overrides: list[str], key: str) -> None:
    with pytest.raises(InputError) as refused:
        Experiment(load_config(None, [*PARTIES, *overrides]))
    message = str(refused.value)
    assert message.startswith(key) and "\n" not in message, message


def test_new_keys_at_their_defaults_leave_trial_keys_alone() -> None:
    """A sweep written before TAPS finds its trials again: its keys at their defaults are not in a
    trial's identity."""
    from simulations.sweep_spec import _identity

    identity = _identity(load_config(None, []))
    assert "languages" not in identity["population"]
    assert not {"parties", "consensus", "consensus_z", "tree_encoding", "tree_oracle", "levels", "candidate_cap",
                "kept_per_level"} & set(identity["protocol"])


def test_shuffled_reports_hide_among_one_party_level() -> None:
    """Shuffled, a report hides among the users of its own party and level only: the crowd the bound
    uses is at most n / (P x levels) = 100,000 / (4 x 9) users: the smallest group, taken at a
    lower confidence bound of its binomial size."""
    from fedhh.api import run as run_api

    result = run_api(None, {"protocol.name": "taps", "population.languages": "en,fr,de,es", "population.users": 100_000,
                            "population.vocabulary": 2000, "privacy.model": "shuffle", "privacy.epsilon": 2.0,
                            "run.driver": "fast"})
    (message,) = result.to_dict()["privacy"]["shuffle"]["messages"]
    assert 0.8 * 100_000 / 36 <= message["users"] <= 100_000 / 36
    assert message["among"] == "the users of the smallest party level"
    assert message["epsilon0"] > 2.0  # the local ε solved from the central target


def test_taps_beats_independent_trees_when_the_parties_share_their_heads() -> None:
    """Eight parties of English users (400,000 in all, one distribution): each party's own estimates
    come from 50,000 users split over 9 levels, too noisy alone at ε = 4, while the consensus pools
    eight. Over 5 seeds TAPS's mean recall@20 is at least 0.1 above the independent trees' (measured:
    0.88 against 0.59 over these 5 seeds; a run's recall spreads by about 0.06, the difference of two
    5-run means by about 0.04, so 0.1 is 7 of them below the measured gap and 2.5 above no gap)."""
    def recall(mode: str, seed: int) -> float:
        found = {item for item, _ in run_view(run_fast(Experiment(load_config(None, [
            'protocol.name="taps"', "protocol.parties=8", f'protocol.consensus="{mode}"', "protocol.top_k=20",
            "run.top_k=20", "population.users=400000", "population.vocabulary=5000", "privacy.epsilon=4",
            f"run.seed={seed}",
        ])), 1, "inprocess").result)}
        truth = wordfreq_candidates("en", 5000, "lowercase")[0][:20]
        return len(found & set(truth)) / 20

    taps = np.mean([recall("taps", seed) for seed in range(5)])
    independent = np.mean([recall("none", seed) for seed in range(5)])
    assert taps >= independent + 0.1, (taps, independent)


def test_taps_beats_independent_trees_on_the_four_languages() -> None:
    """Four parties of one language each (100,000 users in all, 2,000 words, ε = 2): the global top 20
    mixes each language's head with words two languages share. Paired over 5 seeds, TAPS's recall@20
    is at least the independent trees' on every seed, and its mean at least 0.15 above (measured:
    0.43 [0.35, 0.50, 0.35, 0.45, 0.50] against 0.13 [0.10, 0.15, 0.10, 0.20, 0.10]; a run's recall
    spreads by about 0.07 and 0.05, the difference of two 5-run means by about 0.04, so 0.15 is
    about 4 of them below the measured gap and above no gap). The rule before this one (a party
    kept first the prefixes the summed estimates called globally heavy, wherever they were heavy)
    measured 0.16 here and fails it.

    The other parties' evidence counts on its own: against independent trees that pool their earlier
    levels too (``consensus = "prior"``, measured 0.33 [0.25, 0.45, 0.20, 0.35, 0.40]), TAPS is at
    least as high on every seed and its mean at least 0.05 above (the paired differences, 0.05 to
    0.15, spread by about 0.04: their 5-run mean by about 0.02, so 0.05 is 2.5 of them below the
    measured 0.10 and above no gain)."""
    from fedhh.metrics import recall_at_k

    def recall(mode: str, seed: int) -> float:
        experiment = Experiment(load_config(None, [*PARTIES, "privacy.epsilon=2", f'protocol.consensus="{mode}"',
                                                   f"run.seed={seed}"]))
        run = run_fast(experiment, 1, "inprocess")
        return recall_at_k({d.item for d in run.result.discoveries}, experiment.truth(run.counts), 20)

    taps = np.array([recall("taps", seed) for seed in range(5)])
    independent = np.array([recall("none", seed) for seed in range(5)])
    assert np.all(taps >= independent), (taps.tolist(), independent.tolist())
    assert taps.mean() >= independent.mean() + 0.15, (taps.tolist(), independent.tolist())
    remembering = np.array([recall("prior", seed) for seed in range(5)])
    assert np.all(taps >= remembering), (taps.tolist(), remembering.tolist())
    assert taps.mean() >= remembering.mean() + 0.05, (taps.tolist(), remembering.tolist())

