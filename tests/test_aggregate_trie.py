"""The aggregate-DP prefix tree: its composed guarantee against dp-accounting and the analytic Gaussian,
the server's noise against its calibration, an audit lower bound under the claim, the data-selection
schemes, the default population's top words at ε = 4, δ = 1e-9, and one shard, several and Flower
(with secure aggregation) agreeing."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from scipy import stats

from fedhh.audits.aggregate_trie import audit_aggregate_trie
from fedhh.config import load_config
from fedhh.data.items import EOS, PAD
from fedhh.data.counted import CountedShard
from fedhh.data.population import Shard, Vocabulary
from fedhh.errors import InputError
from fedhh.experiment import Experiment
from fedhh.kernels.randomness import KeyedRandomness
from fedhh.privacy.aggregate_trie import AggregateTrieParameters, composed_epsilon, solve_aggregate_trie
from fedhh.privacy.central import gaussian_delta
from fedhh.privacy.ledger import Ledger, LedgerError
from fedhh.protocols.aggregate_trie.client import respond
from fedhh.protocols.aggregate_trie.extensions import ExtensionDomain
from fedhh.protocols.aggregate_trie.law import law as law_sampler
from fedhh.protocols.aggregate_trie.messages import LevelCounts, LevelRequest
from fedhh.protocols.aggregate_trie.parameters import AggregateTrieKeys
from fedhh.protocols.aggregate_trie.server import AggregateTrieServer, level_noise
from fedhh.protocols.aggregate_trie.sizing import size_aggregate_trie, verification_server
from simulations.cli import main
from simulations.fast import run_fast
from simulations.sizing import verify_item

from .helpers import flower_matches_fast, lowercase_codec

TRIE = 'protocol.name="aggregate-trie"'


def independent_epsilon(level: dp_event.DpEvent, levels: int, delta: float) -> float:
    """dp-accounting's PLD accountant at its default (finer) discretisation, the levels as a list."""
    accountant = pld_privacy_accountant.PLDAccountant()
    accountant.compose(dp_event.ComposedDpEvent([level] * levels))
    return float(accountant.get_epsilon(delta))


@pytest.mark.parametrize(("noise", "contributions", "rate"), [
    ("gaussian", 1, 1.0), ("gaussian", 3, 0.05), ("laplace", 1, 0.1), ("laplace", 2, 1.0),
])
def test_composed_epsilon_matches_an_independent_dp_accounting_computation(
    noise: str, contributions: int, rate: float
) -> None:
    """The run's ε at δ is the PLD of its level events: built here by hand from the theorem (Gaussian
    of multiplier σ/sqrt(c); c Laplace mechanisms; Poisson sampling), at the finer default grid."""
    levels, delta = 6, 1e-9
    params = solve_aggregate_trie(10**6, 4.0, delta, noise, contributions, rate, levels)
    if noise == "gaussian":
        level: dp_event.DpEvent = dp_event.GaussianDpEvent(params.scale / math.sqrt(contributions))
    else:
        level = dp_event.LaplaceDpEvent(params.scale)
        if contributions > 1:
            level = dp_event.ComposedDpEvent([level] * contributions)
    if rate < 1:
        level = dp_event.PoissonSampledDpEvent(rate, level)
    reference = independent_epsilon(level, levels, delta)
    assert params.epsilon <= 4.0
    # both grids round losses up (pessimistic); they differ by at most a few grid steps per mechanism
    assert abs(params.epsilon - reference) <= levels * contributions * 2e-3
    # the scale is the smallest that meets the target: a hair less misses it
    assert composed_epsilon(noise, params.scale * (1 - 1e-3), contributions, rate, levels, delta) > 4.0
    # one level instead of six is far below: the check can fail
    assert independent_epsilon(level, 1, delta) < 0.9 * params.epsilon


def test_gaussian_levels_compose_to_one_gaussian() -> None:
    """Without sampling, L Gaussian levels of multiplier z are exactly one Gaussian of multiplier
    z / sqrt(L): the analytic δ of Balle and Wang at the reported ε is at most δ, and not far below."""
    params = solve_aggregate_trie(10**6, 2.0, 1e-9, "gaussian", 2, 1.0, 5)
    single = params.scale / math.sqrt(2) / math.sqrt(5)
    assert gaussian_delta(single, params.epsilon) <= 1e-9
    assert gaussian_delta(single, params.epsilon * 0.98) > 1e-9


