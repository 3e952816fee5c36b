"""What a prefix search (PEM, TreeHist) asks of users, and how a shard of users answers.

Users are split into levels by public randomness keyed by (partition seed,
user), which the server and a device compute from the request alone.  Each
user sends one report per level it belongs to (PEM: its group's prefix with
the whole ε; TreeHist: its level's prefix with ε/2 and its full value with
ε/2), randomised by the level's frequency oracle with randomness keyed by
(purpose, level, global user id); a user holding no encodable item reports
the empty value.  One message pair serves three modes: ``level`` and
``final`` (interactive: the oracle's flat statistics, or the candidates'
support counts) and ``collect`` (one shot: the distinct report rows with
counts).  Which randomness each path draws from, and why a one-shot run
and an interactive one decode the same statistics, is in
``docs/derivations.md`` ("How a shard answers a prefix search").
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterator, Sequence
from typing import TypeVar

import numpy as np

from ...data.population import Shard
from ...kernels.randomness import GRID_USERS, RandomnessSource, UserRandom
from ...oracles import FrequencyOracle
from ...oracles.sampling import RandomSource
from ..base import Request, Response
from ..common.item_choice import choose_items
from ..common.prefix_encoding import PrefixEncoding
from ..messages import array_field, message, scalar_field, summed
from .oracles import answers_with_support, level_draws_from_ranges, level_oracle, shard_counts
from .report_table import distinct_rows, merge_tables, to_table

LEVEL, FINAL, COLLECT = "level", "final", "collect"
MODES: tuple[str, ...] = (LEVEL, FINAL, COLLECT)
LEVEL_PURPOSE = "prefix.level-report"
FINAL_PURPOSE = "prefix.final-report"
ITEM_PURPOSE = "prefix.item"
USERS_PER_BLOCK = (
    1 << 15
)  # users drawn and randomised at once: bounds a block's memory (CMS: 1 KB of words a user a call)
CACHED_LEVEL_USERS = 1 << 22  # largest range whose users' levels are kept between rounds
LEVELS_AT_ONCE = 1 << 14  # users whose levels are hashed in one pass

ResponseT = TypeVar("ResponseT", bound="PrefixResponse")


@message
class PrefixRequest(Request):
    """One round of a prefix search, with every public parameter a device needs to answer it."""

    mode: str  # level | final | collect
    level: int = scalar_field(minimum=-1)  # the level asked (mode "level"), else -1
    levels: int = scalar_field(minimum=1)  # number of levels (user groups)
    encoding: str  # bits | symbols: how values become units
    lengths: np.ndarray = array_field("int64", ("levels",), minimum=1)  # prefix length (units) each level reports
    level_bounds: np.ndarray = array_field("float64", ("levels+1",), minimum=0.0)  # cumulative share of users per level
    partition_seed: int  # public seed of the users' levels
    oracle: str  # the LDP oracle's name (see "LDP oracles")
    epsilon: float = scalar_field(minimum=0.0)  # ε of a level report
    final_epsilon: float = scalar_field(minimum=0.0)  # ε of the full-value report (0: the protocol has none)
    oracle_seed: int  # the oracle's option seed: names its public hash functions
    sketch_rows: int  # the oracle's option rows, when not 0
    sketch_width: int  # the oracle's option width, when not 0
    candidates: np.ndarray = array_field("uint64", ("C",))  # oracle keys of the candidate prefixes

    def oracle_for(self, length: int, epsilon: float, encoding: PrefixEncoding) -> FrequencyOracle:
        return level_oracle(
            self.oracle, epsilon, encoding.domain(length), self.oracle_seed, self.sketch_rows, self.sketch_width
        )


@message
class PrefixResponse(Response):
    """The reports' counts (level, final) or the report table (collect); additive."""

    # flat statistics, or support counts (see prefix_oracles.shard_counts); Hadamard-based ones are signed
    counts: np.ndarray = array_field("int64", ("S",), minimum=None)
    # reports behind them (per sketch row or hash where the oracle has them)
    reporters: np.ndarray = array_field("int64", ("U",))
    # mode collect: the distinct report rows, first column the level; other modes: empty, shape (0, 0)
    report_rows: np.ndarray = array_field("uint64", ("R", "W"))
    # mode collect: how many users sent each row; other modes: empty, shape (0,)
    report_counts: np.ndarray = array_field("int64", ("R",), minimum=1)

    @classmethod
    def combine(cls: type[ResponseT], responses: Sequence[ResponseT]) -> ResponseT:
        if not responses:
            raise ValueError("combine needs at least one response")
        rounds = {r.round for r in responses}
        if len(rounds) != 1:
            raise ValueError(f"cannot combine responses of different rounds: {sorted(rounds)}")
        shapes = {(r.counts.shape, r.reporters.shape, r.report_rows.shape[1]) for r in responses}
        if len(shapes) != 1:
            raise ValueError(f"cannot combine responses of different shapes: {sorted(shapes)}")
        first = responses[0]
        if len(responses) == 1:
            return first
        rows, counts = merge_tables([(r.report_rows, r.report_counts) for r in responses])
        return cls(
            round=first.round,
            sampled_users=sum(r.sampled_users for r in responses),
            responding_users=sum(r.responding_users for r in responses),
            counts=summed([r.counts for r in responses]),
            reporters=summed([r.reporters for r in responses]),
            report_rows=rows,
            report_counts=counts,
        )


