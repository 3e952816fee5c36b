"""Unary encodings: symmetric (SUE, basic RAPPOR) and optimised (OUE).

A user's value becomes a one-hot ``d``-bit vector; its 1 is kept with
probability ``p`` and every 0 turns into a 1 with probability ``q``, each bit
independently.  Two inputs differ in two bits, so the worst-case ratio is
``p (1 - q) / (q (1 - p))`` = ``e^ε`` for

* SUE: ``p = e^(ε/2) / (e^(ε/2) + 1)``, ``q = 1 - p``;
* OUE: ``p = 1/2``, ``q = 1 / (e^ε + 1)`` (minimises the variance).

A bit is a uniform 32-bit word compared with an integer threshold, rounded
conservatively (:func:`word_thresholds`), so the realised ``p' <= p`` and
``q' >= q`` keep every report ε-LDP exactly; they are the oracle's ``p`` and
``q``.  Three client paths give the same statistics: ``randomize`` (per-user
bit rows, the deployment path), ``randomize_aggregate`` with a
``numpy.random.Generator`` (each column's exact Binomial law) and, with a
:class:`~fedhh.kernels.randomness.RangeRandom` and ``q' <=``
:data:`SPARSE_MAX_Q`, the set bits alone by geometric gaps
(:mod:`fedhh.kernels.sparse_bernoulli`).  Why each draws the device's law is
derived in ``docs/derivations.md`` ("Unary encodings: three client paths,
one law").
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeGuard

import numpy as np

from ..errors import InputError
from ..kernels.randomness import GRID_USERS, RangeRandom
from ..kernels.sparse_bernoulli import grid_pieces, row_divider
from .base import FLAT_CELLS_LIMIT, PureOracle, Support, check_groups, check_kind, check_lengths, group_members
from .device_spec import DeviceSpec
from .sampling import RandomSource, check_rng_batch, random_words

MAX_UNARY_DOMAIN = 1 << 26
WORD_SCALE = 1 << 32  # a bit compares a uniform 32-bit word with its threshold
_WORDS_PER_DRAW = 128  # 256 bits per call on the rng: fixed, so the call sequence never depends on the shard
_BYTE_SUM_ROWS = 255  # rows a uint8 column sum can take without overflowing
# The sparse sampler walks the set bits, the dense path draws and counts every bit (half a
# Philox word, a comparison, a column sum a bit): on 1,024-bit rows they cost the same near
# q' = 0.155, and the sampler is cheaper below.  The switch depends on q' alone, so every shard
# takes the same path (and a shard's sample depends on the path: the switch fixes the results).
SPARSE_MAX_Q = 0.125


def column_counts(bits: np.ndarray) -> np.ndarray:
    """Ones per column of a C-contiguous 0/1 matrix ``(n, w)`` (bool or uint8), as int64.

    Runs of 255 rows are summed in uint8 (no cast, no overflow), then the
    runs in int64: about four times faster than one int64 sum of the matrix.
    """
    ones = np.ascontiguousarray(bits).view(np.uint8)
    runs = ones.shape[0] // _BYTE_SUM_ROWS
    head = ones[: runs * _BYTE_SUM_ROWS].reshape(runs, _BYTE_SUM_ROWS, ones.shape[1]).sum(axis=1, dtype=np.uint8)
    return head.sum(axis=0, dtype=np.int64) + ones[runs * _BYTE_SUM_ROWS :].sum(axis=0, dtype=np.int64)


def word_thresholds(p: float, q: float) -> tuple[int, int]:
    """``(T_p, T_q)``: a bit is reported set when a uniform 32-bit word is below its threshold.

    ``T_p = floor(p 2^32)`` (at most ``2^32 - 1``) and ``T_q = ceil(q 2^32)``
    round towards less privacy loss: the realised ``p' <= p`` and ``q' >= q``
    give every likelihood ratio at most the ideal one.
    """
    t_p, t_q = min(math.floor(p * WORD_SCALE), WORD_SCALE - 1), math.ceil(q * WORD_SCALE)
    if t_p <= t_q:
        raise InputError(
            f"epsilon: p = {p} and q = {q} leave no 32-bit difference between a user's own bit and "
            "the others; use a larger ε"
        )
    return t_p, t_q


@dataclass(frozen=True)
class UnaryReports:
    """Per-user bit rows packed with ``numpy.packbits`` (``bits[i]`` has ``ceil(d / 8)`` bytes)."""

    bits: np.ndarray

    def __post_init__(self) -> None:
        bits = np.asarray(self.bits, dtype=np.uint8)
        if bits.ndim != 2:
            raise ValueError(f"UnaryReports: bits must be 2-D (users, bytes), got shape {bits.shape}")
        object.__setattr__(self, "bits", bits)

    def __len__(self) -> int:
        return int(self.bits.shape[0])

    def take(self, rows: np.ndarray) -> UnaryReports:
        return UnaryReports(self.bits[rows])


@dataclass(frozen=True)
class UnaryStatistics:
    """How many reports have bit ``v`` set, for every ``v``, and the number of reports."""

    counts: np.ndarray
    n_users: int

    def __add__(self, other: UnaryStatistics) -> UnaryStatistics:
        if not isinstance(other, UnaryStatistics):
            return NotImplemented
        check_lengths("UnaryStatistics", counts=self.counts, other_counts=other.counts)
        return UnaryStatistics(self.counts + other.counts, self.n_users + other.n_users)


class UnaryEncoding(PureOracle[UnaryReports, UnaryStatistics]):
    """Unary encoding with keep probability ``p`` and flip-on probability ``q``."""

    max_domain = MAX_UNARY_DOMAIN
    device_spec = DeviceSpec(
        parameters="`d <= 2^26`; `sue`: `p = e^(ε/2) / (e^(ε/2) + 1)`, `q = 1 / (e^(ε/2) + 1)`; `oue`: `p = 1/2`, "
        "`q = 1 / (E + 1)` (float64); the 32-bit thresholds `T_p = min(floor(p 2^32), 2^32 - 1)` and "
        "`T_q = ceil(q 2^32)`, and the realised probabilities `p' = T_p / 2^32 <= p` and `q' = T_q / 2^32 >= q`, "
        "which the server's estimates use (rounding towards less privacy loss keeps the report ε-LDP).",
        randomizer="`ceil(d / 2)` uniform 64-bit words `w_0, w_1, ...`, each two 32-bit uniforms: "
        "`u_(2i) = w_i mod 2^32` (the low half) and `u_(2i+1) = w_i >> 32` (the last high half unused when `d` "
        "is odd); bit `x` is 1 when `u_x < T_p` for `x = v` and when `u_x < T_q` for every other `x` "
        "(independent bits, 1 with probability `p'`, resp. `q'`); `bits` is the row packed 8 bits per byte, "
        "first bit in the most significant bit, zero-padded (`numpy.packbits`), `ceil(d / 8)` bytes.",
        statistics="When `d <= FLAT_CELLS_LIMIT`: `cells[x]` (`x < d`) is the number of reports with bit `x` set; "
        "`reporters = [n]`.",
        support="`counts[i]` is the number of reports with bit `candidates[i]` set; `reporters = [n]`.",
    )

    def __init__(self, epsilon: float, domain: int) -> None:
        super().__init__(epsilon, domain)
        self.thresholds = word_thresholds(*self.bit_probabilities(self.epsilon))
        self.p, self.q = (threshold / WORD_SCALE for threshold in self.thresholds)

    @staticmethod
    @abstractmethod
    def bit_probabilities(epsilon: float) -> tuple[float, float]:
        """Ideal ``(p, q)``: probability that the user's own bit, and any other bit, is 1
        (the oracle's ``p`` and ``q`` are their 32-bit realisations, :func:`word_thresholds`)."""

    def _bit_blocks(self, values: np.ndarray, rng: RandomSource) -> Iterator[tuple[int, np.ndarray]]:
        """``(first bit, (n, w) bool block)``: the randomised bits, ``2 x _WORDS_PER_DRAW`` columns
        per call on ``rng`` (bit ``x`` compares the ``x``-th 32-bit half of the user's words, low
        half first, with ``T_p`` for its own value and ``T_q`` otherwise)."""
        n_users = values.shape[0]
        check_rng_batch(rng, n_users)
        t_p, t_q = (np.uint32(threshold) for threshold in self.thresholds)
        for first in range(0, self.domain, 2 * _WORDS_PER_DRAW):
            width = min(2 * _WORDS_PER_DRAW, self.domain - first)
            words = random_words(rng, n_users, -(-width // 2)).astype(
                "<u8", copy=False
            )  # little-endian: low half first
            uniforms = words.view("<u4")[:, :width]
            block = uniforms < t_q
            own = np.flatnonzero((values >= first) & (values < first + width))
            own_column = (values[own] - np.uint64(first)).astype(np.intp)
            block[own, own_column] = uniforms[own, own_column] < t_p
            yield first, block

    def randomize(self, values: np.ndarray, rng: RandomSource) -> UnaryReports:
        values = self._values(values)
        packed = np.empty((values.shape[0], -(-self.domain // 8)), dtype=np.uint8)
        for first, block in self._bit_blocks(values, rng):
            packed[:, first // 8 : first // 8 + -(-block.shape[1] // 8)] = np.packbits(block, axis=1)
        return UnaryReports(packed)

    def randomize_aggregate(self, values: np.ndarray, rng: RandomSource) -> UnaryStatistics:
        values = self._values(values)
        if self._sparse(rng):
            return self._sparse_statistics(values, np.zeros(values.shape[0], dtype=np.int64), 1, rng)[0]
        if not isinstance(rng, np.random.Generator):
            counts = np.zeros(self.domain, dtype=np.int64)
            for first, block in self._bit_blocks(values, rng):
                counts[first : first + block.shape[1]] = column_counts(block)
            return UnaryStatistics(counts, int(values.shape[0]))
        holders = np.bincount(values.astype(np.intp), minlength=self.domain)
        counts = rng.binomial(holders, self.p) + rng.binomial(values.shape[0] - holders, self.q)
        return UnaryStatistics(counts.astype(np.int64), int(values.shape[0]))

    def randomize_aggregate_groups(
        self, values: np.ndarray, groups: np.ndarray, n_groups: int, rng: RandomSource
    ) -> list[UnaryStatistics]:
        """Per group, the counts of its users' bits: the sparse sampler with a :class:`RangeRandom`
        when ``q' <=`` :data:`SPARSE_MAX_Q`, each group's Binomial counts with a Generator, else
        the per-user reports (module docstring)."""
        values = self._values(values)
        groups = check_groups(groups, values.shape[0], n_groups)
        if self._sparse(rng):
            return self._sparse_statistics(values, groups, int(n_groups), rng)
        if isinstance(rng, np.random.Generator):
            return [self.randomize_aggregate(values[members], rng) for members in group_members(groups, int(n_groups))]
        return super().randomize_aggregate_groups(values, groups, n_groups, rng)

    def _sparse(self, rng: RandomSource) -> TypeGuard[RangeRandom]:
        return isinstance(rng, RangeRandom) and self.q <= SPARSE_MAX_Q

    def _sparse_statistics(
        self, values: np.ndarray, groups: np.ndarray, n_groups: int, rng: RangeRandom
    ) -> list[UnaryStatistics]:
        """One call on ``rng``: the grid of the other bits, ``d - 1`` a user, whose blocks lead
        with a 32-bit uniform per user, the own bit being that uniform below ``T_p`` (module
        docstring).

        Counting: group ``g``'s counts are kept in ``2d`` cells, ``g 2d + x``.  A user's own bit
        counts in cell ``g 2d + v``; its slot ``c`` (``c < d - 1``) on the grid's line, position
        ``p = r (d - 1) + c`` of its block's row ``r``, counts in cell ``p + offset[r]`` with
        ``offset[r] = g 2d + v + 1 - r (d - 1)``, that is ``g 2d + v + 1 + c``, and column ``x``
        of the group is the sum of its cells ``x`` and ``x + d``: slot ``c`` lands in column
        ``(v + 1 + c) mod d``, every column but ``v`` once.  A set bit costs a row (a multiply
        and a shift), a gathered offset, an add and a counted cell; nothing compares a bit with
        the user's own value.
        """
        check_rng_batch(rng, values.shape[0])
        d = self.domain
        stride = 2 * d
        cells = (n_groups + 1) * stride  # uncounted users fill a discarded group
        own_cells = groups * stride
        counted = groups >= 0
        if values.size and not counted.all():
            np.putmask(own_cells, ~counted, n_groups * stride)
            reporters = np.bincount(groups[counted], minlength=n_groups)
        else:
            reporters = np.bincount(groups, minlength=n_groups)
        own_cells += values.view(np.int64)  # values < d: the same bits (an int64 add, not numpy's float64 mix)
        slots = d - 1
        rows_of = row_divider(slots)
        slot_zero = 1 - np.arange(min(GRID_USERS, values.shape[0]), dtype=np.int64) * slots  # offset[r] - own cell
        # the bits' counts in int32 (no cell exceeds the users, < 2^31 here): half the bytes in the
        # cache that add.at scatters into, 3% of SFP's run
        tally = np.int32 if values.shape[0] < 1 << 31 else np.int64
        counts, one = np.zeros(cells, dtype=tally), tally(1)
        own = np.empty(values.shape[0], dtype=bool)
        own_threshold = np.uint32(self.thresholds[0])
        offsets = own_cells
        for first, positions, (rows_buffer, cells_buffer), leading in grid_pieces(rng, slots, self.q, leading=True):
            if leading is not None:  # a block's first piece
                users = leading.size
                np.less(leading, own_threshold, out=own[first : first + users])
                offsets = own_cells[first : first + users] + slot_zero[:users]
            rows = rows_of(positions, rows_buffer[: positions.size])
            hit = cells_buffer[: positions.size]
            np.take(offsets, rows, out=hit, mode="clip")  # rows < users: clipping never acts, and skips the check
            hit += positions
            np.add.at(counts, hit, one)
        # own bits added as 0 or 1 in every user's cell: no select or compress (half the bits set at
        # random: either costs a mispredicted branch a user), no bincount's array of every cell
        np.add.at(counts, own_cells, own.view(np.uint8).astype(tally))
        halves: np.ndarray = counts[: n_groups * stride].reshape(n_groups, 2, d)
        per_group = halves[:, 0].astype(np.int64)
        per_group += halves[:, 1]
        return [UnaryStatistics(row, int(users)) for row, users in zip(per_group, reporters, strict=True)]

    def aggregate(self, reports: UnaryReports) -> UnaryStatistics:
        check_kind(self.name, reports, UnaryReports, "reports")
        expected = -(-self.domain // 8)
        if reports.bits.shape[1] != expected:
            raise ValueError(
                f"{self.name}: reports.bits must have {expected} bytes per user for domain "
                f"{self.domain}, got {reports.bits.shape[1]}"
            )
        counts = np.zeros(self.domain, dtype=np.int64)
        rows_per_block = max(1, (1 << 24) // max(self.domain, 1))
        for first in range(0, len(reports), rows_per_block):
            counts += column_counts(
                np.unpackbits(reports.bits[first : first + rows_per_block], axis=1, count=self.domain)
            )
        return UnaryStatistics(counts, len(reports))

    def flat_size(self) -> int | None:
        return self.domain if self.domain <= FLAT_CELLS_LIMIT else None

    def to_flat(self, statistics: UnaryStatistics) -> tuple[np.ndarray, np.ndarray]:
        return statistics.counts, np.array([statistics.n_users], dtype=np.int64)

    def from_flat(self, cells: np.ndarray, reporters: np.ndarray) -> UnaryStatistics:
        cells, reporters = self._check_flat(cells, reporters, 1)
        return UnaryStatistics(cells, int(reporters[0]))

    def support(self, statistics: UnaryStatistics, candidates: np.ndarray) -> Support:
        check_kind(self.name, statistics, UnaryStatistics, "statistics")
        candidates = self._values(candidates, "candidates")
        return Support(statistics.counts[candidates.astype(np.intp)], statistics.n_users)

    def report_bits(self) -> int:
        """The randomised bit vector: one bit per value of the domain."""
        return self.domain

    def report_probabilities(self, value: int, reports: UnaryReports) -> np.ndarray:
        bits = np.unpackbits(reports.bits, axis=1, count=self.domain).astype(bool)
        log_other = np.where(bits, math.log(self.q), math.log1p(-self.q)).sum(axis=1)
        own = bits[:, value]
        own_change = np.where(own, math.log(self.p) - math.log(self.q), math.log1p(-self.p) - math.log1p(-self.q))
        return np.exp(log_other + own_change)


class SymmetricUnaryEncoding(UnaryEncoding):
    """SUE (basic one-time RAPPOR): each bit is randomised response at ε/2."""

    name = "sue"

    @staticmethod
    def bit_probabilities(epsilon: float) -> tuple[float, float]:
        half = math.exp(epsilon / 2)
        return half / (half + 1), 1 / (half + 1)


class OptimisedUnaryEncoding(UnaryEncoding):
    """OUE: keep the 1 with probability 1/2, turn each 0 on with ``1 / (e^ε + 1)``."""

    name = "oue"

    @staticmethod
    def bit_probabilities(epsilon: float) -> tuple[float, float]:
        return 0.5, 1 / (math.exp(epsilon) + 1)
