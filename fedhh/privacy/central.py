"""The curator baseline's privacy: a noisy histogram of the items present, released above a threshold.

The mechanism (``protocol.name = "central"``) is the stability-based
histogram over an unknown domain: a trusted curator counts the items its
users hold, each user contributing **one** item (chosen as TrieHH chooses
it: one of its items, with probability its local frequency), adds
independent noise to the count of every item present, and releases the
items whose noisy count exceeds a threshold τ, with their noisy counts.
Items nobody holds are never counted, so the domain need not be known.

**Theorem** (user-level (ε, δ)-DP; adjacency add/remove: two populations
differ in one user's whole data, which contributes one item).  Let D' be D
plus one user whose chosen item is x; only x's count differs, by one.

* **Laplace** (``noise = "laplace"``): scale ``b = 1/ε`` and
  ``τ = 1 + ln(1/(2δ))/ε``.  If x is held in D, its noisy count is the
  Laplace mechanism of sensitivity 1 (ε-DP) and the threshold is
  post-processing.  If not, x is never released from D and is released
  from D' with probability ``P(1 + Lap(b) > τ) = ½ e^(-(τ-1)/b) = δ``;
  every other coordinate has the same law under both.  So the release is
  (ε, δ)-DP.  This is Korolova, Kenthapadi, Mishra and Ntoulas (WWW 2009)'s
  noisy threshold, with the threshold of Gopi et al. ("Differentially
  Private Set Union", ICML 2020, §3: ``ρ_Lap`` at ``Δ0 = 1``) and of
  Google's differential-privacy library (``LaplacePartitionSelection``);
  the stability-based histogram of Bun, Nissim and Stemmer (ITCS 2016) and
  Vadhan ("The Complexity of Differential Privacy", 2017, Proposition 3.5)
  is the same construction under replace-one adjacency (two counts change:
  ``Lap(2/ε)``, ``τ = 1 + 2 ln(2/δ)/ε``).
* **Gaussian** (``noise = "gaussian"``): δ is split in halves.  σ is the
  smallest that makes the Gaussian mechanism of sensitivity 1
  (ε, δ/2)-DP by the exact condition of Balle and Wang (ICML 2018,
  Theorem 8), ``Φ(1/(2σ) - εσ) - e^ε Φ(-1/(2σ) - εσ) <= δ/2``, and
  ``τ = 1 + σ Φ⁻¹(1 - δ/2)``, so that an item absent from D is released
  from D' with probability δ/2 (Gopi et al.'s ``ρ_Gauss`` at ``Δ0 = 1``;
  Google's ``GaussianPartitionSelection``).  The two halves add up to δ.

The report's (ε, δ) is derived from the mechanism's own numbers
(:func:`central_guarantee`): for Laplace ``ε = 1/b`` and
``δ = ½ e^(-(τ-1)/b)``; for Gaussian the analytic δ of σ at ε plus the
threshold's tail ``1 - Φ((τ-1)/σ)``, which the bisection for σ keeps at or
below the target.  A privacy ledger checks every stored run against it.

Not covered: the noise is drawn in floating point (numpy's Laplace and
normal samplers), which Mironov (CCS 2012) showed can leak through the low
bits of a released value; round the counts before publishing them outside a
simulation.  The curator itself sees every user's item: this is the central
model, the comparison point for what federation and local noise cost.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from .report import EVALUATION_NOT_COVERED, PUBLIC_INPUTS, USER_LEVEL, Coverage, PrivacyReport
from .validation import check_delta, check_epsilon, check_users

MODEL = "central, user-level, noisy threshold histogram"
LAPLACE, GAUSSIAN = "laplace", "gaussian"
NOISES = (LAPLACE, GAUSSIAN)
SIGMA_PRECISION = 1e-13  # relative: the bisection for σ stops within this of the smallest valid σ
COVERAGE = Coverage(
    covered=(
        "heavy_hitters[] (item, estimated_count): the items whose noisy count passed τ, with those noisy "
        "counts, which the theorem releases",
        "rounds[] (released, above_threshold): functions of the released histogram",
        PUBLIC_INPUTS,
    ),
    not_covered=(
        "the curator's exact histogram (every item present and its count): the curator sees it, and it is "
        "kept in the server's log only",
        EVALUATION_NOT_COVERED,
    ),
)


def _normal_tail(x: float) -> float:
    """``1 - Φ(x)``, exact far into the tail."""
    return 0.5 * math.erfc(x / math.sqrt(2))


def gaussian_delta(sigma: float, epsilon: float) -> float:
    """The smallest δ for which the Gaussian mechanism of sensitivity 1 and noise σ is (ε, δ)-DP
    (Balle and Wang 2018, Theorem 8): ``Φ(1/(2σ) - εσ) - e^ε Φ(-1/(2σ) - εσ)``, in log space
    (``Φ(x) (1 - e^(ε + ln Φ(y) - ln Φ(x)))``) so that two tiny, nearly equal terms do not cancel
    and a large ε does not overflow."""
    from scipy.special import log_ndtr  # scipy.special only: no scipy.stats import

    a = 1 / (2 * sigma)
    first = float(log_ndtr(a - epsilon * sigma))
    second = epsilon + float(log_ndtr(-a - epsilon * sigma))
    if second >= first:
        return 0.0
    return math.exp(first) * -math.expm1(second - first)


def gaussian_sigma(epsilon: float, delta: float) -> float:
    """The smallest σ (to :data:`SIGMA_PRECISION`) with ``gaussian_delta(σ, ε) <= δ``: bisection over
    ``log σ`` (the δ of a σ falls as σ grows), returning the end that meets δ."""
    high = 1.0
    while gaussian_delta(high, epsilon) > delta:
        high *= 2
    low = high / 2
    while gaussian_delta(low, epsilon) <= delta:
        low, high = low / 2, low
    while high / low - 1 > SIGMA_PRECISION:
        middle = math.sqrt(low * high)
        if not low < middle < high:
            break
        low, high = (middle, high) if gaussian_delta(middle, epsilon) > delta else (low, middle)
    return high


def normal_quantile_upper(tail: float) -> float:
    """``Φ⁻¹(1 - tail)``, computed as ``-Φ⁻¹(tail)`` so that a tiny tail keeps its digits."""
    from scipy.special import ndtri

    return -float(ndtri(tail))


@dataclass(frozen=True)
class CentralParameters:
    """The noise and threshold of the curator's histogram for a target (ε, δ), and the guarantee they give."""

    noise: str
    n_users: int
    epsilon: float  # the target ε (Gaussian: the ε at which σ was calibrated)
    scale: float  # Laplace: b; Gaussian: σ
    threshold: float  # τ: an item is released when its noisy count exceeds it

    @property
    def guarantee(self) -> tuple[float, float]:
        return central_guarantee(self.to_parameters())

    def to_parameters(self) -> dict[str, Any]:
        return {
            "noise": self.noise,
            "n_users": self.n_users,
            "epsilon": self.epsilon,
            "scale": self.scale,
            "threshold": self.threshold,
        }

    def report(self) -> PrivacyReport:
        epsilon, delta = self.guarantee
        if self.noise == LAPLACE:
            mechanism = (
                f"a curator's count of each item present, one item per user, plus Laplace noise of "
                f"scale b = {self.scale:.4g}; released when the noisy count exceeds τ = {self.threshold:.4g}"
            )
            method = (
                "Laplace thresholding (Korolova et al. 2009; Gopi et al. 2020, ρ_Lap at Δ0 = 1): "
                "ε = 1/b, δ = ½ exp(-(τ - 1)/b)"
            )
        else:
            mechanism = (
                f"a curator's count of each item present, one item per user, plus Gaussian noise of "
                f"σ = {self.scale:.4g}; released when the noisy count exceeds τ = {self.threshold:.4g}"
            )
            method = (
                "Gaussian thresholding (Gopi et al. 2020, ρ_Gauss at Δ0 = 1): σ by Balle and Wang 2018, "
                "Theorem 8, at (ε, δ/2); δ = δ_Gauss(σ, ε) + 1 - Φ((τ - 1)/σ)"
            )
        return PrivacyReport(
            model=MODEL,
            epsilon=epsilon,
            delta=delta,
            mechanism=mechanism,
            method=method,
            adjacency=USER_LEVEL,
            parameters=self.to_parameters(),
            coverage=COVERAGE,
        )