def level_one_server(noise: str, scale: float, seed: int) -> AggregateTrieServer:
    """A server whose first level keeps every one of the 703 candidates of two lowercase letters."""
    codec = lowercase_codec()
    params = AggregateTrieParameters(noise, 10**6, scale, 1, 1.0, 6, 4.0, 1e-9)
    keys = AggregateTrieKeys(count_threshold=1e-9, max_prefixes=1000, max_vector=1 << 20)
    return AggregateTrieServer(params, keys, codec, seed)


@pytest.mark.parametrize(("noise", "variance"), [("gaussian", 3.0**2), ("laplace", 2 * 3.0**2)])
def test_the_servers_noise_has_the_calibrated_variance(noise: str, variance: float) -> None:
    """Every candidate counted 1000 times: the kept complete items' noisy counts spread with the law's
    variance (σ² or 2b²), within 5 standard errors of the sample variance; mean 1000."""
    domain = ExtensionDomain(27, 2)
    rows = domain.rows(np.arange(domain.size))
    noisy = []
    for seed in range(200):
        server = level_one_server(noise, 3.0, seed)
        request = server.next_request()
        assert isinstance(request, LevelRequest) and request.extension == 2
        server.absorb(LevelCounts(round=1, sampled_users=10**6, responding_users=10**6, width=2, prefixes=rows,
                                  counts=np.full(domain.size, 1000, dtype=np.int64)))
        noisy.extend(d.estimated_count for d in server.result().discoveries)
    values = np.array(noisy)
    assert values.size == 200 * 27  # the empty item and the 26 one-letter words
    kurtosis = 3.0 if noise == "gaussian" else 6.0
    standard_error = variance * math.sqrt((kurtosis - 1) / values.size)
    assert abs(values.var(ddof=1) - variance) < 5 * standard_error
    assert abs(values.mean() - 1000) < 5 * math.sqrt(variance / values.size)


@pytest.mark.parametrize(("noise", "rate"), [("gaussian", 1.0), ("gaussian", 0.1), ("laplace", 1.0)])
def test_an_audit_lower_bound_stays_under_the_claim(noise: str, rate: float) -> None:
    """fedhh audit aggregate-trie: neighbouring populations, the target's counts 0 in every level or
    moved by one added user (sampled in each level with probability q); the sum of the target's noisy
    counts over 1,000,000 draws of the server's noise gives a Clopper-Pearson lower bound on ε at the
    claimed δ, which stays under the claim, and not far under it without sampling (the test is
    optimal for Gaussian noise); the same audit of noise three times smaller exceeds the claim."""
    params = solve_aggregate_trie(10**4, 1.0, 1e-5, noise, 1, rate, 6)
    audit = audit_aggregate_trie(params)
    assert 0 < audit.epsilon_lower < params.epsilon and not audit.violated
    if noise == "gaussian" and rate == 1:
        assert audit.epsilon_lower > 0.6 * params.epsilon
    weaker = dataclasses.replace(params, scale=params.scale / 3)
    assert audit_aggregate_trie(weaker, claim=(params.epsilon, params.delta)).violated


