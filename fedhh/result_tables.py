"""A run's result document as tables: its heavy hitters (with their truth) and its rounds.

The same rows are a results folder's ``heavy_hitters.csv`` and ``rounds.csv``
(:func:`table_writers`, what every writer of a run's folder adds to
``result.json``) and, in code, :meth:`fedhh.Result.items`.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from .results import Writer

TRUTH_COLUMNS = ("true_rank", "true_count", "true_frequency")


def discoveries_with_truth(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each published discovery, joined with its true rank, count and frequency when the
    result has an evaluation section (the two lists are in the same order)."""
    found = result["heavy_hitters"]
    evaluation = result.get("evaluation")
    if evaluation is None:
        return [dict(hit) for hit in found]
    return [{**hit, **truth} for hit, truth in zip(found, evaluation["heavy_hitters"], strict=True)]


def heavy_hitter_columns(result: dict[str, Any]) -> list[str]:
    """The columns of :func:`discoveries_with_truth`'s rows, in order (a discovery may lack a
    protocol's column: TrieHH has supports, the LDP protocols estimated counts)."""
    return ["item", "support", "estimated_count", *(TRUTH_COLUMNS if "evaluation" in result else ())]


def table_writers(result: dict[str, Any]) -> list[Writer]:
    """The writers of ``heavy_hitters.csv`` and ``rounds.csv`` (none without rounds) into a folder."""

    def heavy_hitters_csv(folder: Path) -> None:
        with open(folder / "heavy_hitters.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, heavy_hitter_columns(result), extrasaction="ignore")
            writer.writeheader()
            writer.writerows(discoveries_with_truth(result))

    def rounds_csv(folder: Path) -> None:
        rounds = result["rounds"]
        if not rounds:
            return
        with open(folder / "rounds.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, list(rounds[0]))
            writer.writeheader()
            writer.writerows(rounds)

    return [heavy_hitters_csv, rounds_csv]
