"""Users like real users: words of their own (Dirichlet users), each user's most frequent word, the
exponential source, and today's populations unchanged for a seed.

The statistical tests compare a large population's counts with the closed forms of
``fedhh.data.user_words`` (written out again here, not imported), fixed seeds, tolerances of
five standard errors.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet
import pytest
from scipy import stats

from fedhh.config import ConfigError, build_config
from fedhh.data.items import ItemCodec, get_alphabet
from fedhh.data.per_user import MostFrequentItemSource, tie_break_words
from fedhh.data.population import Shard, SingleItemShard
from fedhh.data.sources import (
    ExponentialSource, FileSource, WordfreqSource, ZipfSource, held_items_per_user, make_source,
)
from fedhh.data.store import DatasetSource
from fedhh.experiment import Experiment
from fedhh.kernels.randomness import derive_key
from simulations.fast import run_fast

from .helpers import lowercase_codec
from .test_population_store import build, config_of, outcome

WORDS, ALPHA, VOCABULARY, USERS = 6, 0.8, 50, 200_000


def dense_counts(shard: Shard, vocabulary: int) -> np.ndarray:
    """Each user's count of each item, as a users x items table (small vocabularies only)."""
    table = np.zeros((shard.n_users, vocabulary), dtype=np.int64)
    owner = np.repeat(np.arange(shard.n_users), np.diff(shard.item_offsets))
    table[owner, shard.item_ids] = shard.item_counts
    return table


def zipf_law(size: int, exponent: float) -> np.ndarray:
    weights = np.arange(1, size + 1, dtype=np.float64) ** -exponent
    return weights / weights.sum()


@pytest.fixture(scope="module")
def dirichlet_users() -> np.ndarray:
    """200,000 users of a 50-string Zipf(1.1) law, 6 words each, concentration 0.8 (item id = rank)."""
    source = ZipfSource(USERS, VOCABULARY, 1.1, 5, WORDS, lowercase_codec(10), seed=5, concentration=ALPHA)
    return dense_counts(source.build_all(), VOCABULARY)


# -- Dirichlet users ---------------------------------------------------------------------------------


@pytest.mark.parametrize("rank", [0, 4, 30])
def test_dirichlet_users_word_counts_have_the_models_moments(dirichlet_users: np.ndarray, rank: int) -> None:
    """A word's count within a user has the Dirichlet-multinomial's mean W p and variance
    W p (1 - p) (W + α) / (1 + α), and the share of users holding it is
    1 - prod_{j < W} (1 - α p / (α + j)); the independent draws' variance and share are far off."""
    p = zipf_law(VOCABULARY, 1.1)[rank]
    counts = dirichlet_users[:, rank].astype(np.float64)
    n = counts.size
    mean, variance = WORDS * p, WORDS * p * (1 - p) * (WORDS + ALPHA) / (1 + ALPHA)
    assert abs(counts.mean() - mean) < 5 * np.sqrt(variance / n)
    centred = counts - counts.mean()
    variance_se = np.sqrt((np.mean(centred**4) - counts.var() ** 2) / n)  # the sample variance's standard error
    assert abs(counts.var() - variance) < 5 * variance_se
    assert abs(counts.var() - WORDS * p * (1 - p)) > 20 * variance_se  # what independent draws would give
    holding = 1 - np.prod([1 - ALPHA * p / (ALPHA + j) for j in range(WORDS)])
    share = np.mean(counts > 0)
    assert abs(share - holding) < 5 * np.sqrt(holding * (1 - holding) / n)
    assert abs(share - (1 - (1 - p) ** WORDS)) > 10 * np.sqrt(holding * (1 - holding) / n)


