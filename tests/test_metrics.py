"""Utility metrics on hand-computed examples."""

from __future__ import annotations

import numpy as np
import pytest

from fedhh.metrics import Truth, f1_at_k, ncr_at_k, precision_at_k, recall_at_k, utility_metrics


@pytest.fixture
def truth() -> Truth:
    items = ["a", "b", "c", "d", "e"]
    return Truth.from_counts(items, np.array([50.0, 40, 30, 20, 10]), np.array([50, 40, 30, 20, 10]))


def test_recall_precision_f1(truth: Truth) -> None:
    found = {"a", "c", "zz"}
    assert recall_at_k(found, truth, 3) == pytest.approx(2 / 3)
    assert precision_at_k(found, truth, 3) == pytest.approx(2 / 3)
    assert f1_at_k(found, truth, 3) == pytest.approx(2 / 3)
    assert precision_at_k(set(), truth, 3) == 0.0


def test_ncr_weights_by_true_rank(truth: Truth) -> None:
    # top-3 scores: a=3, b=2, c=1; total 6
    assert ncr_at_k({"a"}, truth, 3) == pytest.approx(3 / 6)
    assert ncr_at_k({"c"}, truth, 3) == pytest.approx(1 / 6)
    assert ncr_at_k({"a", "b", "c"}, truth, 3) == 1.0


def test_ties_rank_by_item_order() -> None:
    tied = Truth.from_counts(["x", "y", "z"], np.array([5.0, 5.0, 7.0]), np.array([5, 5, 7]))
    assert tied.top(3) == ["z", "x", "y"]
    assert tied.rank_of() == {"z": 1, "x": 2, "y": 3}


def test_recall_keys_include_top_k(truth: Truth) -> None:
    metrics = utility_metrics({"a", "b"}, truth, 2)
    assert set(metrics["recall_at_k"]) == {"2"}
    assert metrics["recall_at_k"]["2"] == 1.0 and metrics["ncr"] == 1.0
