"""Hadamard mechanism with ``t`` sampled coefficients, HM(t) (Apple's HCMS core, TreeHist).

``K`` is the smallest power of two ``>= d``.  A user holding ``v`` samples
``t`` row indices ``j_1..j_t`` uniformly (with replacement, independently of
``v``) and forms the ``t``-bit word of its coefficients ``H[j_k, v]``; the
word goes through randomised response over its ``2^t`` values: kept with
probability ``p = e^ε / (e^ε + 2^t - 1)``, else replaced by a uniform other
word.  The indices are public randomness, so the ratio is exactly ``e^ε``.

Decoding reads each sent coefficient on its own, which is what makes HM fast:
the server sums the signs per index, ``T[j] = sum of reported signs at j``,
and one Walsh-Hadamard transform gives every value's support at once,
``D(x) = sum_j T[j] H[j, x]``.

Estimator and variance (derivation).  Write ``s_k = +1`` when bit ``k``
survived the word randomisation.  ``E[s_k] = mu = (e^ε - 1) / (e^ε + 2^t - 1)``
and, for ``k != l``, ``E[s_k s_l] = rho = p - (1 - p) / (2^t - 1)`` (equal to
``mu``).  A user holding ``x`` adds ``sum_k s_k`` to ``D(x)``; any other user
adds ``sum_k s_k H[j_k, w]`` with ``w = u xor x != 0``.  The flips ``s`` do
not depend on the indices, and ``E[H[j_k, w] H[j_l, w]] = E[H[j, w]]^2 = 0``
for independent indices (a coincidence ``j_k = j_l``, probability ``1/K``,
is exactly offset by the negative correlation of distinct rows), so these
``t`` terms are uncorrelated, mean-zero ±1.  Hence ``c_hat(x) = D(x) / (t mu)``
is unbiased and

    Var c_hat(x) = [(n - c_x) t + c_x (t + t(t-1) rho - t^2 mu^2)] / (t mu)^2.

For ``t = 1`` this is ``n ((e^ε + 1) / (e^ε - 1))^2 - c_x``, BLH's variance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from .base import (
    MAX_DOMAIN,
    FrequencyOracle,
    HistogramFlatForm,
    Support,
    check_groups,
    check_kind,
    check_lengths,
    check_positive_int,
    group_members,
    index_bits,
)
from .device_spec import DeviceSpec
from .histogram import Histogram
from .sampling import RandomSource, check_rng_batch, randomized_response, uniform_below
from .walsh_hadamard import fwht, hadamard_parity, signed_sums

_DENSE_INDICES = 1 << 24
_INTEGER_INDICES = 1 << 52  # row counts drawn by one ``integers`` call (``uniform_below``'s small bounds)
MAX_COEFFICIENTS = 16


def _sign_sums(signed_cells: np.ndarray, cells: int) -> np.ndarray:
    """Per cell, the sum of the signs reported into it: ``signed_cells`` is ``2 cell + 1`` for a
    -1, ``2 cell`` for a +1, so one bincount counts both and the sum is their difference."""
    both = np.bincount(signed_cells, minlength=2 * cells).reshape(cells, 2)
    return both[:, 0] - both[:, 1]


@dataclass(frozen=True)
class HadamardMechanismReports:
    """Per user: ``t`` sampled row indices and the randomised ``t``-bit word (bit k = 1 means -1)."""

    indices: np.ndarray
    words: np.ndarray

    def __post_init__(self) -> None:
        indices = np.asarray(self.indices, dtype=np.uint64)
        if indices.ndim != 2:
            raise ValueError(f"HadamardMechanismReports: indices must be 2-D (users, t), got shape {indices.shape}")
        object.__setattr__(self, "indices", indices)
        object.__setattr__(self, "words", np.asarray(self.words, dtype=np.uint32).ravel())
        check_lengths("HadamardMechanismReports", indices=self.indices, words=self.words)

    def __len__(self) -> int:
        return int(self.indices.shape[0])

    def take(self, rows: np.ndarray) -> HadamardMechanismReports:
        # np.take along the users' axis: cheaper than fancy indexing of the 2-D (users, t) indices
        return HadamardMechanismReports(np.take(self.indices, rows, axis=0), np.take(self.words, rows))


@dataclass(frozen=True)
class HadamardMechanismStatistics:
    """``coefficients``: the sum of reported signs per row index; ``n_users`` reports."""

    coefficients: Histogram
    n_users: int

    def __add__(self, other: HadamardMechanismStatistics) -> HadamardMechanismStatistics:
        if not isinstance(other, HadamardMechanismStatistics):
            return NotImplemented
        return HadamardMechanismStatistics(self.coefficients + other.coefficients, self.n_users + other.n_users)


class HadamardMechanism(HistogramFlatForm, FrequencyOracle[HadamardMechanismReports, HadamardMechanismStatistics]):
    """HM(t): ``coefficients`` sampled Hadamard coefficients per user."""

    name = "hm"
    statistics_type = HadamardMechanismStatistics
    device_spec = DeviceSpec(
        parameters="`t = coefficients`; `K = 2^bit_length(d - 1)` rows (the smallest power of two `>= d`); "
        "`p = E / (E + 2^t - 1)`.",
        randomizer="`indices`: `t` row indices `j_1..j_t`, each uniform in `[0, K)`; "
        "`words = RR(w, 2^t, p)` where bit `k - 1` of `w` is `parity(j_k, v)`.",
        statistics="When `K <= FLAT_CELLS_LIMIT`: `cells[j]` (`j < K`) is the sum, over the reports and their "
        "`k = 1..t` with `j_k = j`, of `1 - 2 (bit k - 1 of the word)` (signed); `reporters = [n]`.",
        support="`counts[i]` is the sum over the reports and `k = 1..t` of "
        "`(1 - 2 (bit k - 1 of the word)) H[j_k, candidates[i]]` (signed); `reporters = [n]`.",
    )

    @property
    def histogram_size(self) -> int:
        return self.rows

    def __init__(self, epsilon: float, domain: int, coefficients: int = 1) -> None:
        super().__init__(epsilon, domain)
        self.coefficients = check_positive_int(coefficients, "coefficients", 1, MAX_COEFFICIENTS)
        self.rows = 1 << (self.domain - 1).bit_length()
        e = math.exp(self.epsilon)
        words = 1 << self.coefficients
        self.keep_probability = e / (e + words - 1)
        # see _one_coefficient: a flip when the word's top 53 bits reach ceil(p 2^53), i.e. when the word reaches
        # that times 2^11 (None: p rounds to 1, no word reaches it)
        self._flip_threshold = math.ceil(self.keep_probability * float(1 << 53))
        self._flip_word_threshold = np.uint64(self._flip_threshold << 11) if self._flip_threshold < 1 << 53 else None
        self.bias = (e - 1) / (e + words - 1)
        self.pair_correlation = self.keep_probability - (1 - self.keep_probability) / (words - 1)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon}, domain={self.domain}, coefficients={self.coefficients})"

    def randomize(self, values: np.ndarray, rng: RandomSource) -> HadamardMechanismReports:
        values = self._values(values)
        n_users = values.shape[0]
        check_rng_batch(rng, n_users)
        t = self.coefficients
        if t == 1:
            index, negative = self._one_coefficient(values, rng)
            return HadamardMechanismReports(index[:, None], negative)
        indices = uniform_below(rng, (n_users, t), self.rows)
        negative = hadamard_parity(indices, values[:, None]).astype(np.uint64)
        true_words = (negative << np.arange(t, dtype=np.uint64)).sum(axis=1, dtype=np.uint64)
        return HadamardMechanismReports(indices, randomized_response(rng, true_words, 1 << t, self.keep_probability))

    def _one_coefficient(self, values: np.ndarray, rng: RandomSource) -> tuple[np.ndarray, np.ndarray]:
        """HM(1)'s report: the index (uint64) and whether the reported sign is -1.  The other word
        is the flipped bit, so one uniform decides (no draw of which other word).

        Per-user randomness draws the same numbers as ``uniform_below`` and ``random`` by cheaper
        routes: the index by ``integers`` with an integer size (``K``, a power of two, is then the
        top bits of one word, as the float route gives exactly), and the flip by comparing the
        word behind ``random``'s uniform ``u = (w >> 11) 2^-53`` with an integer threshold:
        ``u >= p`` exactly when ``w >> 11 >= ceil(p 2^53)`` (``p 2^53`` is exact in float64), that is
        when ``w >= ceil(p 2^53) 2^11`` (no shift of the words)."""
        n_users = values.shape[0]
        if isinstance(rng, np.random.Generator) or self.rows > _INTEGER_INDICES:
            index = uniform_below(rng, (n_users,), self.rows)
            negative = hadamard_parity(index, values)
            negative ^= rng.random(n_users) >= self.keep_probability
            return index, negative
        index = rng.integers(0, self.rows, size=n_users).view(np.uint64)  # int64 below 2^52: the same numbers
        negative = hadamard_parity(index, values)
        flip_words = rng.words(1)[:, 0]
        if self._flip_word_threshold is not None:  # w >> 11 >= t exactly when w >= t 2^11 (t < 2^53)
            negative ^= flip_words >= self._flip_word_threshold
        return index, negative

    def randomize_aggregate_groups(
        self, values: np.ndarray, groups: np.ndarray, n_groups: int, rng: RandomSource
    ) -> list[HadamardMechanismStatistics]:
        """Every user's device report (``randomize``, the same draws), its signs summed per
        (group, row index) in one bincount over all groups at once rather than a sort of the
        users by group and one aggregate per group: the same integer sums."""
        values = self._values(values)
        groups = check_groups(groups, values.shape[0], n_groups)
        check_rng_batch(rng, values.shape[0])
        n_groups = int(n_groups)
        if n_groups * self.rows > _DENSE_INDICES:
            reports = self.randomize(values, rng)
            return [self.aggregate(reports.take(members)) for members in group_members(groups, n_groups)]
        if self.coefficients == 1:  # the same draws as randomize, without building the reports
            index, negative = self._one_coefficient(values, rng)
            indices, negative = index.view(np.int64)[:, None], negative[:, None]  # below 2^24 here: the same numbers
        else:
            reports = self.randomize(values, rng)
            indices = reports.indices.astype(np.intp)
            negative = self._negative(reports.words).reshape(indices.shape)
        if int(groups.min(initial=0)) < 0:
            counted = groups >= 0
            indices, negative, groups = indices[counted], negative[counted], groups[counted]
        signed_cells = indices  # 2 (group K + index) + [sign is -1], over the indices (fresh arrays: ours)
        signed_cells <<= 1
        signed_cells |= negative
        signed_cells += (groups * (2 * self.rows))[:, None]
        sums = _sign_sums(signed_cells.ravel(), n_groups * self.rows).reshape(n_groups, self.rows)
        reporters = np.bincount(groups, minlength=n_groups)
        return [
            HadamardMechanismStatistics(Histogram.of_owned_dense(row), int(users))
            for row, users in zip(sums, reporters, strict=True)
        ]

    def _negative(self, words: np.ndarray) -> np.ndarray:
        """Per report and coefficient (flattened row-major), whether the reported sign is -1."""
        if self.coefficients == 1:
            return words.astype(bool)
        return ((words[:, None] >> np.arange(self.coefficients, dtype=np.uint32)) & 1).ravel().astype(bool)

    def _signs(self, reports: HadamardMechanismReports) -> np.ndarray:
        bits = (reports.words[:, None] >> np.arange(self.coefficients, dtype=np.uint32)) & 1
        return 1 - 2 * bits.astype(np.int64)

    def aggregate(self, reports: HadamardMechanismReports) -> HadamardMechanismStatistics:
        check_kind(self.name, reports, HadamardMechanismReports, "reports")
        if reports.indices.shape[1] != self.coefficients:
            raise ValueError(
                f"{self.name}: reports.indices must have {self.coefficients} columns (t), "
                f"got {reports.indices.shape[1]}"
            )
        if len(reports) and self.rows < MAX_DOMAIN and int(reports.indices.max()) >= self.rows:  # uint64 already
            raise InputError(f"reports.indices must be in [0, {self.rows}), got {int(reports.indices.max())}")
        if len(reports) and int(reports.words.max()) >= 1 << self.coefficients:
            raise ValueError(
                f"{self.name}: reports.words must be in [0, {1 << self.coefficients}), got {int(reports.words.max())}"
            )
        if self.rows > _DENSE_INDICES:
            sparse = Histogram.of(reports.indices.ravel(), self._signs(reports).ravel())
            return HadamardMechanismStatistics(sparse, len(reports))
        # dense rows: one integer bincount of (index, sign) pairs (no sort, no float weights)
        sums = _sign_sums(reports.indices.ravel().astype(np.intp) * 2 + self._negative(reports.words), self.rows)
        return HadamardMechanismStatistics(Histogram.from_dense(sums), len(reports))

    def support(self, statistics: HadamardMechanismStatistics, candidates: np.ndarray) -> Support:
        """``D(x) = sum_j T[j] H[j, x]`` per candidate (signed, additive)."""
        check_kind(self.name, statistics, HadamardMechanismStatistics, "statistics")
        candidates = self._values(candidates, "candidates")
        if self.rows <= _DENSE_INDICES:
            transformed = fwht(statistics.coefficients.to_dense(self.rows))
            return Support(transformed[candidates.astype(np.intp)], statistics.n_users)
        sums = statistics.coefficients
        return Support(signed_sums(sums.keys, sums.counts, candidates), statistics.n_users)

    def dense_supports(self, statistics: Sequence[HadamardMechanismStatistics]) -> np.ndarray | None:
        """``[len(statistics), K]``: :meth:`support` of every value ``[0, K)`` in each statistics, from one
        transform of them all (a sketch's rows), the same integers; ``None`` past the dense limit."""
        if self.rows > _DENSE_INDICES or not statistics:
            return None
        for stats in statistics:
            check_kind(self.name, stats, HadamardMechanismStatistics, "statistics")
        return fwht(np.stack([stats.coefficients.to_dense(self.rows) for stats in statistics]))

    def report_bits(self) -> int:
        """``t`` row indices in ``[0, K)`` and the randomised ``t``-bit word of their coefficients."""
        return self.coefficients * (index_bits(self.rows) + 1)

    def max_support(self) -> int:
        """A report carries ``coefficients`` signs, each of which may add one to a candidate."""
        return self.coefficients

    def estimate_support(self, support: Support) -> np.ndarray:
        return support.counts / (self.coefficients * self.bias)

    def per_user_variance(self) -> tuple[float, float]:
        t = self.coefficients
        scale = (t * self.bias) ** 2
        other = float(t)
        same = t + t * (t - 1) * self.pair_correlation - scale
        return other / scale, same / scale

    def report_probabilities(self, value: int, reports: HadamardMechanismReports) -> np.ndarray:
        t = self.coefficients
        negative = hadamard_parity(reports.indices, np.uint64(value)).astype(np.uint64)
        words = (negative << np.arange(t, dtype=np.uint64)).sum(axis=1, dtype=np.uint64)
        other = (1 - self.keep_probability) / ((1 << t) - 1)
        word_probability = np.where(words == reports.words, self.keep_probability, other)
        return word_probability / float(self.rows) ** t
