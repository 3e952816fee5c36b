"""The set bits of a keyed grid of independent Bernoulli(q) bits, at a cost proportional to them.

A simulated shard of ``n`` users each holding ``w`` independent bits that
are 1 with a small probability ``q`` (the "other" bits of OUE) need not
draw ``n w`` uniforms to find the few ``n w q`` ones: it walks from one set
bit to the next by geometric gaps, ``G = floor(log U / log(1 - q))``, whose
positions are exactly the 1s of independent Bernoulli(q) bits (up to the
53-bit truncation of ``U``: every tail within ``2^-52``).

The line of bits is cut into blocks of
:data:`fedhh.kernels.randomness.GRID_USERS` consecutive global users, each
walked by its own SFC64 generator keyed by (call key, block), the call key
being one call of a :class:`fedhh.kernels.randomness.RangeRandom`: a user's
bits depend only on the seed, purpose, round, its global id and the call
sequence, so they are the same in any range, shard or transport.  The law,
the rounding bound, the keys and the choice of blocks and of SFC64 are
derived in the documentation (``docs/derivations.md``, "Bernoulli bits by
geometric gaps").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np

from .randomness import GRID_USERS, RangeRandom
from .scratch import borrowed

_SPREAD = 6.0  # a block's first draw covers its expected set bits plus 6 sd (one draw, nearly always)
# Words drawn at once: a piece's arrays (256 KiB each) stay in the L2 cache while the walk and
# its consumer pass over them, which costs less than the Python calls of more pieces.
MAX_DRAW = 1 << 15
# The smallest probability a 32-bit threshold gives: a gap is then at most 53 ln 2 / 2^-32 < 2^38,
# so the cumulative sum of one draw (at most 2^15 gaps) stays far inside int64.
MIN_PROBABILITY = 2.0**-32
_MASK_64 = (1 << 64) - 1
_SFC64_WARM_UP = 12  # steps numpy's SFC64 seeding takes after setting its state


def grid_set_bits(rng: RangeRandom, width: int, probability: float) -> Iterator[tuple[int, np.ndarray]]:
    """The set bits of ``rng``'s ``(n_users, width)`` grid of independent Bernoulli(``probability``)
    bits, a piece of a block of users at a time: ``(first, positions)``, ``positions`` int64
    ascending on the line of the users ``first, first + 1, ...`` (the range's local indices) laid
    row after row -- bit ``(first + p // width, p % width)`` for each ``p``.  A block's pieces (at
    most :data:`MAX_DRAW` positions each) share its ``first`` and follow each other on its line.

    Consumes one call of ``rng`` now (whether or not the blocks are read), so the
    calls that follow are the same whatever the grid holds.  A yielded array is a view of the
    walk's scratch (:mod:`fedhh.kernels.scratch`): valid until the next piece is asked for (copy what
    must outlive it).
    """
    return ((piece.first, piece.positions) for piece in grid_pieces(rng, width, probability))


class GridPiece(NamedTuple):
    """A piece of :func:`grid_pieces`: :func:`grid_set_bits`'s ``(first, positions)`` and more."""

    first: int
    positions: np.ndarray
    # two int64 scratch arrays of MAX_DRAW elements the walk does not need until the next piece
    free: tuple[np.ndarray, np.ndarray]
    # with ``leading``, on a block's first piece: a uint32 uniform per user of the range in the block
    leading: np.ndarray | None


def grid_pieces(rng: RangeRandom, width: int, probability: float, leading: bool = False) -> Iterator[GridPiece]:
    """:func:`grid_set_bits`'s pieces (the same bits), each with two scratch arrays a consumer
    that counts the bits may work in, in the cache the walk just warmed, instead of arrays of its
    own (fewer arrays in flight).

    ``leading``: each block's stream first gives ``GRID_USERS / 2`` 64-bit words, row ``r``'s
    32-bit uniform being half ``r`` (low half first) -- drawn whole whatever part of the block
    the range holds, so the walk that follows on the same stream is the same -- and the block's
    first piece carries the range's users' uniforms (a different grid from ``leading=False``'s,
    of the same law, and still a pure function of the call key and the users' global ids).
    SFC64 gives them for a fraction of the cost of a call of keyed Philox words.
    """
    if not isinstance(rng, RangeRandom):
        raise TypeError(f"grid_set_bits: rng must be a RangeRandom, got {type(rng).__name__}")
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width < 1:
        raise ValueError(f"grid_set_bits: width must be an integer >= 1, got {width!r}")
    if not MIN_PROBABILITY <= probability < 1:
        raise ValueError(f"grid_set_bits: probability must be in [2^-32, 1), got {probability!r}")
    return _walk(rng.next_call_key(), rng.ranges, int(width), float(probability), leading)