def test_dirichlet_users_words_pair_as_the_urn_says(dirichlet_users: np.ndarray) -> None:
    """Two of a user's words are the same word with probability sum_i E[q_i^2]
    = sum_i p_i (α p_i + 1) / (α + 1) (the Dirichlet's second moment): the pairs of equal words a
    user holds, sum_i N_i (N_i - 1) / (W (W - 1)), average to it."""
    law = zipf_law(VOCABULARY, 1.1)
    pairs = np.sum(dirichlet_users * (dirichlet_users - 1), axis=1) / (WORDS * (WORDS - 1))
    expected = np.sum(law * (ALPHA * law + 1) / (ALPHA + 1))
    assert abs(pairs.mean() - expected) < 5 * pairs.std() / np.sqrt(pairs.size)


def test_every_user_holds_its_words_and_the_truth_keeps_its_mean(dirichlet_users: np.ndarray) -> None:
    """Each user holds exactly W words; a word's population frequency (local shares added up)
    keeps the law's mean n p whatever α, within five binomial-like standard errors."""
    assert np.all(dirichlet_users.sum(axis=1) == WORDS)
    law = zipf_law(VOCABULARY, 1.1)
    shares = dirichlet_users / WORDS
    for rank in (0, 4, 30):
        assert abs(shares[:, rank].sum() - USERS * law[rank]) < 5 * np.sqrt(USERS) * shares[:, rank].std()


def test_the_fresh_words_are_the_independent_populations_own() -> None:
    """Concentration only repeats words: a user's first word is the independent population's first
    word, and every other word is either the independent one at that index or one of its own."""
    codec = lowercase_codec(10)
    independent = ZipfSource(5_000, VOCABULARY, 1.1, 5, WORDS, codec, seed=9)._draw_items(0, 5_000)
    urn = ZipfSource(5_000, VOCABULARY, 1.1, 5, WORDS, codec, seed=9, concentration=0.5)._draw_items(0, 5_000)
    np.testing.assert_array_equal(urn[0], independent[0])
    repeated = 0
    for j in range(1, WORDS):
        fresh = urn[j] == independent[j]
        earlier = np.any(np.stack(urn[:j]) == urn[j], axis=0)
        assert np.all(fresh | earlier)
        repeated += int(np.sum(~fresh))
    assert repeated > 0


def test_dirichlet_shards_are_slices_of_the_whole() -> None:
    source = WordfreqSource(9_000, "en", 2_000, 5, lowercase_codec(10), seed=3, concentration=0.3)
    whole = source.build_all()
    for index in range(5):
        shard = source.build_shard(index, 5)
        expected = whole.slice(shard.first_user, shard.stop_user)
        for name in ("item_offsets", "item_ids", "item_counts"):
            np.testing.assert_array_equal(getattr(shard, name), getattr(expected, name))


# -- each user's most frequent word ------------------------------------------------------------------


def test_mode_keeps_each_users_most_frequent_word(dirichlet_users: np.ndarray) -> None:
    """``per_user = "mode"``: one item a user, held by the user as often as any of its items; when
    several tie, each of them is kept as often (checked on two-way ties: the smaller id half the time)."""
    source = ZipfSource(USERS, VOCABULARY, 1.1, 5, WORDS, lowercase_codec(10), seed=5, concentration=ALPHA)
    reduced = MostFrequentItemSource(source, seed=5).build_all()
    assert isinstance(reduced, SingleItemShard) and reduced.n_users == USERS
    kept = reduced.item_of_user
    users = np.arange(USERS)
    np.testing.assert_array_equal(dirichlet_users[users, kept], dirichlet_users.max(axis=1))
    top = dirichlet_users == dirichlet_users.max(axis=1, keepdims=True)
    two_way = np.flatnonzero(top.sum(axis=1) == 2)
    smaller = np.argmax(top[two_way], axis=1)
    share = np.mean(kept[two_way] == smaller)
    assert two_way.size > 10_000 and abs(share - 0.5) < 5 * np.sqrt(0.25 / two_way.size)
    counts = reduced.counts()  # the truth is the reduced users'
    np.testing.assert_array_equal(counts.holders, np.bincount(kept, minlength=VOCABULARY))


