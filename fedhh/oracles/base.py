"""The frequency-oracle contract shared by every LDP mechanism and sketch.

A frequency oracle is split the way a deployment splits it:

* client: ``randomize(values, rng) -> reports`` privatises a whole shard of
  users at once (one report row per user, compact numpy arrays);
* shard or server: ``aggregate(reports) -> statistics``; statistics are
  additive (``+``), so a population's statistics are the sum of its shards';
* federated decoding: ``support(statistics, candidates) -> Support``, the
  per-candidate support counts, also additive, so a shard can send these
  instead of its reports; ``estimate_support(support)`` turns the summed
  support into unbiased counts.  ``estimate`` chains the two.

Statistics of a fixed size (FLH's table of function x bucket counts, a
sketch's rows, unary and Hadamard counts) also have a *flat form*: integer
vectors whose elementwise sum over shards is the flat form of the summed
statistics (``flat_size``, ``to_flat``, ``from_flat``).  Shards that send
that form let the server decode once per round instead of once per shard.
Oracles whose statistics grow with the reports (OLH's are the reports
themselves) have none; their shards send support counts, whose decoding
costs each shard only its own reports.

Values are integer keys in ``[0, domain)`` (see :mod:`fedhh.oracles.keys` for
items of any length); ``domain`` may be as large as ``2**64``, in which case
only candidate-set queries make sense.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from ..errors import InputError
from .histogram import Histogram
from .sampling import RandomSource

MAX_DOMAIN = 1 << 64
MAX_EPSILON = 50.0
# Below this, e^ε - 1 (the gap between the report probabilities every estimator
# divides by) is computed with a relative error above 1e-10, and at 1e-16 it is 0.
MIN_EPSILON = 1e-6
FLAT_CELLS_LIMIT = 1 << 20  # statistics above this many cells (8 MB) are not sent in flat form

ReportsT = TypeVar("ReportsT")
StatisticsT = TypeVar("StatisticsT")


def check_epsilon(epsilon: Any) -> float:
    """A privacy budget in ``[MIN_EPSILON, MAX_EPSILON]``: beyond the top ``e^ε``
    overflows the mechanisms, below the bottom their estimators lose precision."""
    allowed = f"a number in [{MIN_EPSILON:g}, {MAX_EPSILON:g}]"
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, np.integer, np.floating)):
        raise InputError(f"epsilon must be {allowed}, got {epsilon!r}")
    value = float(epsilon)
    if not (math.isfinite(value) and MIN_EPSILON <= value <= MAX_EPSILON):
        raise InputError(f"epsilon must be {allowed}, got {epsilon!r}")
    return value


def check_domain(domain: Any, maximum: int = MAX_DOMAIN, field: str = "domain") -> int:
    """An integer domain size in ``[2, maximum]``."""
    if isinstance(domain, bool) or not isinstance(domain, (int, np.integer)):
        raise InputError(f"{field} must be an integer in [2, {maximum}], got {domain!r}")
    value = int(domain)
    if not 2 <= value <= maximum:
        raise InputError(f"{field} must be an integer in [2, {maximum}], got {value}")
    return value


def check_positive_int(value: Any, field: str, minimum: int = 1, maximum: int | None = None) -> int:
    """An integer option such as a number of hash functions or sketch rows."""
    upper = "" if maximum is None else f", {maximum}"
    allowed = f"[{minimum}{upper}]" if maximum is not None else f">= {minimum}"
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputError(f"{field} must be an integer {allowed}, got {value!r}")
    number = int(value)
    if number < minimum or (maximum is not None and number > maximum):
        raise InputError(f"{field} must be an integer {allowed}, got {number}")
    return number


def check_values(values: Any, domain: int, field: str = "values") -> np.ndarray:
    """A 1-D array of integer values in ``[0, domain)`` as uint64."""
    array = np.asarray(values)
    if array.ndim != 1:
        raise InputError(f"{field} must be a 1-D array of integers in [0, {domain}), got shape {array.shape}")
    if array.size == 0:
        return np.zeros(0, dtype=np.uint64)
    if not np.issubdtype(array.dtype, np.integer):
        raise InputError(f"{field} must be integers in [0, {domain}), got dtype {array.dtype}")
    if np.issubdtype(array.dtype, np.signedinteger) and int(array.min()) < 0:
        raise InputError(f"{field} must be in [0, {domain}), got {int(array.min())}")
    array = array.astype(np.uint64, copy=False)  # uint64 already (symbols, keys): checked, not copied
    if domain < MAX_DOMAIN and int(array.max()) >= domain:
        raise InputError(f"{field} must be in [0, {domain}), got {int(array.max())}")
    return array


def check_groups(groups: Any, n_users: int, n_groups: Any) -> np.ndarray:
    """Each user's group as int64: in ``[0, n_groups)``, or -1 for a user drawn but not counted."""
    n_groups = check_positive_int(n_groups, "n_groups")
    array = np.asarray(groups)
    if array.shape != (n_users,) or (array.size and not np.issubdtype(array.dtype, np.integer)):
        raise InputError(
            f"groups must be {n_users} integers (one per value) in [-1, {n_groups}), got shape {array.shape} "
            f"and dtype {array.dtype}"
        )
    array = array.astype(np.int64, copy=False)
    if array.size and (int(array.min()) < -1 or int(array.max()) >= n_groups):
        raise InputError(
            f"groups must be in [-1, {n_groups}), got values from {int(array.min())} to {int(array.max())}"
        )
    return array


