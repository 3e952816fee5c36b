"""The intervals of a sweep report: what each plotted point is consistent with, and how that was computed.

A report plots two kinds of numbers, and each gets the interval that fits it:

* **a discovery rate over item-trials** (``--x frequency``, ``--y
  discovery``): the items found over the items tried, pooled over the
  trials, with the exact **Clopper-Pearson** 95% interval of a binomial
  proportion (:func:`binomial`).  It never leaves [0, 1] and it is not of
  zero width when every trial agrees (12 found of 16: 0.48 to 0.93).  It
  takes the item-trials as independent draws of one rate: items of
  different frequencies in one bin make the true spread narrower than that,
  items found together in one trial (prefixes shared in one trie) wider.
* **a per-trial metric** (recall@K, F1, NCR, bits, seconds): the mean over
  trials with a 95% **bootstrap** interval (:func:`over_trials`): the
  percentiles of :data:`RESAMPLES` means of trials resampled with
  replacement, from a fixed seed so that a report is reproducible.  The
  percentiles are Hesterberg's *expanded* ones (the levels
  ``Φ(∓ sqrt(n / (n - 1)) t_{n-1, 0.975})`` in place of 2.5% and 97.5%),
  which correct the plain percentile interval's narrowness in small
  samples: at 10 trials the plain one covers the mean about 90% of the time,
  the expanded one about 95%.  Every resampled mean lies between the
  smallest and the largest trial, so a bounded metric's interval stays
  inside its bounds.  Below :data:`MIN_BOOTSTRAP_TRIALS` trials no interval
  is claimed: the band is the **range** of the trials (smallest to
  largest), and the figures draw the trials themselves.

Each point carries its method (:data:`METHODS`), which the figures' legends,
the CSVs and ``summary.md`` name.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CLOPPER_PEARSON, BOOTSTRAP, RANGE = "clopper-pearson", "bootstrap", "range"
CONFIDENCE = 0.95
MIN_BOOTSTRAP_TRIALS = 10  # fewer trials: the range of the trials, not an interval
RESAMPLES = 4000
BOOTSTRAP_SEED = 20_250_825  # fixed: the same tables give the same report
METHODS = {
    CLOPPER_PEARSON: "95% Clopper-Pearson interval over item-trials",
    BOOTSTRAP: f"95% bootstrap interval (expanded percentile, {RESAMPLES:,} resamples)",
    RANGE: f"range of the trials (fewer than {MIN_BOOTSTRAP_TRIALS}: no interval)",
}


@dataclass
class Interval:
    """Per point: the estimate, its interval, the method and the trials behind it."""

    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    method: np.ndarray  # one of METHODS' keys per point ("" where a point has no data)
    trials: np.ndarray

    def __post_init__(self) -> None:
        self.method = np.asarray(self.method, dtype=object)

    @property
    def size(self) -> int:
        return int(self.mean.size)


def binomial(found: np.ndarray, tried: np.ndarray, trials: np.ndarray) -> Interval:
    """The rate ``found / tried`` per point with its Clopper-Pearson interval (``trials``: the
    trials the item-trials come from, for the record); NaN where nothing was tried."""
    from scipy.stats import beta

    found = np.asarray(found, dtype=np.float64)
    tried = np.asarray(tried, dtype=np.float64)
    some = tried > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(some, found / np.where(some, tried, 1.0), np.nan)
        tail = (1 - CONFIDENCE) / 2
        low = np.where(found > 0, beta.ppf(tail, found, tried - found + 1), 0.0)
        high = np.where(found < tried, beta.ppf(1 - tail, found + 1, tried - found), 1.0)
    method = np.where(some, CLOPPER_PEARSON, "")
    return Interval(rate, np.where(some, low, np.nan), np.where(some, high, np.nan), method, np.asarray(trials))


def over_trials(values: np.ndarray) -> Interval:
    """Per column of ``values`` (trials x points, NaN where a point has fewer trials): the mean
    over its trials, with the bootstrap interval from :data:`MIN_BOOTSTRAP_TRIALS` trials on and
    the range of the trials below."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"values: expected trials x points, got shape {values.shape}")
    points = values.shape[1]
    count = np.sum(~np.isnan(values), axis=0)
    mean = np.full(points, np.nan)
    low = np.full(points, np.nan)
    high = np.full(points, np.nan)
    method = np.full(points, "", dtype=object)
    for n in np.unique(count[count > 0]).tolist():
        columns = np.flatnonzero(count == n)
        block = np.stack([values[~np.isnan(values[:, j]), j] for j in columns], axis=1)  # n x columns
        mean[columns] = block.mean(axis=0)
        if n < MIN_BOOTSTRAP_TRIALS:
            low[columns], high[columns] = block.min(axis=0), block.max(axis=0)
            method[columns] = RANGE
        else:
            lows, highs = bootstrap_mean(block)
            low[columns], high[columns] = np.minimum(lows, mean[columns]), np.maximum(highs, mean[columns])
            method[columns] = BOOTSTRAP
    return Interval(mean, low, high, method, count)


def bootstrap_mean(block: np.ndarray, seed: int = BOOTSTRAP_SEED) -> tuple[np.ndarray, np.ndarray]:
    """The expanded-percentile bootstrap interval of the mean of each column of ``block`` (n x columns,
    n >= 2), from :data:`RESAMPLES` resamples of the n rows drawn with ``seed``."""
    from scipy.stats import norm, t

    n = block.shape[0]
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n, size=(RESAMPLES, n))
    weights = np.bincount((np.arange(RESAMPLES)[:, None] * n + picks).ravel(), minlength=RESAMPLES * n)
    means = weights.reshape(RESAMPLES, n).astype(np.float64) @ block / n  # resamples x columns
    tail = float(norm.cdf(-np.sqrt(n / (n - 1)) * t.ppf(1 - (1 - CONFIDENCE) / 2, n - 1)))
    low, high = np.quantile(means, [tail, 1 - tail], axis=0)
    lowest, highest = block.min(axis=0), block.max(axis=0)  # the interpolation can round past the data
    return np.clip(low, lowest, highest), np.clip(high, lowest, highest)
