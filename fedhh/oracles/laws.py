"""The law of an oracle's aggregate given how many reporters hold each value.

A law simulation (:mod:`fedhh.protocols.law`) never draws a user's report:
given ``counts[i]`` reporters holding ``values[i]``, it draws the sum of
their reports directly, in the form a shard sends it:

* :func:`statistics_law`: the oracle's statistics (its flat form is what a
  shard sends for most oracles);
* :func:`support_law`: the candidates' support counts (OLH, whose
  statistics are the reports themselves; a sketch of unary rows over few
  candidates).

Both have exactly the law of ``aggregate(randomize(values repeated))``
(resp. its support): the users' reports are independent given their
values, and each law below is derived from one user's report.  What each
oracle's law rests on:

* **OLH, BLH** (:func:`_independent_support`): a report ``(seed, y)``
  supports candidate ``c`` when ``H_seed(c) = y``.  For an *ideal* random
  hash, given ``y`` the values ``H(c)`` of the other candidates are
  independent uniforms, so a report's supports of distinct candidates are
  independent: its own value with probability ``p``, every other with
  ``1/g``.  Support counts are then independent ``Binomial(n_c, p) +
  Binomial(n - n_c, 1/g)``.  The real 32-bit family's collisions deviate
  from ``1/g`` by O(g / 2^32) (:mod:`fedhh.oracles.hashing`): not modelled.
* **Randomised response as a mixture.**  Keeping the true value with
  probability ``p`` and reporting each of the ``k - 1`` others with ``q``
  (``p + (k - 1) q = 1``) is the same as reporting the truth with
  probability ``λ = p - q`` and otherwise a value uniform over all ``k``.
  So a value's truthful reporters are ``Binomial(c_v, λ)`` and everyone
  else reports uniformly: one multinomial over the outputs.  GRR (``k =
  d``), FLH's bucket (``k = g``, the function uniform too), the Hadamard
  bits (``k = 2``: ``λ`` is the bias ``(e^ε - 1)/(e^ε + 1)``) and HM's
  ``t``-bit words (``k = 2^t``) all take this form.
* **Unary encodings**: every bit of every report is independent, so column
  ``v`` is ``Binomial(n_v, p) + Binomial(n - n_v, q)`` independently per
  column (:mod:`fedhh.oracles.unary` samples it so already).
* **A uniform Hadamard row** (:func:`hadamard_row_sums`): a truthful report
  adds ``s W[r, a]`` at a uniform row ``r`` (``a``: its column, ``s``: its
  sign).  The row's bits are independent fair coins, and bit ``b`` of ``r``
  flips the sign exactly when bit ``b`` of ``a`` is set; so the reporters
  of each (word, sign) cell are split bit by bit with ``Binomial(N, 1/2)``,
  the row's bits replacing the column's: ``log2 m`` rounds over ``2m``
  cells, O(m log m) per sketch row, however many reporters.  Hadamard
  response draws its offset the same way, the bit at the lowest set bit of
  the position then fixed by the parity of the bits above it (its
  "positive set").
* **Sketches**: each reporter picks its row uniformly, so a value's
  reporters split ``Multinomial(c_v, 1/k)`` over the rows, and each row is
  the inner oracle's law over the row's symbols.
* **Everything else** (an oracle or a form without a derivation here: OLH's
  statistics, which are its reports; a Hadamard response or GRR whose
  outputs exceed :data:`~fedhh.oracles.base.FLAT_CELLS_LIMIT`): the reports
  are drawn, a block of reporters at a time, from the values repeated
  (:func:`_drawn_statistics`): the same law, at a cost that grows with the
  reporters.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from types import ModuleType

import numpy as np

from ..kernels.laws import FAIR_WORDS_MAX, fair_binomial, fair_draws
from .base import FLAT_CELLS_LIMIT, FrequencyOracle, Support
from .count_sketch_hadamard import CountSketchHadamard, CountSketchHadamardStatistics
from .direct import DirectEncoding, DirectStatistics
from .fast_local_hashing import FastLocalHashing, FastLocalHashStatistics
from .hadamard_mechanism import HadamardMechanism, HadamardMechanismStatistics
from .hadamard_response import HadamardResponse, HadamardResponseStatistics
from .hashing import hash_expanded, mix_keys
from .hashtogram import Hashtogram, HashtogramStatistics
from .histogram import Histogram
from .local_hashing import LocalHashing
from .numba_setting import compiled_module
from .sketches import SketchOracle, SketchStatistics
from .unary import UnaryEncoding, UnaryStatistics

DRAWN_BLOCK = 1 << 16  # reporters whose reports are drawn at once where no law is derived
COMPILED_CELLS = 1 << 15  # (block, word, sign) cells from which Hadamard rows split compiled (FEDHH_NUMBA=auto)


def distinct_values(values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(values, counts)`` with every value once (counts added up) and no zero count."""
    values = np.asarray(values, dtype=np.uint64)
    counts = np.asarray(counts, dtype=np.int64)
    keep = counts > 0
    distinct, inverse = np.unique(values[keep], return_inverse=True)
    summed = np.bincount(inverse, weights=counts[keep].astype(np.float64), minlength=distinct.size)
    return distinct, np.rint(summed).astype(np.int64)


