"""Exact samplers of the laws a law simulation draws from, for any population size.

A law simulation (``run.simulation = "law"``) draws a round's aggregate from
its exact distribution given how many users hold each item, without drawing
a single user.  What it needs beyond numpy's own samplers:

* **Hypergeometric draws of any total.**  numpy refuses totals of
  :data:`NUMPY_TOTAL_LIMIT` (10^9) or more.  Above it
  :func:`multivariate_hypergeometric` thins: every one of the ``N`` objects
  is selected independently with a probability ``π`` a little above
  ``draws / N`` (one binomial per class), a draw that selects fewer than
  ``draws`` is drawn again, and the surplus ``S - draws`` is removed by
  choosing that many of the ``S`` selected uniformly without replacement
  and counting them per class (a surplus larger than the classes by the
  same sampler: a uniform subset of the selected).  Why it is exact: given their number ``S``,
  the selected objects are a uniform ``S``-subset (independent selection
  treats every object alike), and a uniform subset of a uniform subset is
  uniform, so the kept objects are a uniform ``draws``-subset, whose counts
  per class are the multivariate hypergeometric law.  ``π`` is set
  :data:`THINNING_MARGIN_SD` standard deviations above the mean, so a
  redraw happens about once in 10^9 calls and the surplus is a few times
  ``sqrt(draws)``: cost O(classes + sqrt(draws)).
* **Fair coins** (:func:`fair_binomial`): ``Binomial(N, 1/2)`` is the number
  of ones among ``N`` random bits, so up to 64 trials it is the popcount of
  one random word masked to ``N`` bits, up to 4,096 the sum of a few words' (exact, and an order of magnitude
  cheaper than numpy's binomial, which sets its sampler up again for every
  new ``N``); larger ``N`` go to numpy.
* **How many of a keyed uniform subset fall in a range** (:func:`subset_count`):
  TrieHH samples ``m`` of ``n`` users a round; a shard needs only how many
  of its own users are sampled, and every shard must agree on one sample.
  The sample is defined top-down on the binary tree of id ranges: a node
  ``[lo, hi)`` holding ``k`` sampled ids gives its left half a
  hypergeometric number of them, drawn from a generator keyed by
  ``(key, lo, hi)``.  That is a uniform ``m``-subset (a uniform subset's
  split between two halves is hypergeometric, and given the split each half
  holds a uniform subset of its own), and the count in ``[start, stop)``
  needs only the nodes on the paths to ``start`` and ``stop``: O(log n)
  draws, the same whichever shard asks.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .randomness import derive_key

NUMPY_TOTAL_LIMIT = 10**9  # numpy's hypergeometric samplers need totals below this
THINNING_MARGIN_SD = 6.0  # the thinning selects this many standard deviations more than it keeps
_THINNING_SLACK = 16  # and this many more objects, for tiny draws
_CHOSEN_SURPLUS_MAX = 1 << 16  # a larger surplus is removed by one more hypergeometric draw, not one by one


def multivariate_hypergeometric(rng: np.random.Generator, colors: np.ndarray, draws: int) -> np.ndarray:
    """How many of each class a uniform ``draws``-subset of the objects holds (``colors[c]``
    objects of class ``c``): numpy's marginals method below :data:`NUMPY_TOTAL_LIMIT` objects,
    exact thinning above it (module docstring).  int64, the shape of ``colors``."""
    colors = np.asarray(colors, dtype=np.int64)
    total = int(colors.sum())
    if colors.size and int(colors.min()) < 0:
        raise ValueError("colors must be >= 0")
    if not 0 <= draws <= total:
        raise ValueError(f"draws must be in [0, {total}], got {draws}")
    if draws == 0:
        return np.zeros_like(colors)
    if draws == total:
        return colors.copy()
    if 2 * draws > total:  # the complement is the smaller draw
        return colors - multivariate_hypergeometric(rng, colors, total - draws)
    if total < NUMPY_TOTAL_LIMIT:
        return rng.multivariate_hypergeometric(colors, draws, method="marginals").astype(np.int64)
    return _thinned(rng, colors, total, draws)


def _thinned(rng: np.random.Generator, colors: np.ndarray, total: int, draws: int) -> np.ndarray:
    """:func:`multivariate_hypergeometric` by thinning then removing the surplus."""
    spread = math.sqrt(draws * (1 - draws / total))
    rate = min(1.0, (draws + THINNING_MARGIN_SD * spread + _THINNING_SLACK) / total)
    while True:
        selected = rng.binomial(colors, rate).astype(np.int64)
        chosen = int(selected.sum())
        if chosen >= draws:
            break
    surplus = chosen - draws
    if surplus == 0:
        return selected
    if surplus >= _CHOSEN_SURPLUS_MAX or surplus > colors.size:
        # a uniform surplus-subset of the selected, the same law drawn again: O(classes), cheaper than
        # choosing the surplus one by one when it outnumbers the classes
        return selected - multivariate_hypergeometric(rng, selected, surplus)
    removed = rng.choice(chosen, size=surplus, replace=False)
    classes = np.searchsorted(np.cumsum(selected), removed, side="right")
    return selected - np.bincount(classes, minlength=colors.size).astype(np.int64)


_ALL_BITS = np.uint64(0xFFFF_FFFF_FFFF_FFFF)
_WORD_BITS = 64
FAIR_WORDS_MAX = 64  # from 64 words (4,096 trials) a fair binomial is numpy's: its set-up then costs less
# numpy's bit generators whose raw output is the 64-bit word Generator.integers takes (MT19937's is 32 bits)
_RAW_IS_64_BITS = (np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64)


def fair_binomial(rng: np.random.Generator, trials: np.ndarray) -> np.ndarray:
    """``Binomial(trials, 1/2)`` elementwise (int64, the shape of ``trials``), exactly: the ones among
    ``trials`` random bits, counted a 64-bit word at a time up to :data:`FAIR_WORDS_MAX` words,
    numpy's sampler above (module docstring).  The draws, in order: one word per cell, then ``w``
    words per cell of ``w`` words (the cells of 2 words in cell order, then of 3, ...), then numpy's
    binomials of the cells of more trials, in cell order."""
    trials = np.asarray(trials, dtype=np.int64)
    words = random_words(rng, trials.shape)
    few = trials <= _WORD_BITS
    shift = (_WORD_BITS - np.clip(trials, 1, _WORD_BITS)).astype(np.uint64)
    words &= np.where(few & (trials > 0), _ALL_BITS >> shift, np.uint64(0))
    ones = np.bitwise_count(words).astype(np.int64)
    more = np.flatnonzero(~few)
    if more.size:
        many = trials.flat[more]
        needed = (many + _WORD_BITS - 1) // _WORD_BITS
        counted = np.zeros(more.size, dtype=np.int64)
        for width in np.unique(needed[needed <= FAIR_WORDS_MAX]).tolist():
            cells = np.flatnonzero(needed == width)
            block = random_words(rng, (cells.size, width))
            left = (many[cells] - (width - 1) * _WORD_BITS).astype(np.uint64)  # bits of the last word, 1..64
            block[:, -1] &= _ALL_BITS >> (np.uint64(_WORD_BITS) - left)
            counted[cells] = np.bitwise_count(block).sum(axis=1, dtype=np.int64)
        above = np.flatnonzero(needed > FAIR_WORDS_MAX)
        counted[above] = rng.binomial(many[above], 0.5)
        ones.flat[more] = counted
    return ones


def fair_draws(
    rng: np.random.Generator, trials: np.ndarray, word_counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What :func:`fair_binomial` draws for ``trials`` (flat), in its order, left to count: a word per
    cell; the words of the cells of 2 to :data:`FAIR_WORDS_MAX` words as one array (the cells of
    ``w`` words from ``starts[w]``); the larger cells' binomials.  ``word_counts[w]``: how many
    cells fill ``w`` words (``FAIR_WORDS_MAX + 2`` entries, the last: more than the others).
    Returns ``(words, block, starts, above)``."""
    words = random_words(rng, trials.size)
    block_words = word_counts[: FAIR_WORDS_MAX + 1] * np.arange(FAIR_WORDS_MAX + 1)
    starts = np.cumsum(block_words) - block_words
    block = random_words(rng, int(block_words.sum()))
    if word_counts[-1]:
        above = rng.binomial(trials[trials > FAIR_WORDS_MAX * _WORD_BITS], 0.5).astype(np.int64)
    else:
        above = np.zeros(0, dtype=np.int64)
    return words, block, starts, above


