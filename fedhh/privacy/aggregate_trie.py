"""The aggregate-DP prefix tree's privacy: noisy level counts, composed over levels by dp-accounting.

The mechanism (``protocol.name = "aggregate-trie"``; Chadha et al., "Differentially
Private Heavy Hitter Detection using Federated Analytics", SaTML 2024) grows
a prefix tree level by level.  Level ``l`` samples users by Poisson sampling
at rate ``q`` (each user independently, keyed by the seed and the level);
each sampled user adds 1 to the counts of at most ``c`` distinct candidates
of the level (the extensions of the tree's kept prefixes: a public set,
fixed before the level starts); the counts are summed (secure aggregation
on Flower) and the server adds independent noise once to the count of
**every** candidate, then keeps the prefixes above a threshold.

**Theorem** (user-level, add/remove adjacency: two populations differ in
one user's whole data).  A level's noisy count vector is, for a fixed
candidate set,

* **Gaussian** (``noise = "gaussian"``, σ per count): adding a user moves at
  most ``c`` counts by 1 each, an ℓ2 shift of at most ``sqrt(c)``, so the
  level is the Gaussian mechanism of noise multiplier ``σ / sqrt(c)``
  (``GaussianDpEvent``; the Gaussian is rotation invariant, so the 1-D
  pair at distance ``sqrt(c)`` dominates every shift of that norm);
* **Laplace** (``noise = "laplace"``, scale ``b`` per count): each of the
  ``c`` counts moves by at most 1 under independent noise, so the level
  is ``c`` Laplace mechanisms of noise multiplier ``b``
  (``SelfComposedDpEvent(LaplaceDpEvent(b), c)``); with sampling this is
  only stated for ``c = 1`` (``PoissonSampledDpEvent`` of one Laplace);

and with ``q < 1`` it is that mechanism amplified by Poisson sampling
(``PoissonSampledDpEvent(q, ...)``): the inclusion of the other users does
not depend on the added one.  The candidate set, the threshold, the cap on
kept prefixes and (with ``protocol.adaptive``) the next level's extension
length are functions of earlier levels' released noisy counts: post-
processing and adaptive composition.  The run is the composition of its
``levels`` level mechanisms, ``levels = ceil(L / extension)`` for trees
of depth ``L`` (the item's symbols plus the end symbol), the most levels
it can take (a run that stops earlier spends less); the composed event is
read by dp-accounting's PLD accountant (``PLDAccountant``, pessimistic
discretisation, so the ε reported is an upper bound) at the target δ.

Given a target (ε, δ), the planner solves the noise scale: the smallest
scale (bisection over its logarithm, to :data:`SCALE_PRECISION`) whose
composed ε at δ is at most the target.

Not covered: the server sees each level's exact sum before adding noise
(the aggregate model: secure aggregation hides single users' vectors from
it, not their sum), who was sampled and how many of them contributed
(``responding_users``); an observer who learns who was sampled in a level
gets the guarantee without the amplification by sampling.  The noise is
drawn in floating point (numpy), which Mironov (CCS 2012) showed can leak
through low bits: round released counts outside a simulation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..errors import InputError
from .central import GAUSSIAN, LAPLACE, NOISES
from .report import EVALUATION_NOT_COVERED, PUBLIC_INPUTS, USER_LEVEL, Coverage, PrivacyReport
from .validation import check_delta, check_epsilon, check_users

MODEL = "central (aggregate), user-level, noisy level counts composed over the levels"
DISCRETIZATION = 1e-3  # the PLD accountant's loss grid: pessimistic rounding, so ε is an upper bound
SCALE_PRECISION = 1e-6  # relative: the bisection for the noise scale stops within this of the smallest valid one
COVERAGE = Coverage(
    covered=(
        "heavy_hitters[] (item, estimated_count): kept complete prefixes with their noisy counts",
        "frequent_prefixes: kept prefixes, functions of the released noisy counts",
        "rounds[] (kept, completed, extension, candidates, threshold): functions of the released noisy counts",
        PUBLIC_INPUTS,
    ),
    not_covered=(
        "each level's exact sum, who was sampled and how many of them contributed: the aggregating server "
        "sees them, and they are kept in the server's log only",
        EVALUATION_NOT_COVERED,
    ),
)


def level_events(noise: str, scale: float, contributions: int, sampling_rate: float, levels: int) -> Any:
    """The dp-accounting event of a whole run: ``levels`` level mechanisms (see the module docstring)."""
    from dp_accounting import dp_event

    if noise == GAUSSIAN:
        level: Any = dp_event.GaussianDpEvent(scale / math.sqrt(contributions))
    else:
        level = dp_event.LaplaceDpEvent(scale)
        if contributions > 1:
            level = dp_event.SelfComposedDpEvent(level, contributions)
    if sampling_rate < 1:
        level = dp_event.PoissonSampledDpEvent(sampling_rate, level)
    return dp_event.SelfComposedDpEvent(level, levels)


def composed_epsilon(
    noise: str, scale: float, contributions: int, sampling_rate: float, levels: int, delta: float
) -> float:
    """ε at ``delta`` of the run's composed event, by dp-accounting's PLD accountant."""
    return _composed_epsilon(noise, float(scale), int(contributions), float(sampling_rate), int(levels), float(delta))


@lru_cache(maxsize=4096)
def _composed_epsilon(
    noise: str, scale: float, contributions: int, sampling_rate: float, levels: int, delta: float
) -> float:
    from dp_accounting.pld import pld_privacy_accountant

    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=DISCRETIZATION)
    accountant.compose(level_events(noise, scale, contributions, sampling_rate, levels))
    return float(accountant.get_epsilon(delta))


@dataclass(frozen=True)
class AggregateTrieParameters:
    """The noise of every level for a target (ε, δ), and the guarantee it gives."""

    noise: str
    n_users: int
    scale: float  # Gaussian: σ per count; Laplace: b per count
    contributions: int  # c: distinct candidates a user adds 1 to per level
    sampling_rate: float  # q: each user's chance to be sampled in a level
    levels: int  # the most levels of the run
    target_epsilon: float
    delta: float

    @property
    def epsilon(self) -> float:
        """The composed ε at δ (at most the target)."""
        return composed_epsilon(self.noise, self.scale, self.contributions, self.sampling_rate, self.levels, self.delta)

    @property
    def expected_users(self) -> float:
        """Users sampled per level on average, ``q n``."""
        return self.sampling_rate * self.n_users

    def to_parameters(self) -> dict[str, Any]:
        return {
            "noise": self.noise,
            "n_users": self.n_users,
            "scale": self.scale,
            "contributions": self.contributions,
            "sampling_rate": self.sampling_rate,
            "levels": self.levels,
            "target_epsilon": self.target_epsilon,
            "delta": self.delta,
            "accountant": "dp_accounting PLD",
            "discretization": DISCRETIZATION,
        }

    def report(self) -> PrivacyReport:
        per_level = (
            f"Gaussian σ = {self.scale:.4g} per count, ℓ2 sensitivity sqrt({self.contributions})"
            if self.noise == GAUSSIAN
            else f"Laplace b = {self.scale:.4g} per count, {self.contributions} count(s) moved by 1"
        )
        sampling = f", Poisson sampling q = {self.sampling_rate:.4g}" if self.sampling_rate < 1 else ""
        return PrivacyReport(
            model=MODEL,
            epsilon=self.epsilon,
            delta=self.delta,
            mechanism=f"{per_level}{sampling}, composed over {self.levels} levels",
            method="dp-accounting PLD accountant of the composed level events (fedhh.privacy.aggregate_trie)",
            adjacency=USER_LEVEL,
            parameters=self.to_parameters(),
            coverage=COVERAGE,
        )


def aggregate_trie_guarantee(parameters: Mapping[str, Any]) -> tuple[float, float]:
    """(ε, δ) of the tree derived again from a report's ``parameters`` (noise, scale, contributions,
    sampling rate, levels, δ) by the PLD accountant; a privacy ledger checks every stored run against it."""
    noise = parameters.get("noise")
    if noise not in NOISES:
        raise InputError(f"noise: must be one of {list(NOISES)}, got {noise!r}")
    numbers = {}
    for key in ("scale", "sampling_rate", "delta"):
        value = parameters.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise InputError(f"{key}: must be a finite number > 0, got {value!r}")
        numbers[key] = float(value)
    counts = {}
    for key in ("contributions", "levels"):
        value = parameters.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{key}: must be an integer >= 1, got {value!r}")
        counts[key] = value
    if numbers["sampling_rate"] > 1 or numbers["delta"] >= 1:
        raise InputError("sampling_rate and delta: must be at most 1 and below 1")
    check_noise(str(noise), counts["contributions"], numbers["sampling_rate"])
    epsilon = composed_epsilon(
        str(noise),
        numbers["scale"],
        counts["contributions"],
        numbers["sampling_rate"],
        counts["levels"],
        numbers["delta"],
    )
    return epsilon, numbers["delta"]


def check_noise(noise: str, contributions: int, sampling_rate: float) -> None:
    if noise not in NOISES:
        raise InputError(f"protocol.level_noise: got {noise!r}; allowed values: {list(NOISES)}")
    if noise == LAPLACE and contributions > 1 and sampling_rate < 1:
        raise InputError(
            "protocol.level_noise: Laplace noise with protocol.contributions > 1 is accounted for only without "
            'sampling (protocol.users_per_level = 0); use level_noise = "gaussian" or contributions = 1'
        )


def solve_aggregate_trie(
    n_users: int, epsilon: float, delta: float, noise: str, contributions: int, sampling_rate: float, levels: int
) -> AggregateTrieParameters:
    """The smallest noise scale whose composed guarantee meets (ε, δ) (δ must be below ``1/n``)."""
    check_users(n_users)
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    check_noise(noise, contributions, sampling_rate)
    if delta * n_users >= 1:
        raise InputError(
            f"privacy.delta: δ = {delta:g} is not below 1/n = 1/{n_users:,} = {1 / n_users:.3g}, where "
            "(ε, δ)-DP means nothing (publishing one random user's data meets it); "
            f"choose δ well below 1/n, e.g. 1/n² = {1 / n_users**2:.3g}"
        )
    if not 0 < sampling_rate <= 1:
        raise InputError(f"protocol.users_per_level: a sampling rate in (0, 1] is needed, got {sampling_rate!r}")
    if levels < 1 or contributions < 1:
        raise InputError(
            f"protocol.extension / protocol.contributions: at least one level and one contribution, "
            f"got {levels} level(s), {contributions} contribution(s)"
        )

    def meets(scale: float) -> bool:
        return composed_epsilon(noise, scale, contributions, sampling_rate, levels, delta) <= epsilon

    high = 1.0
    while not meets(high):
        high *= 2
        if high > 1e12:
            raise InputError(
                f"privacy.epsilon: no noise scale meets ε = {epsilon:g} at δ = {delta:g} over "
                f"{levels} levels; ask for a larger ε or δ"
            )
    low = high / 2
    while meets(low) and low > 1e-6:
        low, high = low / 2, low
    while high / low - 1 > SCALE_PRECISION:
        middle = math.sqrt(low * high)
        low, high = (low, middle) if meets(middle) else (middle, high)
    return AggregateTrieParameters(noise, n_users, high, contributions, sampling_rate, levels, epsilon, delta)


def noise_tail_quantile(noise: str, scale: float, tail: float) -> float:
    """The count ``t`` with ``P(noise > t) = tail``: where a candidate nobody holds passes with chance ``tail``."""
    if noise == LAPLACE:
        return scale * math.log(1 / (2 * tail)) if tail < 0.5 else -scale * math.log(2 * (1 - tail))
    from .central import normal_quantile_upper

    return scale * normal_quantile_upper(tail)