def test_the_audit_command_prints_its_bound_and_refuses_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "aggregate-trie", "--users", "10000", "--epsilon", "1", "--delta", "1e-5",
                 "--trials", "100000", "--json"]) == 0
    assert '"violated": false' in capsys.readouterr().out
    assert main(["audit", "aggregate-trie", "--users", "10000", "--epsilon", "1", "--delta", "1e-5",
                 "--users-per-level", "20000"]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "--users-per-level" in error


def shard_of(words: list[list[tuple[str, int]]]) -> Shard:
    vocabulary, ids = Vocabulary.encode(sorted({w for user in words for w, _ in user}), lowercase_codec())
    index = {word: int(i) for word, i in zip(sorted({w for user in words for w, _ in user}), ids)}
    users = np.array([u for u, user in enumerate(words) for _ in user])
    items = np.array([index[w] for user in words for w, _ in user])
    counts = np.array([c for user in words for _, c in user])
    shard = Shard.from_pairs(vocabulary, 0, len(words), users, items)
    order = np.lexsort((items, users))
    return Shard(vocabulary, 0, shard.item_offsets, items[order], counts[order])


def level_request(**fields: object) -> LevelRequest:
    """A level's request as the users path sends it: every user sampled at q = 1 unless given."""
    defaults: dict[str, object] = {"sampling_rate": 1.0, "sampled_by_law": False}
    return LevelRequest(**{**defaults, **fields})  # type: ignore[arg-type]


def first_level(selection: str, contributions: int = 1) -> LevelRequest:
    return level_request(round=1, depth=0, extension=1, choose_from="extending", data_selection=selection, contributions=contributions,
                        sampled=np.arange(3), parents=np.zeros((1, 0), dtype=np.int64))


def counted(response: LevelCounts) -> dict[str, int]:
    letters = "_abcdefghijklmnopqrstuvwxyz"
    return {letters[row[0]]: int(count) for row, count in zip(response.prefixes.tolist(), response.counts.tolist())}


def test_data_selection_schemes_count_what_they_say() -> None:
    """Users holding {apple: 5, banana: 1, cherry: 1}, {avocado: 2, apricot: 2, berry: 1}, {cat: 1}:
    most_frequent counts a, a, c; several (2) counts a and b for the first two users and c for the
    third; weighted and random draw one each (frequencies below)."""
    users = [[("apple", 5), ("banana", 1), ("cherry", 1)], [("apricot", 2), ("avocado", 2), ("berry", 1)],
             [("cat", 1)]]
    shard = shard_of(users)
    randomness = KeyedRandomness(0)
    assert counted(respond(first_level("most_frequent"), shard, randomness)) == {"a": 2, "c": 1}
    several = respond(first_level("several", 2), shard, randomness)
    assert counted(several) == {"a": 2, "b": 2, "c": 1} and several.responding_users == 3
    # weighted: the first user counts a with probability 5/7; random: 1/3 (10,000 users each)
    many = shard_of([users[0]] * 10_000)
    request = level_request(round=1, depth=0, extension=1, choose_from="extending", data_selection="weighted", contributions=1,
                           sampled=np.arange(10_000), parents=np.zeros((1, 0), dtype=np.int64))
    share = counted(respond(request, many, randomness))["a"] / 10_000
    assert abs(share - 5 / 7) < 5 * math.sqrt(5 / 7 * 2 / 7 / 10_000)
    uniform = level_request(round=1, depth=0, extension=1, choose_from="extending", data_selection="random", contributions=1,
                           sampled=np.arange(10_000), parents=np.zeros((1, 0), dtype=np.int64))
    share = counted(respond(uniform, many, randomness))["a"] / 10_000
    assert abs(share - 1 / 3) < 5 * math.sqrt(1 / 3 * 2 / 3 / 10_000)


def test_a_level_extends_only_kept_prefixes_and_codes_its_ends() -> None:
    """Parents 'ap' and 'ba' extended by two symbols: apple -> 'appl', apricot -> 'apri', banana ->
    'bana'; 'berry' and 'cat' extend nothing; an item ending inside the extension ('at' of 'cat' from
    'c') keeps its end symbol and padding."""
    shard = shard_of([[("apple", 1)], [("apricot", 1)], [("banana", 1)], [("berry", 1)], [("cat", 1)]])
    codec = lowercase_codec()
    parents = codec.encode(["ap", "ba", "c"]).rows
    request = level_request(round=2, depth=2, extension=2, choose_from="extending", data_selection="weighted", contributions=1,
                           sampled=np.arange(5), parents=np.ascontiguousarray(parents[:2, :2]))
    response = respond(request, shard, KeyedRandomness(0))
    expected = codec.encode(["apple", "apricot", "banana"]).rows[:, :4]
    assert sorted(map(tuple, response.prefixes.tolist())) == sorted(map(tuple, expected.tolist()))
    assert response.responding_users == 3 and response.sampled_users == 5
    cat = level_request(round=2, depth=1, extension=3, choose_from="extending", data_selection="weighted", contributions=1,
                       sampled=np.arange(5), parents=np.ascontiguousarray(parents[2:, :1]))
    rows = respond(cat, shard, KeyedRandomness(0)).prefixes
    assert rows.tolist() == [[3, 1, 20, EOS]] and PAD not in rows[0, :3]


def test_choosing_among_all_items_counts_only_choices_that_extend_the_tree() -> None:
    """10,000 users holding {apple: 5, banana: 1}, the tree keeping only 'b': choosing among the items
    that extend it, every user counts 'ba'; choosing among all (weighted), a sixth of them do."""
    shard = shard_of([[("apple", 5), ("banana", 1)]] * 10_000)
    parents = lowercase_codec().encode(["b"]).rows[:, :1]

    def level(choose_from: str) -> LevelRequest:
        return level_request(round=2, depth=1, extension=1, choose_from=choose_from, data_selection="weighted",
                            contributions=1, sampled=np.arange(10_000), parents=np.ascontiguousarray(parents))

    assert respond(level("extending"), shard, KeyedRandomness(3)).counts.tolist() == [10_000]
    share = respond(level("all"), shard, KeyedRandomness(3)).counts[0] / 10_000
    assert abs(share - 1 / 6) < 5 * math.sqrt(1 / 6 * 5 / 6 / 10_000)


SMALL = ['population.source="zipf"', "population.users=20000", "population.vocabulary=300",
         "population.item_length=5", "protocol.max_length=5", "privacy.delta=1e-9", "run.seed=4"]


@pytest.mark.parametrize("settings", [
    [],
    ["population.words_per_user=4", 'protocol.data_selection="several"', "protocol.contributions=2",
     "protocol.users_per_level=5000"],
    ["population.words_per_user=4", 'protocol.choose_from="all"', 'protocol.data_selection="random"'],
    ["protocol.adaptive=true", "protocol.extension=1", "protocol.max_vector=4000", 'protocol.level_noise="laplace"'],
])
def test_any_shard_count_finds_the_same(settings: list[str]) -> None:
    experiment = Experiment(load_config(None, [TRIE, *SMALL, *settings]))
    runs = [run_fast(experiment, shards, "inprocess").result for shards in (1, 3, 7)]
    views = [[(d.item, d.estimated_count) for d in run.discoveries] for run in runs]
    assert views[0] and views[0] == views[1] == views[2]
    assert [r.to_dict() for r in runs[0].trace] == [r.to_dict() for r in runs[2].trace]


def test_adaptive_levels_take_the_longest_extension_that_fits_the_vector() -> None:
    """max_vector = 4000: the first level (one empty parent) extends by 2 (703 candidates; 3 would be
    18,279); every level takes the longest extension whose K x D(k) fits, never below 1."""
    config = load_config(None, [TRIE, *SMALL, "protocol.adaptive=true", "protocol.extension=1",
                                "protocol.max_vector=4000"])
    result = run_fast(Experiment(config), 1, "inprocess").result
    assert result.trace[0].values["extension"] == 2
    depth = 0
    for record in result.trace:
        values = record.values
        length = values["extension"]
        parents = values["candidates"] // ExtensionDomain(27, length).size
        assert parents * ExtensionDomain(27, length).size == values["candidates"] <= 4000
        room = 6 - depth
        assert length == room or parents * ExtensionDomain(27, length + 1).size > 4000
        depth = values["depth"]
    assert len(result.trace) < 6  # fewer levels than extensions of one symbol would take


def test_the_default_populations_top_words_are_found_at_epsilon_4_delta_1e9() -> None:
    experiment = Experiment(load_config(None, [TRIE, "privacy.delta=1e-9"]))
    run = run_fast(experiment, 2, "inprocess")
    found = {d.item for d in run.result.discoveries}
    top = experiment.truth(run.counts).top(20)
    assert set(top) <= found
    assert run.result.privacy.epsilon <= 4 and run.result.privacy.delta == 1e-9


def test_flower_with_secure_aggregation_finds_what_the_fast_driver_finds(tmp_path: Path) -> None:
    found, rounds = flower_matches_fast([TRIE, *SMALL, "run.secure_aggregation=true"], tmp_path / "secure")
    assert found and rounds >= 2


@pytest.mark.parametrize(("arguments", "field"), [
    (["--users", "1000", "--epsilon", "0.01", "--delta", "1e-9"], "privacy.epsilon"),
    (["--users", "1000", "--epsilon", "4", "--delta", "0.01"], "privacy.delta"),
    (["--users", "1000", "--epsilon", "4", "--delta", "1e-9", "--users-per-level", "2000"], "protocol.users_per_level"),
])
def test_plan_refuses_impossible_targets_in_one_line(
    arguments: list[str], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "aggregate-trie", *arguments]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and field in error


def test_plan_gives_the_noise_of_the_guarantee(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "aggregate-trie", "--users", "1000000", "--epsilon", "4", "--delta", "1e-9", "--json"]) == 0
    import json

    planned = json.loads(capsys.readouterr().out)
    assert planned["levels"] == 6 and planned["epsilon"] <= 4
    assert planned["discovery_rate"]["0.001"] > 0.99
    with pytest.raises(InputError, match=r"protocol\.contributions"):
        AggregateTrieKeys(contributions=2).check()