def user_levels(partition_seed: int, level_bounds: np.ndarray, user_ids: np.ndarray) -> np.ndarray:
    """The level of each global user id (public randomness: the same on every device and shard).

    A user's level is ``searchsorted(level_bounds, u, side="right") - 1`` clipped to the levels,
    for its uniform ``u = (w >> 11) 2^-53`` (``w``: its first keyed word).  With ascending bounds
    that is the number of inner bounds ``b <= u``, and ``b <= u`` exactly when
    ``w >> 11 >= ceil(b 2^53)`` (``b 2^53`` is exact in float64, ``u`` a multiple of ``2^-53``):
    a few integer comparisons of the words, the same levels without floats or a binary search
    (half the time).  Drawn :data:`LEVELS_AT_ONCE` users at a time (a user's level is
    a function of its id alone): the hashes' temporaries then stay in cache."""
    ids = np.asarray(user_ids, dtype=np.int64)
    bounds = np.asarray(level_bounds, dtype=np.float64)
    if bounds.size < 3 or not np.all(bounds[1:] >= bounds[:-1]):
        return _searched_levels(partition_seed, bounds, ids)
    tops = np.ceil(bounds[1:-1] * float(1 << 53))
    # w >> 11 >= t  <=>  w >= t << 11; a bound above every uniform (t >= 2^53) counts no one
    thresholds = [np.uint64(int(top) << 11) for top in tops if 0.0 < top < float(1 << 53)]
    always = int(np.count_nonzero(tops <= 0.0))  # bounds at or below 0 count everyone
    levels = np.full(ids.shape, always, dtype=np.int64)
    hit = np.empty(min(ids.size, LEVELS_AT_ONCE), dtype=bool)
    for first in range(0, ids.size, LEVELS_AT_ONCE):
        words = UserRandom(np.uint64(partition_seed), ids[first : first + LEVELS_AT_ONCE]).words(1)[:, 0]
        out, flags = levels[first : first + LEVELS_AT_ONCE], hit[: words.size]
        for threshold in thresholds:
            out += np.greater_equal(words, threshold, out=flags)
    return levels


