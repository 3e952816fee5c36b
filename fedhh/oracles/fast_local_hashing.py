"""Fast local hashing (FLH): OLH restricted to ``k'`` public hash functions.

Client side is OLH except that the seed is one of ``k'`` public seeds (drawn
uniformly, independently of the value, so privacy is unchanged).  The server
then only needs, per function ``j`` and bucket ``y``, how many users reported
``(j, y)``: a ``k' x g`` table that is additive across shards.  Supporting a
candidate ``v`` is ``sum_j table[j, H_j(v)]``, so decoding costs ``O(k' |C|)``
instead of OLH's ``O(n |C|)``: the ``k' x |C|`` hashes are computed block by
block in cache and summed at once, never stored (a table of them is hundreds
of MB for a PEM level), on every core.

Accuracy (derivation).  Given the ``k'`` functions, a user holding ``u != v``
supports ``v`` with probability ``q_grr + (p - q_grr) kappa_uv`` where
``kappa_uv`` is the fraction of functions under which ``u`` and ``v``
collide; over a random choice of the functions ``kappa_uv ~ Binomial(k',
1/g) / k'``.  The estimator ``(S - n/g) / (p - 1/g)`` is unbiased over that
choice, and with ``(p - q_grr) / (p - 1/g) = g / (g - 1)`` its variance is

    Var_OLH(v) + sum_{u != v} c_u (c_u - 1) / ((g - 1) k').

The extra term is the price of few functions: it vanishes when no two users
share a value and decays as ``1/k'``, which is why FLH approaches OLH as
``k'`` grows and why heavy values hurt it on skewed data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedhh.kernels.randomness import derive_key, splitmix64

from .base import FLAT_CELLS_LIMIT, PureOracle, Support, check_kind, check_lengths, check_positive_int, index_bits
from .device_spec import DeviceSpec
from .hashing import MAX_RANGE, compiled_kernels, expand_seeds, hash_expanded, hash_keys, map_blocks, mix_keys, slices
from .histogram import Histogram
from .local_hashing import optimal_range
from .sampling import RandomSource, check_rng_batch, randomized_response

_BLOCK_ENTRIES = 1 << 17  # (function, candidate) hashes per numpy pass: 1 MB, in cache
_CANDIDATES_PER_TASK = 2048
COMPILED_HASHES = 1 << 24  # (function, candidate) hashes from which a decode is compiled
MAX_HASH_FUNCTIONS = 1 << 20


@dataclass(frozen=True)
class FastLocalHashReports:
    """Per user: which public hash function, and the randomised bucket."""

    functions: np.ndarray
    buckets: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "functions", np.asarray(self.functions, dtype=np.uint32).ravel())
        object.__setattr__(self, "buckets", np.asarray(self.buckets, dtype=np.uint32).ravel())
        check_lengths("FastLocalHashReports", functions=self.functions, buckets=self.buckets)

    def __len__(self) -> int:
        return int(self.functions.shape[0])

    def take(self, rows: np.ndarray) -> FastLocalHashReports:
        return FastLocalHashReports(self.functions[rows], self.buckets[rows])


@dataclass(frozen=True)
class FastLocalHashStatistics:
    """``table[j, y]``: reports that used function ``j`` and said bucket ``y``."""

    table: np.ndarray
    n_users: int

    def __add__(self, other: FastLocalHashStatistics) -> FastLocalHashStatistics:
        if not isinstance(other, FastLocalHashStatistics):
            return NotImplemented
        if other.table.shape != self.table.shape:
            raise ValueError(
                f"FastLocalHashStatistics: table shapes differ ({self.table.shape} vs {other.table.shape})"
            )
        return FastLocalHashStatistics(self.table + other.table, self.n_users + other.n_users)


class FastLocalHashing(PureOracle[FastLocalHashReports, FastLocalHashStatistics]):
    """OLH over ``hash_functions`` public functions chosen by ``seed``."""

    name = "flh"
    device_spec = DeviceSpec(
        parameters="`k' = hash_functions`; `g = max(2, round(E) + 1)` (round half to even); `p = E / (E + g - 1)`; "
        "function `j` (`j < k'`) is `hash64(σ_j, ., g)` with `σ_j` the `j`-th seed of purpose "
        '`"fedhh.oracles.flh.functions"` under `seed`.',
        randomizer="`functions`: `j` uniform in `[0, k')`; `buckets = RR(hash64(σ_j, v, g), g, p)`.",
        statistics="When `k' g <= FLAT_CELLS_LIMIT`: `cells[j g + y]` is the number of reports `(j, y)`; "
        "`reporters = [n]`.",
        support="`counts[i]` is the number of reports `(j, y)` with `hash64(σ_j, candidates[i], g) = y`; "
        "`reporters = [n]`.",
    )

    def __init__(
        self, epsilon: float, domain: int, hash_functions: int = 1000, seed: int = 0, g: int | None = None
    ) -> None:
        super().__init__(epsilon, domain)
        self.hash_functions = check_positive_int(hash_functions, "hash_functions", 1, MAX_HASH_FUNCTIONS)
        self.g = optimal_range(self.epsilon) if g is None else check_positive_int(g, "g", 2, MAX_RANGE)
        self.seed = int(seed)
        base = derive_key(self.seed, "fedhh.oracles.flh.functions")
        with np.errstate(over="ignore"):
            self.function_seeds = splitmix64(base + np.arange(self.hash_functions, dtype=np.uint64))
        self.multipliers, self.offsets = expand_seeds(self.function_seeds)
        self._row_starts = np.arange(self.hash_functions, dtype=np.uint64) * np.uint64(
            self.g
        )  # row j of the flat table
        e = math.exp(self.epsilon)
        self.keep_probability = e / (e + self.g - 1)
        self.p = self.keep_probability
        self.q = 1.0 / self.g

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(epsilon={self.epsilon}, domain={self.domain}, "
            f"hash_functions={self.hash_functions}, g={self.g}, seed={self.seed})"
        )

    def randomize(self, values: np.ndarray, rng: RandomSource) -> FastLocalHashReports:
        values = self._values(values)
        n_users: int = values.shape[0]
        check_rng_batch(rng, n_users)
        functions = rng.integers(0, self.hash_functions, size=n_users)
        hashed = hash_expanded(self.multipliers[functions], self.offsets[functions], mix_keys(values), self.g)
        return FastLocalHashReports(functions, randomized_response(rng, hashed, self.g, self.keep_probability))

    def aggregate(self, reports: FastLocalHashReports) -> FastLocalHashStatistics:
        check_kind(self.name, reports, FastLocalHashReports, "reports")
        if len(reports) and int(reports.functions.max()) >= self.hash_functions:
            raise ValueError(
                f"{self.name}: reports.functions must be in [0, {self.hash_functions}), "
                f"got {int(reports.functions.max())}"
            )
        if len(reports) and int(reports.buckets.max()) >= self.g:
            raise ValueError(f"{self.name}: reports.buckets must be in [0, {self.g}), got {int(reports.buckets.max())}")
        cells = reports.functions.astype(np.int64) * self.g + reports.buckets
        table = np.bincount(cells, minlength=self.hash_functions * self.g).reshape(self.hash_functions, self.g)
        return FastLocalHashStatistics(table.astype(np.int64), len(reports))

    def flat_size(self) -> int | None:
        cells = self.hash_functions * self.g
        return cells if cells <= FLAT_CELLS_LIMIT else None

    def to_flat(self, statistics: FastLocalHashStatistics) -> tuple[np.ndarray, np.ndarray]:
        return statistics.table.ravel(), np.array([statistics.n_users], dtype=np.int64)

    def from_flat(self, cells: np.ndarray, reporters: np.ndarray) -> FastLocalHashStatistics:
        cells, reporters = self._check_flat(cells, reporters, 1)
        return FastLocalHashStatistics(cells.reshape(self.hash_functions, self.g), int(reporters[0]))

    def support(self, statistics: FastLocalHashStatistics, candidates: np.ndarray) -> Support:
        check_kind(self.name, statistics, FastLocalHashStatistics, "statistics")
        if statistics.table.shape != (self.hash_functions, self.g):
            raise ValueError(
                f"{self.name}: statistics.table must have shape {(self.hash_functions, self.g)}, "
                f"got {statistics.table.shape}"
            )
        mixed = mix_keys(self._values(candidates, "candidates"))
        cells = statistics.table.ravel()
        parts = slices(mixed.shape[0], _CANDIDATES_PER_TASK)
        work = self.hash_functions * mixed.shape[0]
        kernels = compiled_kernels(work, COMPILED_HASHES)
        if kernels is None:
            blocks = map_blocks(lambda part: self._support_block(cells, mixed[part]), parts, work)
        else:
            cells, g = np.ascontiguousarray(cells, dtype=np.int64), np.uint64(self.g)
            blocks = map_blocks(
                lambda part: kernels.sum_table_at_buckets(cells, self.multipliers, self.offsets, g, mixed[part]),
                parts,
                work,
            )
        return Support(np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.int64), statistics.n_users)

    def _support_block(self, cells: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """``sum_j table[j, H_j(c)]`` for a block of mixed candidate keys, the functions taken in
        groups whose ``H_j(c)`` fit in cache (computed in place, never stored as a whole table)."""
        rows = max(1, _BLOCK_ENTRIES // keys.shape[0])
        work = np.empty((rows, keys.shape[0]), dtype=np.uint64)
        counts = np.zeros(keys.shape[0], dtype=np.int64)
        shift, g = np.uint64(32), np.uint64(self.g)
        with np.errstate(over="ignore"):
            for first in range(0, self.hash_functions, rows):
                group = slice(first, first + rows)
                z = work[: self.multipliers[group].shape[0]]
                np.multiply(self.multipliers[group, None], keys[None, :], out=z)
                np.add(z, self.offsets[group, None], out=z)
                np.right_shift(z, shift, out=z)
                np.multiply(z, g, out=z)
                np.right_shift(z, shift, out=z)  # H_j(c), as hash_expanded computes it
                np.add(z, self._row_starts[group, None], out=z)
                counts += cells[z.view(np.int64)].sum(axis=0)
        return counts

    def variance(self, candidates: np.ndarray, truth: Histogram) -> np.ndarray:
        """OLH's variance plus the hash-choice term (see the module docstring);
        the expectation is over a random choice of the ``k'`` public functions."""
        base = super().variance(candidates, truth)
        counts = truth.lookup(self._values(candidates, "candidates")).astype(np.float64)
        pair_mass = float(np.sum(truth.counts.astype(np.float64) * (truth.counts - 1)))
        return base + (pair_mass - counts * (counts - 1)) / ((self.g - 1) * self.hash_functions)

    def report_bits(self) -> int:
        """Which of the ``k'`` public hash functions, and the bucket in ``[0, g)``."""
        return index_bits(self.hash_functions) + index_bits(self.g)

    def report_probabilities(self, value: int, reports: FastLocalHashReports) -> np.ndarray:
        hashed = hash_keys(self.function_seeds[reports.functions.astype(np.intp)], np.uint64(value), self.g)
        grr_other = (1 - self.keep_probability) / (self.g - 1)
        chosen = np.where(hashed == reports.buckets, self.keep_probability, grr_other)
        return chosen / self.hash_functions
