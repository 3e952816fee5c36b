"""Sparse additive counts keyed by 64-bit values.

The server-side statistics of several oracles are "how many reports said
``k``" over an index space that may be 2**64 wide (direct encoding's reported
values, Hadamard response's output indices, the Hadamard mechanism's signed
coefficient sums).  Storing only the keys that occur keeps a shard's
statistics as small as its reports while staying additive: the histogram of a
population is the ``+`` of its shards' histograms.  It also describes a true
population (``truth`` in the variance formulas).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass

import numpy as np

_DENSE_LIMIT = 1 << 24


@dataclass(frozen=True)
class Histogram:
    """Counts of distinct uint64 keys: ``keys`` sorted and unique, ``counts`` int64."""

    keys: np.ndarray
    counts: np.ndarray

    def __post_init__(self) -> None:
        keys = np.asarray(self.keys, dtype=np.uint64)
        counts = np.asarray(self.counts, dtype=np.int64)
        if keys.ndim != 1 or counts.shape != keys.shape:
            raise ValueError(
                f"Histogram: keys and counts must be 1-D of equal length, got shapes {keys.shape} and {counts.shape}"
            )
        if keys.size > 1 and not np.all(keys[1:] > keys[:-1]):
            raise ValueError("Histogram: keys must be sorted and unique")
        object.__setattr__(self, "keys", keys)
        object.__setattr__(self, "counts", counts)

    @classmethod
    def empty(cls) -> Histogram:
        return cls(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64))

    @classmethod
    def of(cls, keys: np.ndarray, weights: np.ndarray | None = None, bound: int | None = None) -> Histogram:
        """Count (or sum ``weights`` over) each distinct key.

        ``bound``, when known and small, lets a bincount replace the sort.
        """
        keys = np.asarray(keys, dtype=np.uint64).ravel()
        if weights is not None:
            weights = np.asarray(weights, dtype=np.int64).ravel()
        if bound is not None and bound <= _DENSE_LIMIT:
            dense = np.bincount(keys.astype(np.intp), weights=weights, minlength=bound)
            return cls.from_dense(np.rint(dense).astype(np.int64) if weights is not None else dense)
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]]) if keys.size else np.zeros(0, np.intp)
        if weights is None:
            counts = np.diff(np.r_[starts, keys.size])
        else:
            counts = np.add.reduceat(weights[order], starts) if keys.size else np.zeros(0, np.int64)
        return cls(sorted_keys[starts], counts)

    @classmethod
    def from_dense(cls, dense: np.ndarray) -> Histogram:
        """Histogram of the non-zero entries of a dense count vector indexed by key."""
        dense = np.asarray(dense, dtype=np.int64)
        keys = np.flatnonzero(dense)
        # flatnonzero's keys are sorted and unique: skip the checks of __post_init__ (sketches build
        # one histogram per row and block)
        histogram = object.__new__(cls)
        object.__setattr__(histogram, "keys", keys.astype(np.uint64))
        object.__setattr__(histogram, "counts", dense[keys])
        return histogram

    @classmethod
    def of_owned_dense(cls, dense: np.ndarray) -> Histogram:
        """:meth:`from_dense` of a count vector the caller hands over (never writes it again): its
        keys and counts are found only when read, and :meth:`to_dense` of its own size copies it.
        An oracle's shard statistics (one per sketch row and group) are mostly flattened back to
        dense cells straight away, so the round trip through keys and counts is skipped."""
        return _DenseHistogram._of(np.asarray(dense, dtype=np.int64))

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def __add__(self, other: Histogram) -> Histogram:
        if not isinstance(other, Histogram):
            return NotImplemented
        return Histogram.of(np.r_[self.keys, other.keys], np.r_[self.counts, other.counts])

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Counts of the given keys (0 for keys never seen)."""
        keys = np.asarray(keys, dtype=np.uint64)
        if self.keys.size == 0:
            return np.zeros(keys.shape, dtype=np.int64)
        positions = np.minimum(np.searchsorted(self.keys, keys), self.keys.size - 1)
        return np.where(self.keys[positions] == keys, self.counts[positions], 0)

    def to_dense(self, size: int) -> np.ndarray:
        """Counts indexed by key for keys below ``size`` (all keys must be)."""
        if self.keys.size and int(self.keys[-1]) >= size:
            raise ValueError(f"Histogram.to_dense: key {int(self.keys[-1])} does not fit size {size}")
        dense = np.zeros(size, dtype=np.int64)
        dense[self.keys.astype(np.intp)] = self.counts
        return dense

    def sum_of_squares(self) -> float:
        """``sum_k count_k ** 2``, the collision mass that hashing variance depends on."""
        return float(np.sum(self.counts.astype(np.float64) ** 2))


class _DenseHistogram(Histogram):
    """A :class:`Histogram` held as the dense count vector it was made of (:meth:`Histogram.of_owned_dense`):
    ``keys`` and ``counts`` are those :meth:`Histogram.from_dense` would give, found on first read."""

    _dense: np.ndarray
    _sparse: Histogram | None

    @classmethod
    def _of(cls, dense: np.ndarray) -> _DenseHistogram:
        histogram = object.__new__(cls)
        object.__setattr__(histogram, "_dense", dense)
        object.__setattr__(histogram, "_sparse", None)
        return histogram

    def _keys_and_counts(self) -> Histogram:
        if self._sparse is None:
            object.__setattr__(self, "_sparse", Histogram.from_dense(self._dense))
        return typing.cast(Histogram, self._sparse)

    @property
    def keys(self) -> np.ndarray:
        return self._keys_and_counts().keys

    @property
    def counts(self) -> np.ndarray:
        return self._keys_and_counts().counts

    @property
    def total(self) -> int:
        return int(self._dense.sum())

    def to_dense(self, size: int) -> np.ndarray:
        if size == self._dense.shape[0]:
            return self._dense.copy()
        return super().to_dense(size)
