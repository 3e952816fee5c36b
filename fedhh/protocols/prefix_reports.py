"""What a prefix search (PEM, TreeHist) asks of users, and how a shard of users answers.

Users are split into levels by public randomness: user ``u`` answers level
``i`` when a uniform keyed by (partition seed, ``u``) falls in the level's
share of ``[0, 1)``.  The server and a device compute the same split from
the request alone, and a user's level never depends on sharding.  Each user
sends one report per level it belongs to (PEM: its group's prefix with the
whole ε; TreeHist: its level's prefix with ε/2, and in addition its full
value with ε/2), randomised by the level's frequency oracle with
randomness keyed by (purpose, level, global user id).  A user holding no
encodable item reports the empty value (all-zero units), so taking part
reveals nothing.

Three modes, one message pair for every variant of the family:

* ``level`` (interactive): the members of one level answer the candidate
  prefixes; the shard sends its reports' statistics in the oracle's flat
  form (FLH's table, a sketch's rows, ...), which add up over shards so the
  server decodes once per round, or, for an oracle whose statistics grow
  with the reports (OLH), the candidates' support counts, which cost each
  shard only its own reports;
* ``final`` (TreeHist, interactive): every user's full-value report answers
  the surviving candidates, the same way;
* ``collect`` (non-interactive, one shot): every user's reports, before any
  candidate is known, as a table of distinct report rows with counts.

The reports are the same in both ways of collecting them (same keys, same
calls), and statistics and support counts are exact integer sums, so a
one-shot run and an interactive run of one seed, over any number of shards,
decode the same statistics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from ..oracles import FrequencyOracle
from ..population import Shard
from ..randomness import RandomnessSource, UserRandom
from .base import Request, Response
from .messages import array_field, scalar_field
from .prefix_encoding import PrefixEncoding
from .prefix_oracles import level_oracle, shard_counts
from .report_table import merge_tables, to_table, distinct_rows
from .triehh import choose_items

LEVEL, FINAL, COLLECT = "level", "final", "collect"
MODES: tuple[str, ...] = (LEVEL, FINAL, COLLECT)
LEVEL_PURPOSE = "prefix.level-report"
FINAL_PURPOSE = "prefix.final-report"
ITEM_PURPOSE = "prefix.item"

ResponseT = TypeVar("ResponseT", bound="PrefixResponse")


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class PrefixResponse(Response):
    """The reports' counts (level, final) or the report table (collect); additive."""

    # flat statistics, or support counts (see prefix_oracles.shard_counts); Hadamard-based ones are signed
    counts: np.ndarray = array_field("int64", ("S",), minimum=None)
    # reports behind them (per sketch row or hash where the oracle has them)
    reporters: np.ndarray = array_field("int64", ("U",))
    report_rows: np.ndarray = array_field("uint64", ("R", "W"))  # distinct report rows, first column the level
    report_counts: np.ndarray = array_field("int64", ("R",), minimum=1)  # users that sent each row

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
            counts=np.sum([r.counts for r in responses], axis=0, dtype=np.int64),
            reporters=np.sum([r.reporters for r in responses], axis=0, dtype=np.int64),
            report_rows=rows,
            report_counts=counts,
        )


def user_levels(partition_seed: int, level_bounds: np.ndarray, user_ids: np.ndarray) -> np.ndarray:
    """The level of each global user id (public randomness: the same on every device and shard)."""
    uniform = UserRandom(np.uint64(partition_seed), np.asarray(user_ids, dtype=np.int64)).random()
    levels = np.searchsorted(level_bounds, uniform, side="right") - 1
    return np.clip(levels, 0, level_bounds.size - 2)


def level_sizes(partition_seed: int, level_bounds: np.ndarray, first_user: int, users: int) -> np.ndarray:
    """How many of the users ``[first_user, first_user + users)`` each level holds."""
    levels = user_levels(partition_seed, level_bounds, np.arange(first_user, first_user + users))
    return np.bincount(levels, minlength=level_bounds.size - 1)


