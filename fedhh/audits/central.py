"""Empirical privacy audit of the curator baseline: lower bounds on the ε and δ its release spends.

The curator's histogram (:mod:`fedhh.privacy.central`) claims (ε, δ)-DP
under add/remove of one user, whose one item ``x`` changes only ``x``'s
count.  For a pair of neighbouring populations -- D with ``c`` users
sending ``x``, D' with ``c + 1`` -- and any event E of the output, the claim
promises ``P_D'(E) <= e^ε P_D(E) + δ`` and the same with D and D' swapped.
The audit runs the real mechanism (the server's own
:func:`~fedhh.protocols.central.server.noisy_counts` and
:func:`~fedhh.protocols.central.server.released`, vectorised over the
trials: each trial is an independent draw of ``x``'s noisy count) on both
populations many times and, for a grid of events fixed before any draw --
"x is released with a noisy count above t", for t from the larger of τ and
``c + 1`` up by steps of the noise scale, and their complements -- turns
one-sided Clopper-Pearson bounds (a Bonferroni share of the error each)
into

* a lower bound on ε at the claimed δ: ``ln((lower(P_more(E)) - δ) / upper(P_less(E)))``;
* a lower bound on δ at the claimed ε: ``lower(P_more(E)) - e^ε upper(P_less(E))``.

With ``c = 0``, D never releases ``x`` (nobody sends it) and D' releases it
with the probability the threshold is calibrated to: that pair tests δ;
the pairs with ``c >= 1`` test ε, which for Laplace noise the events above
``c + 1`` attain exactly (their likelihood ratio is ``e^ε``).  Either bound
above the claim is a bug in the mechanism or in the accountant.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..errors import InputError
from ..privacy.central import CentralParameters
from ..protocols.central.server import noisy_counts, released
from .triehh import clopper_pearson

EVENT_STEPS = 4  # thresholds t per pair: from the start up by this many noise scales
TOLERANCE = 1e-9


@dataclass(frozen=True)
class PairAudit:
    """One pair of populations: ``holders`` users send the target item in D, one more in D'."""

    holders: int
    event: str  # the event of the largest ε bound
    probability_without: float  # its estimated probability under D
    probability_with: float  # and under D'
    epsilon_lower: float  # -inf: no event of this pair proves anything
    delta_lower: float  # the largest δ bound of this pair (<= 0: nothing proved)


@dataclass(frozen=True)
class CentralAudit:
    """What the audit of one mechanism found, against what it claims."""

    noise: str
    claimed_epsilon: float
    claimed_delta: float
    trials: int  # draws per population
    confidence: float
    pairs: tuple[PairAudit, ...]

    @property
    def epsilon_lower(self) -> float:
        return max(pair.epsilon_lower for pair in self.pairs)

    @property
    def delta_lower(self) -> float:
        return max(pair.delta_lower for pair in self.pairs)

    @property
    def violated(self) -> bool:
        """The measurements contradict the claim (at the stated confidence)."""
        return (
            self.epsilon_lower > self.claimed_epsilon + TOLERANCE or self.delta_lower > self.claimed_delta + TOLERANCE
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "epsilon_lower": self.epsilon_lower,
            "delta_lower": self.delta_lower,
            "violated": self.violated,
        }


def _release(params: CentralParameters, holders: int, trials: int, generator: np.random.Generator) -> np.ndarray:
    """Per trial, the target item's released noisy count (NaN: not released); nobody sends it when
    ``holders`` is 0, so it is never counted nor released."""
    if holders == 0:
        return np.full(trials, np.nan)
    noisy = noisy_counts(np.full(trials, holders), params, generator)
    return np.where(released(noisy, params), noisy, np.nan)


def default_holders(params: CentralParameters) -> tuple[int, ...]:
    """0 (the pair that tests δ), 1, and counts at and just above τ, where a release is common
    enough to measure how much one more user changes it (the pairs that test ε)."""
    at = math.ceil(params.threshold)
    return (0, 1, at, at + 2)


def audit_central(
    params: CentralParameters,
    holders: Sequence[int] | None = None,
    trials: int = 200_000,
    seed: int = 0,
    confidence: float = 0.95,
    claim: tuple[float, float] | None = None,
) -> CentralAudit:
    """Audit the mechanism of ``params`` on the pairs (``c``, ``c + 1``) for ``c`` in ``holders``
    (default :func:`default_holders`; see the module docstring) against ``claim`` (default: the
    guarantee ``params`` state); all bounds hold together with probability ``confidence``."""
    if holders is None:
        holders = default_holders(params)
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 2:
        raise InputError(f"trials: must be an integer >= 2, got {trials!r}")
    if not 0 < confidence < 1:
        raise InputError(f"confidence: must be in (0, 1), got {confidence!r}")
    if not holders or any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in holders):
        raise InputError(f"holders: must be integers >= 0, got {list(holders)!r}")
    epsilon, delta = params.guarantee if claim is None else claim
    # each event bounds both directions (E favours D', its complement D), each bound two one-sided estimates
    alpha = (1 - confidence) / (len(holders) * EVENT_STEPS * 2)
    pairs = []
    for index, c in enumerate(holders):
        generator = np.random.default_rng([seed, index])
        without = _release(params, c, trials, generator)
        with_ = _release(params, c + 1, trials, generator)
        start = max(params.threshold, c + 1.0)
        best = (-math.inf, "", 0.0, 0.0)
        delta_lower = -math.inf
        for step in range(EVENT_STEPS):
            t = start + step * params.scale
            above_with = int(np.count_nonzero(with_ > t))  # NaN compares false: not released
            above_without = int(np.count_nonzero(without > t))
            # (event, hits of the population it favours, of the other, under D, under D', the other is D)
            events = (
                (f"released above {t:.4g}", above_with, above_without, above_without, above_with, True),
                (
                    f"not released above {t:.4g}",
                    trials - above_without,
                    trials - above_with,
                    trials - above_without,
                    trials - above_with,
                    False,
                ),
            )
            for name, more, less, hits_without, hits_with, less_is_without in events:
                lower, _ = clopper_pearson(np.array([more]), np.array([trials]), alpha / 2)
                _, upper = clopper_pearson(np.array([less]), np.array([trials]), alpha / 2)
                low, high = float(lower[0]), float(upper[0])
                if c == 0 and less_is_without:
                    high = 0.0  # nobody sends x in D: it is never released there, exactly
                if low <= delta:
                    bound = -math.inf
                else:
                    bound = math.inf if high == 0 else math.log((low - delta) / high)
                if bound > best[0]:
                    best = (bound, name, hits_without / trials, hits_with / trials)
                delta_lower = max(delta_lower, low - math.exp(epsilon) * high)
        pairs.append(PairAudit(c, best[1], best[2], best[3], best[0], delta_lower))
    return CentralAudit(params.noise, epsilon, delta, trials, confidence, tuple(pairs))