def test_a_ledger_composes_runs_and_checks_each_against_its_parameters(tmp_path: Path) -> None:
    """Two runs in one ledger: each entry's (ε, δ) is derived again from its parameters; an edited scale
    is refused."""
    params = solve_aggregate_trie(20000, 2.0, 1e-9, "gaussian", 1, 0.25, 3)
    ledger = Ledger(tmp_path / "ledger.json")
    ledger.record(params.report(), "first")
    composed = ledger.record(params.report(), "second").composition
    assert composed is not None and composed.runs == 2 and 2.0 < composed.epsilon < 4.0
    text = (tmp_path / "ledger.json").read_text(encoding="utf-8")
    (tmp_path / "ledger.json").write_text(text.replace(repr(params.scale), repr(params.scale * 1.5), 1),
                                          encoding="utf-8")
    with pytest.raises(LedgerError, match="disagree"):
        Ledger(tmp_path / "ledger.json").entries


def test_size_answers_a_population_where_runs_find_the_item_as_often_as_predicted() -> None:
    """fedhh size aggregate-trie: the analysis meets the target at its answer and not 1% below, and 100
    runs of the tree on the population it assumes find the planted item as often (95% interval)."""
    answer = size_aggregate_trie(0.01, 0.9, 1.0, 1e-9, max_length=4, sampling_rate=0.1)
    assert answer.discovery >= 0.9 > answer.below_discovery
    args = SimpleNamespace(max_length=4, extension=2, epsilon=1.0, delta=1e-9, noise="gaussian", contributions=1,
                           sampling_rate=0.1)
    verified = verify_item("aggregate-trie", answer.users, 0.01, answer.discovery, 100,
                           **verification_server(args, answer))
    assert verified.interval[0] <= answer.discovery <= verified.interval[1]
    with pytest.raises(InputError, match="--delta"):
        size_aggregate_trie(0.0001, 0.9, 4.0, 1e-4)


