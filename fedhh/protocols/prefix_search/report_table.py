"""Oracle reports as rows of one integer table, so a one-shot collection travels like any response.

In the non-interactive mode every user sends its reports before the server
knows any candidate, so a shard must hand over the reports themselves (for
OLH there is no smaller sufficient statistic).  Each oracle has its own
report class -- frozen dataclasses of per-user arrays, some nested (a
sketch's inner reports) or two-dimensional (HM's sampled indices) -- so they
are flattened generically: every per-user column becomes a ``uint64``
column, and a template report of the same oracle says how to rebuild the
object.  A set of reports is kept as its distinct rows with counts, which
is additive (counts of equal rows add) and canonical (rows sorted), so
shards combine in any order to the same table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np


def columns_of(reports: Any) -> list[np.ndarray]:
    """The per-user columns of a report object, in field order (nested fields inline)."""
    columns: list[np.ndarray] = []
    for field in dataclasses.fields(reports):
        value = getattr(reports, field.name)
        if dataclasses.is_dataclass(value):
            columns.extend(columns_of(value))
        else:
            array = np.asarray(value)
            columns.extend([array] if array.ndim == 1 else list(array.T))
    return columns


def to_table(reports: Any) -> np.ndarray:
    """Reports as a ``(users, columns)`` uint64 table."""
    columns = columns_of(reports)
    if not columns:
        raise ValueError(f"{type(reports).__name__} has no per-user arrays")
    return np.stack([column.astype(np.uint64) for column in columns], axis=1)


def from_table(table: np.ndarray, template: Any) -> Any:
    """Rebuild reports of ``template``'s type and layout from table rows."""
    rebuilt, used = _rebuild(table, template, 0)
    if used != table.shape[1]:
        raise ValueError(f"report table has {table.shape[1]} columns, {type(template).__name__} needs {used}")
    return rebuilt


def _rebuild(table: np.ndarray, template: Any, first: int) -> tuple[Any, int]:
    values: dict[str, Any] = {}
    column = first
    for field in dataclasses.fields(template):
        value = getattr(template, field.name)
        if dataclasses.is_dataclass(value):
            values[field.name], column = _rebuild(table, value, column)
            continue
        array = np.asarray(value)
        width = 1 if array.ndim == 1 else array.shape[1]
        part = table[:, column : column + width].astype(array.dtype)
        values[field.name] = part[:, 0] if array.ndim == 1 else part
        column += width
    return type(template)(**values), column


def distinct_rows(table: np.ndarray, counts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct rows of ``table`` and how many times each occurs (weighted by ``counts``)."""
    if table.shape[0] == 0:
        return table.reshape(0, table.shape[1]), np.zeros(0, dtype=np.int64)
    rows, inverse = np.unique(table, axis=0, return_inverse=True)
    weights = np.ones(table.shape[0], dtype=np.int64) if counts is None else counts
    totals = np.bincount(inverse.ravel(), weights=weights, minlength=rows.shape[0])
    return rows, np.rint(totals).astype(np.int64)


def merge_tables(tables: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The distinct-row table of the union of several (rows, counts) tables."""
    rows = np.concatenate([rows for rows, _ in tables])
    counts = np.concatenate([counts for _, counts in tables])
    return distinct_rows(rows, counts)


def expand(rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """One row per report again (order is irrelevant: every oracle's statistics are sums)."""
    return np.repeat(rows, counts, axis=0)
