"""PEM's utility analysis (seed 000 §IV-B, eqs. (4)-(5)) and the parameter optimizer of §IV-C.

Eq. (5), the chance that the ``j``-th most frequent value survives level
``i``, is written there for OLH's support counts.  Here it is written on the
estimates, which makes it hold for any oracle with a variance model and
reduces to eq. (5) for pure oracles (OLH, GRR, ...):

* the level's ``n_i = n share_i`` users hold ``v_j`` about ``c_j = n_i f_j``
  times; its estimate is normal with mean ``c_j`` and variance
  ``Var_oracle(c_j) + c_j (1 - f_j)``.  The second term is the random split
  of holders into groups, which the paper's model (each of the ``n_i`` users
  holds ``v_j`` with probability ``f_j``) contains: for a pure oracle,
  ``n_i p_j (1 - p_j) / (p - q)^2`` is exactly the oracle's variance plus
  ``c_j (1 - f_j)``;
* the ``N_i = |D_i| - k`` other candidates are taken to have frequency 0
  (the paper's simplification), with standard deviation ``σ_0`` each, so
  the threshold above which ``s`` of them are expected is
  ``T(s) = σ_0 Φ^-1(1 - s / N_i)``;
* the ``j - 1`` more frequent values are assumed ranked first, leaving
  ``s_j = |C_i| - j + 1`` places for ``v_j``.  (The paper's text says
  ``k - j + 1`` places; its formula writes ``Φ^-1((k - j)/N)``, which would
  make the ``k``-th value impossible to find.  The text is used here.)

so ``Piden_j[i] = Φ((c_j - T(s_j)) / sd_j)``.  Eq. (4) weighs the products
over levels: ``w_j = 1/k`` gives the expected F1 (with ``k`` outputs,
precision = recall), ``w_j ∝ k + 1 - j`` the expected NCR.

The fixed threshold ``T`` is a large-``N_i`` shortcut (the paper: "especially
safe when N[i] is large").  With very short segments ``N_i`` is close to
the number of places, every level looks near-certain, and the frequent
values beyond the top k that really compete for those places are ignored:
measured on Zipf data, ``η = 1`` finds far fewer values than eq. (5)
predicts.  The optimizer therefore ranks only designs inside the regime the
seed validated, with at least ``MIN_BRANCHING`` candidates per kept prefix
at every level.

The variance model comes from the oracle itself (``variance(candidates,
truth)``), evaluated on the Zipf population the planner assumes; for FLH it
includes the hash-choice term that heavy values add.  Every oracle's
variance is a polynomial of degree at most two in the number of reporters
(linear noise, quadratic collision terms), so it is fitted once per level
domain from three population scales.

Optimizer (§IV-C): for every start length γ near ``log_B |C|`` and every
number of levels ``g``, the segments are as equal as possible (Observation
2), the groups equal, and the design is kept if its total number of oracle
queries ``Σ |D_i|`` stays within the limit (and it branches enough, above);
the best predicted F1 wins.
Then the group split is refined by moving users between neighbouring
groups (and to the last one) while the predicted F1 improves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.special import ndtr
from scipy.stats import norm

from ..errors import InputError
from ..oracles import FrequencyOracle, Histogram
from ..errors import InputError
from ..privacy.validation import check_epsilon, check_positive_int, check_users
from .prefix_encoding import MAX_CANDIDATES, MAX_DOMAIN, ValueSpace
from .prefix_oracles import PREFIX_ORACLES, build_level_oracle

DEFAULT_QUERY_LIMIT = 1 << 20  # seed 000 §VI-A
DEFAULT_ZIPF_EXPONENT = 1.0  # seed 000 §IV-C: f_j ∝ 1/j
DEFAULT_DISTINCT_VALUES = 10_000
FIT_SCALES = (1_000_000, 2_000_000, 4_000_000)  # reporters at which the variance polynomial is fitted
MIN_BRANCHING = 8  # candidates per kept prefix at every level, for eq. (5) to be trusted
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


@dataclass
class UtilityModel:
    """Eqs. (4)-(5) for one population assumption, oracle, privacy budget and output size."""

    space: ValueSpace
    n_users: int
    epsilon: float
    top_k: int
    oracle: str
    frequencies: np.ndarray  # all values' frequencies, most frequent first
    oracle_seed: int = 0
    _fits: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        check_users(self.n_users)
        check_epsilon(self.epsilon)
        check_positive_int(self.top_k, "protocol.top_k")
        if self.oracle not in PREFIX_ORACLES:
            raise InputError(f"protocol.oracle: unknown name {self.oracle!r}; allowed: {list(PREFIX_ORACLES)}")
        frequencies = np.asarray(self.frequencies, dtype=np.float64)
        if frequencies.ndim != 1 or frequencies.size < self.top_k or np.any(frequencies < 0):
            raise InputError(
                f"frequencies: need at least protocol.top_k = {self.top_k} non-negative frequencies, "
                f"got {frequencies.size}"
            )
        self.frequencies = np.sort(frequencies)[::-1] / frequencies.sum()

    def _oracle(self, domain: int) -> FrequencyOracle:
        return build_level_oracle(self.oracle, self.epsilon, domain, self.oracle_seed, 0, 0)

    def _variance_fit(self, length: int) -> np.ndarray:
        """Coefficients ``[3, k + 1]`` of the variance of the top-k values and of an absent
        value (last column) as ``a + b n + c n^2`` in the number of reporters ``n``."""
        domain = max(self.space.domain(length), min(self.frequencies.size + 1, MAX_DOMAIN))
        if domain not in self._fits:
            oracle = self._oracle(domain)
            probes = np.arange(self.top_k + 1, dtype=np.uint64)
            probes[-1] = self.frequencies.size  # a value nobody holds
            scales = np.array(FIT_SCALES, dtype=np.float64)
            samples = []
            for scale in FIT_SCALES:
                counts = np.rint(self.frequencies * scale).astype(np.int64)
                truth = Histogram(np.arange(counts.size, dtype=np.uint64), counts)
                samples.append(oracle.variance(probes, truth))
            design = np.stack([np.ones_like(scales), scales, scales**2], axis=1)
            self._fits[domain] = np.linalg.solve(design, np.stack(samples))
        return self._fits[domain]

    def noise(self, length: int, reporters: float) -> tuple[float, np.ndarray]:
        """(σ_0, sd_j of the top-k values) at a level of ``reporters`` users asking ``length`` units."""
        a, b, c = self._variance_fit(length)
        variance = np.maximum(a + b * reporters + c * reporters**2, 0.0)
        heavy = reporters * self.frequencies[: self.top_k]
        sampling = heavy * (1 - self.frequencies[: self.top_k])
        return math.sqrt(variance[-1]), np.sqrt(variance[:-1] + sampling)

    def predict(self, design: PEMDesign) -> PEMPrediction:
        """Eq. (4): the weighted products over the levels of eq. (5)'s ``Piden_j[i]``."""
        k = self.top_k
        counts = design.candidate_counts(self.space)
        lengths = design.lengths()
        rank = np.arange(1, k + 1)
        identification = np.empty((k, design.levels))
        for level in range(design.levels):
            reporters = self.n_users * design.shares[level]
            sd_zero, sd_heavy = self.noise(int(lengths[level]), reporters)
            kept = k if level == design.levels - 1 else design.candidates_per_step
            places = kept - rank + 1
            others = max(counts[level] - k, 0)
            mean = reporters * self.frequencies[:k]
            identification[:, level] = identification_probability(mean, sd_heavy, sd_zero, places, others)
        overall = identification.prod(axis=1)
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
    threshold = np.where(places >= others, -np.inf, sd_zero * norm.isf(tail))
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