def _walk(
    key: np.uint64, ranges: tuple[tuple[int, int], ...], width: int, probability: float, leading: bool
) -> Iterator[GridPiece]:
    """The pieces of each range's blocks in turn, ``first`` counted on the ranges' users in order."""
    scratch = (MAX_DRAW, np.float64), (MAX_DRAW, np.int64), (MAX_DRAW, np.int64)
    local = 0  # local index of the range's first user
    stream = np.random.Generator(np.random.SFC64(0))  # set to each block's state in turn
    with borrowed(*scratch) as (uniforms, steps, line):
        free = (steps, uniforms.view(np.int64))  # dead once a piece's positions are summed
        for first_user, n_users in ranges:
            if n_users == 0:
                continue
            end = first_user + n_users
            for block in range(first_user // GRID_USERS, -(-end // GRID_USERS)):
                origin = block * GRID_USERS
                first_row, end_row = max(first_user - origin, 0), min(end - origin, GRID_USERS)
                skipped = first_row * width
                block_stream(key, block, stream)
                lead = None
                if leading:
                    words = stream.bit_generator.random_raw(GRID_USERS // 2).astype("<u8", copy=False)
                    lead = words.view("<u4")[first_row:end_row]
                for positions in _block_positions(stream, end_row * width, probability, uniforms, steps, line):
                    if skipped:
                        positions = positions[np.searchsorted(positions, skipped) :]
                        positions -= skipped
                    yield GridPiece(local + max(origin - first_user, 0), positions, free, lead)
                    lead = None
            local += n_users


def _block_positions(
    stream: np.random.Generator,
    length: int,
    probability: float,
    uniforms: np.ndarray,
    steps: np.ndarray,
    line: np.ndarray,
) -> Iterator[np.ndarray]:
    """Ascending positions below ``length`` of the 1s on a block's line walked with ``stream``
    (module docstring), in pieces of at most :data:`MAX_DRAW` (the stream is read in order, so
    the positions do not depend on how it is cut), each a view of ``line`` (``uniforms``,
    ``steps``: scratch of its size)."""
    log_keep = math.log1p(-probability)
    last = -1
    while True:
        size = _draw_size((length - 1 - last) * probability)
        draws, gaps, positions = uniforms[:size], steps[:size], line[:size]
        stream.random(out=draws)  # k 2^-53, k uniform on [0, 2^53)
        steps_from_uniforms(draws, log_keep, gaps)
        gaps[0] += last
        running_sum(gaps, positions, draws.view(np.int64))
        if positions[-1] >= length:
            yield positions[: np.searchsorted(positions, length)]
            return
        last = int(positions[-1])  # before the consumer may shift the yielded array in place
        yield positions


def steps_from_uniforms(draws: np.ndarray, log_keep: float, out: np.ndarray) -> np.ndarray:
    """``out = floor(log(1 - draws) / log_keep + 1)``, the steps ``G + 1`` from one set bit to the
    next (``draws``: ``k 2^-53``, overwritten; ``log_keep``: ``log1p(-q)``)."""
    np.subtract(1.0, draws, out=draws)  # U = (2^53 - k) 2^-53, uniform on {1, ..., 2^53} 2^-53, exactly
    np.log(draws, out=draws)
    draws /= log_keep  # not a product with 1 / log_keep: its rounding would widen the bound (module docstring)
    draws += 1.0  # >= 1, so truncation is floor: the step to the next 1 is gap + 1
    np.copyto(out, draws, casting="unsafe")
    return out


def running_sum(steps: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """``out[i] = steps[0] + ... + steps[i]`` (1-d integer arrays, exact; ``out`` and ``scratch``, of at
    least ``steps.size // 2`` elements, overlap neither ``steps`` nor each other).

    Why not ``np.cumsum`` alone: it adds one element at a time, each waiting for the sum before;
    summing neighbouring pairs first (one vectorised pass) halves that chain, the sum at each even
    index is then the pair's end minus its second step.  Integer sums, so the same values to the
    bit.
    """
    pairs = steps.size // 2
    if pairs == 0:
        return np.cumsum(steps, out=out)
    ends = out[1 : 2 * pairs : 2]
    np.add(steps[0 : 2 * pairs : 2], steps[1 : 2 * pairs : 2], out=scratch[:pairs])
    np.cumsum(scratch[:pairs], out=ends)
    np.subtract(ends, steps[1 : 2 * pairs : 2], out=out[0 : 2 * pairs : 2])
    if steps.size % 2:
        out[-1] = out[-2] + steps[-1]
    return out


def row_divider(width: int, limit: int = GRID_USERS) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``rows(positions, out)``: ``out = positions // width`` for positions in ``[0, limit x width)``
    (a block's line: ``limit`` rows), exact, by the cheapest route: a shift for a power of two,
    else a multiplication and a shift, else (when the product could overflow) ``floor_divide``.

    Why: numpy's ``floor_divide`` costs about twice the multiplication and the shift.
    ``M = ceil(2^s / w)``, ``e = M w - 2^s < w``:
    ``p M / 2^s = p / w + p e / (w 2^s)``, and ``p e < 2^s`` (``s`` chosen with ``limit w^2 <=
    2^s``) keeps the excess below ``1 / w``, which no fraction ``(p mod w) / w`` can reach 1 with.
    """
    if width & (width - 1) == 0:
        shift = width.bit_length() - 1
        return lambda positions, out: np.right_shift(positions, shift, out=out)
    bits = (limit * width * width - 1).bit_length()
    multiplier = -(-(1 << bits) // width)
    if limit * width * multiplier >= 1 << 63:
        return lambda positions, out: np.floor_divide(positions, width, out=out)

    def rows(positions: np.ndarray, out: np.ndarray) -> np.ndarray:
        np.multiply(positions, multiplier, out=out)
        return np.right_shift(out, bits, out=out)

    return rows


def _draw_size(expected: float) -> int:
    """Words to draw for ``expected`` set bits still to come: all of them plus 6 sd (so the last
    piece of a block is one draw, nearly always), at most :data:`MAX_DRAW`."""
    return min(int(expected + _SPREAD * math.sqrt(expected)) + 16, MAX_DRAW)


def block_stream(key: np.uint64, block: int, stream: np.random.Generator | None = None) -> np.random.Generator:
    """Block ``block``'s generator under the call key ``key`` (a pure function of the two, so the
    same on every shard): SFC64 whose three state words are SplitMix64 hashes of ``(key,
    block)``, its counter 1, advanced 12 steps -- numpy's own seeding of SFC64, with the hashes
    for its ``SeedSequence`` words.  ``stream``: an SFC64 generator to set to that state and
    return (a walk keeps one for all its blocks: setting a state costs a tenth of building a
    seed sequence, a bit generator and a generator)."""
    if stream is None:
        stream = np.random.Generator(np.random.SFC64(0))
    base = _splitmix64(int(key) ^ _splitmix64(int(block)))
    words = [_splitmix64((base + part) & _MASK_64) for part in (1, 2, 3)]
    stream.bit_generator.state = {
        "bit_generator": "SFC64",
        "state": {"state": np.array([*words, 1], dtype=np.uint64)},
        "has_uint32": 0,
        "uinteger": 0,
    }
    stream.bit_generator.random_raw(_SFC64_WARM_UP)
    return stream


def _splitmix64(x: int) -> int:
    """SplitMix64 (:func:`fedhh.kernels.randomness.splitmix64`) on one Python integer: a numpy
    scalar's dozen operations would cost several times more."""
    z = (x + 0x9E3779B97F4A7C15) & _MASK_64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK_64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK_64
    return z ^ (z >> 31)
