"""Which candidates survive one level of a prefix search: order statistics of Gaussian estimates.

A level of PEM or TreeHist estimates every candidate prefix and keeps the
``kept`` best (top-k selection), or the best among those at or above a
threshold (threshold selection).  [Wang19]'s eq. (5) asks whether value
``j`` beats ``kept - j + 1`` zero-frequency candidates and assumes the
``j - 1`` more frequent values are ranked first; it ignores the values
ranked just below, which compete for the same places.  Near rank ``k``
those competitors matter most: at n = 50,000, ε = 2, OLH, k = 8 on Zipf
data eq. (5) says 0.69 where runs find the 8th value about half the time
(``docs/sizing.md``).

This module models the whole candidate set instead.  A level's candidates
are *entries*: a value (or a bin of similar tail values, or the class of
zero-frequency candidates) with a Gaussian estimate ``N(mean, sd^2)``, a
multiplicity (how many candidates the entry stands for) and a presence
probability (that its prefix survived the levels before).  Entry ``v``
survives when, at its estimate ``x``, fewer than ``kept`` of the *other*
candidates are above ``x`` (and ``x`` clears the threshold, if any)::

    S_v = ∫ P(C_v(x) <= kept - 1) dF_v(x)   over x >= threshold

where ``C_v(x)`` counts the other candidates above ``x``.  Each other
candidate ``u`` is above ``x`` independently with probability
``presence_u Φ((mean_u - x) / sd_u)``, so ``C_v(x)`` is Poisson-binomial.
Its value part (few candidates, probabilities anywhere in [0, 1]) is
approximated by the refined normal approximation (normal with continuity
correction and a skewness term, Volkova 1996); the zero-frequency part
(very many candidates, each rarely above a heavy value's estimate) is
Poisson.  The integral runs over ``F_v``'s quantiles with Gauss-Legendre
nodes, which also handles the threshold's cut exactly.

Candidates are treated as independent (the exact count kept at a level is
not enforced on the next level's presence); tests hold the approximation to
a Monte Carlo of the same Gaussian model and the model to real runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri

QUADRATURE_NODES = 12
_TINY = 1e-300
_GAUSS_LEGENDRE = np.polynomial.legendre.leggauss(QUADRATURE_NODES)


@dataclass(frozen=True)
class LevelCandidates:
    """The candidates of one level, as entries (see the module docstring).

    ``means``, ``sds``, ``multiplicity`` and ``presence`` have one element
    per value entry; ``zeros`` candidates nobody holds have estimates
    ``N(0, zero_sd^2)``.
    """

    means: np.ndarray
    sds: np.ndarray
    multiplicity: np.ndarray
    presence: np.ndarray
    zeros: float
    zero_sd: float

    def __post_init__(self) -> None:
        for name in ("means", "sds", "multiplicity", "presence"):
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype=np.float64))
        shapes = {self.means.shape, self.sds.shape, self.multiplicity.shape, self.presence.shape}
        if len(shapes) != 1 or self.means.ndim != 1:
            raise ValueError(f"LevelCandidates: entries need 1-D arrays of one length, got shapes {sorted(shapes)}")


def noise_threshold(zero_sd: float, candidates: float) -> float:
    """The automatic threshold of a prefix search: the estimate about one of ``candidates``
    absent prefixes (sd ``zero_sd``) passes."""
    return zero_sd * float(ndtri(1 - min(1.0 / max(candidates, 1.0), 0.5)))


def survival(level: LevelCandidates, kept: int, threshold: float | None = None) -> tuple[np.ndarray, float]:
    """(P(value entry survives | present), P(a zero-frequency candidate survives)).

    ``kept`` is the most survivors the level keeps; ``threshold`` the
    estimate a survivor needs (``None``: top-k selection only).
    """
    if kept <= 0:
        return np.zeros(level.means.size), 0.0
    means = np.append(level.means, 0.0)
    sds = np.maximum(np.append(level.sds, level.zero_sd), _TINY)
    nodes, weights = _GAUSS_LEGENDRE
    # the part of each entry's distribution where it can survive, in quantiles [low, 1]: above the
    # threshold, and above where the zero-frequency candidates alone surely outnumber the places
    cut = max(-np.inf if threshold is None else threshold, _crowded_below(level, means, sds, kept))
    low = ndtr((cut - means) / sds)
    quantiles = low[:, None] + (1 - low[:, None]) * (nodes[None, :] + 1) / 2  # [V, G]
    x = means[:, None] + sds[:, None] * ndtri(quantiles)
    mass = (1 - low)[:, None] * weights[None, :] / 2  # quadrature weights on that part

    # the value part: every value entry's chance to be above each x, and the cumulants of their count
    scaled = (level.means / sds[:-1])[:, None, None] - x[None] / sds[:-1, None, None]
    above = level.presence[:, None, None] * ndtr(scaled)  # [U, V, G]
    squared = above * above
    count = level.multiplicity
    first = np.tensordot(count, above, axes=1)
    second = np.tensordot(count, squared, axes=1)
    cubed = np.tensordot(count, squared * above, axes=1)
    own = np.arange(level.means.size)
    own_above = above[own, own]  # an entry does not compete with itself
    first[own] -= own_above
    second[own] -= own_above**2
    cubed[own] -= own_above**3
    mean = first
    variance = first - second
    third = first - 3 * second + 2 * cubed

    # the zero-frequency part, Poisson; a zero candidate does not compete with itself either
    zero_mean = np.maximum(level.zeros - np.append(np.zeros(level.means.size), 1.0), 0.0)[:, None] * ndtr(
        -x / max(level.zero_sd, _TINY)
    )
    fits = _count_at_most(kept - 1, mean, variance, third, zero_mean)  # P(C <= kept - 1) at each x
    survived = (fits * mass).sum(axis=1)
    return np.clip(survived[:-1], 0.0, 1.0), float(np.clip(survived[-1], 0.0, 1.0))


def _crowded_below(level: LevelCandidates, means: np.ndarray, sds: np.ndarray, kept: int) -> float:
    """An estimate below which no candidate survives: there, more than ``kept`` other candidates
    are above it with certainty (their expected count, less the candidate itself, exceeds
    :func:`_poisson_excess`; a Poisson-binomial count is more concentrated than a Poisson one)."""
    counts = np.append(level.multiplicity * level.presence, level.zeros)
    crowd = _poisson_excess(kept - 1) + 1

    def expected_above(x: float) -> float:
        return float(counts @ ndtr((means - x) / sds))

    if expected_above(float(np.min(means - 8 * sds))) < crowd:
        return -np.inf
    low, high = float(np.min(means - 8 * sds)), float(np.max(means + 40 * sds))
    for _ in range(30):  # bisection on a decreasing function, to well below the estimates' spread
        middle = (low + high) / 2
        low, high = (middle, high) if expected_above(middle) >= crowd else (low, middle)
    return low


def _count_at_most(
    limit: int, mean: np.ndarray, variance: np.ndarray, third: np.ndarray, zero_mean: np.ndarray
) -> np.ndarray:
    """P(values + zeros <= limit): the value count by its refined normal approximation, the zero
    count Poisson(zero_mean), convolved where the Poisson part is neither negligible nor certain
    to exceed ``limit`` (elsewhere one of the two settles it)."""
    result = _refined_normal_cdf(limit, mean, variance, third)
    result[zero_mean > _poisson_excess(limit)] = 0.0
    mixed = (zero_mean > 1e-9) & (result > 0)
    if mixed.any():
        places = np.arange(limit + 1)
        rate = zero_mean[mixed][:, None]
        log_factorial = np.cumsum(np.log(np.maximum(places, 1)))
        poisson = np.exp(places * np.log(rate) - rate - log_factorial)
        values = _refined_normal_cdf(
            limit - places, mean[mixed][:, None], variance[mixed][:, None], third[mixed][:, None]
        )
        result[mixed] = (poisson * values).sum(axis=1)
    return result


def _poisson_excess(limit: int) -> float:
    """A Poisson mean above which more than ``limit`` events are certain (probability < 1e-12)."""
    return limit + 12 * math.sqrt(limit + 1) + 12


def _refined_normal_cdf(
    at: np.ndarray | float, mean: np.ndarray, variance: np.ndarray, third: np.ndarray
) -> np.ndarray:
    """P(X <= at) for a Poisson-binomial X with these cumulants: the normal approximation with
    continuity correction and Volkova's skewness term; exact where X is certain (variance 0)."""
    sd = np.sqrt(np.maximum(variance, 0.0))
    spread = sd > 1e-9
    safe_sd = np.where(spread, sd, 1.0)
    z = (at + 0.5 - mean) / safe_sd
    skew = third / safe_sd**3
    density = np.exp(-0.5 * z**2) / math.sqrt(2 * math.pi)
    refined = np.clip(ndtr(z) + skew * (1 - z**2) * density / 6, 0.0, 1.0)
    return np.where(spread, refined, (mean <= at + 0.5).astype(np.float64))
