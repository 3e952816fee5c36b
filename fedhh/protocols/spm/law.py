"""SPM's law sampler: a shard's support counts drawn from their law given its item counts.

SPM's rounds read the *same* segment reports (a user's reports are keyed by
its id), so the law of a round is conditional on what earlier rounds drew.
Given a shard's item counts:

* **Which value a user reports**, once per run: its item's, or, holding
  several, one item's drawn by local frequency
  (:func:`~fedhh.protocols.law.reported_holders`); a user holding none
  reports the empty value (all bits 0).
* **Segment pairs.**  A user's pair is a public uniform index keyed by its id,
  independent across users: an item's reporters split over the pairs as
  ``Multinomial(reporters, 1 / C(g, 2) each)``
  (:func:`~fedhh.protocols.law.public_index_table`), once per run.
* **The segment reports, once per run.**  A user of pair ``P`` sends one OLH
  report of each of its pair's segments.  For an **ideal random hash** a
  report supports its own pattern with probability ``p`` and every other
  pattern with ``q = 1/g``, independently across patterns (as
  :mod:`fedhh.oracles.laws` says for OLH).  So for every pair ``P``, segment
  ``s`` of it and pattern ``x``, the supporters of ``x`` among ``P``'s users
  holding ``x`` in segment ``s`` are ``Binomial(holders, p)`` and among the
  others ``Binomial(others, q)``, independently: drawn once per run and kept
  (:class:`SegmentSupports`).  The segments round sends, per segment, their
  sums over the pairs holding it.
* **The pairs round.**  Given those counts, the users supporting pattern
  ``x`` of segment ``i`` are a uniform subset of each group (holders of
  ``x``, the others) of the drawn size, independently across patterns, and
  independently of segment ``j``'s (the users are exchangeable within a
  group, the reports independent).  The round sends ``A^T B``: how many
  users support both ``x`` and ``y``, which depends on *which* users support
  each, jointly over the ``|C_i| x |C_j|`` cells; no law of it is derived
  here that costs less than the users.  So this round draws the subsets user
  by user (users built from the counts, a block of :data:`USERS_AT_ONCE`
  at a time, each block's share of a subset drawn first by a multivariate
  hypergeometric over the blocks): exact, at the users path's cost,
  O(users x (|C_i| + |C_j|)) draws and O(users |C_i| |C_j|) to sum, with
  memory O(:data:`USERS_AT_ONCE` x patterns).  The column sums it sends are
  the segments round's counts, as in the users path.
* **The final round**: every user's full-value OLH report, independent of
  the segment reports; the candidates' support counts from OLH's law.

Exact given the counts for an ideal random hash in OLH (the real 32-bit
family's collisions are not modelled); the segments and final rounds cost
O(pairs x patterns) whatever the number of users, the pairs round grows with
the users.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...data.counted import CountedShard
from ...kernels.blas import single_blas_thread
from ...kernels.laws import multivariate_hypergeometric
from ...kernels.randomness import KeyedRandomness
from ...oracles import make_oracle
from ...oracles.laws import support_law
from ...oracles.local_hashing import LocalHashing
from ..common.prefix_encoding import PrefixEncoding
from ..law import public_index_table, reported_holders, shard_generator
from .client import segment_keys, segment_pairs
from .messages import SPMRequest, SPMResponse
from .parameters import FINAL, MODES, ORACLE, SEGMENTS

SEGMENTS_PURPOSE = "spm.law-segments"
REPORTS_PURPOSE = "spm.law-reports"
USERS_AT_ONCE = 1 << 16  # users of a pair whose support indicators the pairs round holds at once


@dataclass(frozen=True)
class SegmentSupports:
    """A shard's segment reports, as counts (drawn once per run, module docstring).

    ``segment_values[v, s]`` is segment ``s`` of value ``v`` (the empty value
    last); ``by_pair[v, P]`` the reporters of value ``v`` in pair ``P``; for
    pair ``P`` and its side ``t`` (0: its first segment, 1: its second),
    ``holding[P][t][x]`` of the pair's users holding pattern ``x`` in that
    segment support it, and ``others[P][t][x]`` of the pair's other users.
    """

    segment_values: np.ndarray  # [V + 1, g] uint64
    by_pair: np.ndarray  # [V + 1, pairs] int64
    holding: tuple[tuple[np.ndarray, np.ndarray], ...]
    others: tuple[tuple[np.ndarray, np.ndarray], ...]


def law(request: SPMRequest, counts: CountedShard, randomness: KeyedRandomness) -> SPMResponse:
    """A shard's support counts for an SPM round, drawn from their law (module docstring)."""
    if request.mode not in MODES:
        raise ValueError(f"request.mode: got {request.mode!r}; allowed: {list(MODES)}")
    encoding = PrefixEncoding("bits", counts.vocabulary.codec)
    if encoding.length != request.value_bits:
        raise ValueError(
            f"request.value_bits: {request.value_bits}, but the item codec gives {encoding.length}-bit values"
        )
    bits = np.concatenate([encoding.units(counts.vocabulary), np.zeros((1, request.value_bits), dtype=np.uint8)])
    rng = shard_generator(randomness, REPORTS_PURPOSE, request.round, counts)
    if request.mode == FINAL:
        oracle = make_oracle(ORACLE, epsilon=request.epsilon, domain=encoding.domain(request.value_bits))
        reporting = reported_holders(counts, randomness)
        support = support_law(oracle, encoding.keys(bits), reporting, request.candidates, rng)
        return _response(request, counts, support.counts, np.array([counts.n_users]))
    supports = segment_supports(request, counts, randomness, bits)
    pairs = segment_pairs(request.segments)
    cells: list[np.ndarray] = []
    reporters: list[int] = []
    if request.mode == SEGMENTS:
        for segment in range(request.segments):
            sides = [(pair, side) for pair, members in enumerate(pairs) for side in (0, 1) if members[side] == segment]
            cells.append(sum(supports.holding[p][t] + supports.others[p][t] for p, t in sides))
            reporters.append(sum(int(supports.by_pair[:, p].sum()) for p, _ in sides))
        return _response(request, counts, np.concatenate(cells), np.array(reporters))
    for pair, (first, second) in enumerate(pairs):
        joint, first_sums, second_sums = _pair_counts(request, supports, pair, first, second, rng)
        cells += [joint.ravel(), first_sums, second_sums]
        reporters.append(int(supports.by_pair[:, pair].sum()))
    return _response(request, counts, np.concatenate(cells), np.array(reporters))


