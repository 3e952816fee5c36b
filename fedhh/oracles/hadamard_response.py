"""Hadamard response (HR, Acharya, Sun and Zhang 2019), general-privacy form.

Parameters (``E = e^ε``): ``B`` blocks, ``B = 1`` for ``ε <= 1`` and
``2^floor(log2(min(2d, E)))`` above (the authors' choice, also the one of the
reference implementation); block size ``b``, the smallest power of two with
``B (b - 1) >= d``; output space ``K = B b``; ``Z = 2B - 1 + E``.

Value ``v`` lives in block ``beta = v // (b - 1)`` at position ``pi = v mod
(b - 1) + 1`` (position 0 is skipped: its Hadamard row is all ones).  Its
*positive set* is the ``b/2`` outputs ``(beta, r)`` with ``H[pi, r] = +1``.
The user reports one output index: with probability ``2B / Z`` uniform over
all ``K``, otherwise uniform over its positive set.  Every output has
probability ``2E / (Z b)`` if it is in the positive set and ``2 / (Z b)``
otherwise, a ratio of exactly ``e^ε``.  For ``B = 1`` this is the basic,
pure HR with ``p = E / (E + 1)``, ``q = 1/2``.

Estimator (derivation).  Let ``w_i(x) = H[pi_x, r_i]`` if report ``i`` falls
in block ``beta_x`` and 0 otherwise.  Then ``E[w_i] = (E - 1) / Z`` for a user
holding ``x`` and 0 for every other user (within a block, the positive sets
of two positions overlap in exactly half), so
``c_hat(x) = Z / (E - 1) * sum_i w_i(x)`` is unbiased.  With
``P[report in block beta_x] = 2/Z + [user in beta_x] (E - 1) / Z``,

    Var c_hat(x) = 2 n Z / (E - 1)^2 + C_beta Z / (E - 1) - c_x,

where ``C_beta`` counts users whose value is in ``x``'s block.  Decoding is a
histogram of the ``n`` indices and one fast Walsh-Hadamard transform per
block: ``O(n + K log b)``, the cheapest of all the oracles.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from .base import FrequencyOracle, HistogramFlatForm, Support, check_kind, check_values, index_bits
from .device_spec import DeviceSpec
from .histogram import Histogram
from .sampling import RandomSource, check_rng_batch, uniform_below
from .walsh_hadamard import fwht, hadamard_parity, signed_sums

_DENSE_OUTPUTS = 1 << 24
MAX_OUTPUTS = 1 << 64


@dataclass(frozen=True)
class HadamardResponseReports:
    """One output index in ``[0, K)`` per user."""

    indices: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "indices", np.asarray(self.indices, dtype=np.uint64).ravel())

    def __len__(self) -> int:
        return int(self.indices.shape[0])

    def take(self, rows: np.ndarray) -> HadamardResponseReports:
        return HadamardResponseReports(self.indices[rows])


@dataclass(frozen=True)
class HadamardResponseStatistics:
    """Histogram of reported output indices and the number of reports."""

    outputs: Histogram
    n_users: int

    def __add__(self, other: HadamardResponseStatistics) -> HadamardResponseStatistics:
        if not isinstance(other, HadamardResponseStatistics):
            return NotImplemented
        return HadamardResponseStatistics(self.outputs + other.outputs, self.n_users + other.n_users)


class HadamardResponse(HistogramFlatForm, FrequencyOracle[HadamardResponseReports, HadamardResponseStatistics]):
    """Hadamard response with ``blocks`` blocks of ``block_size`` outputs."""

    name = "hr"
    statistics_type = HadamardResponseStatistics
    device_spec = DeviceSpec(
        parameters="`B = 1` when `ε <= 1`, else `B = 2^floor(log2(floor(min(2d, E))))` blocks; "
        "`b = 2^bit_length(ceil(d / B))` outputs per block (`bit_length(x)`: the bits of `x` written without "
        "leading zeros; so `b - 1 >= ceil(d / B)`); `K = B b` outputs; `Z = 2B - 1 + E`. Value `v` lives in "
        "block `β = v div (b - 1)` at position `π = (v mod (b - 1)) + 1`; its positive set is the `b/2` offsets "
        "`r < b` with `parity(π, r) = 0`.",
        randomizer="`indices`: with probability `2B / Z` an output uniform in `[0, K)`, otherwise `β b + r` with "
        "`r` uniform over the positive set.",
        statistics="When `K <= FLAT_CELLS_LIMIT`: `cells[x]` (`x < K`) is the number of reports equal to `x`; "
        "`reporters = [n]`.",
        support="For candidate `c` in block `β_c` at position `π_c`: `counts[i]` is the sum of `H[π_c, x - β_c b]` "
        "over the reports `x` in `[β_c b, (β_c + 1) b)` (signed); `reporters = [n]`.",
    )

    @property
    def histogram_size(self) -> int:
        return self.outputs

    max_domain = (1 << 64) - 1

    def __init__(self, epsilon: float, domain: int) -> None:
        super().__init__(epsilon, domain)
        self.exp_epsilon = math.exp(self.epsilon)
        # 2^floor(log2(min(2d, e^ε))), as an exact integer computation
        largest = int(min(2 * self.domain, self.exp_epsilon))
        self.blocks = 1 if self.epsilon <= 1 else 1 << (largest.bit_length() - 1)
        per_block = -(-self.domain // self.blocks)
        self.block_bits = per_block.bit_length()
        self.block_size = 1 << self.block_bits
        self.outputs = self.blocks * self.block_size
        if self.outputs > MAX_OUTPUTS:
            largest = MAX_OUTPUTS - self.blocks  # blocks x (2**64 / blocks - 1) values fit
            raise InputError(
                f"domain must be an integer in [2, {largest}] for hr at epsilon {self.epsilon} "
                f"(its {self.blocks} blocks of outputs must fit in 64 bits), got {self.domain}"
            )
        self.normaliser = 2 * self.blocks - 1 + self.exp_epsilon
        self.scale = self.normaliser / (self.exp_epsilon - 1)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(epsilon={self.epsilon}, domain={self.domain}, "
            f"blocks={self.blocks}, block_size={self.block_size})"
        )

    def _locate(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(block, position in 1..b-1) of each value."""
        blocks, offsets = np.divmod(values, np.uint64(self.block_size - 1))
        return blocks, offsets + np.uint64(1)

    def randomize(self, values: np.ndarray, rng: RandomSource) -> HadamardResponseReports:
        values = self._values(values)
        n_users = values.shape[0]
        check_rng_batch(rng, n_users)
        blocks, positions = self._locate(values)
        anywhere = rng.random(n_users) < 2 * self.blocks / self.normaliser
        # one uniform output index serves both branches: reported as is when the
        # report goes anywhere, its low bits are a uniform offset in the own block
        reported = uniform_below(rng, (n_users,), self.outputs)
        offsets = reported & np.uint64(self.block_size - 1)
        # flipping the lowest set bit of the position turns a -1 entry into a +1:
        # a 2-to-1 map onto the positive set, so the offset becomes uniform on it
        flip = positions & (np.uint64(0) - positions)  # lowest set bit
        flip *= hadamard_parity(offsets, positions)
        offsets ^= flip
        offsets |= blocks << np.uint64(self.block_bits)
        return HadamardResponseReports(np.where(anywhere, reported, offsets))

    def aggregate(self, reports: HadamardResponseReports) -> HadamardResponseStatistics:
        check_kind(self.name, reports, HadamardResponseReports, "reports")
        indices = check_values(reports.indices, self.outputs, "reports.indices")
        return HadamardResponseStatistics(Histogram.of(indices, bound=self.outputs), len(reports))

    def support(self, statistics: HadamardResponseStatistics, candidates: np.ndarray) -> Support:
        """``sum_i w_i(x)`` per candidate (signed, additive)."""
        check_kind(self.name, statistics, HadamardResponseStatistics, "statistics")
        blocks, positions = self._locate(self._values(candidates, "candidates"))
        if self.outputs <= _DENSE_OUTPUTS:
            dense = statistics.outputs.to_dense(self.outputs).reshape(self.blocks, self.block_size)
            transformed = fwht(dense)
            return Support(transformed[blocks.astype(np.intp), positions.astype(np.intp)], statistics.n_users)
        return Support(self._sparse_support(statistics.outputs, blocks, positions), statistics.n_users)

    def _sparse_support(self, outputs: Histogram, blocks: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Block by block, sum the signs of the reports that fell in each candidate's block."""
        totals = np.zeros(blocks.shape[0], dtype=np.int64)
        order = np.argsort(blocks, kind="stable")
        sorted_blocks = blocks[order]
        starts: np.ndarray | list[int] = (
            np.flatnonzero(np.r_[True, sorted_blocks[1:] != sorted_blocks[:-1]]) if blocks.size else []
        )
        bounds = np.r_[starts, blocks.size].astype(np.intp)
        shift = np.uint64(self.block_bits)
        for first, last in itertools.pairwise(bounds):
            block = sorted_blocks[first]
            low = block << shift
            lo = np.searchsorted(outputs.keys, low, side="left")
            hi = np.searchsorted(outputs.keys, low + np.uint64(self.block_size - 1), side="right")
            members = order[first:last]
            local = outputs.keys[lo:hi] - low
            totals[members] = signed_sums(local, outputs.counts[lo:hi], positions[members])
        return totals

    def estimate_support(self, support: Support) -> np.ndarray:
        return self.scale * support.counts.astype(np.float64)

    def per_user_variance(self) -> tuple[float, float]:
        """Placement-averaged: another value shares the block with probability
        ``(min(b - 1, d) - 1) / (d - 1)``; :meth:`variance` uses the true blocks."""
        uniform_part = 2 * self.normaliser / (self.exp_epsilon - 1) ** 2
        sharing = (min(self.block_size - 1, self.domain) - 1) / (self.domain - 1)
        return uniform_part + sharing * self.scale, uniform_part + self.scale - 1

    def variance(self, candidates: np.ndarray, truth: Histogram) -> np.ndarray:
        candidates = self._values(candidates, "candidates")
        blocks, _ = self._locate(candidates)
        truth_blocks, _ = self._locate(truth.keys)
        block_counts = Histogram.of(truth_blocks, truth.counts).lookup(blocks).astype(np.float64)
        counts = truth.lookup(candidates).astype(np.float64)
        uniform_part = 2 * self.normaliser / (self.exp_epsilon - 1) ** 2
        return truth.total * uniform_part + block_counts * self.scale - counts

    def report_bits(self) -> int:
        """One output index in ``[0, K)``: ``log2 K`` bits (``K = B b`` is a power of two)."""
        return index_bits(self.outputs)

    def report_probabilities(self, value: int, reports: HadamardResponseReports) -> np.ndarray:
        block, position = self._locate(np.array([value], dtype=np.uint64))
        in_block = (reports.indices >> np.uint64(self.block_bits)) == block[0]
        offsets = reports.indices & np.uint64(self.block_size - 1)
        positive = in_block & ~hadamard_parity(offsets, position[0])
        low = 2 / (self.normaliser * self.block_size)
        return np.where(positive, self.exp_epsilon * low, low)