def group_members(groups: np.ndarray, n_groups: int) -> list[np.ndarray]:
    """Indices of the users of each group ``0 .. n_groups - 1``, ascending (one sort, not ``n_groups``
    scans); users of group -1 are in none."""
    order = stable_order(groups + 1, n_groups + 1) if groups.size else np.zeros(0, dtype=np.intp)
    bounds = np.searchsorted(groups[order], np.arange(n_groups + 1))
    return [order[bounds[group] : bounds[group + 1]] for group in range(n_groups)]


def stable_order(keys: np.ndarray, bound: int) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` of integer keys in ``[0, bound)``: keys below 2^16 are
    sorted as uint8 or uint16, which numpy sorts by radix (several times faster than int64's
    merge sort; the same order, a stable sort being unique)."""
    if bound <= 1 << 8:
        keys = keys.astype(np.uint8)
    elif bound <= 1 << 16:
        keys = keys.astype(np.uint16)
    return np.argsort(keys, kind="stable")


def index_bits(choices: int) -> int:
    """Bits of a fixed-width field that names one of ``choices`` values: ``ceil(log2 choices)``
    (0 for a single choice, which needs no field)."""
    return (int(choices) - 1).bit_length()


def check_lengths(owner: str, **arrays: np.ndarray) -> int:
    """Report arrays of one report set must describe the same number of users."""
    lengths = {name: int(np.shape(array)[0]) for name, array in arrays.items()}
    if len(set(lengths.values())) > 1:
        described = ", ".join(f"{name}={length}" for name, length in lengths.items())
        raise ValueError(f"{owner}: report arrays must have one row per user, got lengths {described}")
    return next(iter(lengths.values()))


def check_kind(owner: str, obj: object, expected: type, field: str) -> None:
    if not isinstance(obj, expected):
        raise ValueError(f"{owner}: {field} must be {expected.__name__}, got {type(obj).__name__}")


@dataclass(frozen=True)
class Support:
    """Per-candidate support counts and the number of users they came from.

    ``counts`` has the candidates on its last axis (sketches add a row axis in
    front, with one ``n_users`` per row).  Additive across shards for the same
    candidate list.
    """

    counts: np.ndarray
    n_users: np.ndarray | int

    def __post_init__(self) -> None:
        object.__setattr__(self, "counts", np.asarray(self.counts, dtype=np.int64))
        object.__setattr__(self, "n_users", np.asarray(self.n_users, dtype=np.int64))

    def __add__(self, other: Support) -> Support:
        if not isinstance(other, Support):
            return NotImplemented
        if other.counts.shape != self.counts.shape or np.shape(other.n_users) != np.shape(self.n_users):
            raise ValueError(
                f"Support: cannot add supports of shapes {self.counts.shape} and {other.counts.shape}; "
                "shards must answer the same candidate list"
            )
        return Support(self.counts + other.counts, self.n_users + other.n_users)


@dataclass(frozen=True)
class LinearVariance:
    """``Var(estimate of v) = zero_count + per_count * count(v)``, in squared counts.

    Every oracle's variance has this form for a fixed population size; the
    post-processing methods that weigh values by their noise (MLE-Apx,
    Base-Cut, Power) take it as their noise model.
    """

    zero_count: float
    per_count: float

    def variance(self, counts: np.ndarray) -> np.ndarray:
        return self.zero_count + self.per_count * np.asarray(counts, dtype=np.float64)


class FrequencyOracle(ABC, Generic[ReportsT, StatisticsT]):
    """An ε-LDP frequency oracle over the integer domain ``[0, domain)``."""

    name: str  # set by each class (a sketch's depends on its estimator)
    max_domain: ClassVar[int] = MAX_DOMAIN

    def __init__(self, epsilon: float, domain: int) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.domain = check_domain(domain, self.max_domain)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon}, domain={self.domain})"

    # client side -----------------------------------------------------------
    @abstractmethod
    def randomize(self, values: np.ndarray, rng: RandomSource) -> ReportsT:
        """Privatise one value per user; every call on ``rng`` draws one value or row per user."""

    def randomize_aggregate(self, values: np.ndarray, rng: RandomSource) -> StatisticsT:
        """A shard's statistics straight from its users' values (same distribution as
        ``aggregate(randomize(values, rng))``; oracles override it when they can skip
        the per-user reports)."""
        return self.aggregate(self.randomize(values, rng))

    def randomize_aggregate_groups(
        self, values: np.ndarray, groups: np.ndarray, n_groups: int, rng: RandomSource
    ) -> list[StatisticsT]:
        """Element ``g`` is the statistics of the users whose ``groups`` entry is ``g``, for
        every ``g`` in ``[0, n_groups)`` (``groups``: one integer in ``[-1, n_groups)`` per
        value); users of group -1 are randomised, their draws consumed as in
        ``randomize``, but counted in no group.

        This default randomises every user once with ``randomize`` and aggregates
        each group's reports, so with per-user randomness a user's contribution is
        its device report whatever group or shard it is in.  Oracles override it
        with a cheaper route of the same law (a unary encoding's sparse sampler).
        """
        values = self._values(values)
        groups = check_groups(groups, values.shape[0], n_groups)
        reports: Any = self.randomize(values, rng)
        return [self.aggregate(reports.take(members)) for members in group_members(groups, int(n_groups))]

    def randomize_support(self, values: np.ndarray, candidates: np.ndarray, rng: RandomSource) -> Support:
        """A shard's support counts of ``candidates`` straight from its users' values, with the law
        of ``support(aggregate(randomize(values, rng)), candidates)`` (a protocol whose shards
        answer with support counts).  This default is ``support(randomize_aggregate(...))``;
        oracles override it when they can sample only what the candidates' support reads (a
        sketch of unary rows: a few of each row's bits)."""
        return self.support(self.randomize_aggregate(values, rng), candidates)

    # server side -----------------------------------------------------------
    @abstractmethod
    def aggregate(self, reports: ReportsT) -> StatisticsT:
        """Additive sufficient statistics of a set of reports."""

    @abstractmethod
    def support(self, statistics: StatisticsT, candidates: np.ndarray) -> Support:
        """Support counts of each candidate; additive across shards."""

    def supports(self, statistics: Sequence[StatisticsT], candidates: np.ndarray) -> list[Support]:
        """:meth:`support` of each statistics for the same candidates (sketches hash the
        candidates once for all of them)."""
        return [self.support(stats, candidates) for stats in statistics]

    @abstractmethod
    def estimate_support(self, support: Support) -> np.ndarray:
        """Unbiased count estimates from (summed) support counts."""

    def estimate(self, statistics: StatisticsT, candidates: np.ndarray) -> np.ndarray:
        """Unbiased count estimate of each candidate value."""
        return self.estimate_support(self.support(statistics, candidates))

    def estimates(self, statistics: Sequence[StatisticsT], candidates: np.ndarray) -> list[np.ndarray]:
        """:meth:`estimate` of each statistics for the same candidates (a protocol's positions;
        sketches decode the candidates' symbols once for all of them)."""
        return [self.estimate(stats, candidates) for stats in statistics]

    # flat form of the statistics ---------------------------------------------
    def flat_size(self) -> int | None:
        """Cells of the statistics' flat form, or ``None`` when there is none of a size
        independent of the reports (at most :data:`FLAT_CELLS_LIMIT`)."""
        return None

    def to_flat(self, statistics: StatisticsT) -> tuple[np.ndarray, np.ndarray]:
        """``(cells, reporters)``: int64 vectors, additive across shards; ``reporters``
        has one entry per sketch row or hash index where the oracle has them, else one."""
        raise NotImplementedError(f"{self.name}: statistics have no flat form")

    def from_flat(self, cells: np.ndarray, reporters: np.ndarray) -> StatisticsT:
        """The statistics whose flat form is ``(cells, reporters)``."""
        raise NotImplementedError(f"{self.name}: statistics have no flat form")

    # capabilities: what a protocol may rely on without knowing the oracle's type -------------
    def support_shape(self) -> tuple[int, ...]:
        """Axes of :attr:`Support.counts` in front of the candidates' axis: none for one count
        per candidate; a sketch counts per row (a signed one in two halves)."""
        return ()

    def support_reporters(self) -> int:
        """Entries of :attr:`Support.n_users`: one per row where the support has rows, else one."""
        shape = self.support_shape()
        return shape[0] if shape else 1

    @abstractmethod
    def report_bits(self) -> int:
        """Bits of one user's report as a deployed device sends it.

        Every field of the report :meth:`randomize` produces, each at the fixed
        width of its range (:func:`index_bits`), the public randomness the user
        draws (a hash seed, a sketch row, a Hadamard index) included: the server
        cannot decode a report without it.  Transport framing is not counted.
        """

    def max_support(self) -> int:
        """The most one report adds to one candidate's support count, in absolute value
        (a server refuses a shard's support counts above ``max_support() x reports``)."""
        return 1

    def restore_support(self, counts: np.ndarray, reporters: np.ndarray) -> Support:
        """Support counts as they travel (``counts`` flat, ``reporters`` a vector of
        :meth:`support_reporters` entries) back in this oracle's own shape."""
        shape = self.support_shape()
        if not shape:
            return Support(counts, reporters[0])
        return Support(counts.reshape(*shape, -1), reporters)

    def _check_flat(self, cells: np.ndarray, reporters: np.ndarray, users: int) -> tuple[np.ndarray, np.ndarray]:
        cells, reporters = np.asarray(cells, dtype=np.int64), np.asarray(reporters, dtype=np.int64)
        if cells.shape != (self.flat_size(),) or reporters.shape != (users,):
            raise ValueError(
                f"{self.name}: flat statistics must be {self.flat_size()} cells and {users} reporter count(s), "
                f"got shapes {cells.shape} and {reporters.shape}"
            )
        return cells, reporters

    # accuracy --------------------------------------------------------------
    @abstractmethod
    def per_user_variance(self) -> tuple[float, float]:
        """Variance contributed to one value's count estimate by one user whose
        value differs from it, and by one user holding it."""

    def variance(self, candidates: np.ndarray, truth: Histogram) -> np.ndarray:
        """Variance of each candidate's estimate when the population is ``truth``."""
        candidates = check_values(candidates, self.domain, "candidates")
        other, same = self.per_user_variance()
        counts = truth.lookup(candidates).astype(np.float64)
        return (truth.total - counts) * other + counts * same

    def linear_variance(self, n_users: int) -> LinearVariance:
        """The noise model ``Var = zero_count + per_count * count`` for ``n_users`` users."""
        other, same = self.per_user_variance()
        return LinearVariance(n_users * other, same - other)

    @abstractmethod
    def report_probabilities(self, value: int, reports: ReportsT) -> np.ndarray:
        """Exact probability of each report given the user's value (for privacy audits)."""

    # helpers ---------------------------------------------------------------
    def _values(self, values: Any, field: str = "values") -> np.ndarray:
        return check_values(values, self.domain, field)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(statistics_type: type) -> tuple[str, ...]:
    """A statistics dataclass's field names, looked up once per type (a sketch flattens one
    statistics per row and batch)."""
    names = _FIELD_NAMES.get(statistics_type)
    if names is None:
        names = _FIELD_NAMES[statistics_type] = tuple(field.name for field in dataclasses.fields(statistics_type))
    return names


class HistogramFlatForm:
    """The flat form of statistics that are a dataclass ``(histogram, n_users)`` with the
    histogram's keys in ``[0, histogram_size)``: the dense counts (GRR's reported values,
    Hadamard response's outputs, the Hadamard mechanism's coefficient sums)."""

    name: str
    statistics_type: ClassVar[type]

    @property
    @abstractmethod
    def histogram_size(self) -> int:
        """One more than the largest key the statistics' histogram can hold."""

    def flat_size(self) -> int | None:
        return self.histogram_size if self.histogram_size <= FLAT_CELLS_LIMIT else None

    def to_flat(self, statistics: Any) -> tuple[np.ndarray, np.ndarray]:
        histogram, n_users = (getattr(statistics, name) for name in _field_names(type(statistics)))
        return histogram.to_dense(self.histogram_size), np.array([n_users], dtype=np.int64)

    def from_flat(self, cells: np.ndarray, reporters: np.ndarray) -> Any:
        cells, reporters = self._check_flat(cells, reporters, 1)  # type: ignore[attr-defined]
        # a copy the histogram owns: its keys and counts are found only if read (a server mostly transforms the cells)
        return self.statistics_type(Histogram.of_owned_dense(cells.copy()), int(reporters[0]))


class PureOracle(FrequencyOracle[ReportsT, StatisticsT]):
    """A pure protocol: a report supports the true value with probability ``p`` and
    any other value with probability ``q`` (averaged over public randomness), so
    ``(C(v) - n q) / (p - q)`` is unbiased with variance
    ``n q (1 - q) / (p - q)^2 + c_v (1 - p - q) / (p - q)``."""

    p: float
    q: float

    def estimate_support(self, support: Support) -> np.ndarray:
        return (support.counts - support.n_users * self.q) / (self.p - self.q)

    def per_user_variance(self) -> tuple[float, float]:
        gap = (self.p - self.q) ** 2
        return self.q * (1 - self.q) / gap, self.p * (1 - self.p) / gap