def held_by(values: np.ndarray, counts: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """How many reporters hold each candidate (``values`` sorted and distinct)."""
    position = np.minimum(np.searchsorted(values, candidates), max(values.size - 1, 0))
    found = values[position] == candidates if values.size else np.zeros(candidates.shape, dtype=bool)
    return np.where(found, counts[position] if values.size else 0, 0).astype(np.int64)


def uniform_split(
    rng: np.random.Generator, counts: np.ndarray, parts: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each ``counts[i]`` reporters spread over ``parts`` uniformly (``Multinomial(counts[i], 1/parts)``),
    as sparse ``(i, part, reporters)`` triples with reporters > 0: a multinomial for the counts of
    at least ``parts`` reporters, a uniform draw per reporter for the others (cost
    O(sum of min(count, parts)))."""
    heavy = counts >= parts
    owners, chosen, weights = [], [], []
    if heavy.any():
        split = rng.multinomial(counts[heavy], np.full(parts, 1.0 / parts))
        used = np.nonzero(split)
        owners.append(np.flatnonzero(heavy)[used[0]])
        chosen.append(used[1])
        weights.append(split[used])
    light = np.flatnonzero(~heavy & (counts > 0))
    if light.size:
        owner = np.repeat(light, counts[light])
        pair, tally = np.unique(owner * parts + rng.integers(0, parts, size=owner.size), return_counts=True)
        owners.append(pair // parts)
        chosen.append(pair % parts)
        weights.append(tally)
    if not owners:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    return (
        np.concatenate(owners).astype(np.int64),
        np.concatenate(chosen).astype(np.int64),
        np.concatenate(weights).astype(np.int64),
    )


# -- the entry points ---------------------------------------------------------------------------


def statistics_law(oracle: FrequencyOracle, values: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> object:
    """The statistics of ``counts[i]`` reporters holding ``values[i]``, drawn from their law."""
    values, counts = distinct_values(values, counts)
    law = _statistics_law(oracle)
    return law(oracle, values, counts, rng) if law is not None else _drawn_statistics(oracle, values, counts, rng)


def support_law(
    oracle: FrequencyOracle, values: np.ndarray, counts: np.ndarray, candidates: np.ndarray, rng: np.random.Generator
) -> Support:
    """The candidates' support counts of ``counts[i]`` reporters holding ``values[i]``, drawn from
    their law (jointly over the candidates; a candidate listed twice gets one count)."""
    values, counts = distinct_values(values, counts)
    candidates = np.asarray(candidates, dtype=np.uint64)
    law = _support_law(oracle)
    if law is not None:
        return law(oracle, values, counts, candidates, rng)
    if _statistics_law(oracle) is not None:
        return oracle.support(_statistics_law(oracle)(oracle, values, counts, rng), candidates)
    support = None
    for block, _ in _blocks(values, counts):
        part = oracle.randomize_support(block, candidates, rng)
        support = part if support is None else support + part
    return support if support is not None else oracle.randomize_support(np.zeros(0, dtype=np.uint64), candidates, rng)


def _statistics_law(oracle: FrequencyOracle):
    """The derived statistics law of ``oracle``, or ``None``."""
    for kind, law in _STATISTICS_LAWS:
        if isinstance(oracle, kind):
            return law if law is not None and _applies(oracle) else None
    return None


def _support_law(oracle: FrequencyOracle):
    for kind, law in _SUPPORT_LAWS:
        if isinstance(oracle, kind):
            return law
    return None


def _applies(oracle: FrequencyOracle) -> bool:
    """Whether a derived statistics law covers this oracle's configuration (dense outputs)."""
    if isinstance(oracle, (DirectEncoding, HadamardResponse, HadamardMechanism)):
        return oracle.histogram_size <= FLAT_CELLS_LIMIT
    if isinstance(oracle, SketchOracle):
        return _statistics_law(oracle.inner) is not None
    return True


# -- reports drawn from the values, where no law is derived --------------------------------------


def _blocks(values: np.ndarray, counts: np.ndarray) -> Iterator[tuple[np.ndarray, int]]:
    """The values repeated by their counts, :data:`DRAWN_BLOCK` reporters at a time."""
    ends = np.cumsum(counts)
    total = int(ends[-1]) if ends.size else 0
    for first in range(0, total, DRAWN_BLOCK):
        last = min(first + DRAWN_BLOCK, total)
        lo, hi = np.searchsorted(ends, [first, last], side="right")
        hi = min(hi + 1, values.size)
        taken = np.minimum(ends[lo:hi], last) - np.maximum(ends[lo:hi] - counts[lo:hi], first)
        yield np.repeat(values[lo:hi], np.maximum(taken, 0)), last - first


def _drawn_statistics(
    oracle: FrequencyOracle, values: np.ndarray, counts: np.ndarray, rng: np.random.Generator
) -> object:
    statistics = None
    for block, _ in _blocks(values, counts):
        part = oracle.randomize_aggregate(block, rng)
        statistics = part if statistics is None else statistics + part
    if statistics is None:
        statistics = oracle.randomize_aggregate(np.zeros(0, dtype=np.uint64), rng)
    return statistics


# -- local hashing ------------------------------------------------------------------------------


def _independent_support(
    oracle: LocalHashing | UnaryEncoding,
    values: np.ndarray,
    counts: np.ndarray,
    candidates: np.ndarray,
    rng: np.random.Generator,
) -> Support:
    """Candidate ``c``'s support ``Binomial(n_c, p) + Binomial(n - n_c, q)``, independent across
    candidates: OLH/BLH (``q = 1/g``, for an ideal hash) and unary encodings (exact)."""
    distinct, inverse = np.unique(candidates, return_inverse=True)
    held = held_by(values, counts, distinct)
    total = int(counts.sum())
    drawn = rng.binomial(held, oracle.p) + rng.binomial(total - held, oracle.q)
    return Support(drawn[inverse].astype(np.int64), total)


# -- randomised response ------------------------------------------------------------------------


def _direct_statistics(
    oracle: DirectEncoding, values: np.ndarray, counts: np.ndarray, rng: np.random.Generator
) -> DirectStatistics:
    truthful = rng.binomial(counts, oracle.p - oracle.q)
    total = int(counts.sum())
    cells = rng.multinomial(total - int(truthful.sum()), np.full(oracle.domain, 1.0 / oracle.domain)).astype(np.int64)
    np.add.at(cells, values.astype(np.intp), truthful)
    return DirectStatistics(Histogram.of_owned_dense(cells), total)


def _direct_support(
    oracle: DirectEncoding, values: np.ndarray, counts: np.ndarray, candidates: np.ndarray, rng: np.random.Generator
) -> Support:
    distinct, inverse = np.unique(candidates, return_inverse=True)
    held = held_by(values, counts, distinct)
    total = int(counts.sum())
    truthful = rng.binomial(held, oracle.p - oracle.q)
    others = rng.binomial(int(counts.sum() - held.sum()), oracle.p - oracle.q)  # truthful holders of non-candidates
    uniform = total - int(truthful.sum()) - int(others)
    share = 1.0 / oracle.domain
    spread = rng.multinomial(uniform, np.append(np.full(distinct.size, share), max(0.0, 1.0 - distinct.size * share)))
    return Support((truthful + spread[:-1])[inverse].astype(np.int64), total)


def _unary_statistics(
    oracle: UnaryEncoding, values: np.ndarray, counts: np.ndarray, rng: np.random.Generator
) -> UnaryStatistics:
    holders = np.zeros(oracle.domain, dtype=np.int64)
    holders[values.astype(np.intp)] = counts
    total = int(counts.sum())
    drawn = rng.binomial(holders, oracle.p) + rng.binomial(total - holders, oracle.q)
    return UnaryStatistics(drawn.astype(np.int64), total)


def _fast_local_hashing_statistics(
    oracle: FastLocalHashing, values: np.ndarray, counts: np.ndarray, rng: np.random.Generator
) -> FastLocalHashStatistics:
    """Truthful reporters (``λ = p - (1 - p)/(g - 1)``) at ``(j, H_j(v))`` for a uniform function
    ``j``; the others uniform over every ``(j, y)``."""
    functions, g = oracle.hash_functions, oracle.g
    truthful = rng.binomial(counts, oracle.p - (1 - oracle.p) / (g - 1))
    total = int(counts.sum())
    cells = rng.multinomial(total - int(truthful.sum()), np.full(functions * g, 1.0 / (functions * g))).astype(np.int64)
    owner, function, weight = uniform_split(rng, truthful, functions)
    bucket = hash_expanded(oracle.multipliers[function], oracle.offsets[function], mix_keys(values[owner]), g)
    np.add.at(cells, function * g + bucket.astype(np.int64), weight)
    return FastLocalHashStatistics(cells.reshape(functions, g), total)


# -- Hadamard rows --------------------------------------------------------------------------------


def hadamard_row_sums(
    rng: np.random.Generator,
    blocks: int,
    width: int,
    block: np.ndarray,
    column: np.ndarray,
    negative: np.ndarray,
    counts: np.ndarray,
) -> np.ndarray:
    """``Z[h, r]``: the sum over reporters of ``(-1)^negative W[r, column]``, each reporter of block
    ``h`` at a row ``r`` uniform in ``[0, width)`` (``width`` a power of two), as ``(blocks, width)``.

    The state counts reporters per ``(block, word, sign)``; the word starts as the column and
    takes the row's bits in its place one bit at a time (module docstring): at bit ``b``, the
    reporters of each cell draw ``Binomial(N, 1/2)`` ones, and those whose column bit ``b`` was
    set flip their sign if they drew a one.  From :data:`COMPILED_CELLS` cells each bit is one
    compiled pass (:mod:`fedhh.kernels.compiled_laws`) over the same draws: the same sums."""
    cells = blocks * width * 2
    index = (block.astype(np.int64) * width + column.astype(np.int64)) * 2 + negative.astype(np.int64)
    # float sums of integer counts, exact below 2^53 reporters
    state = np.rint(np.bincount(index, weights=counts.astype(np.float64), minlength=cells)).astype(np.int64)
    compiled = _compiled_laws(cells)
    if compiled is not None:  # the same draws, counted and split in one pass a bit
        word_counts = np.zeros(FAIR_WORDS_MAX + 2, dtype=np.int64)
        compiled.count_cell_words(state, word_counts)
        scratch = np.empty(2 * width, dtype=np.int64)
        for bit in range(width.bit_length() - 2, -1, -1):
            compiled.split_row_bit(state, *fair_draws(rng, state, word_counts), 1 << bit, scratch, word_counts)
    else:
        for bit in range(width.bit_length() - 2, -1, -1):
            shape = (blocks, width >> (bit + 1), 2, 1 << bit, 2)  # [block, higher bits, bit b, lower bits, sign]
            view = state.reshape(shape)
            ones = fair_binomial(rng, view)
            zeros = view - ones
            zero_side = zeros[:, :, 0] + zeros[:, :, 1]
            one_side = ones[:, :, 0] + ones[:, :, 1, ..., ::-1]  # a one under a set column bit flips the sign
            view[:, :, 0] = zero_side
            view[:, :, 1] = one_side
    state = state.reshape(blocks, width, 2)
    return state[..., 0] - state[..., 1]


def _compiled_laws(cells: int) -> ModuleType | None:
    """:mod:`fedhh.kernels.compiled_laws` for Hadamard rows of ``cells`` cells, or ``None`` for the
    numpy path, as ``FEDHH_NUMBA`` chooses (``auto``: from :data:`COMPILED_CELLS` on)."""
    return compiled_module("fedhh.kernels.compiled_laws", cells, COMPILED_CELLS)


def _hashed_hadamard(
    rng: np.random.Generator,
    values: np.ndarray,
    counts: np.ndarray,
    truth: float,
    blocks: int,
    width: int,
    cells_of: object,
) -> tuple[np.ndarray, np.ndarray]:
    """Sums and reporters per block of a one-bit Hadamard oracle whose reporter picks a block
    (hash row) uniformly: truthful ones (``truth``: the bias) at ``cells_of(blocks, values)``'s
    (column, negative); the others a fair coin at a uniform row, which is column 0 with a fair
    sign (``W[r, 0] = 1``), in the same draw."""
    truthful = rng.binomial(counts, truth)
    owner, which, weight = uniform_split(rng, truthful, blocks)
    column, negative = cells_of(which, values[owner])  # type: ignore[operator]
    noisy = rng.multinomial(int(counts.sum() - truthful.sum()), np.full(blocks, 1.0 / blocks))
    plus = fair_binomial(rng, noisy)
    every = np.arange(blocks)
    sums = hadamard_row_sums(
        rng,
        blocks,
        width,
        np.concatenate((which, every, every)),
        np.concatenate((column.astype(np.int64), np.zeros(2 * blocks, dtype=np.int64))),
        np.concatenate((negative.astype(np.int64), np.zeros(blocks, dtype=np.int64), np.ones(blocks, dtype=np.int64))),
        np.concatenate((weight, plus, noisy - plus)),
    )
    users = np.bincount(which, weights=weight.astype(np.float64), minlength=blocks).astype(np.int64) + noisy
    return sums, users


def _count_sketch_hadamard_statistics(
    oracle: CountSketchHadamard, values: np.ndarray, counts: np.ndarray, rng: np.random.Generator
) -> CountSketchHadamardStatistics:
    sums, users = _hashed_hadamard(rng, values, counts, oracle.bias, oracle.hashes, oracle.width, oracle.cells)
    return CountSketchHadamardStatistics(sums, users)


def _hashtogram_statistics(
    oracle: Hashtogram, values: np.ndarray, counts: np.ndarray, rng: np.random.Generator
) -> HashtogramStatistics:
    def cells(rows: np.ndarray, held: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return oracle.buckets(rows, held), np.zeros(held.shape, dtype=bool)

    sums, users = _hashed_hadamard(rng, values, counts, oracle.bias, oracle.rows, oracle.width, cells)
    return HashtogramStatistics(sums, users)


def _hadamard_mechanism_statistics(
    oracle: HadamardMechanism, values: np.ndarray, counts: np.ndarray, rng: np.random.Generator
) -> HadamardMechanismStatistics:
    """A truthful word (``λ = p - (1 - p)/(2^t - 1)``) adds ``t`` coefficients ``H[j, v]`` at
    independent uniform indices: as ``t`` truthful one-coefficient reports; a uniform word, ``t``
    fair coins at uniform indices."""
    t, words = oracle.coefficients, 1 << oracle.coefficients
    truthful = rng.binomial(counts, oracle.keep_probability - (1 - oracle.keep_probability) / (words - 1))
    total = int(counts.sum())
    noisy = t * (total - int(truthful.sum()))
    plus = int(fair_binomial(rng, np.array([noisy]))[0])
    sums = hadamard_row_sums(
        rng,
        1,
        oracle.rows,
        np.zeros(values.size + 2, dtype=np.int64),
        np.append(values.astype(np.int64), [0, 0]),
        np.append(np.zeros(values.size, dtype=np.int64), [0, 1]),
        np.append(t * truthful, [plus, noisy - plus]),
    )[0]
    return HadamardMechanismStatistics(Histogram.of_owned_dense(sums), total)


def _hadamard_response_statistics(
    oracle: HadamardResponse, values: np.ndarray, counts: np.ndarray, rng: np.random.Generator
) -> HadamardResponseStatistics:
    """Reporters anywhere (probability ``2B/Z``) uniform over the outputs; the others at an offset
    uniform over their value's positive set: the offset's bits are fair coins but the one at the
    position's lowest set bit, which is the parity of the position's bits above it and the offset's."""
    total = int(counts.sum())
    anywhere = rng.binomial(counts, 2 * oracle.blocks / oracle.normaliser)
    outputs = rng.multinomial(int(anywhere.sum()), np.full(oracle.outputs, 1.0 / oracle.outputs)).astype(np.int64)
    blocks, positions = oracle._locate(values)
    size, bits = oracle.block_size, oracle.block_bits
    # cells: 2 (block size + word) + parity; the word's high bits become the offset's, its low bits the position's
    cells = 2 * oracle.outputs
    state = np.bincount(
        ((blocks.astype(np.int64) * size + positions.astype(np.int64)) << 1),
        weights=(counts - anywhere).astype(np.float64),
        minlength=cells,
    )
    for bit in range(bits - 1, -1, -1):
        occupied = np.flatnonzero(state)
        held = state[occupied].astype(np.int64)
        word, parity = occupied >> 1, occupied & 1
        low = word & ((1 << (bit + 1)) - 1)  # the position's bits not replaced yet
        lowest = (low & -low) == (1 << bit)  # this bit is the position's lowest set bit: fixed
        position_bit = (word >> bit) & 1
        ones = np.where(lowest, parity * held, fair_binomial(rng, held))
        zero = ((word & ~(1 << bit)) << 1) | parity
        one = ((word | (1 << bit)) << 1) | np.where(lowest, parity, parity ^ position_bit)
        state = np.bincount(
            np.concatenate((zero, one)), weights=np.concatenate((held - ones, ones)).astype(np.float64), minlength=cells
        )
    outputs += np.rint(state).astype(np.int64).reshape(-1, 2).sum(axis=1)
    return HadamardResponseStatistics(Histogram.of_owned_dense(outputs), total)


# -- sketches -------------------------------------------------------------------------------------


def _row_split(
    oracle: SketchOracle, values: np.ndarray, counts: np.ndarray, rng: np.random.Generator
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per sketch row, the (symbol, reporters) of the reporters that picked it."""
    owner, row, weight = uniform_split(rng, counts, oracle.rows)
    symbols = oracle.symbols(row, values[owner])
    order = np.argsort(row, kind="stable")
    bounds = np.searchsorted(row[order], np.arange(oracle.rows + 1))
    return [(symbols[order[a:b]], weight[order[a:b]]) for a, b in itertools.pairwise(bounds)]


def _sketch_statistics(
    oracle: SketchOracle, values: np.ndarray, counts: np.ndarray, rng: np.random.Generator
) -> SketchStatistics:
    return SketchStatistics(
        tuple(
            statistics_law(oracle.inner, symbols, held, rng)
            for symbols, held in _row_split(oracle, values, counts, rng)
        )
    )


def _sketch_support(
    oracle: SketchOracle, values: np.ndarray, counts: np.ndarray, candidates: np.ndarray, rng: np.random.Generator
) -> Support:
    """Each row's inner support of the candidates' symbols (and, signed, of their mirrors)."""
    read = oracle._candidate_symbols(candidates)  # (rows, 1 or 2, C)
    supports = np.empty(read.shape, dtype=np.int64)
    reporters = np.empty(oracle.rows, dtype=np.int64)
    for row, (symbols, held) in enumerate(_row_split(oracle, values, counts, rng)):
        support = support_law(oracle.inner, symbols, held, read[row].ravel().astype(np.uint64), rng)
        supports[row] = support.counts.reshape(read.shape[1:])
        reporters[row] = int(support.n_users)
    return Support(supports, reporters)


_STATISTICS_LAWS: tuple[tuple[type, object], ...] = (
    (LocalHashing, None),
    (DirectEncoding, _direct_statistics),
    (UnaryEncoding, _unary_statistics),
    (FastLocalHashing, _fast_local_hashing_statistics),
    (CountSketchHadamard, _count_sketch_hadamard_statistics),
    (Hashtogram, _hashtogram_statistics),
    (HadamardMechanism, _hadamard_mechanism_statistics),
    (HadamardResponse, _hadamard_response_statistics),
    (SketchOracle, _sketch_statistics),
)
_SUPPORT_LAWS: tuple[tuple[type, object], ...] = (
    (LocalHashing, _independent_support),
    (DirectEncoding, _direct_support),
    (UnaryEncoding, _independent_support),
    (SketchOracle, _sketch_support),
)


@functools.cache
def has_derived_law(oracle_type: type) -> bool:
    """Whether an oracle class has a law derived here (its aggregate's cost then does not grow
    with the reporters); the others draw reports (module docstring)."""
    return any(issubclass(oracle_type, kind) and law is not None for kind, law in (*_STATISTICS_LAWS, *_SUPPORT_LAWS))
