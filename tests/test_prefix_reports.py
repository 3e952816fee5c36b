"""A prefix search's reports (PEM, TreeHist): every round's statistics are exactly the same for a
range of users cut into shards anywhere and drawn in blocks of any size (the final pass's Philox
range streams, the level members' own streams), and the caches the reports use (the users'
levels, the prefixes' keys) give what they cache."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from fedhh.config import load_config
from fedhh.experiment import Experiment
from fedhh.kernels.randomness import GRID_USERS, UserRandom
from fedhh.oracles.histogram import Histogram
from fedhh.oracles.unary import SPARSE_MAX_Q
from fedhh.protocols.prefix_search import reports as prefix_reports
from fedhh.protocols.common.prefix_encoding import PrefixEncoding
from fedhh.protocols.prefix_search.nodes import asked_oracle, check_reply
from fedhh.protocols.prefix_search.oracles import (
    answers_with_support,
    counts_size,
    decode_counts,
    level_draws_from_ranges,
)
from fedhh.protocols.prefix_search.reports import (
    PrefixRequest,
    PrefixResponse,
    held_items,
    range_levels,
    respond,
    user_levels,
)
from fedhh.protocols.spec import InvalidReply

RUN = [
    'protocol.name="treehist"', 'population.source="zipf"', "population.users=12000", "population.vocabulary=500",
    "population.item_length=4", "population.zipf_exponent=1.3", "protocol.max_length=4", "privacy.epsilon=6.0",
    'protocol.encoding="symbols"', "protocol.segment_length=2", 'protocol.selection="top-k"',
    "protocol.candidates_per_step=8", "protocol.sketch_rows=4", "protocol.sketch_width=64", "run.seed=4",
]
# pieces that straddle the Philox grid (4,096 users a stream) and the draw blocks set below
CUTS = [0, 1, GRID_USERS - 1, GRID_USERS + 1, 7000, 12000]
SMALL_BLOCKS = 1000


def assert_same(response: PrefixResponse, reference: PrefixResponse) -> None:
    np.testing.assert_array_equal(response.counts, reference.counts)
    np.testing.assert_array_equal(response.reporters, reference.reporters)
    assert (response.sampled_users, response.responding_users) == (reference.sampled_users, reference.responding_users)


@pytest.mark.parametrize(
    ("oracle", "extra"),
    [("hcms", []), ("cms", []), ("count-sketch-hadamard", []), ("olh", []), ("flh", []), ("hr", []),
     ("hcms", ["population.words_per_user=2"]), ("cms", ["protocol.sketch_width=1024"])],
)
def test_every_round_is_the_same_for_any_cut_into_shards_and_blocks(
    oracle: str, extra: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Levels (members' own streams; CMS: range streams laid over the level's members) and the
    final pass (range streams), exactly: the whole range in one piece, cut into 5 shards, and drawn
    in blocks of 1,000 users instead of 32,768.  (CMS answers its final pass, and with a width of
    1,024 its first level, with support counts sampled at the read cells alone.)"""
    experiment = Experiment(load_config(None, [*RUN, f'protocol.oracle="{oracle}"', *extra]))
    population = experiment.build_shard(0, 1)
    assert population.n_users == CUTS[-1] > prefix_reports.USERS_PER_BLOCK // 4
    server, randomness = experiment.make_server(), experiment.randomness
    modes = []
    while (request := server.next_request()) is not None:
        if request.mode == "level":  # CMS's OUE rows: every user of a block drawn from range streams
            length = int(request.lengths[request.level])
            level_oracle = request.oracle_for(length, request.epsilon, encoding_of(request))
            assert level_draws_from_ranges(level_oracle) == (oracle == "cms")
        whole = respond(request, population, randomness)
        pieces = [respond(request, population.slice(a, b), randomness) for a, b in zip(CUTS, CUTS[1:])]
        assert_same(PrefixResponse.combine(pieces), whole)
        with monkeypatch.context() as patch:
            patch.setattr(prefix_reports, "USERS_PER_BLOCK", SMALL_BLOCKS)
            assert_same(respond(request, population, randomness), whole)
        modes.append(request.mode)
        server.absorb(whole)
    assert modes == ["level", "level", "final"]


