"""Fast exact sampling: subsets without replacement, and inverse-CDF draws from a discrete law.

**Subsets.** Uniform samples without replacement in time proportional to the sample, not the population.

``Generator.choice(n, m, replace=False)`` takes numpy's O(n) path (a
permutation of the whole population) once ``m > n / 50``: at TrieHH's
sampling rates (about 2 % of the users a round) that is a shuffle of ten
million ids to pick two hundred thousand.  :func:`uniform_subset` instead
draws ids with replacement, keeps the distinct ones and, when it has more
than ``m``, drops the surplus at random.

Why the result is uniform over the ``m``-subsets: every step treats the
ids symmetrically.  The draws are i.i.d. uniform, how many are drawn
depends only on how many distinct ids are already held, and the surplus is
dropped by choosing uniformly among positions.  So for any relabelling
``π`` of the population the sample of ``π(draws)`` is ``π`` of the sample:
its distribution is invariant under every permutation of the ids, and the
only such distribution over subsets of one size is the uniform one.  Above
half the population the complement is sampled instead (same argument, and
the duplicates stay few).

Cost: about ``m + m^2 / (2n)`` draws and one sort of them, O(m log m); the
result comes out sorted, which is how TrieHH's requests carry it.

**Inverse CDF.** :class:`InverseCdf` maps uniforms to outcomes exactly as
``np.searchsorted(cdf, u, side="right")`` does, but most uniforms are
settled by one lookup in a guide table (Chen and Asau's method): ``u`` in
``[k / K, (k + 1) / K)`` has its outcome between those of the two ends, and
the two are equal except in the at most ``outcomes`` cells that hold a
boundary of the CDF, where the binary search runs on those uniforms only.
``K`` is a power of two, so ``k = floor(u K)`` and ``k / K`` are exact.
"""

from __future__ import annotations

import math

import numpy as np

# Extra draws beyond the expected number, in standard deviations of the
# number of draws needed: one batch suffices but for about 1 in 10^9 calls.
_MARGIN_SD = 6.0
_MARGIN_MIN = 16


def uniform_subset(generator: np.random.Generator, population: int, size: int) -> np.ndarray:
    """``size`` distinct ids drawn uniformly from ``range(population)``, sorted (int64)."""
    if population < 0 or not 0 <= size <= population:
        raise ValueError(f"sample size must be in [0, population = {population}], got {size}")
    if 2 * size > population:
        left_out = uniform_subset(generator, population, population - size)
        keep = np.ones(population, dtype=bool)
        keep[left_out] = False
        return np.flatnonzero(keep).astype(np.int64)
    dtype = np.uint32 if population <= 1 << 32 else np.int64  # 32-bit ids sort faster
    held = np.zeros(0, dtype=dtype)
    while held.size < size:
        draws = generator.integers(0, population, size=_draws_for(population, held.size, size), dtype=dtype)
        held = _distinct(np.concatenate((held, draws)))
    surplus = held.size - size
    if surplus:
        held = np.delete(held, generator.choice(held.size, surplus, replace=False))
    return held.astype(np.int64)


def _distinct(ids: np.ndarray) -> np.ndarray:
    """Sorted distinct values (a sort and a mask: ``np.unique`` is several times slower on int64)."""
    ids = np.sort(ids)
    return ids[np.concatenate(([True], ids[1:] != ids[:-1]))] if ids.size else ids


def _draws_for(population: int, held: int, size: int) -> int:
    """Draws that bring ``held`` distinct ids to ``size`` with near certainty.

    Each draw is new with probability ``(population - j) / population`` when
    ``j`` ids are held, so the number of draws is a sum of geometric
    variables; its mean and variance are bounded here by those of the last,
    least likely step, times the steps.
    """
    missing = size - held
    new_at_end = (population - size + 1) / population  # the hardest step's success probability
    mean = population * math.log((population - held) / (population - size))  # size <= population / 2
    variance = missing * (1 - new_at_end) / new_at_end**2
    return missing + max(0, math.ceil(mean - missing + _MARGIN_SD * math.sqrt(variance))) + _MARGIN_MIN


GUIDE_CELLS_PER_OUTCOME = 2  # a small table stays in cache; the binary search then runs on about 1 uniform in 10
GUIDE_CELLS_MAX = 1 << 20
_UNSETTLED = -1


class InverseCdf:
    """Outcome ``i`` of a discrete law for each uniform in ``[0, 1)``, given the law's CDF."""

    def __init__(self, cdf: np.ndarray) -> None:
        self.cdf = np.asarray(cdf, dtype=np.float64)
        if self.cdf.ndim != 1 or self.cdf.size == 0 or np.any(np.diff(self.cdf) < 0):
            raise ValueError("cdf must be a non-empty, non-decreasing 1-D array")
        if self.cdf.size >= 1 << 31:
            raise ValueError(f"cdf: at most 2**31 - 1 outcomes, got {self.cdf.size}")
        self._cells = min(1 << (GUIDE_CELLS_PER_OUTCOME * self.cdf.size - 1).bit_length(), GUIDE_CELLS_MAX)
        ends = np.searchsorted(self.cdf, np.arange(self._cells + 1) / self._cells, side="right")
        # the outcome of every uniform of a cell, or _UNSETTLED where a CDF boundary splits the cell
        self._outcome_of_cell = np.where(ends[1:] == ends[:-1], ends[:-1], _UNSETTLED).astype(np.int32)

    def __call__(self, uniforms: np.ndarray) -> np.ndarray:
        """``np.searchsorted(cdf, uniforms, side="right")``, bit for bit (int64)."""
        uniforms = np.asarray(uniforms, dtype=np.float64)
        outcome = self._outcome_of_cell[(uniforms * self._cells).astype(np.intp)].astype(np.int64)
        unsettled = np.flatnonzero(outcome == _UNSETTLED)
        outcome[unsettled] = np.searchsorted(self.cdf, uniforms[unsettled], side="right")
        return outcome
