"""Empirical privacy audit of the aggregate-DP prefix tree: a lower bound on the ε a whole run spends.

The tree (:mod:`fedhh.privacy.aggregate_trie`) claims (ε, δ)-DP under
add/remove of one user, who moves at most ``c`` counts of each level by one
when sampled (each level with probability ``q``).  The audit runs the
server's own noise (:func:`~fedhh.protocols.aggregate_trie.server.level_noise`)
on a pair of neighbouring populations for one target: in D the target's
``c`` counts are 0 in every level; in D' the added user is sampled in each
level with probability ``q`` and then adds 1 to each of them.  The
statistic is the sum of the target's noisy counts over the levels and the
``c`` counts, the optimal test for Gaussian noise without sampling; for a
grid of thresholds fixed before any draw (the statistic's upper quantiles
under D at 10^-1 ... 10^-4), one-sided Clopper-Pearson bounds (a Bonferroni
share of the error each) give a lower bound on ε at the claimed δ,
``ln((lower(P_D'(S > t)) - δ) / upper(P_D(S > t)))``.  A bound above the
claim is a bug in the mechanism or the accountant; how far below it lies is
what the accountant's composition costs against this attack.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..errors import InputError
from ..privacy.aggregate_trie import AggregateTrieParameters
from ..protocols.aggregate_trie.server import level_noise
from .triehh import clopper_pearson

TAILS = (1e-1, 1e-2, 1e-3, 1e-4)  # upper quantiles of the statistic under D where events are placed
TOLERANCE = 1e-9


@dataclass(frozen=True)
class AggregateTrieAudit:
    """What the audit found, against what the run claims."""

    noise: str
    claimed_epsilon: float
    claimed_delta: float
    trials: int
    confidence: float
    thresholds: tuple[float, ...]
    probabilities_without: tuple[float, ...]
    probabilities_with: tuple[float, ...]
    epsilon_lower: float  # -inf: no event proved anything

    @property
    def violated(self) -> bool:
        return self.epsilon_lower > self.claimed_epsilon + TOLERANCE

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "violated": self.violated}


def statistic(params: AggregateTrieParameters, shift: bool, trials: int, generator: np.random.Generator) -> np.ndarray:
    """Per trial, the sum over the levels and the ``c`` counts of the target's noisy counts; with
    ``shift``, the added user, sampled in each level with probability ``q``, adds 1 to each."""
    cells = params.levels * params.contributions
    noise = level_noise(params.noise, params.scale, trials * cells, generator).reshape(trials, cells).sum(axis=1)
    if not shift:
        return noise
    sampled = (
        generator.binomial(params.levels, params.sampling_rate, trials)
        if params.sampling_rate < 1
        else (np.full(trials, params.levels))
    )
    return noise + sampled * params.contributions


def audit_aggregate_trie(
    params: AggregateTrieParameters,
    trials: int = 1_000_000,
    seed: int = 0,
    confidence: float = 0.95,
    claim: tuple[float, float] | None = None,
) -> AggregateTrieAudit:
    """Audit the run of ``params`` (module docstring) against ``claim`` (default: its own guarantee);
    the bounds hold together with probability ``confidence``."""
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 2:
        raise InputError(f"--trials: must be an integer >= 2, got {trials!r}")
    if not 0 < confidence < 1:
        raise InputError(f"--confidence: must be in (0, 1), got {confidence!r}")
    epsilon, delta = (params.epsilon, params.delta) if claim is None else claim
    generator = np.random.default_rng(seed)
    without = statistic(params, False, trials, generator)
    with_user = statistic(params, True, trials, generator)
    spread = math.sqrt(params.levels * params.contributions) * params.scale
    if params.noise == "laplace":
        spread *= math.sqrt(2)
    from scipy.special import ndtri

    thresholds = tuple(float(-ndtri(tail)) * spread for tail in TAILS)  # normal quantiles of the sum
    alpha = (1 - confidence) / (2 * len(thresholds))
    best = -math.inf
    p_without, p_with = [], []
    for threshold in thresholds:
        more = int(np.count_nonzero(with_user > threshold))
        less = int(np.count_nonzero(without > threshold))
        lower, _ = clopper_pearson(more, trials, alpha)
        _, upper = clopper_pearson(less, trials, alpha)
        low, high = float(lower), float(upper)
        if low > delta:
            best = max(best, math.log((low - delta) / high))
        p_without.append(less / trials)
        p_with.append(more / trials)
    return AggregateTrieAudit(
        params.noise, epsilon, delta, trials, confidence, thresholds, tuple(p_without), tuple(p_with), best
    )