def test_a_short_last_block_joins_the_one_before_and_changes_no_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 5,500 over 12,000 users: the last 1,000 (under a quarter of a block) join the second
    block, and every round's counts are those of the whole range in one block."""
    experiment = Experiment(load_config(None, [*RUN, 'protocol.oracle="hcms"']))
    population = experiment.build_shard(0, 1)
    randomness = experiment.randomness
    monkeypatch.setattr(prefix_reports, "USERS_PER_BLOCK", 5500)
    sizes = [block.size for block, _ in prefix_reports._member_draws(np.arange(12000), None, randomness, ("p", 0, 0))]
    assert sizes == [5500, 6500]
    server = experiment.make_server()
    while (request := server.next_request()) is not None:
        blocked = respond(request, population, randomness)
        with monkeypatch.context() as patch:
            patch.setattr(prefix_reports, "USERS_PER_BLOCK", 1 << 20)
            whole = respond(request, population, randomness)
        assert_same(blocked, whole)
        server.absorb(whole)


def encoding_of(request: PrefixRequest) -> PrefixEncoding:
    return PrefixEncoding(request.encoding, Experiment(load_config(None, RUN)).codec)  # type: ignore[arg-type]


def test_cms_level_counts_are_the_members_reports_unbiased_with_the_sketch_variance() -> None:
    """A CMS level round drawn from range streams over the level's members: one reporter per member,
    and each heavy prefix's estimate within 5 sd (the count-mean sketch's variance) of its count
    among the members -- a member's report drawn twice, or other users' counted, would double it."""
    experiment = Experiment(load_config(None, [*RUN, 'protocol.oracle="cms"', "population.users=60000",
                                               "protocol.sketch_width=256"]))
    population = experiment.build_shard(0, 1)
    request = experiment.make_server().next_request()
    encoding = encoding_of(request)
    length = int(request.lengths[request.level])
    oracle = request.oracle_for(length, request.epsilon, encoding)
    assert level_draws_from_ranges(oracle)
    response = respond(request, population, experiment.randomness)
    levels = range_levels(request.partition_seed, request.level_bounds, 0, population.n_users)
    members = levels == request.level
    assert int(response.reporters.sum()) == response.responding_users == int(members.sum())
    values = encoding.prefix_keys(population.vocabulary, length)[held_items(population, experiment.randomness)]
    truth = Histogram.of(values[members])
    heavy = truth.keys[np.argsort(truth.counts)[-5:]]
    assert not answers_with_support(oracle, request.candidates.size)  # flat statistics: every symbol's count
    estimates = oracle.estimate(oracle.from_flat(response.counts, response.reporters), heavy)
    z = (estimates - truth.lookup(heavy)) / np.sqrt(oracle.variance(heavy, truth))
    assert np.all(np.abs(z) < 5), z
    assert truth.lookup(heavy[-1:]) > 10 * np.sqrt(oracle.variance(heavy[-1:], truth))  # its doubling: z > 10


@pytest.mark.parametrize(("oracle", "forms"), [("cms", ["support", "flat", "support"]), ("hcms", ["flat"] * 3),
                                               ("olh", ["support"] * 3)])
