"""Where a discovery rate reaches a level (50%, 90%), read item by item rather than from bins.

Binning items by frequency and comparing the bins with a model drawn through
them mixes the model's curvature into the comparison.  Instead, over the
item-trials of one curve (each item of each trial: its true frequency ``f``
and whether it was found):

* the simulated frequency at level ``p`` comes from a logistic fit of
  ``found`` on ``log f`` by maximum likelihood (:func:`simulated_crossing`),
  which reads every item-trial without bins;
* a model's comes from its per-item probabilities, made monotone in ``f``
  (the pool-adjacent-violators fit) and interpolated in ``log f``
  (:func:`model_crossing`).

The ratio of the two is how far, in frequency, the runs sit from the model.
"""

from __future__ import annotations

import math

import numpy as np

LEVELS = (0.5, 0.9)


def simulated_crossing(frequency: np.ndarray, found: np.ndarray, level: float) -> float | None:
    """The frequency at which the logistic fit of ``found`` (0/1) on ``log10 frequency`` reaches
    ``level``; ``None`` when the fit has no increasing crossing (all found, none found, or no
    trend)."""
    from scipy.optimize import minimize

    positive = frequency > 0
    x = np.log10(frequency[positive])
    y = np.asarray(found, dtype=np.float64)[positive]
    if x.size < 2 or y.min() == y.max() or x.min() == x.max():
        return None
    centre, spread = float(x.mean()), float(x.std())

    def loss(parameters: np.ndarray) -> tuple[float, np.ndarray]:
        z = parameters[0] + parameters[1] * (x - centre) / spread
        p = 1.0 / (1.0 + np.exp(-z))
        gradient = p - y
        return float(np.sum(np.logaddexp(0.0, z) - y * z)), np.array(
            [gradient.sum(), gradient @ ((x - centre) / spread)]
        )

    fit = minimize(loss, np.zeros(2), jac=True, method="BFGS")
    intercept, slope = fit.x
    if not fit.success or slope <= 0:
        return None
    crossing = centre + spread * (math.log(level / (1 - level)) - intercept) / slope
    return 10.0**crossing


def model_crossing(frequency: np.ndarray, predicted: np.ndarray, level: float) -> float | None:
    """The frequency at which a model's per-item probabilities, made monotone in frequency, reach
    ``level`` (interpolated in log frequency); ``None`` when they never do or start above it."""
    keep = (frequency > 0) & np.isfinite(predicted)
    if not keep.any():
        return None
    order = np.argsort(frequency[keep], kind="stable")
    x = np.log10(frequency[keep][order])
    y = _increasing(predicted[keep][order])
    above = np.flatnonzero(y >= level)
    if not above.size or above[0] == 0:
        return None
    i = int(above[0])
    share = (level - y[i - 1]) / (y[i] - y[i - 1])
    return 10.0 ** (x[i - 1] + share * (x[i] - x[i - 1]))


def _increasing(values: np.ndarray) -> np.ndarray:
    """The least-squares non-decreasing fit of ``values`` (pool adjacent violators)."""
    means: list[float] = []
    sizes: list[int] = []
    for value in values.tolist():
        means.append(value)
        sizes.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            size = sizes[-2] + sizes[-1]
            means[-2] = (means[-2] * sizes[-2] + means[-1] * sizes[-1]) / size
            sizes[-2] = size
            means.pop()
            sizes.pop()
    return np.repeat(np.array(means), np.array(sizes))
