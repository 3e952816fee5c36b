"""Unary encodings: symmetric (SUE, basic RAPPOR) and optimised (OUE).

A user's value becomes a one-hot ``d``-bit vector; its 1 is kept with
probability ``p`` and every 0 turns into a 1 with probability ``q``, each bit
independently.  Two inputs differ in two bits, so the worst-case ratio is
``p (1 - q) / (q (1 - p))`` = ``e^ε`` for

* SUE: ``p = e^(ε/2) / (e^(ε/2) + 1)``, ``q = 1 - p``;
* OUE: ``p = 1/2``, ``q = 1 / (e^ε + 1)`` (minimises the variance).

Two client paths give the same statistics (the per-value support counts):

* ``randomize``: per-user bit rows, packed 8 per byte -- the deployment path
  and the one that stays identical under any sharding with ``UserRandom``;
  memory and time grow as ``users x d``, so it is for small domains.
* ``randomize_aggregate`` with a ``numpy.random.Generator``: the shard's
  counts directly.  Column ``v`` of the bit matrix is a sum of independent
  Bernoulli bits, ``n_v`` of them with probability ``p`` and ``n - n_v`` with
  probability ``q``, and all bits of all columns are independent; so the
  count vector has *exactly* the law ``Binomial(n_v, p) + Binomial(n - n_v, q)``
  independently per ``v``, which is what is sampled, in ``O(n + d)``.
  It is the same distribution, not the same sample: with a ``UserRandom``
  this method falls back to the per-user bit path.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass

import numpy as np

from .base import FLAT_CELLS_LIMIT, PureOracle, Support, check_kind, check_lengths
from .device_spec import DeviceSpec
from .sampling import RandomSource, check_rng_batch

MAX_UNARY_DOMAIN = 1 << 26
_COLUMNS_PER_DRAW = 16  # fixed, so the call sequence never depends on the shard


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
        parameters="`d <= 2^26`; `sue`: `p = e^(ε/2) / (e^(ε/2) + 1)`, `q = 1 - p`; `oue`: `p = 1/2`, "
        "`q = 1 / (E + 1)`.",
        randomizer="`d` independent bits: bit `v` is 1 with probability `p`, every other bit with probability `q`; "
        "`bits` is the row packed 8 bits per byte, first bit in the most significant bit, zero-padded "
        "(`numpy.packbits`), `ceil(d / 8)` bytes.",
        statistics="When `d <= FLAT_CELLS_LIMIT`: `cells[x]` (`x < d`) is the number of reports with bit `x` set; "
        "`reporters = [n]`.",
        support="`counts[i]` is the number of reports with bit `candidates[i]` set; `reporters = [n]`.",
    )

    def __init__(self, epsilon: float, domain: int) -> None:
        super().__init__(epsilon, domain)
        self.p, self.q = self.bit_probabilities(self.epsilon)

    @staticmethod
    @abstractmethod
    def bit_probabilities(epsilon: float) -> tuple[float, float]:
        """``(p, q)``: probability that the user's own bit, and any other bit, is 1."""

    def randomize(self, values: np.ndarray, rng: RandomSource) -> UnaryReports:
        values = self._values(values)
        n_users = values.shape[0]
        check_rng_batch(rng, n_users)
        bits = np.empty((n_users, self.domain), dtype=bool)
        users = np.arange(n_users)
        for first in range(0, self.domain, _COLUMNS_PER_DRAW):
            width = min(_COLUMNS_PER_DRAW, self.domain - first)
            uniforms = rng.random((n_users, width))
            block = uniforms < self.q
            own = (values >= first) & (values < first + width)
            own_column = (values[own] - np.uint64(first)).astype(np.intp)
            block[users[own], own_column] = uniforms[users[own], own_column] < self.p
            bits[:, first : first + width] = block
        return UnaryReports(np.packbits(bits, axis=1))

    def randomize_aggregate(self, values: np.ndarray, rng: RandomSource) -> UnaryStatistics:
        if not isinstance(rng, np.random.Generator):
            return self.aggregate(self.randomize(values, rng))
        values = self._values(values)
        holders = np.bincount(values.astype(np.intp), minlength=self.domain)
        counts = rng.binomial(holders, self.p) + rng.binomial(values.shape[0] - holders, self.q)
        return UnaryStatistics(counts.astype(np.int64), int(values.shape[0]))

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
            block = np.unpackbits(reports.bits[first : first + rows_per_block], axis=1, count=self.domain)
            counts += block.sum(axis=0, dtype=np.int64)
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
