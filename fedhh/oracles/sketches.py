"""Sketch oracles: shrink a large domain to ``k`` rows of width ``m`` before any oracle.

Public hash functions ``h_1..h_k: [0, d) -> [0, m)`` (and, for the Count
Sketch, signs ``s_j: [0, d) -> {+1, -1}``) are fixed by ``seed``.  A user
picks a row ``j`` uniformly (public randomness) and privatises the bucket
``h_j(v)`` with an inner frequency oracle over ``m`` values; the Count Sketch
privatises ``h_j(v) + m [s_j(v) = -1]`` over ``2m`` values, so negative
weights are handled by the positive/negative halves (survey §4).  Privacy is
the inner oracle's ε.  The server decodes every row with the inner oracle
(``E_j(b)``: estimated number of row-``j`` users in bucket ``b``) and
combines the rows per candidate:

* Count-Mean (Apple's CMS with OUE, HCMS with HM(1)):
  ``(m / (m - 1)) (sum_j E_j(h_j(v)) - n / m)``;
* Count-Median: the same correction applied to ``k median_j E_j(h_j(v))``;
* Count-Min: ``k min_j E_j(h_j(v))`` (no correction; biased, as in the survey);
* Count Sketch: ``k median_j s_j(v) (E_j(+) - E_j(-))`` (or the mean).

Count-Mean variance (derivation, over the random hash functions, the rows the
users pick and the inner noise; inner variance ``n_j a + C b`` for a bucket
holding ``C`` of the row's ``n_j`` users):
``S = sum_j E_j(h_j(v))`` has mean ``c_v + (n - c_v) / m`` and variance

    n a + b (c_v + (n - c_v) / m) + ((m - 1) / m^2) sum_{u != v} (c_u (1 - 1/k) + c_u^2 / k),

the last term being hash collisions (``N_{u,j}``, the row-``j`` holders of
``u``, is Binomial(``c_u``, ``1/k``), so ``sum_j E[N_{u,j}^2] = c_u (1 - 1/k) +
c_u^2 / k``).  The estimate's variance is that times ``(m / (m - 1))^2``.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from fedhh.errors import InputError
from fedhh.kernels.randomness import derive_key, splitmix64

from .base import (
    FLAT_CELLS_LIMIT,
    FrequencyOracle,
    Support,
    check_groups,
    check_kind,
    check_positive_int,
    index_bits,
    stable_order,
)
from .device_spec import DeviceSpec
from .hadamard_mechanism import HadamardMechanism
from .hashing import MAX_RANGE, expand_seeds, hash_expanded, mix_keys
from .histogram import Histogram
from .sampling import RandomSource, check_rng_batch
from .unary import UnaryEncoding

SketchEstimator = Literal["mean", "median", "min"]
SKETCH_ESTIMATORS: tuple[str, ...] = ("mean", "median", "min")
_ROW_REDUCERS: dict[str, Callable[..., Any]] = {"mean": np.mean, "median": np.median, "min": np.min}
MAX_ROWS = 1 << 16
_HASHED_AT_ONCE = 1 << 22  # (row, candidate) symbols hashed in one pass of a decoding
MAX_DOMAIN_ESTIMATES = 1 << 22  # values domain_estimates enumerates
_DOMAIN_BLOCK = 1 << 14  # values domain_estimates hashes and sums at once (their arrays fit in a core's cache)


@dataclass(frozen=True)
class SketchReports:
    """Per user: the sketch row it chose and its inner oracle's report."""

    rows: np.ndarray
    inner: Any

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", np.asarray(self.rows, dtype=np.uint32).ravel())
        if len(self.inner) != self.rows.shape[0]:
            raise ValueError(
                f"SketchReports: report arrays must have one row per user, got lengths "
                f"rows={self.rows.shape[0]}, inner={len(self.inner)}"
            )

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def take(self, rows: np.ndarray) -> SketchReports:
        return SketchReports(self.rows[rows], self.inner.take(rows))