def test_replies_are_flat_or_support_counts_of_the_length_the_server_checks(oracle: str, forms: list[str]) -> None:
    """A CMS round with fewer candidates than the sketch's width (1,024: the first level's 703,
    the final pass's 8) is answered with the candidates' support counts (rows x candidates), a
    round with more (5,624) with the flat rows (rows x width); HCMS always sends its flat rows,
    OLH its support counts.  The reply has the length ``counts_size`` gives, which the server's
    check accepts and decodes, and a reply of the other form's length is refused."""
    experiment = Experiment(load_config(None, [*RUN, f'protocol.oracle="{oracle}"', "protocol.sketch_width=1024"]))
    population, server = experiment.build_shard(0, 1), experiment.make_server()
    node = SimpleNamespace(first_user=0, users=population.n_users)
    seen = []
    while (request := server.next_request()) is not None:
        response = respond(request, population, experiment.randomness)
        level_oracle, candidates = asked_oracle(request, server), request.candidates.size
        support = answers_with_support(level_oracle, candidates)
        seen.append("support" if support else "flat")
        support_cells = int(np.prod(level_oracle.support_shape())) * candidates  # rows x candidates for a sketch
        expected = (support_cells if support else level_oracle.flat_size(), level_oracle.support_reporters())
        assert counts_size(level_oracle, candidates) == expected == (response.counts.size, response.reporters.size)
        check_reply(request, response, node, server)
        decoded = decode_counts(level_oracle, response.counts, response.reporters, request.candidates)
        assert decoded.counts.shape[-1] == candidates and int(decoded.n_users.sum()) == response.responding_users
        if level_oracle.flat_size() is not None:  # the other form's length
            other = level_oracle.flat_size() if support else support_cells
            wrong = dataclasses.replace(response, counts=np.zeros(other, dtype=np.int64))
            with pytest.raises(InvalidReply, match=r"PrefixResponse\.counts: \d+ counts from"):
                check_reply(request, wrong, node, server)
        server.absorb(response)
    assert seen == forms


def test_dense_unary_levels_keep_the_members_own_streams() -> None:
    """Below ε = ln 7 OUE draws densely, where drawing every user costs more: members' own streams."""
    experiment = Experiment(load_config(None, [*RUN, 'protocol.oracle="cms"', "privacy.epsilon=3.0"]))
    request = experiment.make_server().next_request()
    oracle = request.oracle_for(int(request.lengths[request.level]), request.epsilon, encoding_of(request))
    assert oracle.inner.q > SPARSE_MAX_Q and not level_draws_from_ranges(oracle)


def test_one_shot_tables_are_the_same_for_any_cut_into_shards_and_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    experiment = Experiment(load_config(None, [*RUN, 'protocol.oracle="hcms"', 'protocol.collection="one-shot"']))
    population = experiment.build_shard(0, 1)
    request = experiment.make_server().next_request()
    whole = respond(request, population, experiment.randomness)
    pieces = PrefixResponse.combine(
        [respond(request, population.slice(a, b), experiment.randomness) for a, b in zip(CUTS, CUTS[1:])]
    )
    with monkeypatch.context() as patch:
        patch.setattr(prefix_reports, "USERS_PER_BLOCK", SMALL_BLOCKS)
        blocked = respond(request, population, experiment.randomness)
    for response in (pieces, blocked):
        np.testing.assert_array_equal(response.report_rows, whole.report_rows)
        np.testing.assert_array_equal(response.report_counts, whole.report_counts)
    assert int(whole.report_counts.sum()) == population.n_users