def optimize_pem(
    model: UtilityModel,
    query_limit: int = DEFAULT_QUERY_LIMIT,
    candidates_per_step: int | None = None,
    start_lengths: Sequence[int] | None = None,
) -> PEMPrediction:
    """The design with the best predicted F1 within ``query_limit`` oracle queries (§IV-C)."""
    check_positive_int(query_limit, "protocol.query_limit")
    kept = model.top_k if candidates_per_step is None else check_positive_int(candidates_per_step, "protocol.candidates_per_step")
    space = model.space
    if start_lengths is None:
        natural = math.ceil(math.log(kept, space.base)) if kept > 1 else 0
        start_lengths = range(max(0, natural - 2), natural + 3)
    best: PEMPrediction | None = None
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
                if sum(counts) > query_limit or max(counts) > MAX_CANDIDATES:
                    continue
                prediction = model.predict(design)
                if best is None or prediction.f1 > best.f1 + 1e-12:
                    best = prediction
    if best is None:
        raise InputError(
            f"protocol.query_limit: {query_limit:,} oracle queries are too few for any design over "
            f"{space.length} units of {space.base} values with {kept} candidates per step"
        )
    return refine_shares(model, best)


def refine_shares(model: UtilityModel, prediction: PEMPrediction) -> PEMPrediction:
    """Coordinate ascent on the group split: move a fraction of a group's users to a
    neighbouring group or to the last one while the predicted F1 improves (seed 000
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
                design = PEMDesign(best.design.start_length, best.design.segment_lengths, tuple(shares),
                                   best.design.candidates_per_step)
                candidate = model.predict(design)
                if candidate.f1 > best.f1 + 1e-9:
                    best, improved = candidate, True
    return best