def test_mode_ties_are_keyed_by_seed_user_and_item() -> None:
    """The same users in any shard keep the same word; another seed breaks ties differently."""
    source = WordfreqSource(20_000, "en", 5_000, 4, lowercase_codec(10), seed=2)
    reduced = MostFrequentItemSource(source, seed=2)
    whole = reduced.build_all().item_of_user
    shards = np.concatenate([reduced.build_shard(index, 7).item_of_user for index in range(7)])
    np.testing.assert_array_equal(shards, whole)
    other = MostFrequentItemSource(source, seed=3).build_all().item_of_user
    assert 0 < np.mean(other != whole) < 1


def test_mode_of_a_file_of_users(tmp_path: Path) -> None:
    """A file's users keep their most frequent item; a tie goes to the item with the larger keyed
    tie word; a user holding only unencodable items keeps nothing."""
    rows = [("ann", "cat"), ("ann", "dog"), ("ann", "cat"), ("bob", "emu"), ("bob", "fox"),
            ("cy", "gnu"), ("dee", "x1"), ("eve", "fox"), ("eve", "fox"), ("eve", "cat")]
    path = tmp_path / "users.parquet"
    pyarrow.parquet.write_table(pa.table({"user": [u for u, _ in rows], "item": [i for _, i in rows]}), path)
    source = FileSource(str(path), ItemCodec(get_alphabet("lowercase"), 1, 10, unknown_chars="drop"))
    kept = MostFrequentItemSource(source, seed=4).build_all().item_of_user
    item = {name: index for index, name in enumerate(source.vocabulary.items)}
    ties = tie_break_words(derive_key(4, "population.mode_ties"), np.array([1, 1]), np.array([item["emu"], item["fox"]]))
    bob = ["emu", "fox"][int(np.argmax(ties))]
    assert [source.vocabulary.items[i] if i >= 0 else None for i in kept] == ["cat", bob, "gnu", None, "fox"]


def test_a_run_on_each_users_most_frequent_word_is_the_same_on_any_shards() -> None:
    """TrieHH on each user's most frequent word of Dirichlet users: the same discoveries on 1 and
    4 shards, and the result says which population it ran on."""
    population = {"users": 200_000, "words_per_user": 5, "concentration": 0.5, "per_user": "mode"}
    documents = []
    for shards in (1, 4):
        config = config_of(population, shards=shards)
        experiment = Experiment(config)
        run = run_fast(experiment, shards, "inprocess")
        documents.append(experiment.finish(run.result, {}, "fast", counts=run.counts))
    assert documents[0]["heavy_hitters"] == documents[1]["heavy_hitters"] != []
    assert documents[0]["config"]["population"]["per_user"] == "mode"
    assert documents[0]["population"]["per_user"] == "mode" and documents[0]["population"]["concentration"] == 0.5


# -- the exponential source --------------------------------------------------------------------------


def chi_square_p_value(holders: np.ndarray, law: np.ndarray) -> float:
    """The chi-square test of one-item-a-user counts against ``law``, ranks of expected count
    below 5 pooled into one cell."""
    expected = holders.sum() * law
    small = expected < 5
    if small.any():
        holders = np.append(holders[~small], holders[small].sum())
        expected = np.append(expected[~small], expected[small].sum())
    observed = holders
    return float(stats.chisquare(observed, expected).pvalue)


def test_exponential_source_follows_its_geometric_law() -> None:
    """Counts against P(rank r) ∝ e^(-λ (r - 1)) pass the chi-square test; against a rate 10%
    off, or Zipf, they fail it."""
    source = ExponentialSource(300_000, 300, 0.05, 6, 1, lowercase_codec(10), seed=8)
    holders = source.build_all().counts().holders
    law = np.exp(-0.05 * np.arange(300))
    assert chi_square_p_value(holders, law / law.sum()) > 1e-4
    other = np.exp(-0.055 * np.arange(300))
    assert chi_square_p_value(holders, other / other.sum()) < 1e-12
    assert chi_square_p_value(holders, zipf_law(300, 1.1)) < 1e-12
    assert len(set(source.vocabulary.items)) == 300
    assert source.describe()["source"] == "exponential" and source.describe()["rate"] == 0.05