def _searched_levels(partition_seed: int, level_bounds: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """:func:`user_levels` by a binary search of each uniform, for bounds not in ascending order."""
    levels = np.empty(ids.shape, dtype=np.int64)
    for first in range(0, ids.size, LEVELS_AT_ONCE):
        uniform = UserRandom(np.uint64(partition_seed), ids[first : first + LEVELS_AT_ONCE]).random()
        levels[first : first + LEVELS_AT_ONCE] = np.searchsorted(level_bounds, uniform, side="right") - 1
    return np.clip(levels, 0, level_bounds.size - 2)


def level_sizes(partition_seed: int, level_bounds: np.ndarray, first_user: int, users: int) -> np.ndarray:
    """How many of the users ``[first_user, first_user + users)`` each level holds."""
    levels = range_levels(partition_seed, level_bounds, first_user, users)
    return np.bincount(levels, minlength=level_bounds.size - 1)


def range_levels(partition_seed: int, level_bounds: np.ndarray, first_user: int, users: int) -> np.ndarray:
    """:func:`user_levels` of the users ``[first_user, first_user + users)``, read-only.

    Every level round of a shard asks for the same levels, so the last few
    ranges' are kept (one byte a user, or two past 255 levels) rather than drawn
    again each round; ranges above :data:`CACHED_LEVEL_USERS` users are drawn
    each time, so the cache stays below 8 x 4 MB.
    """
    bounds = np.asarray(level_bounds, dtype=np.float64)
    if users > CACHED_LEVEL_USERS:
        return user_levels(partition_seed, bounds, np.arange(first_user, first_user + users))
    return _range_levels(int(partition_seed), bounds.tobytes(), int(first_user), int(users))


@functools.lru_cache(maxsize=8)
def _range_levels(partition_seed: int, bounds: bytes, first_user: int, users: int) -> np.ndarray:
    level_bounds = np.frombuffer(bounds, dtype=np.float64)
    levels = user_levels(partition_seed, level_bounds, np.arange(first_user, first_user + users))
    levels = levels.astype(np.min_scalar_type(level_bounds.size))
    levels.flags.writeable = False
    return levels


def held_items(shard: Shard, randomness: RandomnessSource) -> np.ndarray:
    """The item each user of the shard reports (one per user for the whole run), ``-1`` for none."""
    if shard.one_item_per_user:
        return np.asarray(shard.item_of_user, dtype=np.int64)
    items = np.full(shard.n_users, -1, dtype=np.int64)
    holders, chosen = choose_items(shard, np.arange(shard.n_users), randomness, ITEM_PURPOSE, 0)
    items[holders] = chosen
    return items


def _report_values(
    request: PrefixRequest, shard: Shard, encoding: PrefixEncoding, items: np.ndarray, final: bool, level: int
) -> tuple[FrequencyOracle, np.ndarray]:
    """The oracle of a level's prefixes (or of whole values) and the key the holder of each of
    ``items`` reports to it."""
    length = encoding.length if final else int(request.lengths[level])
    oracle = request.oracle_for(length, request.final_epsilon if final else request.epsilon, encoding)
    return oracle, encoding.prefix_keys(shard.vocabulary, length)[items]  # item -1: the empty value, last


def _member_draws(
    values: np.ndarray,
    members: np.ndarray | None,
    randomness: RandomnessSource,
    draws: tuple[str, int, int],
) -> Iterator[tuple[np.ndarray, RandomSource]]:
    """The ``values`` of the shard's ``members`` (local indices, one value each; ``None``: every
    user) with their draws, block by block of :data:`USERS_PER_BLOCK` users in user order (the
    last block up to a quarter longer); ``draws`` is ``(purpose, round, first global user of the shard)``.

    Every user's report (the final pass) draws from the Philox range streams
    (:meth:`~fedhh.kernels.randomness.RandomnessSource.for_range`) of the block's
    users; a level's members, scattered over the shard by the public
    partition, draw from their own keyed streams
    (:meth:`~fedhh.kernels.randomness.RandomnessSource.for_users`).  Either way a
    user's draws depend on its global id only, never on the shard or block
    holding it.  A level of CMS (sketch rows drawn by the sparse sampler) draws
    from range streams laid over its members instead (:func:`_ranked_draws`,
    :func:`~fedhh.protocols.prefix_search.oracles.level_draws_from_ranges`).
    """
    purpose, round_, first_user = draws
    starts = list(range(0, max(values.size, 1), USERS_PER_BLOCK))
    if len(starts) > 1 and values.size - starts[-1] < USERS_PER_BLOCK // 4:
        starts.pop()  # a short last block joins the one before: a call's fixed cost is not worth a few users
    for first, end in zip(starts, [*starts[1:], max(values.size, 1)]):
        block = values[first:end]
        if members is None:
            yield block, randomness.for_range(purpose, round_, first_user + first, block.size)
        else:
            yield block, randomness.for_users(purpose, round_, members[first:end] + first_user)


def _ranked_draws(
    values: np.ndarray,
    members: np.ndarray,
    request: PrefixRequest,
    randomness: RandomnessSource,
    draws: tuple[str, int, int],
) -> Iterator[tuple[np.ndarray, RandomSource]]:
    """A level's ``members`` (local indices, ascending; ``values``: theirs) with their draws, from
    range streams over the members alone: within each block of
    :data:`~fedhh.kernels.randomness.GRID_USERS` global ids, the level's members, in id order, take the
    consecutive range ids ``block x GRID_USERS + rank`` (``rank``: how many of the level's
    members precede it in the block).

    A member's range id depends on its global id and the public partition only (a shard that
    starts inside a block counts the level's members of the block before it), and differs from
    every other member's, so its draws are its own and the same under any cut of the users,
    while the sampler walks the members' rows only, not every user's.
    """
    purpose, round_, first_user = draws
    if members.size == 0:  # no one: statistics in the oracle's shape
        yield values, randomness.for_users(purpose, round_, members + first_user)
        return
    blocks = (members + first_user) // GRID_USERS
    first_block = first_user // GRID_USERS
    head = first_user - first_block * GRID_USERS
    before = 0
    if head and blocks[0] == first_block:
        head_ids = np.arange(first_user - head, first_user)
        head_levels = user_levels(request.partition_seed, request.level_bounds, head_ids)
        before = int(np.count_nonzero(head_levels == request.level))
    starts = np.r_[0, np.flatnonzero(np.diff(blocks)) + 1]
    ranges = [
        (int(blocks[start]) * GRID_USERS + (before if blocks[start] == first_block else 0), int(end - start))
        for start, end in zip(starts, np.r_[starts[1:], blocks.size])
    ]
    # one oracle call for the members of several blocks (a range each), about USERS_PER_BLOCK of them:
    # the same draws as a call per block (each member's are its range id's), a call's fixed costs fewer times
    calls: list[list[tuple[int, int]]] = [[]]
    held = 0
    for block_range in ranges:
        if held >= USERS_PER_BLOCK:
            calls.append([])
            held = 0
        calls[-1].append(block_range)
        held += block_range[1]
    start = 0
    for call in calls:
        users = sum(count for _, count in call)
        yield values[start : start + users], randomness.for_ranges(purpose, round_, tuple(call))
        start += users


def respond(request: PrefixRequest, shard: Shard, randomness: RandomnessSource) -> PrefixResponse:
    """A shard's answer to one prefix-search round (vectorised over its users)."""
    if request.mode not in MODES:
        raise ValueError(f"request.mode: got {request.mode!r}; allowed: {list(MODES)}")
    encoding = PrefixEncoding(request.encoding, shard.vocabulary.codec)  # type: ignore[arg-type]
    items = held_items(shard, randomness)
    if request.mode == COLLECT:
        levels = range_levels(request.partition_seed, request.level_bounds, shard.first_user, shard.n_users)
        return _collect(request, shard, encoding, levels, items, randomness)
    final = request.mode == FINAL
    if final:
        oracle, values = _report_values(request, shard, encoding, items, final, request.level)
        reporting = shard.n_users
        batches = _member_draws(values, None, randomness, (FINAL_PURPOSE, 0, shard.first_user))
    else:
        levels = range_levels(request.partition_seed, request.level_bounds, shard.first_user, shard.n_users)
        members = np.flatnonzero(levels == request.level)
        reporting = int(members.size)
        draws = (LEVEL_PURPOSE, request.level, shard.first_user)
        oracle, values = _report_values(request, shard, encoding, items[members], final, request.level)
        if level_draws_from_ranges(oracle):
            batches = _ranked_draws(values, members, request, randomness, draws)
        else:
            batches = _member_draws(values, members, randomness, draws)
    counts, reporters = _summed_counts(oracle, batches, request.candidates)
    return PrefixResponse(
        round=request.round,
        sampled_users=reporting,
        responding_users=reporting,
        counts=np.asarray(counts, dtype=np.int64),
        reporters=np.asarray(reporters, dtype=np.int64),
        report_rows=np.zeros((0, 0), dtype=np.uint64),
        report_counts=np.zeros(0, dtype=np.int64),
    )


def _summed_counts(
    oracle: FrequencyOracle, batches: Iterator[tuple[np.ndarray, RandomSource]], candidates: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """What a shard sends (:func:`~fedhh.protocols.prefix_search.oracles.shard_counts`) for its batches of
    users (their values and draws):

    * the flat form: each batch's statistics' flat form, summed cell by cell (no merging of
      sparse statistics);
    * an oracle without a flat form (OLH): the candidates' support in the batches' summed
      statistics (one decode per shard, whatever its number of batches);
    * a sketch of unary rows answering with support counts: each batch's support counts drawn
      straight from its users (:meth:`~fedhh.oracles.FrequencyOracle.randomize_support`: only
      the cells the candidates read), summed.
    """
    if not answers_with_support(oracle, candidates.size):
        counts = reporters = np.zeros(0, dtype=np.int64)
        for number, (block, rng) in enumerate(batches):
            cells, users = oracle.to_flat(oracle.randomize_aggregate(block, rng))
            counts, reporters = (cells, users) if number == 0 else (counts + cells, reporters + users)
        return counts, reporters
    if oracle.flat_size() is None:
        statistics = functools.reduce(operator.add, (oracle.randomize_aggregate(block, rng) for block, rng in batches))
        return shard_counts(oracle, statistics, candidates)
    support = functools.reduce(
        operator.add, (oracle.randomize_support(block, candidates, rng) for block, rng in batches)
    )
    return support.counts.ravel(), np.atleast_1d(support.n_users)


def _collect(
    request: PrefixRequest,
    shard: Shard,
    encoding: PrefixEncoding,
    levels: np.ndarray,
    items: np.ndarray,
    randomness: RandomnessSource,
) -> PrefixResponse:
    """Every user's reports as one table: ``[level, level report..., full-value report...]``."""
    final_table = None
    if request.final_epsilon > 0:
        oracle, values = _report_values(request, shard, encoding, items, True, -1)
        final_table = _table(oracle, values, None, randomness, (FINAL_PURPOSE, 0, shard.first_user))
    tables = []
    for level in range(request.levels):
        in_level = levels == level
        oracle, values = _report_values(request, shard, encoding, items[in_level], False, level)
        reports = _table(oracle, values, np.flatnonzero(in_level), randomness, (LEVEL_PURPOSE, level, shard.first_user))
        columns = [np.full((reports.shape[0], 1), level, dtype=np.uint64), reports]
        if final_table is not None:
            columns.append(final_table[in_level])
        tables.append(np.concatenate(columns, axis=1))
    rows, counts = distinct_rows(np.concatenate(tables))
    return PrefixResponse(
        round=request.round,
        sampled_users=shard.n_users,
        responding_users=shard.n_users,
        counts=np.zeros(0, dtype=np.int64),
        reporters=np.zeros(0, dtype=np.int64),
        report_rows=rows,
        report_counts=counts,
    )


def _table(
    oracle: FrequencyOracle,
    values: np.ndarray,
    members: np.ndarray | None,
    randomness: RandomnessSource,
    draws: tuple[str, int, int],
) -> np.ndarray:
    """The reports of the ``members`` (local indices; ``None``: every user) of their ``values``
    as one report table, in user order."""
    blocks = _member_draws(values, members, randomness, draws)
    return np.concatenate([to_table(oracle.randomize(block, rng)) for block, rng in blocks])