def searched_levels(seed: int, bounds: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The levels' definition: each user's uniform searched among the bounds, clipped to the levels."""
    uniform = UserRandom(np.uint64(seed), ids).random()
    return np.clip(np.searchsorted(bounds, uniform, side="right") - 1, 0, bounds.size - 2)


def test_levels_by_integer_thresholds_are_the_searched_levels_at_every_edge() -> None:
    """``user_levels`` compares the users' words with integer thresholds: the same levels as the binary
    search of their uniforms, for random shares, empty levels, bounds at 0 and 1, and bounds equal
    to a user's uniform or just below it (where a float rounding would move the user)."""
    ids = np.arange(3000, 3000 + 2 * prefix_reports.LEVELS_AT_ONCE + 7)
    uniform = UserRandom(np.uint64(21), ids).random()
    rng = np.random.default_rng(5)
    cases = [np.array([0.0, 1.0]), np.array([0.0, 0.0, 0.5, 0.5, 1.0]), np.array([0.0, 1.0, 1.0])]
    for levels in (2, 3, 7):
        shares = np.concatenate(([0.0], np.cumsum(rng.dirichlet(np.ones(levels)))))
        shares[-1] = 1.0
        cases.append(shares)
    for user in (0, 1, 99):
        cases.append(np.array([0.0, uniform[user], 1.0]))
        cases.append(np.array([0.0, np.nextafter(uniform[user], 0.0), uniform[user + 1] + 1.0]))
    for bounds in cases:
        found = user_levels(21, bounds, ids)
        assert found.dtype == np.int64
        np.testing.assert_array_equal(found, searched_levels(21, np.sort(bounds), ids))
    assert np.bincount(user_levels(21, cases[-6], ids), minlength=2)[1] == int(np.sum(uniform >= uniform[0]))


def test_cached_levels_are_the_users_levels_and_read_only() -> None:
    bounds = np.array([0.0, 0.2, 0.7, 1.0])
    levels = range_levels(11, bounds, 5000, 3000)
    np.testing.assert_array_equal(levels, user_levels(11, bounds, np.arange(5000, 8000)))
    assert range_levels(11, bounds, 5000, 3000) is levels and not levels.flags.writeable
    np.testing.assert_array_equal(range_levels(11, bounds, 6000, 500), levels[1000:1500])  # another range: its own
    assert np.bincount(levels, minlength=3).tolist() == np.bincount(user_levels(11, bounds, np.arange(5000, 8000))).tolist()


def test_levels_of_ranges_too_large_to_keep_are_drawn_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    bounds = np.array([0.0, 0.5, 1.0])
    monkeypatch.setattr(prefix_reports, "CACHED_LEVEL_USERS", 1000)
    levels = range_levels(12, bounds, 0, 1001)
    np.testing.assert_array_equal(levels, user_levels(12, bounds, np.arange(1001)))
    assert range_levels(12, bounds, 0, 1001) is not levels


def test_cached_prefix_keys_are_the_keys_of_the_prefixes_and_read_only() -> None:
    experiment = Experiment(load_config(None, RUN))
    vocabulary = experiment.build_shard(0, 1).vocabulary
    encoding = PrefixEncoding("symbols", vocabulary.codec)
    for length in (2, 4):
        keys = encoding.prefix_keys(vocabulary, length)
        rows = np.concatenate([encoding.units(vocabulary)[:, :length], np.zeros((1, length), dtype=np.int64)])
        np.testing.assert_array_equal(keys, encoding.keys(rows))
        assert encoding.prefix_keys(vocabulary, length) is keys and not keys.flags.writeable


def test_levels_hashed_in_chunks_are_the_levels_of_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    bounds = np.array([0.0, 0.3, 0.5, 1.0])
    ids = np.arange(3 * prefix_reports.LEVELS_AT_ONCE + 17) * 7 + 123
    chunked = user_levels(5, bounds, ids)
    monkeypatch.setattr(prefix_reports, "LEVELS_AT_ONCE", ids.size)
    np.testing.assert_array_equal(chunked, user_levels(5, bounds, ids))
    assert np.bincount(chunked, minlength=3).min() > 0.15 * ids.size


@pytest.mark.parametrize("rows_shape", [(0, 5), (1, 0)])
def test_outside_a_collection_the_report_table_is_empty_of_shape_0_by_0(rows_shape: tuple[int, int]) -> None:
    """docs/messages.md: outside mode ``collect`` ``report_rows`` is ``(0, 0)`` and ``report_counts``
    ``(0,)``, as fedhh's own nodes send them; a node sending another empty or non-empty table is
    refused by name, never summed with the others (whose table width it would not share)."""
    experiment = Experiment(load_config(None, [*RUN, 'protocol.name="pem"', 'protocol.oracle="olh"']))
    population, server = experiment.build_shard(0, 1), experiment.make_server()
    node = SimpleNamespace(first_user=0, users=population.n_users)
    request = server.next_request()
    response = respond(request, population, experiment.randomness)
    assert response.report_rows.shape == (0, 0) and response.report_counts.shape == (0,)
    check_reply(request, response, node, server)
    wrong = dataclasses.replace(response, report_rows=np.zeros(rows_shape, dtype=np.uint64),
                                report_counts=np.ones(rows_shape[0], dtype=np.int64))
    with pytest.raises(InvalidReply, match=r"report_rows has shape \(0, 0\) and report_counts \(0,\), got "
                                           rf"\({rows_shape[0]}, {rows_shape[1]}\)"):
        check_reply(request, wrong, node, server)