def held_items(shard: Shard, members: np.ndarray, randomness: RandomnessSource) -> np.ndarray:
    """The item each member reports (one per user for the whole run), ``-1`` for none."""
    items = np.full(members.size, -1, dtype=np.int64)
    holders, chosen = choose_items(shard, members, randomness, ITEM_PURPOSE, 0)
    items[np.searchsorted(members, holders)] = chosen
    return items


def _reports(
    request: PrefixRequest,
    shard: Shard,
    encoding: PrefixEncoding,
    members: np.ndarray,
    items: np.ndarray,
    randomness: RandomnessSource,
    final: bool,
    level: int,
) -> tuple[FrequencyOracle, object]:
    """The members' reports of their level's prefix (or of their whole value)."""
    length = encoding.length if final else int(request.lengths[level])
    oracle = request.oracle_for(length, request.final_epsilon if final else request.epsilon, encoding)
    values = encoding.prefix_keys(shard.vocabulary, length)[items]  # item -1: the empty value, last
    rng = randomness.for_users(FINAL_PURPOSE if final else LEVEL_PURPOSE, 0 if final else level,
                               members + shard.first_user)
    return oracle, oracle.randomize(values, rng)


def respond(request: PrefixRequest, shard: Shard, randomness: RandomnessSource) -> PrefixResponse:
    """A shard's answer to one prefix-search round (vectorised over its users)."""
    if request.mode not in MODES:
        raise ValueError(f"request.mode: got {request.mode!r}; allowed: {list(MODES)}")
    encoding = PrefixEncoding(request.encoding, shard.vocabulary.codec)  # type: ignore[arg-type]
    local = np.arange(shard.n_users)
    levels = user_levels(request.partition_seed, request.level_bounds, local + shard.first_user)
    members = local[levels == request.level] if request.mode == LEVEL else local
    items = held_items(shard, members, randomness)
    if request.mode == COLLECT:
        return _collect(request, shard, encoding, members, levels, items, randomness)
    oracle, reports = _reports(request, shard, encoding, members, items, randomness, request.mode == FINAL,
                               request.level)
    counts, reporters = shard_counts(oracle, oracle.aggregate(reports), request.candidates)
    return PrefixResponse(
        round=request.round,
        sampled_users=int(members.size),
        responding_users=int(members.size),
        counts=np.asarray(counts, dtype=np.int64),
        reporters=np.asarray(reporters, dtype=np.int64),
        report_rows=np.zeros((0, 0), dtype=np.uint64),
        report_counts=np.zeros(0, dtype=np.int64),
    )


def _collect(
    request: PrefixRequest,
    shard: Shard,
    encoding: PrefixEncoding,
    members: np.ndarray,
    levels: np.ndarray,
    items: np.ndarray,
    randomness: RandomnessSource,
) -> PrefixResponse:
    """Every user's reports as one table: ``[level, level report..., full-value report...]``."""
    tables = []
    for level in range(request.levels):
        in_level = levels == level
        level_members, level_items = members[in_level], items[in_level]
        _, reports = _reports(request, shard, encoding, level_members, level_items, randomness, False, level)
        columns = [np.full((level_members.size, 1), level, dtype=np.uint64), to_table(reports)]
        if request.final_epsilon > 0:
            _, final = _reports(request, shard, encoding, level_members, level_items, randomness, True, level)
            columns.append(to_table(final))
        tables.append(np.concatenate(columns, axis=1))
    rows, counts = distinct_rows(np.concatenate(tables))
    return PrefixResponse(
        round=request.round,
        sampled_users=int(members.size),
        responding_users=int(members.size),
        counts=np.zeros(0, dtype=np.int64),
        reporters=np.zeros(0, dtype=np.int64),
        report_rows=rows,
        report_counts=counts,
    )