def segment_supports(
    request: SPMRequest, counts: CountedShard, randomness: KeyedRandomness, bits: np.ndarray
) -> SegmentSupports:
    """The shard's segment reports as counts, drawn once per run and kept (module docstring)."""
    key = (SEGMENTS_PURPOSE, randomness.seed, int(request.partition_seed), request.bounds.tobytes(), request.epsilon)
    kept: SegmentSupports | None = counts.memo.get(key)
    if kept is not None:
        return kept
    rng = shard_generator(randomness, SEGMENTS_PURPOSE, 0, counts)
    values = segment_keys(bits, request.bounds)
    pairs = segment_pairs(request.segments)
    by_pair = public_index_table(rng, reported_holders(counts, randomness), pairs.shape[0])
    holding, others = [], []
    for pair, members in enumerate(pairs):
        users = int(by_pair[:, pair].sum())
        sides_holding, sides_others = [], []
        for segment in members:
            width = int(request.bounds[segment + 1] - request.bounds[segment])
            oracle = make_oracle(ORACLE, epsilon=request.epsilon, domain=1 << width)
            assert isinstance(oracle, LocalHashing)
            holders = np.bincount(
                values[:, segment].astype(np.intp), weights=by_pair[:, pair].astype(np.float64), minlength=1 << width
            )
            holders = np.rint(holders).astype(np.int64)  # exact: float64 sums of integers below 2**53
            sides_holding.append(rng.binomial(holders, oracle.p).astype(np.int64))
            sides_others.append(rng.binomial(users - holders, oracle.q).astype(np.int64))
        holding.append(tuple(sides_holding))
        others.append(tuple(sides_others))
    drawn = SegmentSupports(values, by_pair, tuple(holding), tuple(others))  # type: ignore[arg-type]
    counts.memo[key] = drawn
    return drawn