def test_zipf_source_follows_its_law() -> None:
    source = ZipfSource(300_000, 300, 1.5, 6, 1, lowercase_codec(10), seed=8)
    holders = source.build_all().counts().holders
    assert chi_square_p_value(holders, zipf_law(300, 1.5)) > 1e-4
    assert chi_square_p_value(holders, zipf_law(300, 1.4)) < 1e-12


def test_exponential_runs_from_the_config() -> None:
    config = build_config({"population": {"source": "exponential", "users": 50_000, "vocabulary": 1_000,
                                          "exponential_rate": 0.1, "item_length": 5}})
    experiment = Experiment(config)
    assert experiment.source.describe()["rate"] == 0.1 and experiment.n_users == 50_000


# -- configs, memory, disk ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("population", "message"),
    [
        ({"concentration": -1.0}, "population.concentration: got -1.0; must be 0 or a finite number > 0"),
        ({"concentration": float("inf")}, "population.concentration: got inf"),
        ({"per_user": "max"}, "population.per_user: got 'max'; allowed values: ['all', 'mode']"),
        ({"exponential_rate": 0}, "population.exponential_rate: got 0.0; must be a finite number > 0"),
        ({"source": "geometric"}, "allowed values: ['wordfreq', 'zipf', 'exponential', 'file', 'dataset']"),
        ({"source": "file", "path": "x.csv", "concentration": 1.0}, "population.concentration: only users drawn from a law"),
    ],
)
def test_bad_user_settings_are_refused_naming_the_key(population: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        build_config({"population": population})
    assert message in str(refused.value)


def test_the_memory_check_counts_what_each_kind_of_user_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Independent words: W items a user in CSR form; Dirichlet users: their expected distinct
    words, which is what the built population holds (within 1%); each user's most frequent word:
    4 bytes a user.  A limit between them refuses the first and not the others."""
    from fedhh import resources

    codec = lowercase_codec(10)
    base = build_config({"population": {"users": 100_000, "vocabulary": 2_000, "words_per_user": 20}})["population"]
    dirichlet = {**base, "concentration": 0.2}
    assert held_items_per_user(base, codec) == 20
    assert held_items_per_user({**dirichlet, "per_user": "mode"}, codec) == 1
    expected = held_items_per_user(dirichlet, codec)
    assert 1 < expected < 20
    shard = WordfreqSource(100_000, "en", 2_000, 20, codec, seed=0, concentration=0.2).build_all()
    held = shard.item_offsets.nbytes + shard.item_ids.nbytes + shard.item_counts.nbytes
    assert held == pytest.approx(resources.population_bytes(100_000, expected), rel=0.01)
    limit = resources.population_bytes(100_000, 20) // 2
    monkeypatch.setattr(resources, "memory_limit", lambda: limit)
    with pytest.raises(resources.ResourceError, match=r"the population \(328 bytes a user for 20 item\(s\)"):
        Experiment(build_config({"population": base}))
    assert Experiment(build_config({"population": dirichlet})).n_users == 100_000
    reduced = Experiment(build_config({"population": {**base, "per_user": "mode"}}))
    assert reduced.source.build_all().item_of_user.nbytes == resources.population_bytes(100_000, 1)


@pytest.mark.parametrize(
    "population",
    [
        {"users": 30_000, "vocabulary": 3_000, "words_per_user": 4, "concentration": 0.5},
        {"users": 30_000, "vocabulary": 3_000, "words_per_user": 4, "concentration": 0.5, "per_user": "mode"},
        {"source": "exponential", "users": 30_000, "vocabulary": 500, "item_length": 5},
    ],
)
def test_new_populations_built_to_disk_run_as_in_memory(tmp_path: Path, population: dict[str, Any]) -> None:
    folder = build(tmp_path, population, stored_shards=2)
    manifest = json.loads((folder / "population.json").read_text())
    for key in ("concentration", "per_user"):
        if key in population:
            assert manifest["population"][key] == population[key]
    in_memory = outcome(config_of(population, "triehh", 3))
    from_disk = outcome(config_of({"source": "dataset", "path": str(folder)}, "triehh", 3))
    assert in_memory["heavy_hitters"]
    assert from_disk == in_memory


def test_a_csv_of_users_is_built_to_disk_as_their_most_frequent_words(tmp_path: Path) -> None:
    rows = "user,item\n" + "".join(f"u{u},{word}\n" for u, words in enumerate(
        [["the", "the", "cat"], ["a", "dog", "dog"], ["sun"]] * 200) for word in words)
    path = tmp_path / "users.csv"
    path.write_text(rows)
    population = {"source": "file", "path": str(path), "per_user": "mode"}
    folder = build(tmp_path, population, stored_shards=2)  # a CSV is streamed, not read whole
    codec = lowercase_codec(10)
    stored = DatasetSource(str(folder), codec)
    assert sorted(zip(stored.vocabulary.items, stored.population_counts().holders.tolist())) == [
        ("a", 0), ("cat", 0), ("dog", 200), ("sun", 200), ("the", 200)]
    in_memory = make_source(config_of(population)["population"], codec, seed=7)
    np.testing.assert_array_equal(
        stored.build_all().item_of_user, in_memory.build_all().item_of_user)


# -- today's results, for a seed ---------------------------------------------------------------------

# Computed with fedhh before user models existed (main at bec2dec): the populations' CSR arrays and the
# discoveries of TrieHH and PEM, seed 11, three shards, each population's other keys the defaults.
BEFORE = {
    "wordfreq-1/population": "19e967c6b2e2daea", "wordfreq-1/triehh": "2c454ca4161544e6",
    "wordfreq-1/pem": "49d5267a587d864e", "wordfreq-4/population": "0f2f1b8f531ead7d",
    "wordfreq-4/triehh": "d79f8047deef5734", "wordfreq-4/pem": "890dd30ef59d2ee2",
    "zipf-3/population": "814c118099d75cf2", "zipf-3/triehh": "e997f9e2b6565bcc", "zipf-3/pem": "ece4c3581ab89397",
}
POPULATIONS = {
    "wordfreq-1": {"users": 100_000},
    "wordfreq-4": {"users": 100_000, "words_per_user": 4},
    "zipf-3": {"source": "zipf", "users": 100_000, "vocabulary": 2_000, "words_per_user": 3},
}


def digest(text: bytes) -> str:
    return hashlib.sha256(text).hexdigest()[:16]


@pytest.mark.parametrize("name", list(POPULATIONS))
def test_default_users_give_todays_populations_and_results(name: str) -> None:
    """``concentration = 0`` and ``per_user = "all"`` are today's draw, bit for bit: the same
    users and the same discoveries as before the keys existed."""
    for protocol in ("triehh", "pem"):
        config = build_config({"population": POPULATIONS[name], "protocol": {"name": protocol},
                               "run": {"driver": "fast", "backend": "inprocess", "shards": 3, "seed": 11}})
        experiment = Experiment(config)
        shard = experiment.source.build_all()
        arrays = b"".join(np.ascontiguousarray(np.asarray(a, dtype=np.int64)).tobytes()
                          for a in (shard.item_offsets, shard.item_ids, shard.item_counts))
        assert digest(arrays) == BEFORE[f"{name}/population"]
        run = run_fast(experiment, 3, "inprocess")
        found = experiment.finish(run.result, {}, "fast", counts=run.counts)["heavy_hitters"]
        assert len(found) >= 13
        assert digest(json.dumps(found, sort_keys=True).encode()) == BEFORE[f"{name}/{protocol}"]
