"""Hashtogram (Bassily, Nissim, Stemmer and Thakurta; [Bassily17] §4): one Hadamard bit of a hashed value.

A public hash ``h_r: V -> [T]`` per row ``r`` maps values into ``T`` buckets
(``T`` a power of two); users are split uniformly over the ``R`` rows, and a
user holding ``v`` sends ``W[s, h_r(v)]`` (``W`` the ``T x T`` Walsh-Hadamard
matrix, ``s`` a uniform public index), kept with probability
``e^ε / (1 + e^ε)``: the report ``(r, s, y)`` is ε-LDP because ``(r, s)``
does not depend on ``v``.  When the domain fits the width the hash is the
identity.  The server decodes every bucket of a row with one fast
Walsh-Hadamard transform and estimates a value by the ``mean`` over rows
(unbiased) or, against heavy collisions, the ``median`` ([Bassily17]'s).
The estimators and their variance are derived in ``docs/derivations.md``
("Hashtogram's decoder").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..kernels.randomness import derive_key, splitmix64
from .base import (
    FLAT_CELLS_LIMIT,
    FrequencyOracle,
    LinearVariance,
    Support,
    check_kind,
    check_lengths,
    check_positive_int,
    index_bits,
)
from .device_spec import DeviceSpec
from .hashing import MAX_RANGE, expand_seeds, hash_expanded, mix_keys
from .histogram import Histogram
from .sampling import RandomSource, check_rng_batch
from .walsh_hadamard import fwht, hadamard_parity

MAX_ROWS = 1 << 12
ESTIMATORS: tuple[str, ...] = ("mean", "median")


@dataclass(frozen=True)
class HashtogramReports:
    """Per user: hash row ``r``, Hadamard index ``s`` (both public) and the randomised bit (1 means -1)."""

    rows: np.ndarray
    indices: np.ndarray
    negative: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", np.asarray(self.rows, dtype=np.uint32).ravel())
        object.__setattr__(self, "indices", np.asarray(self.indices, dtype=np.uint32).ravel())
        object.__setattr__(self, "negative", np.asarray(self.negative, dtype=np.uint8).ravel())
        check_lengths("HashtogramReports", rows=self.rows, indices=self.indices, negative=self.negative)

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def take(self, rows: np.ndarray) -> HashtogramReports:
        return HashtogramReports(self.rows[rows], self.indices[rows], self.negative[rows])


@dataclass(frozen=True)
class HashtogramStatistics:
    """``sums[r, s]``: signed sum of the bits reported in row ``r`` at index ``s``;
    ``users[r]``: reports of row ``r``."""

    sums: np.ndarray
    users: np.ndarray

    @property
    def n_users(self) -> int:
        return int(self.users.sum())

    def __add__(self, other: HashtogramStatistics) -> HashtogramStatistics:
        if not isinstance(other, HashtogramStatistics):
            return NotImplemented
        if other.sums.shape != self.sums.shape:
            raise ValueError(f"HashtogramStatistics: shapes differ ({self.sums.shape} vs {other.sums.shape})")
        return HashtogramStatistics(self.sums + other.sums, self.users + other.users)


class Hashtogram(FrequencyOracle[HashtogramReports, HashtogramStatistics]):
    """``rows`` hash rows of ``width`` buckets, one randomised Hadamard bit per user (module docstring)."""

    name = "hashtogram"
    device_spec = DeviceSpec(
        parameters="`R = rows`, `T = width` (a power of two); `p = E / (1 + E)`; row `r`'s bucket of `v` is "
        '`h_r(v) = hash64(σ_r, v, T)` with `σ_r` the `r`-th seed of purpose `"fedhh.oracles.hashtogram.rows"` '
        "under `seed`, or `h_r(v) = v` when `d <= T` (no hashing).",
        randomizer="`rows`: `r` uniform in `[0, R)`; `indices`: `s` uniform in `[0, T)`; "
        "`negative = parity(s, h_r(v))`, flipped (XOR 1) with probability `1 - p`.",
        statistics="When `R T <= FLAT_CELLS_LIMIT`: `cells[r T + s]` is the sum of `1 - 2 negative` over the "
        "reports `(r, s, .)` (signed); `reporters[r]` (`R` entries) is the number of reports of row `r`.",
        support="Shape `(R, C)`, row-major: `counts[r C + i]` is the sum over the reports `(r, s, y)` of row `r` "
        "of `(1 - 2 y) H[s, h_r(candidates[i])]` (signed); `reporters[r]` as for the statistics.",
    )

    def __init__(
        self, epsilon: float, domain: int, rows: int = 1, width: int = 1024, seed: int = 0, estimator: str = "mean"
    ) -> None:
        super().__init__(epsilon, domain)
        if estimator not in ESTIMATORS:
            raise InputError(f"estimator: got {estimator!r}; allowed: {list(ESTIMATORS)}")
        self.estimator = estimator
        self.rows = check_positive_int(rows, "rows", 1, MAX_ROWS)
        self.width = check_positive_int(width, "width", 2, MAX_RANGE)
        if self.width & (self.width - 1):
            raise InputError(f"width: the Hadamard transform needs a power of two, got {self.width}")
        self.hashed = self.domain > self.width  # a domain that fits the width is not hashed
        self.seed = int(seed)
        base = derive_key(self.seed, "fedhh.oracles.hashtogram.rows")
        with np.errstate(over="ignore"):
            self.row_hashes = expand_seeds(splitmix64(base + np.arange(self.rows, dtype=np.uint64)))
        e = math.exp(self.epsilon)
        self.keep_probability = e / (1 + e)
        self.bias = (e - 1) / (e + 1)
        self.collision = 1.0 / self.width if self.hashed else 0.0

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(epsilon={self.epsilon}, domain={self.domain}, rows={self.rows}, "
            f"width={self.width}, seed={self.seed}, estimator={self.estimator!r})"
        )

    def buckets(self, rows: np.ndarray, values: np.ndarray | np.integer) -> np.ndarray:
        """``h_r(v)`` for rows and values (broadcasting); the value itself when the domain fits."""
        if not self.hashed:
            return np.broadcast_to(np.asarray(values, dtype=np.uint64), np.broadcast(rows, values).shape)
        multipliers, offsets = self.row_hashes
        return hash_expanded(multipliers[rows], offsets[rows], mix_keys(values), self.width)

    def randomize(self, values: np.ndarray, rng: RandomSource) -> HashtogramReports:
        values = self._values(values)
        n_users: int = values.shape[0]
        check_rng_batch(rng, n_users)
        rows = rng.integers(0, self.rows, size=n_users)
        indices = rng.integers(0, self.width, size=n_users)
        flipped = rng.random(n_users) >= self.keep_probability
        honest = hadamard_parity(indices.astype(np.uint64), self.buckets(rows, values))
        return HashtogramReports(rows, indices, honest ^ flipped)

    def aggregate(self, reports: HashtogramReports) -> HashtogramStatistics:
        check_kind(self.name, reports, HashtogramReports, "reports")
        if len(reports) and (int(reports.rows.max()) >= self.rows or int(reports.indices.max()) >= self.width):
            raise ValueError(
                f"{self.name}: reports must have rows in [0, {self.rows}) and indices in [0, {self.width})"
            )
        cells = reports.rows.astype(np.int64) * self.width + reports.indices
        signs = 1 - 2 * reports.negative.astype(np.int64)
        sums = np.bincount(cells, weights=signs, minlength=self.rows * self.width)
        users = np.bincount(reports.rows, minlength=self.rows)
        return HashtogramStatistics(
            np.rint(sums).astype(np.int64).reshape(self.rows, self.width), users.astype(np.int64)
        )

    def support(self, statistics: HashtogramStatistics, candidates: np.ndarray) -> Support:
        """``(W Z_r)[h_r(v)]`` for every row and candidate, shaped ``(rows, candidates)``."""
        check_kind(self.name, statistics, HashtogramStatistics, "statistics")
        if statistics.sums.shape != (self.rows, self.width):
            raise ValueError(
                f"{self.name}: statistics.sums must have shape {(self.rows, self.width)}, got {statistics.sums.shape}"
            )
        candidates = self._values(candidates, "candidates")
        columns = fwht(statistics.sums)
        index = np.arange(self.rows)[:, None]
        return Support(columns[index, self.buckets(index, candidates[None, :]).astype(np.intp)], statistics.users)

    def report_bits(self) -> int:
        """The hash row in ``[0, R)``, the Hadamard index in ``[0, T)`` and the randomised bit."""
        return index_bits(self.rows) + index_bits(self.width) + 1

    def support_shape(self) -> tuple[int, ...]:
        """One count per hash row and candidate (each row's reporters counted apart)."""
        return (self.rows,)

    def estimate_support(self, support: Support) -> np.ndarray:
        if support.counts.ndim != 2 or support.counts.shape[0] != self.rows:
            raise ValueError(
                f"{self.name}: support.counts must have shape (rows={self.rows}, candidates), "
                f"got {support.counts.shape}"
            )
        reports = float(np.sum(support.n_users))
        if self.estimator == "median":
            per_row = support.counts * (self.rows / self.bias)
            return (np.median(per_row, axis=0) - reports * self.collision) / (1 - self.collision)
        total = support.counts.sum(axis=0) / self.bias
        return (total - reports * self.collision) / (1 - self.collision)

    def flat_size(self) -> int | None:
        cells = self.rows * self.width
        return cells if cells <= FLAT_CELLS_LIMIT else None

    def to_flat(self, statistics: HashtogramStatistics) -> tuple[np.ndarray, np.ndarray]:
        return statistics.sums.ravel(), statistics.users

    def from_flat(self, cells: np.ndarray, reporters: np.ndarray) -> HashtogramStatistics:
        cells, reporters = self._check_flat(cells, reporters, self.rows)
        return HashtogramStatistics(cells.reshape(self.rows, self.width), reporters)

    def per_user_variance(self) -> tuple[float, float]:
        """Without the collision terms (see :meth:`variance`): ``1/c^2`` and ``1/c^2 - 1``, over ``(1 - 1/T)^2``
        (times ``pi / 2`` for the median)."""
        scale = (1 - self.collision) ** 2 / (math.pi / 2 if self.estimator == "median" else 1.0)
        return 1 / self.bias**2 / scale, (1 / self.bias**2 - 1) / scale

    def linear_variance(self, n_users: int) -> LinearVariance:
        other, same = self.per_user_variance()
        return LinearVariance(n_users * other, same - other)

    def variance(self, candidates: np.ndarray, truth: Histogram) -> np.ndarray:
        """The module docstring's variance, with the collisions of ``truth``'s values (mean estimator;
        the median's is :meth:`per_user_variance`'s, collisions aside)."""
        if self.estimator == "median":
            return super().variance(candidates, truth)
        counts = truth.lookup(self._values(candidates, "candidates")).astype(np.float64)
        n_users, t = float(truth.total), self.collision
        pair_mass = float(np.sum(truth.counts.astype(np.float64) * (truth.counts - 1)))
        colliding = t * (1 - t) * (pair_mass - counts * (counts - 1)) / self.rows
        return (n_users / self.bias**2 - counts - (n_users - counts) * t**2 + colliding) / (1 - t) ** 2

    def report_probabilities(self, value: int, reports: HashtogramReports) -> np.ndarray:
        honest = hadamard_parity(
            reports.indices.astype(np.uint64), self.buckets(reports.rows.astype(np.intp), np.uint64(value))
        )
        chosen = np.where(honest == reports.negative.astype(bool), self.keep_probability, 1 - self.keep_probability)
        return chosen / (self.rows * self.width)