@dataclass(frozen=True)
class SketchStatistics:
    """One inner-oracle statistics object per sketch row."""

    rows: tuple[Any, ...]

    @property
    def n_users(self) -> int:
        return int(sum(row.n_users for row in self.rows))

    def __add__(self, other: SketchStatistics) -> SketchStatistics:
        if not isinstance(other, SketchStatistics):
            return NotImplemented
        if len(other.rows) != len(self.rows):
            raise ValueError(f"SketchStatistics: row counts differ ({len(self.rows)} vs {len(other.rows)})")
        return SketchStatistics(tuple(mine + theirs for mine, theirs in zip(self.rows, other.rows, strict=True)))


class SketchOracle(FrequencyOracle[SketchReports, SketchStatistics]):
    """A Count-Mean/Median/Min sketch or a Count Sketch over an inner oracle."""

    name = "sketch"
    device_spec = DeviceSpec(
        parameters="`k = rows`, `m = width`; the *inner* oracle is the one named (with its own default options: "
        "an inner `flh` has 1000 functions and seed 0) at the same ε over `m` values, or `2m` for the signed "
        "`count-sketch`; with `σ_j` and `σ'_j` the `j`-th seed and sign seed of purpose "
        '`"fedhh.oracles.sketch.rows"` under `seed`, row `j`\'s symbol of `v` is `hash64(σ_j, v, m)`, plus '
        "`m hash64(σ'_j, v, 2)` when signed.",
        randomizer="`rows`: `j` uniform in `[0, k)`; `inner`: the inner oracle's report of row `j`'s symbol of `v`.",
        statistics="When the inner oracle has a flat form of `F` cells and `k F <= FLAT_CELLS_LIMIT`: `cells` is "
        "row 0's inner flat cells (of the reports that chose row 0), then row 1's, ... (`k F` cells); `reporters` "
        "is the rows' inner `reporters` one after the other (`k` entries: reports per row).",
        support="Shape `(k, 1 or 2, C)`, row-major: `counts[j, 0, i]` is the inner support of row `j`'s symbol of "
        "`candidates[i]` among row `j`'s reports; when signed, `counts[j, 1, i]` is that of the mirror symbol "
        "(`symbol + m` below `m`, `symbol - m` from `m`); `reporters[j]` (`k` entries) is row `j`'s report count.",
    )

    def __init__(
        self,
        inner: FrequencyOracle,
        domain: int,
        rows: int,
        width: int,
        estimator: SketchEstimator = "mean",
        signed: bool = False,
        seed: int = 0,
    ) -> None:
        super().__init__(inner.epsilon, domain)
        self.name = "count-sketch" if signed else f"count-{estimator}"
        self.rows = check_positive_int(rows, "rows", 1, MAX_ROWS)
        self.width = check_positive_int(width, "width", 2, MAX_RANGE)
        if estimator not in SKETCH_ESTIMATORS:
            raise InputError(f"estimator must be one of {list(SKETCH_ESTIMATORS)}, got {estimator!r}")
        if signed and estimator == "min":
            raise InputError("estimator 'min' needs an unsigned sketch; allowed for signed: ['mean', 'median']")
        self.estimator = estimator
        self.signed = bool(signed)
        expected_inner = self.width * (2 if self.signed else 1)
        if inner.domain != expected_inner:
            raise ValueError(
                f"inner oracle domain must be {expected_inner} (width x {1 + self.signed}), got {inner.domain}"
            )
        self.inner = inner
        self.seed = int(seed)
        base = derive_key(self.seed, "fedhh.oracles.sketch.rows")
        with np.errstate(over="ignore"):
            row_seeds = splitmix64(base + np.arange(self.rows, dtype=np.uint64))
            sign_seeds = splitmix64(~base + np.arange(self.rows, dtype=np.uint64))
        self.row_hashes = expand_seeds(row_seeds)
        self.sign_hashes = expand_seeds(sign_seeds)
        self._last_read_cells: tuple[bytes, tuple[np.ndarray, np.ndarray, np.ndarray, int]] | None = None

    def __repr__(self) -> str:
        return (
            f"SketchOracle({self.name}, rows={self.rows}, width={self.width}, "
            f"domain={self.domain}, inner={self.inner!r})"
        )

    def symbols(self, rows: np.ndarray, values: np.ndarray | np.integer) -> np.ndarray:
        """The inner-oracle symbol of each value in the given rows (broadcasting)."""
        mixed = mix_keys(values)
        multipliers, offsets = self.row_hashes
        buckets = hash_expanded(multipliers[rows], offsets[rows], mixed, self.width)
        if not self.signed:
            return buckets
        multipliers, offsets = self.sign_hashes
        negative = hash_expanded(multipliers[rows], offsets[rows], mixed, 2)
        return buckets + negative * np.uint64(self.width)

    def randomize(self, values: np.ndarray, rng: RandomSource) -> SketchReports:
        values = self._values(values)
        n_users: int = values.shape[0]
        check_rng_batch(rng, n_users)
        rows = rng.integers(0, self.rows, size=n_users)
        return SketchReports(rows, self.inner.randomize(self.symbols(rows, values), rng))

    def randomize_aggregate(self, values: np.ndarray, rng: RandomSource) -> SketchStatistics:
        """With a Generator each row's users go through the inner oracle's shard path
        (for OUE: the Binomial counts); with per-user randomness, as
        :meth:`randomize_aggregate_groups` with one group (row ``j`` is inner group ``j``),
        without building and checking that group."""
        values = self._values(values)
        n_users: int = values.shape[0]
        if not isinstance(rng, np.random.Generator):
            check_rng_batch(rng, n_users)
            rows = rng.integers(0, self.rows, size=n_users)
            return SketchStatistics(
                tuple(self.inner.randomize_aggregate_groups(self.symbols(rows, values), rows, self.rows, rng))
            )
        rows = rng.integers(0, self.rows, size=n_users)
        symbols = self.symbols(rows, values)
        return SketchStatistics(
            tuple(self.inner.randomize_aggregate(symbols[members], rng) for members in self._row_members(rows))
        )

    def randomize_aggregate_groups(
        self, values: np.ndarray, groups: np.ndarray, n_groups: int, rng: RandomSource
    ) -> list[SketchStatistics]:
        """Each user's row is drawn exactly as ``randomize`` draws it; the inner oracle then
        randomises the rows' symbols grouped by (group, row), group ``g``'s row ``j`` being
        inner group ``g x rows + j`` (group -1 stays -1: drawn, not counted)."""
        values = self._values(values)
        n_users: int = values.shape[0]
        groups = check_groups(groups, n_users, n_groups)
        check_rng_batch(rng, n_users)
        rows = rng.integers(0, self.rows, size=n_users)
        inner_groups = np.where(groups >= 0, groups * self.rows + rows, -1)
        inner = self.inner.randomize_aggregate_groups(
            self.symbols(rows, values), inner_groups, int(n_groups) * self.rows, rng
        )
        return [
            SketchStatistics(tuple(inner[group * self.rows : (group + 1) * self.rows])) for group in range(n_groups)
        ]

    def randomize_support(self, values: np.ndarray, candidates: np.ndarray, rng: RandomSource) -> Support:
        """The candidates' support counts of the users' reports; over unary rows (CMS), only the
        bits those counts read are drawn.

        Law.  Count ``(j, ., i)`` of the support is the number of row-``j`` reports whose bit at
        row ``j``'s symbol of ``candidates[i]`` (signed: or at its mirror) is set: it reads row
        ``j``'s bits at ``S_j``, the row's sorted distinct read symbols, and no other bit.  A
        device of row ``j`` holding symbol ``s`` sets its bits independently, bit ``x`` with
        probability ``p'`` if ``x = s`` and ``q'`` otherwise; at the columns ``S_j`` these are
        independent bits, ``p'`` at ``s`` (if ``s`` is in ``S_j``) and ``q'`` at the others.  Here each
        user's row is drawn as :meth:`randomize` draws it, its symbol becomes its index in
        ``S_j`` (``W = max_j |S_j|`` when not in it), and a unary encoding of the inner oracle's
        class and ε (the same ``p'`` and ``q'``) over ``W + 1`` values randomises these indices,
        grouped by row (:meth:`randomize_aggregate_groups`: its sparse sampler over range streams,
        Binomial counts with a Generator, else every user's bits): bit ``i`` is 1 with ``p'`` at
        the user's index and ``q'`` elsewhere, all independent, so column ``i < |S_j|`` of row ``j``
        has the law of the device reports' count at ``S_j[i]``, jointly over every read cell;
        the columns ``i >= |S_j|``, read by no candidate, are dropped.  Candidates sharing a
        symbol in a row read the same column, as they read the same cell of the full row.  The
        law is exact (the 32-bit thresholds, hence ``p'`` and ``q'``, depend on ε alone), up to the
        sparse sampler's 53-bit truncation (:mod:`fedhh.kernels.sparse_bernoulli`); the sample differs
        from :meth:`randomize_aggregate`'s, which draws all ``m`` columns.

        Sharding: the draws are a function of each user's global id and the call sequence
        (the calls of :meth:`randomize_aggregate`: the row, then the inner oracle's), and ``W``
        of the candidates alone, so any cut of the users gives the same counts.  Cost: a
        user's ~``q' W`` set bits instead of ``q' m`` (TreeHist's final pass: 10 candidates
        of a 1,024-wide row).
        """
        if not isinstance(self.inner, UnaryEncoding):
            return super().randomize_support(values, candidates, rng)
        values = self._values(values)
        read, column_of, read_columns, width = self._read_cells(self._values(candidates, "candidates"))
        n_users: int = values.shape[0]
        check_rng_batch(rng, n_users)
        rows = rng.integers(0, self.rows, size=n_users)
        own = column_of[rows * self.inner.domain + self.symbols(rows, values).view(np.int64)]
        restricted = type(self.inner)(self.inner.epsilon, width + 1)
        per_row = restricted.randomize_aggregate_groups(own, rows, self.rows, rng)
        counts = np.stack([row.counts for row in per_row])
        return Support(
            np.take_along_axis(counts, read_columns, axis=1).reshape(read.shape),
            np.array([row.n_users for row in per_row], dtype=np.int64),
        )

    def _read_cells(self, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """The cells the candidates' support reads: their ``(rows, 1 or 2, C)`` symbols,
        ``column_of[j m' + x]``, the index of symbol ``x`` among row ``j``'s sorted distinct read
        symbols (``W``, their largest number over the rows, at least 1, for a symbol not read;
        ``m'`` the inner domain); each read symbol's index, ``(rows, 2C or C)``; and ``W``.

        The last candidates' cells are kept (read-only): a shard's batches of users in one round
        ask for the same candidates, whose hashing and sorting cost as much as a batch's rows
        (703 candidates, 16 rows)."""
        key = candidates.tobytes()
        kept = self._last_read_cells
        if kept is not None and kept[0] == key:
            return kept[1]
        read = self._candidate_symbols(candidates)
        cells = (read, *self._read_columns(read))
        for array in cells[:3]:
            array.flags.writeable = False
        self._last_read_cells = (key, cells)
        return cells

    def _read_columns(self, read: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """``column_of``, each read symbol's index and ``W`` of :meth:`_read_cells`."""
        domain = self.inner.domain
        keys = (np.arange(self.rows, dtype=np.int64)[:, None] * domain + read.reshape(self.rows, -1)).ravel()
        distinct, inverse = np.unique(keys, return_inverse=True)
        row_of = distinct // domain
        rank = np.arange(distinct.size) - np.searchsorted(row_of, row_of)  # position within its row
        width = max(int(np.bincount(row_of, minlength=self.rows).max(initial=0)), 1)
        column_of = np.full(self.rows * domain, width, dtype=np.int64)
        column_of[distinct] = rank
        return column_of, rank[inverse].reshape(self.rows, -1), width

    def _row_members(self, rows: np.ndarray) -> list[np.ndarray]:
        """Indices of the users in each sketch row, in row order (one sort, not ``k`` scans)."""
        order = stable_order(rows, self.rows)
        bounds = np.searchsorted(rows[order], np.arange(self.rows + 1))
        return [order[bounds[row] : bounds[row + 1]] for row in range(self.rows)]

    def aggregate(self, reports: SketchReports) -> SketchStatistics:
        check_kind(self.name, reports, SketchReports, "reports")
        if len(reports) and int(reports.rows.max()) >= self.rows:
            raise ValueError(f"{self.name}: reports.rows must be in [0, {self.rows}), got {int(reports.rows.max())}")
        return SketchStatistics(
            tuple(self.inner.aggregate(reports.inner.take(members)) for members in self._row_members(reports.rows))
        )

    def support(self, statistics: SketchStatistics, candidates: np.ndarray) -> Support:
        """Per row, the inner support of each candidate's symbol (and, signed, of its
        mirror symbol in the other half), shaped ``(rows, 1 or 2, candidates)``.

        When the inner domain is not much larger than the candidate set, each
        row decodes all its symbols once (one transform, or one pass of FLH's
        functions) and the candidates read their symbols from it; an inner
        oracle that decodes whole rows anyway (HM: ``dense_supports``) does so
        for any number of candidates, every row in one transform.
        """
        return self.supports([statistics], candidates)[0]

    def supports(self, statistics: Sequence[SketchStatistics], candidates: np.ndarray) -> list[Support]:
        """:meth:`support` of each statistics for the same candidates (a protocol's positions):
        the candidates' symbols are hashed once for all of them, every row in one pass."""
        for stats in statistics:
            self._check_statistics(stats)
        candidates = self._values(candidates, "candidates")
        symbols = self._candidate_symbols(candidates)
        whole_rows = self.inner.domain <= 4 * candidates.shape[0]
        all_symbols = np.arange(self.inner.domain, dtype=np.uint64)
        supports = []
        # an inner oracle with dense supports (HM) transforms whole rows even for a few candidates: all at once
        dense_supports = getattr(self.inner, "dense_supports", None)
        row_index = np.arange(self.rows)[:, None, None]
        for stats in statistics:
            table = None if dense_supports is None else dense_supports(stats.rows)  # every row in one transform
            if table is not None:  # each row's candidates read their symbols' cells, every row at once
                counts = table[row_index, symbols].astype(np.int64, copy=False)
                supports.append(Support(counts, np.array([row.n_users for row in stats.rows], dtype=np.int64)))
                continue
            counts = np.empty(symbols.shape, dtype=np.int64)
            for row, row_stats in enumerate(stats.rows):
                if whole_rows:
                    counts[row] = self.inner.support(row_stats, all_symbols).counts[symbols[row]]
                else:
                    for half, half_symbols in enumerate(symbols[row]):
                        counts[row, half] = self.inner.support(row_stats, half_symbols.astype(np.uint64)).counts
            supports.append(Support(counts, np.array([row.n_users for row in stats.rows], dtype=np.int64)))
        return supports

    def _check_statistics(self, statistics: SketchStatistics) -> None:
        check_kind(self.name, statistics, SketchStatistics, "statistics")
        if len(statistics.rows) != self.rows:
            raise ValueError(f"{self.name}: statistics must have {self.rows} rows, got {len(statistics.rows)}")

    def _candidate_symbols(self, candidates: np.ndarray) -> np.ndarray:
        """``(rows, 1 or 2, candidates)`` inner symbols (intp): each row's symbol of every candidate
        and, signed, its mirror in the other half; keys mixed once, rows hashed a few at a time."""
        mixed = mix_keys(candidates)
        symbols = np.empty((self.rows, 1 + int(self.signed), candidates.shape[0]), dtype=np.intp)
        step = max(1, _HASHED_AT_ONCE // max(candidates.shape[0], 1))
        for first in range(0, self.rows, step):
            rows = np.arange(first, min(first + step, self.rows))[:, None]
            multipliers, offsets = self.row_hashes
            own = hash_expanded(multipliers[rows], offsets[rows], mixed, self.width)
            if self.signed:
                multipliers, offsets = self.sign_hashes
                own += hash_expanded(multipliers[rows], offsets[rows], mixed, 2) * np.uint64(self.width)
                width = np.uint64(self.width)
                symbols[first : first + step, 1] = np.where(own < width, own + width, own - width)
            symbols[first : first + step, 0] = own
        return symbols

    def report_bits(self) -> int:
        """The sketch row in ``[0, k)`` and the inner oracle's report of the row's symbol."""
        return index_bits(self.rows) + self.inner.report_bits()

    def support_shape(self) -> tuple[int, ...]:
        """One count per row and candidate; a signed sketch's in two halves (its inner domain is
        twice the width)."""
        return (self.rows, 1 + int(self.signed))

    def max_support(self) -> int:
        return self.inner.max_support()

    def flat_size(self) -> int | None:
        inner = self.inner.flat_size()
        return None if inner is None or inner * self.rows > FLAT_CELLS_LIMIT else inner * self.rows

    def to_flat(self, statistics: SketchStatistics) -> tuple[np.ndarray, np.ndarray]:
        """The rows' inner flat forms one after the other, and each row's reporters."""
        parts = [self.inner.to_flat(row) for row in statistics.rows]
        return np.concatenate([cells for cells, _ in parts]), np.concatenate([users for _, users in parts])

    def from_flat(self, cells: np.ndarray, reporters: np.ndarray) -> SketchStatistics:
        cells, reporters = self._check_flat(cells, reporters, self.rows)
        per_row = cells.reshape(self.rows, -1)
        return SketchStatistics(tuple(self.inner.from_flat(row, reporters[i : i + 1]) for i, row in enumerate(per_row)))

    def estimate_support(self, support: Support) -> np.ndarray:
        if support.counts.ndim != 3 or support.counts.shape[:2] != (self.rows, 1 + self.signed):
            raise ValueError(
                f"{self.name}: support.counts must have shape (rows={self.rows}, {1 + self.signed}, candidates), "
                f"got {support.counts.shape}"
            )
        n_users = typing.cast(np.ndarray, support.n_users)  # a sketch's support: one report count a row
        if isinstance(self.inner, HadamardMechanism):  # counts / (t bias): elementwise, no row's report count
            return self._combine(self.inner.estimate_support(support), n_users)
        row_estimates = np.empty(support.counts.shape)
        for row, halves in enumerate(support.counts):
            for half, counts in enumerate(halves):
                row_estimates[row, half] = self.inner.estimate_support(Support(counts, n_users[row]))
        return self._combine(row_estimates, n_users)

    def estimates(self, statistics: Sequence[SketchStatistics], candidates: np.ndarray) -> list[np.ndarray]:
        """:meth:`estimate` of each statistics for the same candidates.  When whole rows are
        decoded (an inner domain at most 4 times the candidates), each row's inner estimate of
        every symbol is computed once and the candidates read theirs: the same floats as
        ``estimate_support(support(...))``, an inner estimate being elementwise in its counts."""
        candidates = self._values(candidates, "candidates")
        if self.inner.domain > 4 * candidates.shape[0]:
            return [self.estimate_support(support) for support in self.supports(statistics, candidates)]
        symbols = self._candidate_symbols(candidates)
        all_symbols = np.arange(self.inner.domain, dtype=np.uint64)
        results = []
        for stats in statistics:
            self._check_statistics(stats)
            row_estimates = np.empty(symbols.shape)
            for row, row_stats in enumerate(stats.rows):
                row_estimates[row] = self.inner.estimate_support(self.inner.support(row_stats, all_symbols))[
                    symbols[row]
                ]
            results.append(self._combine(row_estimates, np.array([row.n_users for row in stats.rows], dtype=np.int64)))
        return results

    def domain_estimates(self, statistics: Sequence[SketchStatistics]) -> np.ndarray:
        """``[len(statistics), domain]``: :meth:`estimates` of every value of ``[0, domain)`` (a
        protocol's positions, each value estimated at each), the same floats.

        For the count-mean estimator over a small domain, each row is hashed once for all the
        statistics and read from tables of its decoded symbols: row ``j``'s inner estimate of
        every symbol times ``k`` (signed: of the symbol minus its mirror, times ``k``) is
        computed once, every value gathers its symbol's entry, and the rows are summed in row
        order -- the very operations of :meth:`_combine` on ``(rows, 1 or 2, C)`` gathered
        estimates (a mean down axis 0 adds the rows one after the other), without them."""
        if self.domain > MAX_DOMAIN_ESTIMATES:
            raise ValueError(
                f"{self.name}: domain_estimates enumerates at most {MAX_DOMAIN_ESTIMATES:,} values, "
                f"the domain has {self.domain:,}"
            )
        if self.estimator != "mean" or self.inner.domain > 4 * self.domain or not statistics:
            return np.array(self.estimates(statistics, np.arange(self.domain, dtype=np.uint64))).reshape(
                len(statistics), self.domain
            )
        for stats in statistics:
            self._check_statistics(stats)
        tables = self._row_tables(statistics)  # [row, statistics, inner symbol]
        mixed = mix_keys(np.arange(self.domain, dtype=np.uint64))
        multipliers, offsets = self.row_hashes
        sign_multipliers, sign_offsets = self.sign_hashes
        sums = np.empty((len(statistics), self.domain))
        for first in range(0, self.domain, _DOMAIN_BLOCK):  # a block's symbols and sums stay in cache
            block_keys, block_sums = mixed[first : first + _DOMAIN_BLOCK], sums[:, first : first + _DOMAIN_BLOCK]
            for row in range(self.rows):
                symbols = hash_expanded(multipliers[row], offsets[row], block_keys, self.width)
                if self.signed:
                    symbols += hash_expanded(sign_multipliers[row], sign_offsets[row], block_keys, 2) * np.uint64(
                        self.width
                    )
                symbols = symbols.view(np.intp)  # below 2**32: the same numbers (numpy's fastest gather is by intp)
                for index, table in enumerate(tables[row]):
                    if row == 0:
                        block_sums[index] = table[symbols]
                    else:
                        block_sums[index] += table[symbols]
        sums /= self.rows
        if not self.signed:
            n_users = np.array([[float(sum(row.n_users for row in stats.rows))] for stats in statistics])
            sums -= n_users / self.width
            sums *= self.width / (self.width - 1)
        return sums

    def _row_tables(self, statistics: Sequence[SketchStatistics]) -> np.ndarray:
        """``[row, statistics, inner symbol]``: each row's inner estimate of every symbol times
        ``k`` (signed: the symbol's estimate minus its mirror's, times ``k``)."""
        all_symbols = np.arange(self.inner.domain, dtype=np.uint64)
        tables = np.empty((self.rows, len(statistics), self.inner.domain))
        for index, stats in enumerate(statistics):
            for row, row_stats in enumerate(stats.rows):
                tables[row, index] = self.inner.estimate_support(self.inner.support(row_stats, all_symbols))
        if self.signed:
            mirrored = np.roll(tables, self.width, axis=2)  # symbol s + m below m, s - m from m
            tables -= mirrored
        tables *= self.rows
        return tables

    def _combine(self, row_estimates: np.ndarray, n_users: np.ndarray) -> np.ndarray:
        """The sketch's estimate from each row's inner estimates ``(rows, 1 or 2, candidates)``
        of the candidates' symbols (and mirrors) and the rows' report counts."""
        if self.signed:
            per_row = (row_estimates[:, 0] - row_estimates[:, 1]) * self.rows
            return per_row.mean(axis=0) if self.estimator == "mean" else np.median(per_row, axis=0)
        per_row = row_estimates[:, 0] * self.rows
        combined = _ROW_REDUCERS[self.estimator](per_row, axis=0)
        if self.estimator == "min":
            return combined
        return (self.width / (self.width - 1)) * (combined - float(n_users.sum()) / self.width)

    def per_user_variance(self) -> tuple[float, float]:
        raise NotImplementedError("sketch variance depends on the whole population: use variance(candidates, truth)")

    def variance(self, candidates: np.ndarray, truth: Histogram) -> np.ndarray:
        """Count-Mean variance over random hashes, rows and noise (module docstring)."""
        if self.signed or self.estimator != "mean":
            raise ValueError(
                f"{self.name}: a closed-form variance exists for the unsigned count-mean sketch only; "
                f"this one is {'signed' if self.signed else 'count-' + self.estimator}"
            )
        candidates = self._values(candidates, "candidates")
        other, same = self.inner.per_user_variance()
        n, m, k = float(truth.total), float(self.width), float(self.rows)
        counts = truth.lookup(candidates).astype(np.float64)
        expected_bucket = counts + (n - counts) / m
        noise = n * other + (same - other) * expected_bucket
        all_mass = n * (1 - 1 / k) + truth.sum_of_squares() / k
        own_mass = counts * (1 - 1 / k) + counts**2 / k
        collisions = (m - 1) / m**2 * (all_mass - own_mass)
        return (m / (m - 1)) ** 2 * (noise + collisions)

    def report_probabilities(self, value: int, reports: SketchReports) -> np.ndarray:
        rows = reports.rows.astype(np.intp)
        symbols = self.symbols(rows, np.uint64(value))
        probabilities = np.empty(len(reports))
        for row in np.unique(rows):
            members = np.flatnonzero(rows == row)
            symbol = int(symbols[members[0]])
            probabilities[members] = self.inner.report_probabilities(symbol, reports.inner.take(members))
        return probabilities / self.rows
