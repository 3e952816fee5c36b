"""Utility of a discovery against the true heavy hitters (evaluation only).

The truth is computed centrally from the simulated population; no protocol
ever sees it.  Definitions follow Wang et al. ([Wang19], §IV-B):

* recall@K: share of the true top-K items that were discovered;
* precision: share of discovered items that are in the true top-K;
* F1: harmonic mean of precision and recall@K;
* NCR (normalised cumulative rank): the true rank-j item of the top-K scores
  ``K + 1 - j``; NCR is the score of the discovered items over ``K(K+1)/2``.

The count errors (:func:`count_errors`) compare a protocol's estimated
counts with the true ones, the population frequency times n (the sum of
the users' local shares of the item, which is each user's chance to report
it: with one item per user, the number of users holding it): mean absolute
error, root mean square error and mean relative error ``|est - true| / true``
over the items that have an estimate; the items without one (not found, or
found by a protocol that estimates no count, such as TrieHH) are left out
and counted.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

DEFAULT_RECALL_KS = (10, 25, 50, 100, 250, 500, 1000)


@dataclass(frozen=True)
class Truth:
    """True ranking of the vocabulary: rank 1 is the most frequent item."""

    items: list[str]
    frequency: np.ndarray  # population frequency (sum of users' local shares)
    holders: np.ndarray  # users holding the item
    order: np.ndarray  # item ids by decreasing frequency (ties: lower id first)

    @classmethod
    def from_counts(cls, items: list[str], frequency: np.ndarray, holders: np.ndarray) -> Truth:
        order = np.lexsort((np.arange(len(items)), -frequency))
        return cls(items, frequency, holders, order)

    @functools.cached_property
    def index_of(self) -> dict[str, int]:
        """Item -> its id in ``items``."""
        return {item: i for i, item in enumerate(self.items)}

    def rank_of(self) -> dict[str, int]:
        return {self.items[i]: rank for rank, i in enumerate(self.order.tolist(), start=1)}

    def top(self, k: int) -> list[str]:
        return [self.items[i] for i in self.order[:k].tolist() if self.frequency[i] > 0]


def recall_at_k(discovered: set[str], truth: Truth, k: int) -> float:
    top = truth.top(k)
    return sum(item in discovered for item in top) / len(top) if top else 0.0


def precision_at_k(discovered: set[str], truth: Truth, k: int) -> float:
    if not discovered:
        return 0.0
    top = set(truth.top(k))
    return sum(item in top for item in discovered) / len(discovered)


def f1_at_k(discovered: set[str], truth: Truth, k: int) -> float:
    precision, recall = precision_at_k(discovered, truth, k), recall_at_k(discovered, truth, k)
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def ncr_at_k(discovered: set[str], truth: Truth, k: int) -> float:
    top = truth.top(k)
    if not top:
        return 0.0
    size = len(top)
    score = sum(size + 1 - j for j, item in enumerate(top, start=1) if item in discovered)
    return score / (size * (size + 1) / 2)


def count_errors(estimates: Mapping[str, float | None], truth: Truth, items: Iterable[str]) -> dict[str, Any]:
    """How far the estimated counts of ``items`` are from their true counts (see the module docstring):
    ``mae``, ``rmse`` and ``relative_error`` (``None`` without any estimate; the relative error over
    the items whose true count is positive), over ``items`` estimated items, ``without_estimate`` left out."""
    index = truth.index_of
    estimated, true, missing = [], [], 0
    for item in items:
        estimate = estimates.get(item)
        if estimate is None:
            missing += 1
            continue
        estimated.append(float(estimate))
        true.append(float(truth.frequency[index[item]]) if item in index else 0.0)
    errors = np.array(estimated) - np.array(true)
    positive = np.array(true) > 0
    return {
        "items": len(estimated),
        "without_estimate": missing,
        "mae": float(np.mean(np.abs(errors))) if errors.size else None,
        "rmse": math.sqrt(float(np.mean(errors**2))) if errors.size else None,
        "relative_error": (
            float(np.mean(np.abs(errors[positive]) / np.array(true)[positive])) if positive.any() else None
        ),
    }


def utility_metrics(
    discovered: set[str], truth: Truth, top_k: int, estimates: Mapping[str, float | None] | None = None
) -> dict[str, object]:
    """Recall@K for the usual K and ``top_k``, precision, F1 and NCR at ``top_k``, the items
    discovered, and with ``estimates`` (item -> estimated count) the count errors on the items found
    and on the true top K."""
    ks = sorted({k for k in DEFAULT_RECALL_KS if k <= len(truth.items)} | {top_k})
    metrics: dict[str, object] = {
        "top_k": top_k,
        "recall_at_k": {str(k): recall_at_k(discovered, truth, k) for k in ks},
        "precision": precision_at_k(discovered, truth, top_k),
        "f1": f1_at_k(discovered, truth, top_k),
        "ncr": ncr_at_k(discovered, truth, top_k),
        "discovered": len(discovered),
    }
    if estimates is not None:
        metrics["count_error"] = {
            "found": count_errors(estimates, truth, sorted(discovered)),
            "top_k": count_errors(estimates, truth, truth.top(top_k)),
        }
    return metrics