# -- law simulation ----------------------------------------------------------------------------------


def mixed_population() -> Shard:
    """300 users: 100 holding one word, 180 holding three with local counts, 20 holding nothing."""
    words = ["apple", "apricot", "avocado", "banana", "berry", "cherry", "cat", "cab", "car"]
    generator = np.random.default_rng(11)
    users: list[list[tuple[str, int]]] = []
    for user in range(300):
        if user < 100:
            users.append([(words[user % len(words)], 1)])
        elif user < 280:
            chosen = generator.choice(len(words), 3, replace=False)
            users.append([(words[i], int(c)) for i, c in zip(chosen, generator.integers(1, 6, 3))])
        else:
            users.append([])
    return shard_of(users)


def expected_counts(request: LevelRequest, shard: Shard) -> dict[tuple[int, ...], float]:
    """Each candidate's expected count, user by user from the rules of respond's docstring."""
    rows = shard.vocabulary.rows
    parents = {tuple(row) for row in request.parents.tolist()}
    expected: dict[tuple[int, ...], float] = {}
    for user in range(shard.n_users):
        entries = range(int(shard.item_offsets[user]), int(shard.item_offsets[user + 1]))
        items = [(int(shard.item_ids[e]), int(shard.item_counts[e])) for e in entries]

        def candidate(item: int) -> tuple[int, ...] | None:
            row = rows[item]
            if request.depth and tuple(row[: request.depth].tolist()) not in parents:
                return None
            return tuple(row[: request.depth + request.extension].tolist())

        may = items if request.choose_from == "all" else [(i, c) for i, c in items if candidate(i) is not None]
        if not may:
            continue
        chances: dict[tuple[int, ...] | None, float] = {}
        if request.data_selection in ("random", "weighted"):
            total = sum(1 if request.data_selection == "random" else c for _, c in may)
            for item, count in may:
                key = candidate(item)
                chances[key] = chances.get(key, 0.0) + (1 if request.data_selection == "random" else count) / total
        elif request.data_selection == "most_frequent":
            chances[candidate(min(may, key=lambda entry: (-entry[1], entry[0]))[0])] = 1.0
        else:
            weights: dict[tuple[int, ...] | None, int] = {}
            for item, count in may:
                weights[candidate(item)] = weights.get(candidate(item), 0) + count
            ranked = sorted(weights, key=lambda key: -weights[key])
            for key in ranked[: request.contributions]:
                chances[key] = 1.0
        for key, chance in chances.items():
            if key is not None:
                expected[key] = expected.get(key, 0.0) + request.sampling_rate * chance
    return expected


