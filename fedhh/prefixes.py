"""Exact set operations on prefix rows (fixed-width rows of symbol ids).

Prefixes of depth ``d`` are ``int64`` rows of ``d`` symbols.  They are
compared exactly, never through a lossy hash: each row is viewed as one
opaque byte string (``numpy`` void dtype), which numpy can sort, search and
deduplicate in vectorised code.
"""

from __future__ import annotations

import numpy as np

from .items import PAD


def row_keys(rows: np.ndarray) -> np.ndarray:
    """One opaque, exactly comparable key per row."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    if rows.ndim != 2:
        raise ValueError(f"prefix rows must be 2-D, got shape {rows.shape}")
    width = max(rows.shape[1], 1)
    if rows.shape[1] == 0:
        rows = np.zeros((rows.shape[0], 1), dtype=np.int64)
    return rows.view(np.dtype((np.void, 8 * width))).ravel()


def rows_in(rows: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Boolean mask: which of ``rows`` appear in ``members`` (same width)."""
    if rows.shape[1] != members.shape[1]:
        raise ValueError(f"prefix widths differ: {rows.shape[1]} vs {members.shape[1]}")
    if members.shape[0] == 0 or rows.shape[0] == 0:
        return np.zeros(rows.shape[0], dtype=bool)
    sorted_members = np.sort(row_keys(members))
    keys = row_keys(rows)
    position = np.minimum(np.searchsorted(sorted_members, keys), sorted_members.size - 1)
    return sorted_members[position] == keys


def sum_histograms(parts: list[tuple[np.ndarray, np.ndarray]], width: int) -> tuple[np.ndarray, np.ndarray]:
    """Add sparse histograms given as (rows, counts) pairs.

    Returns the distinct rows in lexicographic-key order with summed counts;
    the result does not depend on how the rows were split into parts.
    """
    rows = [r for r, _ in parts if r.shape[0]]
    if not rows:
        return np.zeros((0, width), dtype=np.int64), np.zeros(0, dtype=np.int64)
    all_rows = np.concatenate(rows).astype(np.int64)
    all_counts = np.concatenate([c for r, c in parts if r.shape[0]]).astype(np.int64)
    unique_keys, first, inverse = np.unique(row_keys(all_rows), return_index=True, return_inverse=True)
    totals = np.bincount(inverse, weights=all_counts, minlength=unique_keys.size)
    return all_rows[first], np.rint(totals).astype(np.int64)


class PrefixIndex:
    """Per depth, the distinct prefixes of a set of item rows.

    ``at(d)`` returns ``(prefix_rows, item_to_prefix)``: the distinct
    depth-``d`` prefixes, and for every item the index of its prefix, or
    ``-1`` for an item that ended before depth ``d`` (no symbol there).
    """

    def __init__(self, rows: np.ndarray) -> None:
        self._rows = np.ascontiguousarray(rows, dtype=np.int64)
        self._cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    @property
    def max_depth(self) -> int:
        return int(self._rows.shape[1])

    def build_all(self) -> None:
        """Build every depth now (placement time) rather than in the first rounds."""
        for depth in range(1, self.max_depth + 1):
            self.at(depth)

    def at(self, depth: int) -> tuple[np.ndarray, np.ndarray]:
        if not 1 <= depth <= self.max_depth:
            raise ValueError(f"depth must be in 1..{self.max_depth}, got {depth}")
        if depth not in self._cache:
            has_symbol = self._rows[:, depth - 1] != PAD
            prefixes = np.ascontiguousarray(self._rows[has_symbol, :depth])
            keys = row_keys(prefixes)
            _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
            item_to_prefix = np.full(self._rows.shape[0], -1, dtype=np.int64)
            item_to_prefix[has_symbol] = inverse.ravel()
            self._cache[depth] = (prefixes[first], item_to_prefix)
        return self._cache[depth]
