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
    """Add sparse histograms given as (rows, int64 counts) pairs.

    Returns the distinct rows in the order of their keys with summed counts,
    added in integers (counts beyond 2**53 stay exact); the result does not
    depend on how the rows were split into parts.
    """
    kept = [(rows, counts) for rows, counts in parts if rows.shape[0]]
    if not kept:
        return np.zeros((0, width), dtype=np.int64), np.zeros(0, dtype=np.int64)
    rows = np.concatenate([r for r, _ in kept]).astype(np.int64)
    counts = np.concatenate([c for _, c in kept]).astype(np.int64)
    keys = row_keys(rows)
    order = np.argsort(keys, kind="stable")
    starts = np.flatnonzero(np.r_[True, keys[order][1:] != keys[order][:-1]])
    return rows[order[starts]], np.add.reduceat(counts[order], starts)


class PrefixIndex:
    """Per depth, the distinct prefixes of a set of item rows.

    ``at(d)`` returns ``(prefix_rows, item_to_prefix)``: the distinct
    depth-``d`` prefixes in the order of their :func:`row_keys`, and for
    every item the index of its prefix, or ``-1`` for an item that ended
    before depth ``d`` (no symbol there).

    Why one sort serves every depth: ordered by their keys (bytewise), rows
    that share their first ``d`` symbols are neighbours, and their groups
    come in the key order of those prefixes.  So the rows are sorted once,
    each neighbour pair's first differing symbol is noted, and a depth's
    prefixes are the runs of rows that agree on their first ``d`` symbols:
    a few passes over the items per depth instead of a sort per depth.
    """

    def __init__(self, rows: np.ndarray, key_order: np.ndarray | None = None) -> None:
        """``key_order``: the row indices ordered by :func:`row_keys`, when the caller has sorted
        them already (:meth:`fedhh.data.population.Vocabulary.encode` does, to find distinct rows)."""
        self._rows = np.ascontiguousarray(rows, dtype=np.int64)
        if self._rows.ndim != 2:
            raise ValueError(f"item rows must be 2-D, got shape {self._rows.shape}")
        if key_order is not None and key_order.shape != (self._rows.shape[0],):
            raise ValueError(f"key_order must order the {self._rows.shape[0]} rows, got shape {key_order.shape}")
        self._key_order = key_order
        self._levels: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # rows, item map, parent ids
        self._sorted: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # order, sorted rows, first difference
        self._extending: tuple[int, np.ndarray, tuple[np.ndarray, np.ndarray]] | None = None  # the last answer

    @property
    def max_depth(self) -> int:
        return int(self._rows.shape[1])

    def build_all(self) -> None:
        """Build every depth now (placement time) rather than in the first rounds."""
        for depth in range(1, self.max_depth + 1):
            self.at(depth)

    def at(self, depth: int) -> tuple[np.ndarray, np.ndarray]:
        prefix_rows, item_to_prefix, _ = self._level(depth)
        return prefix_rows, item_to_prefix

    def extending(self, depth: int, parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The depth-``depth`` prefixes that extend one of ``parents`` (depth ``depth - 1`` rows;
        at depth 1 every prefix), and per depth-``depth`` prefix id its index among them.

        Returns ``(candidate_rows, candidate_of_prefix)``: the candidates in
        key order, and an array of ``P + 1`` entries (``P`` prefixes at this
        depth) giving each prefix's candidate index or ``-1``; its last entry
        is ``-1``, so that indexing it with :meth:`at`'s ``-1`` (an item with
        no symbol at this depth) gives ``-1`` too.  The last answer is kept:
        every shard held by a process asks the same question each round.
        """
        parents = np.asarray(parents)
        if depth > 1 and (parents.ndim != 2 or parents.shape[1] != depth - 1):
            raise ValueError(
                f"parents of depth-{depth} prefixes must be rows of {depth - 1} symbols, got shape {parents.shape}"
            )
        last = self._extending
        if last is not None and last[0] == depth and (depth == 1 or np.array_equal(last[1], parents)):
            return last[2]
        prefix_rows, _, parent_of = self._level(depth)
        if depth == 1:
            candidates = np.arange(prefix_rows.shape[0])
        else:
            parent_keys = row_keys(self._level(depth - 1)[0])
            asked = row_keys(parents)
            position = np.minimum(np.searchsorted(parent_keys, asked), max(parent_keys.size - 1, 0))
            allowed = np.zeros(parent_keys.size + 1, dtype=bool)  # the last entry: no parent (-1)
            if parent_keys.size:
                allowed[position[parent_keys[position] == asked]] = True
            candidates = np.flatnonzero(allowed[parent_of])
        candidate_of_prefix = np.full(prefix_rows.shape[0] + 1, -1, dtype=np.int64)
        candidate_of_prefix[candidates] = np.arange(candidates.size)
        answer = (prefix_rows[candidates], candidate_of_prefix)
        self._extending = (depth, parents.copy(), answer)
        return answer

    def _sorted_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The rows in key order (with that order), and for each row the first symbol where it
        differs from the previous row (``max_depth`` for an equal row; 0 for the first row)."""
        if self._sorted is None:
            order = self._key_order if self._key_order is not None else np.argsort(row_keys(self._rows))
            rows = self._rows[order]
            differs = rows[1:] != rows[:-1]
            first_difference = np.zeros(rows.shape[0], dtype=np.int64)
            first_difference[1:] = np.where(differs.any(axis=1), differs.argmax(axis=1), self.max_depth)
            self._sorted = (order, rows, first_difference)
        return self._sorted

    def _level(self, depth: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Depth ``depth``'s prefix rows, item-to-prefix map, and each prefix's depth-``depth - 1``
        prefix id (0 at depth 1: the empty prefix)."""
        if not 1 <= depth <= self.max_depth:
            raise ValueError(f"depth must be in 1..{self.max_depth}, got {depth}")
        if depth not in self._levels:
            order, rows, first_difference = self._sorted_rows()
            starts = np.flatnonzero(first_difference < depth)  # the first row of each group (row 0's is 0)
            group_sizes = np.diff(np.append(starts, rows.shape[0]))
            has_symbol = rows[starts, depth - 1] != PAD  # shared by a group: its rows agree up to depth
            prefix_of_group = np.where(has_symbol, np.cumsum(has_symbol) - 1, -1)
            item_to_prefix = np.empty(rows.shape[0], dtype=np.int64)
            item_to_prefix[order] = np.repeat(prefix_of_group, group_sizes)
            first_rows = starts[has_symbol]
            prefix_rows = np.ascontiguousarray(rows[first_rows, :depth])
            if depth == 1:
                parent_of = np.zeros(first_rows.size, dtype=np.int64)
            else:
                parent_of = self._level(depth - 1)[1][order[first_rows]]
            self._levels[depth] = (prefix_rows, item_to_prefix, parent_of)
            if len(self._levels) == self.max_depth:
                self._sorted = None  # every depth built: the sorted copy of the rows is not needed again
        return self._levels[depth]