def drawn_counts(responses: list[LevelCounts]) -> dict[tuple[int, ...], np.ndarray]:
    keys = sorted({tuple(row) for response in responses for row in response.prefixes.tolist()})
    table = {key: np.zeros(len(responses)) for key in keys}
    for index, response in enumerate(responses):
        for row, count in zip(response.prefixes.tolist(), response.counts.tolist()):
            table[tuple(row)][index] = count
    return table


@pytest.mark.parametrize(("selection", "choose_from", "contributions"), [
    ("weighted", "all", 1), ("weighted", "extending", 1), ("random", "extending", 1),
    ("most_frequent", "all", 1), ("several", "extending", 2),
])
def test_the_law_sampler_draws_the_users_paths_expected_counts(
    selection: str, choose_from: str, contributions: int
) -> None:
    """Level 2 (parents 'a', 'b', 'c'; one letter more) at q = 0.5 over 400 seeds: every candidate's
    mean count, by law and by the users path, within 5 standard errors of its expectation worked
    out user by user; a law sampling 10% more users than q is told apart."""
    shard = mixed_population()
    counts = CountedShard.of_shard(shard, shard.n_users)
    parents = np.ascontiguousarray(lowercase_codec().encode(["a", "b", "c"]).rows[:, :1])
    request = level_request(round=2, depth=1, extension=1, choose_from=choose_from, data_selection=selection,
                            contributions=contributions, sampling_rate=0.5, sampled_by_law=True,
                            sampled=np.zeros(0, dtype=np.int64), parents=parents)
    expected = expected_counts(request, shard)
    by_law = drawn_counts([law_sampler(request, counts, KeyedRandomness(seed)) for seed in range(400)])
    users = []
    for seed in range(400):
        generator = np.random.default_rng(seed)
        sample = np.flatnonzero(generator.random(shard.n_users) < 0.5)
        users.append(respond(dataclasses.replace(request, sampled_by_law=False, sampled=sample), shard,
                             KeyedRandomness(seed)))
    by_users = drawn_counts(users)
    assert set(by_law) == set(by_users) == set(expected)
    for key, mean in expected.items():
        for draws in (by_law[key], by_users[key]):
            assert abs(draws.mean() - mean) <= 5 * max(draws.std(ddof=1), 0.5) / math.sqrt(draws.size), key
    oversampled = dataclasses.replace(request, sampling_rate=0.55)
    wrong = drawn_counts([law_sampler(oversampled, counts, KeyedRandomness(seed)) for seed in range(400)])
    assert any(abs(wrong[key].mean() - mean) > 5 * wrong[key].std(ddof=1) / math.sqrt(400)
               for key, mean in expected.items())


def test_a_law_run_of_a_billion_users_finds_the_top_words() -> None:
    """run.simulation = "law" at 10^9 wordfreq users, users_per_level = 10^6: the same guarantee as the
    users path would carry, and the top 20 words found."""
    config = load_config(None, [TRIE, "population.users=1000000000", "privacy.delta=1e-19",
                                "protocol.users_per_level=1000000", 'run.simulation="law"'])
    experiment = Experiment(config)
    run = run_fast(experiment, 2, "inprocess")
    found = {d.item for d in run.result.discoveries}
    assert set(experiment.truth(run.counts).top(20)) <= found
    assert run.result.privacy.epsilon <= 4 and run.result.params["sampling_rate"] == 1e-3
