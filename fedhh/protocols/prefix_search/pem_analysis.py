"""PEM's utility analysis ([Wang19] §IV-B, eqs. (4)-(5)), a better survival model, and the optimizer of §IV-C.

Eq. (4) weighs, over the top-k values, the product over levels of each
value's chance to survive the level (``w_j = 1/k``: the expected F1;
``w_j ∝ k + 1 - j``: the expected NCR).  A level's survival comes from the
``order-statistics`` model (the default,
:mod:`fedhh.protocols.prefix_search.selection_model`) or from [Wang19]'s
eq. (5), written here on the estimates so that it holds for any oracle with
a variance model.  The optimizer (§IV-C) ranks designs of equal segments
and groups within the query limit by their predicted F1, then refines the
group split.  The model's assumptions, where eq. (5) is optimistic and why
the optimizer keeps to designs that branch enough are in
``docs/derivations.md`` ("PEM's utility model and optimizer").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.special import ndtr, ndtri

from ...errors import InputError
from ...oracles import FrequencyOracle, Histogram
from ...oracles.registry import ORACLE_NAMES
from ...privacy.validation import check_epsilon, check_positive_int, check_users
from ..common.prefix_encoding import MAX_CANDIDATES, MAX_DOMAIN, ValueSpace
from .oracles import build_level_oracle
from .pem_assumptions import DEFAULT_QUERY_LIMIT, EQUATION_5, MODELS, ORDER_STATISTICS
from .selection_model import LevelCandidates, survival

FIT_SCALES = (1_000_000, 2_000_000, 4_000_000)  # reporters at which the variance polynomial is fitted
MIN_BRANCHING = 8  # candidates per kept prefix at every level, for eq. (5) to be trusted
COMPETITORS_BELOW = 16  # values below the kept-th that the order-statistics model follows one by one
TAIL_BINS = 12  # bins of the remaining values
SCREENED_DESIGNS = 6  # designs eq. (5) ranks best, compared by the order-statistics model
_SHARE_STEPS = (0.2, 0.1, 0.05, 0.02)
_TINY = 1e-300


@dataclass(frozen=True)
class PEMDesign:
    """The parameters the optimizer chooses: γ, η[i], the group split n[i]/n, |C_i|."""

    start_length: int
    segment_lengths: tuple[int, ...]
    shares: tuple[float, ...]
    candidates_per_step: int

    @property
    def levels(self) -> int:
        return len(self.segment_lengths)

    def lengths(self) -> np.ndarray:
        return self.start_length + np.cumsum(self.segment_lengths)

    def candidate_counts(self, space: ValueSpace) -> list[int]:
        """``|D_i|`` of every level when every level keeps ``|C|`` prefixes."""
        first = space.segment_count(self.start_length + self.segment_lengths[0])
        later = [self.candidates_per_step * space.segment_count(eta) for eta in self.segment_lengths[1:]]
        return [first, *later]

    def queries(self, space: ValueSpace) -> int:
        return sum(self.candidate_counts(space))


@dataclass(frozen=True)
class PEMPrediction:
    """Predicted utility of a design: eq. (4) with the F1 and NCR weights."""

    design: PEMDesign
    identification: np.ndarray  # [k, g]: Piden_j[i]
    f1: float
    ncr: float
    queries: int

    @property
    def overall(self) -> np.ndarray:
        """Probability that each of the top-k values is found (product over levels)."""
        return self.identification.prod(axis=1)


@dataclass(frozen=True)
class ValueEntries:
    """The assumed values as the order-statistics model sees them: the most frequent one by
    one, the tail in bins of similar frequency (a bin competes as ``multiplicity`` values)."""

    frequencies: np.ndarray  # mean frequency of each entry, most frequent first
    multiplicity: np.ndarray
    probes: np.ndarray  # a value id standing for each entry in the variance fit

    @property
    def size(self) -> int:
        return int(self.frequencies.size)


def value_entries(frequencies: np.ndarray, individual: int, bins: int = TAIL_BINS) -> ValueEntries:
    """The first ``individual`` values alone, the rest in ``bins`` bins of geometrically growing rank ranges."""
    individual = min(individual, frequencies.size)
    edges = np.unique(np.rint(np.geomspace(individual, frequencies.size, bins + 1)).astype(np.int64))
    starts, stops = edges[:-1], edges[1:]
    bin_means = np.add.reduceat(frequencies, starts)[: starts.size] / (stops - starts) if starts.size else np.zeros(0)
    nearest = [
        start + int(np.argmin(np.abs(frequencies[start:stop] - mean)))
        for start, stop, mean in zip(starts, stops, bin_means, strict=True)
    ]
    return ValueEntries(
        np.concatenate([frequencies[:individual], bin_means]),
        np.concatenate([np.ones(individual), (stops - starts).astype(np.float64)]),
        np.concatenate([np.arange(individual), nearest]).astype(np.uint64),
    )


@dataclass
class UtilityModel:
    """Eq. (4) over the levels of a design, each level's survival from the order-statistics
    model (default) or from eq. (5) (``model = "eq5"``, for comparison)."""

    space: ValueSpace
    n_users: int
    epsilon: float
    top_k: int
    oracle: str
    frequencies: np.ndarray  # all values' frequencies, most frequent first
    oracle_seed: int = 0
    model: str = ORDER_STATISTICS
    _fits: dict[tuple[int, int], np.ndarray] = field(default_factory=dict, repr=False)
    _entries: dict[int, ValueEntries] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        check_users(self.n_users)
        check_epsilon(self.epsilon)
        check_positive_int(self.top_k, "protocol.top_k")
        if self.oracle not in ORACLE_NAMES:
            raise InputError(f"protocol.oracle: unknown name {self.oracle!r}; allowed: {list(ORACLE_NAMES)}")
        if self.model not in MODELS:
            raise InputError(f"model: got {self.model!r}; allowed: {list(MODELS)}")
        frequencies = np.asarray(self.frequencies, dtype=np.float64)
        if frequencies.ndim != 1 or frequencies.size < self.top_k or np.any(frequencies < 0):
            raise InputError(
                f"frequencies: need at least protocol.top_k = {self.top_k} non-negative frequencies, "
                f"got {frequencies.size}"
            )
        self.frequencies = np.sort(frequencies)[::-1] / frequencies.sum()

    def with_model(self, model: str) -> UtilityModel:
        """The same assumption under another survival model, sharing the variance fits."""
        return replace(self, model=model, _fits=self._fits, _entries=self._entries)

    def _oracle(self, domain: int) -> FrequencyOracle:
        return build_level_oracle(self.oracle, self.epsilon, domain, self.oracle_seed, 0, 0)

    def entries(self, kept: int) -> ValueEntries:
        """The values modelled when a level keeps up to ``kept`` candidates."""
        individual = max(self.top_k, kept) + COMPETITORS_BELOW
        if individual not in self._entries:
            self._entries[individual] = value_entries(self.frequencies, individual)
        return self._entries[individual]

    def _variance_fit(self, length: int, entries: ValueEntries) -> np.ndarray:
        """Coefficients ``[3, entries + 1]`` of the variance of each entry's value and of an
        absent value (last column) as ``a + b n + c n^2`` in the number of reporters ``n``."""
        domain = max(self.space.domain(length), min(self.frequencies.size + 1, MAX_DOMAIN))
        key = (domain, entries.size)
        if key not in self._fits:
            oracle = self._oracle(domain)
            probes = np.append(entries.probes, np.uint64(self.frequencies.size))  # the last: a value nobody holds
            scales = np.array(FIT_SCALES, dtype=np.float64)
            samples = []
            for scale in FIT_SCALES:
                counts = np.rint(self.frequencies * scale).astype(np.int64)
                truth = Histogram(np.arange(counts.size, dtype=np.uint64), counts)
                samples.append(oracle.variance(probes, truth))
            design = np.stack([np.ones_like(scales), scales, scales**2], axis=1)
            self._fits[key] = np.linalg.solve(design, np.stack(samples))
        return self._fits[key]

    def noise(self, length: int, reporters: float, entries: ValueEntries) -> tuple[float, np.ndarray]:
        """(σ_0, sd of each entry's estimate) at a level of ``reporters`` users asking ``length`` units."""
        a, b, c = self._variance_fit(length, entries)
        variance = np.maximum(a + b * reporters + c * reporters**2, 0.0)
        sampling = reporters * entries.frequencies * (1 - entries.frequencies)
        return math.sqrt(variance[-1]), np.sqrt(variance[:-1] + sampling)

    def predict(self, design: PEMDesign) -> PEMPrediction:
        """Eq. (4): the weighted products over the levels of each top-k value's survival."""
        k = self.top_k
        counts = design.candidate_counts(self.space)
        lengths = design.lengths()
        entries = self.entries(design.candidates_per_step)
        presence = np.ones(entries.size)
        identification = np.empty((k, design.levels))
        for level in range(design.levels):
            reporters = self.n_users * design.shares[level]
            sd_zero, sds = self.noise(int(lengths[level]), reporters, entries)
            kept = k if level == design.levels - 1 else design.candidates_per_step
            means = reporters * entries.frequencies
            if self.model == EQUATION_5:
                places = kept - np.arange(k)
                others = max(counts[level] - k, 0)
                identification[:, level] = identification_probability(means[:k], sds[:k], sd_zero, places, others)
                continue
            zeros = max(counts[level] - float(entries.multiplicity @ presence), 0.0)
            candidates = LevelCandidates(means, sds, entries.multiplicity, presence, zeros, sd_zero)
            survived, _ = survival(candidates, kept)
            identification[:, level] = survived[:k]
            presence = presence * survived
        overall = identification.prod(axis=1)
        rank = np.arange(1, k + 1)
        ncr_weights = (k + 1 - rank) / (k * (k + 1) / 2)
        return PEMPrediction(
            design,
            identification,
            f1=float(overall.mean()),
            ncr=float(overall @ ncr_weights),
            queries=design.queries(self.space),
        )


def identification_probability(
    mean: np.ndarray, sd: np.ndarray, sd_zero: float, places: np.ndarray, others: int
) -> np.ndarray:
    """Eq. (5): ``Φ((c_j - T(s_j)) / sd_j)``, where ``T(s)`` is the estimate that ``s`` of the
    ``others`` zero-frequency candidates are expected to exceed (certain when they cannot fill
    the ``s_j`` places, impossible when no place is left)."""
    tail = np.clip(places / max(others, 1), _TINY, 1 - 1e-12)  # the cases outside are settled below
    threshold = np.where(places >= others, -np.inf, -sd_zero * ndtri(tail))
    return np.where(places <= 0, 0.0, ndtr((mean - threshold) / np.maximum(sd, _TINY)))


def zipf_frequencies(exponent: float, distinct: int) -> np.ndarray:
    """``f_j ∝ j^-s`` over ``distinct`` values, most frequent first."""
    if not (math.isfinite(exponent) and exponent > 0):
        raise InputError(f"zipf exponent: must be a finite number > 0, got {exponent!r}")
    check_positive_int(distinct, "distinct values")
    weights = np.arange(1, distinct + 1, dtype=np.float64) ** -exponent
    return weights / weights.sum()


def balanced_segments(total: int, levels: int, longer_first: bool) -> tuple[int, ...]:
    """``total`` units in ``levels`` segments differing by at most one unit."""
    base, extra = divmod(total, levels)
    longer = [base + 1] * extra
    shorter = [base] * (levels - extra)
    return tuple(longer + shorter if longer_first else shorter + longer)


def candidate_designs(
    space: ValueSpace, kept: int, query_limit: int, start_lengths: Sequence[int] | None = None
) -> list[PEMDesign]:
    """Every design §IV-C considers: γ near ``log_B |C|``, ``g`` levels of balanced segments
    (Observation 2) with equal groups, within the query limit and branching enough."""
    if start_lengths is None:
        natural = math.ceil(math.log(kept, space.base)) if kept > 1 else 0
        start_lengths = range(max(0, natural - 2), natural + 3)
    designs = []
    for gamma in start_lengths:
        if gamma >= space.length:
            continue
        for levels in range(1, space.length - gamma + 1):
            for longer_first in (True, False):
                segments = balanced_segments(space.length - gamma, levels, longer_first)
                if min(space.segment_count(eta) for eta in segments[1:] or (MIN_BRANCHING,)) < MIN_BRANCHING:
                    continue
                design = PEMDesign(gamma, segments, (1.0 / levels,) * levels, kept)
                counts = design.candidate_counts(space)
                if sum(counts) <= query_limit and max(counts) <= MAX_CANDIDATES and design not in designs:
                    designs.append(design)
    return designs


def optimize_pem(
    model: UtilityModel,
    query_limit: int = DEFAULT_QUERY_LIMIT,
    candidates_per_step: int | None = None,
    start_lengths: Sequence[int] | None = None,
) -> PEMPrediction:
    """The design with the best predicted F1 within ``query_limit`` oracle queries (§IV-C).

    Under the order-statistics model, eq. (5) (about ten times cheaper) screens the designs
    first and the ``SCREENED_DESIGNS`` it ranks best are compared by the model itself.  The
    group split is refined by a local search under eq. (5) and kept only if the model agrees
    it helps (the refined split changes the predicted F1 little, while a search under the model
    would cost a hundred times more).
    """
    check_positive_int(query_limit, "protocol.query_limit")
    kept = (
        model.top_k
        if candidates_per_step is None
        else check_positive_int(candidates_per_step, "protocol.candidates_per_step")
    )
    designs = candidate_designs(model.space, kept, query_limit, start_lengths)
    if not designs:
        raise InputError(
            f"protocol.query_limit: {query_limit:,} oracle queries are too few for any design over "
            f"{model.space.length} units of {model.space.base} values with {kept} candidates per step"
        )
    screen = model if model.model == EQUATION_5 else model.with_model(EQUATION_5)
    if screen is not model and len(designs) > SCREENED_DESIGNS:
        designs = sorted(designs, key=lambda design: -screen.predict(design).f1)[:SCREENED_DESIGNS]
    best = max((model.predict(design) for design in designs), key=lambda prediction: prediction.f1)
    refined = refine_shares(screen, screen.predict(best.design) if screen is not model else best)
    if screen is model:
        return refined
    confirmed = model.predict(refined.design)
    return confirmed if confirmed.f1 > best.f1 else best


def refine_shares(model: UtilityModel, prediction: PEMPrediction) -> PEMPrediction:
    """Coordinate ascent on the group split: move a fraction of a group's users to a
    neighbouring group or to the last one while the predicted F1 improves ([Wang19]
    finds the balanced split near-optimal; leftover bits can make it lopsided)."""
    best = prediction
    levels = best.design.levels
    moves = sorted({(a, b) for a in range(levels) for b in (a - 1, a + 1, levels - 1) if 0 <= b < levels and a != b})
    for step in _SHARE_STEPS:
        improved = True
        while improved:
            improved = False
            for source, target in moves:
                shares = list(best.design.shares)
                moved = shares[source] * step
                shares[source] -= moved
                shares[target] += moved
                design = PEMDesign(
                    best.design.start_length,
                    best.design.segment_lengths,
                    tuple(shares),
                    best.design.candidates_per_step,
                )
                candidate = model.predict(design)
                if candidate.f1 > best.f1 + 1e-9:
                    best, improved = candidate, True
    return best
