"""Composing (ε, δ) guarantees of repeated runs: dp-accounting's PLD, with the
textbook bounds beside it.

A daily discovery job over the same users spends privacy every day.  The
cumulative guarantee is computed three ways, so a reader can see where the
number comes from and how much the modern accountant saves:

* **basic** (sequential) composition: ``(Σ ε_i, Σ δ_i)``, always valid;
* **advanced** composition (Dwork, Rothblum and Vadhan 2010, Theorem III.3,
  in its heterogeneous form): for any ``δ' > 0`` the runs are
  ``(sqrt(2 ln(1/δ') Σ ε_i²) + Σ ε_i (e^ε_i - 1), Σ δ_i + δ')``-DP.  The bound
  falls as ``δ'`` grows, so at a target total δ the optimal choice is the
  whole slack ``δ' = δ - Σ δ_i``;
* **privacy loss distributions** (Google's ``dp-accounting``): each run's
  (ε, δ) becomes the pessimistic PLD of
  ``privacy_loss_distribution.from_privacy_parameters`` (the worst mechanism
  with that guarantee), the PLDs are convolved, and ε is read off at the
  target δ.  This is the optimal composition of (ε, δ) guarantees (Kairouz,
  Oh and Viswanath 2015) up to the discretisation, which only rounds losses
  up.

The cumulative ε reported is the smallest of the three that is valid at the
target δ: all three are upper bounds, and discretisation can put the PLD a
hair above the basic sum when nothing is gained.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

from .report import CompositionSummary

Guarantee = tuple[float, float]  # (epsilon, delta) of one run

MIN_DISCRETIZATION = 1e-4  # dp-accounting's default interval
MAX_GRID_POINTS = 1_000_000  # cap on the dense PLD grid (2 Σε / interval)


def default_delta(guarantees: Iterable[Guarantee]) -> float:
    """The total δ at which a ledger states its ε when none is set: ``2 Σ δ_i``.

    Half goes to the runs' own δ, the other half is the slack ``δ'`` that
    advanced and PLD composition trade for a smaller ε.  Pure ε runs
    (``δ_i = 0``, LDP) get ``δ = 0`` and basic composition, which is exact
    for them.
    """
    return min(1.0, 2.0 * math.fsum(delta for _, delta in guarantees))


def basic_composition(guarantees: Iterable[Guarantee]) -> Guarantee:
    """``(Σ ε_i, Σ δ_i)`` (Dwork and Roth 2014, Theorem 3.16)."""
    pairs = list(guarantees)
    return math.fsum(e for e, _ in pairs), min(1.0, math.fsum(d for _, d in pairs))


def advanced_composition(guarantees: Iterable[Guarantee], delta: float) -> tuple[float, float]:
    """Dwork-Rothblum-Vadhan at total ``delta``: ``(ε, δ')``, ``ε = inf`` when no slack is left.

    ``δ' = delta - Σ δ_i`` is the optimum over ``δ'``: the bound
    ``sqrt(2 ln(1/δ') Σ ε_i²) + Σ ε_i (e^ε_i - 1)`` decreases in ``δ'``.
    """
    pairs = list(guarantees)
    slack = delta - math.fsum(d for _, d in pairs)
    if not pairs or slack <= 0 or any(not math.isfinite(e) for e, _ in pairs):
        return (0.0 if not pairs else math.inf), max(slack, 0.0)
    squares = math.fsum(e * e for e, _ in pairs)
    drift = math.fsum(e * math.expm1(e) for e, _ in pairs)
    return math.sqrt(2.0 * math.log(1.0 / slack) * squares) + drift, slack


def discretization_for(guarantees: Iterable[Guarantee]) -> float:
    """PLD grid step: dp-accounting's 1e-4, coarser when Σε would need over 10^6 points.

    Pessimistic rounding moves each run's loss up by less than one step, so
    the composed ε is at most ``runs x step`` above the exact value
    (a relative error below ``runs / 10^6`` of the basic sum).
    """
    total = math.fsum(e for e, _ in guarantees if math.isfinite(e))
    return max(MIN_DISCRETIZATION, 2.0 * total / MAX_GRID_POINTS)


def pld_composition(guarantees: Iterable[Guarantee], delta: float, discretization: float) -> float:
    """ε at total ``delta`` of the composed pessimistic PLDs (dp-accounting).

    Identical guarantees are self-composed once (one FFT), then the distinct
    groups are convolved: a ledger of daily runs with one setting costs one
    self-composition whatever its length.
    """
    # dp-accounting (and the scipy.signal it loads) is a slow import; only ledgers compose
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld_module

    counts = Counter(guarantees)
    if not counts:
        return 0.0
    if any(not math.isfinite(e) or d >= 1 for e, d in counts):
        return math.inf
    composed = None
    for (epsilon, run_delta), count in sorted(counts.items()):
        pld = pld_module.from_privacy_parameters(
            common.DifferentialPrivacyParameters(epsilon, run_delta), discretization
        )
        if count > 1:
            pld = pld.self_compose(count)
        composed = pld if composed is None else composed.compose(pld)
    assert composed is not None  # guarantees were given
    return float(composed.get_epsilon_for_delta(delta))


def compose(guarantees: Iterable[Guarantee], delta: float | None = None) -> CompositionSummary:
    """The cumulative guarantee of the runs at total ``delta`` (default :func:`default_delta`)."""
    pairs = [(float(e), float(d)) for e, d in guarantees]
    for index, (epsilon, run_delta) in enumerate(pairs):
        if not (epsilon > 0 and 0 <= run_delta <= 1):
            raise ValueError(f"run {index}: ε must be > 0 and δ in [0, 1], got ε = {epsilon!r}, δ = {run_delta!r}")
    target = default_delta(pairs) if delta is None else float(delta)
    if not 0 <= target < 1:
        raise ValueError(f"delta: the total δ must be in [0, 1), got {delta!r}")
    basic_epsilon, basic_delta = basic_composition(pairs)
    advanced_epsilon, delta_prime = advanced_composition(pairs, target)
    step = discretization_for(pairs)
    pld_epsilon = pld_composition(pairs, target, step)
    candidates = {"pld": pld_epsilon, "advanced": advanced_epsilon}
    if basic_delta <= target:
        candidates["basic"] = basic_epsilon
    tightest = min(candidates, key=lambda name: (candidates[name], name != "pld"))
    return CompositionSummary(
        runs=len(pairs),
        delta=target,
        epsilon=candidates[tightest],
        tightest=tightest,
        pld_epsilon=pld_epsilon,
        basic_epsilon=basic_epsilon,
        basic_delta=basic_delta,
        advanced_epsilon=advanced_epsilon,
        advanced_delta_prime=delta_prime,
        discretization=step,
    )
