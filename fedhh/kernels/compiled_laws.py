"""A Hadamard row's bit split with its fair coins counted in place, as compiled loops.

:func:`fedhh.oracles.laws.hadamard_row_sums` moves every cell's reporters
one bit at a time, each cell's ones a fair binomial
(:func:`fedhh.kernels.laws.fair_binomial`); in numpy a bit is two dozen
passes over the cells (masks, shifts, a where, index lists per word
count, the split), each a trip through memory.  :func:`split_row_bit`
counts every cell's ones and splits it in one pass, from the words
:func:`fedhh.kernels.laws.fair_draws` drew in ``fair_binomial``'s
order, and counts the next bit's words as it goes
(:func:`count_cell_words` starts the count): the same integers, so every
sum equals the numpy path's bit for bit (``FEDHH_NUMBA`` chooses,
:mod:`fedhh.oracles.numba_setting`; the numpy path is the fallback and the
tests' reference).

Importing this module imports numba; :mod:`fedhh.oracles.laws` does so
only when a law needs it.  The loops start no threads and release the GIL;
their machine code is cached on disk (:func:`fedhh.kernels.compiled.compile_cached`).
"""

from __future__ import annotations

import numba
import numpy as np

from .compiled import compile_cached

_WORD_BITS = 64
_ALL_BITS = np.uint64(0xFFFF_FFFF_FFFF_FFFF)


@numba.njit(nogil=True, inline="always")
def _ones(word: np.uint64) -> np.int64:
    """The set bits of a 64-bit word (the branch-free count LLVM turns into one instruction)."""
    word = word - ((word >> np.uint64(1)) & np.uint64(0x5555_5555_5555_5555))
    word = (word & np.uint64(0x3333_3333_3333_3333)) + ((word >> np.uint64(2)) & np.uint64(0x3333_3333_3333_3333))
    word = (word + (word >> np.uint64(4))) & np.uint64(0x0F0F_0F0F_0F0F_0F0F)
    return np.int64((word * np.uint64(0x0101_0101_0101_0101)) >> np.uint64(56))


@numba.njit(nogil=True, inline="always")
def _low_ones(word: np.uint64, bits: int) -> np.int64:
    """The set bits among the ``bits`` (0..64) lowest of ``word``."""
    mask = _ALL_BITS >> np.uint64(_WORD_BITS - bits) if bits > 0 else np.uint64(0)
    return _ones(word & mask)


@numba.njit(nogil=True, inline="always")
def _tally(count: int, word_counts: np.ndarray) -> None:
    """Adds a cell of ``count`` trials to ``word_counts[w]`` when it fills ``w >= 2`` words (the last
    entry: every ``w`` beyond the others)."""
    if count > _WORD_BITS:
        word_counts[min((count + _WORD_BITS - 1) // _WORD_BITS, word_counts.size - 1)] += 1


@compile_cached
def count_cell_words(trials: np.ndarray, word_counts: np.ndarray) -> None:
    """``word_counts[w]``: how many cells of ``trials`` fill ``w >= 2`` words (zeroed first)."""
    word_counts[:] = 0
    for i in range(trials.size):
        _tally(trials[i], word_counts)


@compile_cached
def split_row_bit(
    state: np.ndarray,
    words: np.ndarray,
    block: np.ndarray,
    starts: np.ndarray,
    above: np.ndarray,
    inner: int,
    ones: np.ndarray,
    word_counts: np.ndarray,
) -> None:
    """One bit of :func:`fedhh.oracles.laws.hadamard_row_sums`, in place, on ``state`` laid out
    ``[outer, bit, inner, sign]`` (flat): each cell's ones drawn as :func:`fedhh.kernels.laws.fair_binomial` draws
    them (``words``: one per cell; ``block``: the cells of ``w`` words, ``w`` ascending, from
    ``starts[w]``; ``above``: the larger cells' binomials, in cell order); the reporters who
    drew a zero stay at bit 0, those who drew a one go to bit 1, their sign flipped where the
    column's bit was set.  ``ones``: scratch of ``4 inner`` cells; ``word_counts``: the new
    state's, for the next bit (:func:`count_cell_words`)."""
    next_word = starts.copy()
    widest = starts.size - 1
    next_above = 0
    half = 2 * inner
    span = 2 * half
    word_counts[:] = 0
    for first in range(0, state.size, span):
        for k in range(span):  # the cells' ones, in cell order: the order of the draws
            count = state[first + k]
            if count <= _WORD_BITS:
                ones[k] = _low_ones(words[first + k], max(count, 0))
                continue
            width = (count + _WORD_BITS - 1) // _WORD_BITS
            if width > widest:
                ones[k] = above[next_above]
                next_above += 1
                continue
            at = next_word[width]
            next_word[width] = at + width
            total = _low_ones(block[at + width - 1], count - (width - 1) * _WORD_BITS)
            for j in range(at, at + width - 1):
                total += _ones(block[j])
            ones[k] = total
        for low in range(0, half, 2):
            i0, i1 = first + low, first + half + low
            zero_plus = state[i0] - ones[low] + state[i1] - ones[half + low]
            zero_minus = state[i0 + 1] - ones[low + 1] + state[i1 + 1] - ones[half + low + 1]
            one_plus = ones[low] + ones[half + low + 1]
            one_minus = ones[low + 1] + ones[half + low]
            state[i0], state[i0 + 1], state[i1], state[i1 + 1] = zero_plus, zero_minus, one_plus, one_minus
            _tally(zero_plus, word_counts)
            _tally(zero_minus, word_counts)
            _tally(one_plus, word_counts)
            _tally(one_minus, word_counts)
