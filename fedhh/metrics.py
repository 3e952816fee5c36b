"""Utility of a discovery against the true heavy hitters (evaluation only).

The truth is computed centrally from the simulated population; no protocol
ever sees it.  Definitions follow Wang et al. ([Wang19], §IV-B):

* recall@K: share of the true top-K items that were discovered;
* precision: share of discovered items that are in the true top-K;
* F1: harmonic mean of precision and recall@K;
* NCR (normalised cumulative rank): the true rank-j item of the top-K scores
  ``K + 1 - j``; NCR is the score of the discovered items over ``K(K+1)/2``.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def utility_metrics(discovered: set[str], truth: Truth, top_k: int) -> dict[str, object]:
    ks = sorted({k for k in DEFAULT_RECALL_KS if k <= len(truth.items)} | {top_k})
    return {
        "top_k": top_k,
        "recall_at_k": {str(k): recall_at_k(discovered, truth, k) for k in ks},
        "precision": precision_at_k(discovered, truth, top_k),
        "f1": f1_at_k(discovered, truth, top_k),
        "ncr": ncr_at_k(discovered, truth, top_k),
        "discovered": len(discovered),
    }