def solve_central(n_users: int, epsilon: float, delta: float, noise: str = LAPLACE) -> CentralParameters:
    """The scale and threshold meeting (ε, δ) for a population of ``n_users`` (δ must be below ``1/n``)."""
    check_users(n_users)
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    if noise not in NOISES:
        raise InputError(f"protocol.noise: got {noise!r}; allowed values: {list(NOISES)}")
    if delta * n_users >= 1:
        raise InputError(
            f"privacy.delta: δ = {delta:g} is not below 1/n = 1/{n_users:,} = {1 / n_users:.3g}, where "
            "(ε, δ)-DP means nothing (publishing one random user's data meets it); "
            f"choose δ well below 1/n, e.g. 1/n² = {1 / n_users**2:.3g}"
        )
    if noise == LAPLACE:
        scale = 1 / epsilon
        threshold = 1 + math.log(1 / (2 * delta)) / epsilon
    else:
        scale = gaussian_sigma(epsilon, delta / 2)
        threshold = 1 + scale * normal_quantile_upper(delta / 2)
    return CentralParameters(noise, n_users, epsilon, scale, threshold)


def central_guarantee(parameters: Mapping[str, Any]) -> tuple[float, float]:
    """(ε, δ) of the curator's histogram derived again from a report's ``parameters`` (noise,
    ε, scale, τ), as the module docstring states them; a privacy ledger checks every stored run
    against it."""
    noise = parameters.get("noise")
    if noise not in NOISES:
        raise InputError(f"noise: must be one of {list(NOISES)}, got {noise!r}")
    values = {}
    for key in ("epsilon", "scale", "threshold"):
        value = parameters.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise InputError(f"{key}: must be a finite number > 0, got {value!r}")
        values[key] = float(value)
    epsilon, scale, threshold = values["epsilon"], values["scale"], values["threshold"]
    if threshold <= 1:
        raise InputError(f"threshold: must exceed 1 (one user's count), got {threshold!r}")
    if noise == LAPLACE:
        if not math.isclose(scale * epsilon, 1.0, rel_tol=1e-12):
            raise InputError(f"scale: Laplace noise of scale {scale!r} is not 1/ε for ε = {epsilon!r}")
        return epsilon, 0.5 * math.exp(-(threshold - 1) * epsilon)
    return epsilon, gaussian_delta(scale, epsilon) + _normal_tail((threshold - 1) / scale)