def _pair_counts(
    request: SPMRequest, supports: SegmentSupports, pair: int, first: int, second: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pair ``(first, second)``'s ``A^T B`` and column sums over ``C_first x C_second``, its users'
    support indicators drawn block by block given the kept counts (module docstring)."""
    reporters = supports.by_pair[:, pair]
    held = np.flatnonzero(reporters)
    ends = np.cumsum(reporters[held])
    users = int(ends[-1]) if ends.size else 0
    blocks = np.arange(0, users, USERS_AT_ONCE)
    sides = []
    for position, segment in enumerate((first, second)):
        patterns = request.patterns[request.pattern_offsets[segment] : request.pattern_offsets[segment + 1]]
        width = int(request.bounds[segment + 1] - request.bounds[segment])
        if patterns.size and int(patterns.max()) >= 1 << width:
            raise ValueError(
                f"request.patterns: segment {segment} has {1 << width} patterns, got {int(patterns.max())}"
            )
        distinct, inverse = np.unique(patterns, return_inverse=True)
        sides.append(
            _Side(
                distinct,
                inverse,
                supports.segment_values[held, segment],
                supports.holding[pair][position][distinct.astype(np.intp)],
                supports.others[pair][position][distinct.astype(np.intp)],
            )
        )

    def block_values(start: int) -> list[np.ndarray]:
        owner = np.searchsorted(ends, np.arange(start, min(start + USERS_AT_ONCE, users)), side="right")
        return [side.values[owner] for side in sides]

    # each block's share of every subset: a multivariate hypergeometric over the blocks' group sizes
    holders = [np.zeros((blocks.size, side.distinct.size), dtype=np.int64) for side in sides]
    sizes = np.diff(np.r_[blocks, users])
    for index, start in enumerate(blocks):
        for side, values, table in zip(sides, block_values(int(start)), holders):
            table[index] = side.holders_of(values)
    shares = [side.block_shares(rng, table, sizes) for side, table in zip(sides, holders)]
    joint = np.zeros((sides[0].distinct.size, sides[1].distinct.size), dtype=np.int64)
    for index, start in enumerate(blocks):
        a, b = (
            _indicators(rng, values, side.distinct, held_share[index], other_share[index])
            for side, values, (held_share, other_share) in zip(sides, block_values(int(start)), shares)
        )
        with single_blas_thread():
            joint += np.rint(a.T.astype(np.float32) @ b.astype(np.float32)).astype(np.int64)  # exact: sums below 2**24
    sums = [(side.holding + side.others)[side.inverse] for side in sides]
    return joint[np.ix_(sides[0].inverse, sides[1].inverse)], sums[0], sums[1]


@dataclass(frozen=True)
class _Side:
    """One segment of a pair in the pairs round: its asked patterns (distinct, and the request's
    order as ``distinct[inverse]``), the segment value of each value held in the pair, and the
    kept supporters of each pattern among its holders and among the others."""

    distinct: np.ndarray
    inverse: np.ndarray
    values: np.ndarray
    holding: np.ndarray
    others: np.ndarray

    def holders_of(self, values: np.ndarray) -> np.ndarray:
        """How many of ``values`` equal each pattern."""
        position = np.minimum(np.searchsorted(self.distinct, values), max(self.distinct.size - 1, 0))
        match = self.distinct[position] == values if self.distinct.size else np.zeros(values.shape, dtype=bool)
        return np.bincount(position[match], minlength=self.distinct.size)

    def block_shares(
        self, rng: np.random.Generator, holders: np.ndarray, sizes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``[blocks, patterns]`` twice: how many of each pattern's supporters among its holders,
        and among the other users, fall in each block (a uniform subset's split over the blocks)."""
        held_shares = np.zeros(holders.shape, dtype=np.int64)
        other_shares = np.zeros(holders.shape, dtype=np.int64)
        for column in range(self.distinct.size):
            held = holders[:, column]
            held_shares[:, column] = multivariate_hypergeometric(rng, held, int(self.holding[column]))
            other_shares[:, column] = multivariate_hypergeometric(rng, sizes - held, int(self.others[column]))
        return held_shares, other_shares


def _indicators(
    rng: np.random.Generator, values: np.ndarray, distinct: np.ndarray, holding: np.ndarray, others: np.ndarray
) -> np.ndarray:
    """``[users, patterns]``: which of a block's users (their segment values) support each pattern,
    ``holding[x]`` uniformly among the holders of ``x`` and ``others[x]`` among the rest."""
    supported = np.zeros((values.size, distinct.size), dtype=bool)
    for column, pattern in enumerate(distinct):
        holds = values == pattern
        for group, size in ((np.flatnonzero(holds), holding[column]), (np.flatnonzero(~holds), others[column])):
            supported[rng.choice(group, size=int(size), replace=False), column] = True
    return supported


def _response(request: SPMRequest, counts: CountedShard, cells: np.ndarray, reporters: np.ndarray) -> SPMResponse:
    return SPMResponse(
        round=request.round,
        sampled_users=counts.n_users,
        responding_users=counts.n_users,
        counts=np.asarray(cells, dtype=np.int64),
        reporters=np.asarray(reporters, dtype=np.int64),
    )
