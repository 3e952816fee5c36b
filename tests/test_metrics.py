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


def test_count_errors_by_hand(truth: Truth) -> None:
    """Estimates for a (55 vs 50), c (27 vs 30), zz (4, not in the population: true 0) and b found without
    an estimate: MAE (5 + 3 + 4) / 3 = 4, RMSE sqrt((25 + 9 + 16) / 3), relative (5/50 + 3/30) / 2 = 0.1
    (zz has no true count to divide by); on the true top 3 (a, b, c) b has no estimate and is counted."""
    estimates = {"a": 55.0, "c": 27.0, "zz": 4.0, "b": None}
    metrics = utility_metrics({"a", "b", "c", "zz"}, truth, 3, estimates)
    found = metrics["count_error"]["found"]
    assert (found["items"], found["without_estimate"]) == (3, 1)
    assert found["mae"] == pytest.approx(4.0) and found["rmse"] == pytest.approx(np.sqrt(50 / 3))
    assert found["relative_error"] == pytest.approx(0.1)
    assert metrics["count_error"]["top_k"] == pytest.approx(
        {"items": 2, "without_estimate": 1, "mae": 4.0, "rmse": np.sqrt(17.0), "relative_error": 0.1})
    nothing = utility_metrics(set(), truth, 3, {})["count_error"]["found"]
    assert nothing == {"items": 0, "without_estimate": 0, "mae": None, "rmse": None, "relative_error": None}
    assert "count_error" not in utility_metrics({"a"}, truth, 3)