def random_words(rng: np.random.Generator, shape: int | tuple[int, ...]) -> np.ndarray:
    """Uniform 64-bit words, ``rng.integers(0, 2**64 - 1, shape, uint64, endpoint=True)``: the bit
    generator's next 64-bit outputs, read raw where they are its raw outputs (twice as fast)."""
    if isinstance(rng.bit_generator, _RAW_IS_64_BITS):
        return rng.bit_generator.random_raw(shape)
    return rng.integers(0, _ALL_BITS, size=shape, dtype=np.uint64, endpoint=True)


def hypergeometric(rng: np.random.Generator, good: int, bad: int, draws: int) -> int:
    """How many of ``good`` objects a uniform ``draws``-subset of ``good + bad`` holds, for any total."""
    if good < NUMPY_TOTAL_LIMIT and bad < NUMPY_TOTAL_LIMIT and 0 < draws < good + bad:
        return int(rng.hypergeometric(good, bad, draws))
    return int(multivariate_hypergeometric(rng, np.array([good, bad]), draws)[0])


def subset_count(key: np.uint64, population: int, size: int, start: int, stop: int) -> int:
    """How many ids of the uniform ``size``-subset of ``range(population)`` that ``key`` names
    lie in ``[start, stop)`` (module docstring: the same subset for every range asked)."""
    if not 0 <= size <= population:
        raise ValueError(f"size must be in [0, population = {population}], got {size}")
    if not 0 <= start <= stop <= population:
        raise ValueError(f"range [{start}, {stop}) is not inside [0, {population})")
    return _count_below(key, population, size, stop) - _count_below(key, population, size, start)


def _count_below(key: np.uint64, population: int, size: int, position: int) -> int:
    """How many ids of the keyed subset are below ``position``: a walk down the tree of ranges."""
    low, high, held, below = 0, population, size, 0
    while held and low < position < high:
        middle = (low + high) // 2
        left = _left_share(int(key), low, middle, high, held)
        if position >= middle:
            below += left
            low, held = middle, held - left
        else:
            high, held = middle, left
    return below + (held if position >= high else 0)


@functools.lru_cache(maxsize=4096)
def _left_share(key: int, low: int, middle: int, high: int, held: int) -> int:
    """The sampled ids of node ``[low, high)`` (``held`` of them) in its left half ``[low, middle)``.

    Kept: the shards of one process walk the same top of the tree."""
    rng = np.random.default_rng(int(derive_key(key, "subset-split", low, high)))
    return hypergeometric(rng, middle - low, high - middle, held)
