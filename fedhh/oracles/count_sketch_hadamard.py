"""TreeHist's frequency oracle: a compressed, noisy count sketch (Bassily et al., [Bassily17] §3).

Public: ``t`` hash pairs ``h_j: V -> [m]``, ``g_j: V -> {+1, -1}`` and the
``m x m`` Walsh-Hadamard matrix ``W`` (``m`` a power of two, never stored:
``W[r, c] = (-1)^popcount(r & c)``).  A user holding ``v`` draws its hash
index ``j`` and a row ``r`` uniformly (public randomness, independent of
``v``), computes the single bit ``x = g_j(v) W[r, h_j(v)]`` and sends it
through randomised response: ``y = x`` with probability ``e^ε / (1 + e^ε)``.
The report ``(j, r, y)`` is therefore ε-LDP.

Decoding (derivation).  With ``c = (e^ε - 1) / (e^ε + 1)``, ``E[y] = c x``
and ``E_r[W[r, a] W[r, b]] = [a = b]``, so for a user of hash index ``j``
holding ``u``, ``E[y W[r, h_j(v)] g_j(v)] = c g_j(u) g_j(v) [h_j(u) =
h_j(v)]``: a count-sketch cell.  The server sums each hash index's reports
per row, ``Z_j[r] = sum y``, and one fast Walsh-Hadamard transform gives
every column at once, ``S_j(v) = g_j(v) (W Z_j)[h_j(v)]`` (additive,
integer).  ``t S_j(v) / c`` is unbiased for ``v``'s count over the random
hash indices (each holder lands in index ``j`` with probability ``1/t``) and
the sign hash cancels collisions on average; the estimate is the median over
``j`` (the paper's high-confidence choice) or the mean.

Variance.  A user not holding ``v`` adds ``y W g / c`` with square ``1/c^2``
and a holder adds ``y'/c`` with ``E[y'] = c``, so the mean over hash indices
has per-user variances ``1/c^2`` and ``1/c^2 - 1`` (those of the Hadamard
mechanism with one coefficient) plus the collision term of any count
sketch.  For ``t`` roughly Gaussian rows, the median costs a factor
``pi / 2`` in variance; ``per_user_variance`` reports it so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..errors import InputError
from ..kernels.randomness import derive_key, splitmix64
from .base import FLAT_CELLS_LIMIT, FrequencyOracle, Support, check_kind, check_lengths, check_positive_int, index_bits
from .device_spec import DeviceSpec
from .hashing import MAX_RANGE, expand_seeds, hash_expanded, mix_keys
from .sampling import RandomSource, check_rng_batch
from .walsh_hadamard import fwht, hadamard_parity

NAME = "count-sketch-hadamard"
ESTIMATORS: tuple[str, ...] = ("median", "mean")
MAX_HASHES = 1 << 12
# names the public hash functions; kept from the module's first home so that a seed draws the same sketch
HASH_PURPOSE = "fedhh.protocols.count-sketch-hadamard"


@dataclass(frozen=True)
class CountSketchHadamardReports:
    """Per user: hash index ``j``, Hadamard row ``r`` and the randomised bit (1 means -1)."""

    hashes: np.ndarray
    rows: np.ndarray
    negative: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "hashes", np.asarray(self.hashes, dtype=np.uint32).ravel())
        object.__setattr__(self, "rows", np.asarray(self.rows, dtype=np.uint32).ravel())
        object.__setattr__(self, "negative", np.asarray(self.negative, dtype=np.uint8).ravel())
        check_lengths("CountSketchHadamardReports", hashes=self.hashes, rows=self.rows, negative=self.negative)

    def __len__(self) -> int:
        return int(self.hashes.shape[0])

    def take(self, rows: np.ndarray) -> CountSketchHadamardReports:
        return CountSketchHadamardReports(self.hashes[rows], self.rows[rows], self.negative[rows])


@dataclass(frozen=True)
class CountSketchHadamardStatistics:
    """``sums[j, r]``: signed sum of the bits reported with hash ``j`` and row ``r``."""

    sums: np.ndarray
    users: np.ndarray  # reports per hash index

    @property
    def n_users(self) -> int:
        return int(self.users.sum())

    def __add__(self, other: CountSketchHadamardStatistics) -> CountSketchHadamardStatistics:
        if not isinstance(other, CountSketchHadamardStatistics):
            return NotImplemented
        if other.sums.shape != self.sums.shape:
            raise ValueError(f"CountSketchHadamardStatistics: shapes differ ({self.sums.shape} vs {other.sums.shape})")
        return CountSketchHadamardStatistics(self.sums + other.sums, self.users + other.users)


def auto_sketch_shape(n_users: int) -> tuple[int, int]:
    """The sketch for ``n`` users: an odd ``t`` near ``ln n`` ([Bassily17]: ``O(log(n/β))``)
    and a width, the power of two at or above ``sqrt(n)`` ([Bassily17] §5 uses ``m = sqrt(n)``)."""
    hashes = 2 * int(math.log(max(n_users, 3)) / 2) + 1
    width = 1 << max(1, math.ceil(math.log2(max(math.sqrt(n_users), 2))))
    return min(max(hashes, 3), 31), width


class CountSketchHadamard(FrequencyOracle[CountSketchHadamardReports, CountSketchHadamardStatistics]):
    """The count sketch of ``hashes`` rows and ``width`` columns, one Hadamard bit per user."""

    name = NAME
    device_spec = DeviceSpec(
        parameters="`t = rows` hash pairs, `m = width` (a power of two); `p = E / (1 + E)`; with `σ_j` and `σ'_j` "
        'the `j`-th seed and sign seed of purpose `"fedhh.protocols.count-sketch-hadamard"` under `seed`: '
        "`h_j(v) = hash64(σ_j, v, m)`, `g_j(v) = hash64(σ'_j, v, 2)` (1 means the sign -1).",
        randomizer="`hashes`: `j` uniform in `[0, t)`; `rows`: `r` uniform in `[0, m)`; "
        "`negative = g_j(v) XOR parity(r, h_j(v))`, flipped (XOR 1) with probability `1 - p`.",
        statistics="When `t m <= FLAT_CELLS_LIMIT`: `cells[j m + r]` is the sum of `1 - 2 negative` over the "
        "reports `(j, r, .)` (signed); `reporters[j]` (`t` entries) is the number of reports of hash `j`.",
        support="Shape `(t, C)`, row-major: `counts[j C + i]` is `(1 - 2 g_j(c))` times the sum over the reports "
        "`(j, r, y)` of hash `j` of `(1 - 2 y) H[r, h_j(c)]`, `c = candidates[i]` (signed); `reporters[j]` as "
        "for the statistics.",
    )

    def __init__(
        self,
        epsilon: float,
        domain: int,
        hashes: int = 15,
        width: int = 1024,
        seed: int = 0,
        estimator: Literal["median", "mean"] = "median",
    ) -> None:
        super().__init__(epsilon, domain)
        self.hashes = check_positive_int(hashes, "protocol.sketch_rows (hash pairs t)", 1, MAX_HASHES)
        self.width = check_positive_int(width, "protocol.sketch_width (m)", 2, MAX_RANGE)
        if self.width & (self.width - 1):
            raise InputError(f"protocol.sketch_width (m): must be a power of two, got {self.width}")
        if estimator not in ESTIMATORS:
            raise InputError(f"estimator must be one of {list(ESTIMATORS)}, got {estimator!r}")
        self.estimator = estimator
        self.seed = int(seed)
        base = derive_key(self.seed, HASH_PURPOSE)
        with np.errstate(over="ignore"):
            self.bucket_hashes = expand_seeds(splitmix64(base + np.arange(self.hashes, dtype=np.uint64)))
            self.sign_hashes = expand_seeds(splitmix64(~base + np.arange(self.hashes, dtype=np.uint64)))
        e = math.exp(self.epsilon)
        self.keep_probability = e / (1 + e)
        self.bias = (e - 1) / (e + 1)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(epsilon={self.epsilon}, domain={self.domain}, hashes={self.hashes}, "
            f"width={self.width}, estimator={self.estimator!r})"
        )

    def cells(self, hashes: np.ndarray, values: np.ndarray | np.integer) -> tuple[np.ndarray, np.ndarray]:
        """``(h_j(v), g_j(v) = -1)`` for hash indices and values (broadcasting)."""
        mixed = mix_keys(values)
        multipliers, offsets = self.bucket_hashes
        buckets = hash_expanded(multipliers[hashes], offsets[hashes], mixed, self.width)
        multipliers, offsets = self.sign_hashes
        negative = hash_expanded(multipliers[hashes], offsets[hashes], mixed, 2).astype(bool)
        return buckets, negative

    def randomize(self, values: np.ndarray, rng: RandomSource) -> CountSketchHadamardReports:
        values = self._values(values)
        n_users: int = values.shape[0]
        check_rng_batch(rng, n_users)
        hashes = rng.integers(0, self.hashes, size=n_users)
        rows = rng.integers(0, self.width, size=n_users)
        flipped = rng.random(n_users) >= self.keep_probability
        buckets, negative = self.cells(hashes, values)
        bit = negative ^ hadamard_parity(rows.astype(np.uint64), buckets)
        return CountSketchHadamardReports(hashes, rows, bit ^ flipped)

    def aggregate(self, reports: CountSketchHadamardReports) -> CountSketchHadamardStatistics:
        check_kind(self.name, reports, CountSketchHadamardReports, "reports")
        if len(reports) and (int(reports.hashes.max()) >= self.hashes or int(reports.rows.max()) >= self.width):
            raise ValueError(
                f"{self.name}: reports must have hash indices in [0, {self.hashes}) and rows in [0, {self.width})"
            )
        cells = reports.hashes.astype(np.int64) * self.width + reports.rows
        signs = 1 - 2 * reports.negative.astype(np.int64)
        sums = np.bincount(cells, weights=signs, minlength=self.hashes * self.width)
        users = np.bincount(reports.hashes, minlength=self.hashes)
        return CountSketchHadamardStatistics(
            np.rint(sums).astype(np.int64).reshape(self.hashes, self.width), users.astype(np.int64)
        )

    def support(self, statistics: CountSketchHadamardStatistics, candidates: np.ndarray) -> Support:
        """``S_j(v)`` for every hash index and candidate, shaped ``(hashes, candidates)``."""
        check_kind(self.name, statistics, CountSketchHadamardStatistics, "statistics")
        if statistics.sums.shape != (self.hashes, self.width):
            raise ValueError(
                f"{self.name}: statistics.sums must have shape {(self.hashes, self.width)}, got {statistics.sums.shape}"
            )
        candidates = self._values(candidates, "candidates")
        columns = fwht(statistics.sums)
        index = np.arange(self.hashes)[:, None]
        buckets, negative = self.cells(index, candidates[None, :])
        counts = columns[index, buckets.astype(np.intp)]
        return Support(np.where(negative, -counts, counts), statistics.users)

    def flat_size(self) -> int | None:
        cells = self.hashes * self.width
        return cells if cells <= FLAT_CELLS_LIMIT else None

    def to_flat(self, statistics: CountSketchHadamardStatistics) -> tuple[np.ndarray, np.ndarray]:
        return statistics.sums.ravel(), statistics.users

    def from_flat(self, cells: np.ndarray, reporters: np.ndarray) -> CountSketchHadamardStatistics:
        cells, reporters = self._check_flat(cells, reporters, self.hashes)
        return CountSketchHadamardStatistics(cells.reshape(self.hashes, self.width), reporters)

    def report_bits(self) -> int:
        """The hash index in ``[0, t)``, the Hadamard row in ``[0, m)`` and the randomised bit."""
        return index_bits(self.hashes) + index_bits(self.width) + 1

    def support_shape(self) -> tuple[int, ...]:
        """One count per hash index and candidate."""
        return (self.hashes,)

    def estimate_support(self, support: Support) -> np.ndarray:
        if support.counts.ndim != 2 or support.counts.shape[0] != self.hashes:
            raise ValueError(
                f"{self.name}: support.counts must have shape (hashes={self.hashes}, candidates), "
                f"got {support.counts.shape}"
            )
        per_hash = support.counts * (self.hashes / self.bias)
        return np.median(per_hash, axis=0) if self.estimator == "median" else per_hash.mean(axis=0)

    def per_user_variance(self) -> tuple[float, float]:
        other = 1 / self.bias**2
        factor = math.pi / 2 if self.estimator == "median" else 1.0
        return factor * other, factor * (other - 1)

    def report_probabilities(self, value: int, reports: CountSketchHadamardReports) -> np.ndarray:
        hashes = reports.hashes.astype(np.intp)
        buckets, negative = self.cells(hashes, np.uint64(value))
        honest = negative ^ hadamard_parity(reports.rows.astype(np.uint64), buckets)
        chosen = np.where(honest == reports.negative.astype(bool), self.keep_probability, 1 - self.keep_probability)
        return chosen / (self.hashes * self.width)
