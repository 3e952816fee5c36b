"""Bytes of eight independent Bernoulli bits, sampled exactly from 16 random bits (rarely more).

Why: a randomiser that sets each bit with probability ``T / 2^32`` (``T`` an
integer threshold, :func:`fedhh.oracles.unary.word_thresholds`) by comparing
a fresh 32-bit uniform per bit spends 32 random bits per bit, although such a
bit carries under one bit of entropy; drawing those words dominated RAPPOR's
cost.  Here a byte of eight such bits costs one 16-bit draw, with exactly the
same law.

The law: byte ``v`` (bit ``i`` of the report = bit ``i`` of ``v``, least
significant first) has probability ``P(v) = Π_i (T if bit i of v is set else
2^32 - T) / 2^256``, the product of eight independent bits, each set with
probability ``T / 2^32``.

Inversion: with ``F_v = P(0) + ... + P(v - 1)`` (``F_0 = 0``, ``F_256 = 1``)
and ``U`` uniform on ``[0, 1)``, the byte ``v`` with ``F_v <= U < F_(v+1)``
has law ``P``.  ``U`` is read 16 bits first, its cell ``[c, c + 1) / 2^16``:
where no ``F_v`` lies strictly inside the cell, ``c`` decides the byte (a
table of 65,536 entries).  The 255 cut points ``F_1 .. F_255`` leave at most
255 cells undecided; there the next 256 bits of ``U`` (four 64-bit
refinement words, most significant first) decide exactly, since every
``F_v`` is a multiple of ``2^-256``: ``F_v <= U`` if and only if ``F_v``'s
256 bits within the cell are at most the refinement's.

The 16-bit draw ``d`` names the cell through a fixed permutation (a uniform
draw either way): the decided cells in increasing order, then the undecided
ones, so that every undecided cell has a draw of at least ``0xFF00``.  A
draw below ``0xFF00`` is one table look-up; one from ``0xFF00`` on (1 in 256)
is refined, whether its cell is undecided or not.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

THRESHOLD_BITS = 32  # a bit is set with probability threshold / 2^32
BYTE_BITS = 8  # bits sampled together
INDEX_BITS = 16  # random bits read first, the table's index
REFINEMENT_WORDS = 4  # 64-bit words read after them where they do not decide: 256 bits
_FRACTION_BITS = BYTE_BITS * THRESHOLD_BITS - INDEX_BITS  # bits of a cut point below its cell: 240
REFINED_FROM = 0xFF00  # draws from here on are refined: every undecided cell is among them
LOOKUPS_PER_CHUNK = 1 << 15  # table look-ups per numpy call: 256 KiB of intp indices
_WORD = (1 << 64) - 1

Refine = Callable[[np.ndarray], np.ndarray]
"""Refinement words: given the flat positions (into the draws) of the draws from
:data:`REFINED_FROM` on, ``(k, 4)`` uniform uint64 words for them, most significant first,
independent of the draws and drawn for those positions only."""


def byte_probabilities(threshold: int) -> list[int]:
    """``P(v) 2^256`` for ``v = 0 .. 255``: exact integers (module docstring)."""
    if not 0 <= threshold <= 1 << THRESHOLD_BITS:
        raise ValueError(f"threshold must be in 0..2^32, got {threshold}")
    one, zero = threshold, (1 << THRESHOLD_BITS) - threshold
    return [
        functools.reduce(lambda product, i: product * (one if value >> i & 1 else zero), range(BYTE_BITS), 1)
        for value in range(1 << BYTE_BITS)
    ]


@dataclass(frozen=True)
class _Inversion:
    """The cut points ``F_1 .. F_255`` split into their cell and their 256 bits below it, and the table."""

    table: np.ndarray  # (2^16,) uint8: by draw, the byte at its cell's start
    cell_of_draw: np.ndarray  # (2^16,) int64: the cell a draw names
    cells: np.ndarray  # (255,) int64: cell of F_v, v = 1 .. 255 (nondecreasing)
    fractions: np.ndarray  # (255, 4) uint64: F_v's 256 bits below its cell, most significant word first
    most_per_cell: int  # cut points in the fullest cell


@functools.lru_cache(maxsize=8)
def _inversion(threshold: int) -> _Inversion:
    cuts: list[int] = []
    total = 0
    for probability in byte_probabilities(threshold)[:-1]:
        total += probability
        cuts.append(total)
    cells = np.array([cut >> _FRACTION_BITS for cut in cuts], dtype=np.int64)
    shifted = [(cut & ((1 << _FRACTION_BITS) - 1)) << (REFINEMENT_WORDS * 64 - _FRACTION_BITS) for cut in cuts]
    fractions = np.array(
        [[(f >> (64 * (REFINEMENT_WORDS - 1 - w))) & _WORD for w in range(REFINEMENT_WORDS)] for f in shifted],
        dtype=np.uint64,
    )
    inside = np.array([f != 0 for f in shifted])
    # F_v <= a cell's start exactly when F_v's cell is earlier, or the same with nothing below it
    reached = np.sort(cells + inside)
    start_value = np.searchsorted(reached, np.arange(1 << INDEX_BITS), side="right").astype(np.uint8)
    undecided = np.zeros(1 << INDEX_BITS, dtype=bool)
    undecided[cells[inside]] = True
    cell_of_draw = np.argsort(undecided, kind="stable")  # decided cells first, then the undecided
    assert not undecided[cell_of_draw[:REFINED_FROM]].any()
    return _Inversion(start_value[cell_of_draw], cell_of_draw, cells, fractions, int(np.bincount(cells).max()))


@dataclass(frozen=True)
class BernoulliBytes:
    """Bytes whose eight bits are independent, each set with probability ``threshold / 2^32``."""

    threshold: int

    def sample(self, draws: np.ndarray, refine: Refine) -> np.ndarray:
        """One byte per uniform 16-bit draw (any shape), ``refine`` asked once for the draws from
        :data:`REFINED_FROM` on."""
        inversion = _inversion(self.threshold)
        values = np.empty(draws.shape, dtype=np.uint8)
        flat_draws, flat_values = draws.reshape(-1), values.reshape(-1)
        for first in range(0, flat_draws.size, LOOKUPS_PER_CHUNK):  # intp indices that stay in cache
            chunk = slice(first, first + LOOKUPS_PER_CHUNK)
            inversion.table.take(flat_draws[chunk].astype(np.intp), out=flat_values[chunk])
        refined = np.flatnonzero(draws >= REFINED_FROM)
        if refined.size:
            cells = inversion.cell_of_draw[draws[np.unravel_index(refined, draws.shape)]]
            values.ravel()[refined] = self.resolve(cells, np.asarray(refine(refined), dtype=np.uint64))
        return values

    def resolve(self, cells: np.ndarray, refinements: np.ndarray) -> np.ndarray:
        """The byte of each ``U = (cell + refinement / 2^256 + ...) / 2^16``: the number of cut points ``<= U``.

        Every cut point of an earlier cell counts; one of the same cell counts
        when its 256 bits are at most the refinement's (compared word by word,
        the first differing word deciding), whatever bits of ``U`` follow.
        """
        inversion = _inversion(self.threshold)
        first = np.searchsorted(inversion.cells, cells, side="left")  # cut points of earlier cells
        values = first.copy()
        last = inversion.cells.size - 1
        for offset in range(inversion.most_per_cell):  # a handful
            index = np.minimum(first + offset, last)
            same_cell = (first + offset <= last) & (inversion.cells[index] == cells)
            values += same_cell & not_above(inversion.fractions[index], refinements)
        return values.astype(np.uint8)


def not_above(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Row-wise ``left <= right`` of multi-word unsigned numbers, most significant word first."""
    differ = left != right
    first = np.argmax(differ, axis=1)
    rows = np.arange(left.shape[0])
    return ~differ.any(axis=1) | (left[rows, first] < right[rows, first])
