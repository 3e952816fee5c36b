"""Counter-based randomness keyed by (seed, purpose, round, global user id).

Why not a ``numpy.random.Generator`` per shard: a shard's draws would then
depend on which users share the shard and in what order, so the same seed
would give a different run for 1 and 7 shards.  Here every draw is a pure
function of its key, hashed with SplitMix64 (vectorised over user ids), so a
user's randomness is the same whatever shard or transport carries it.

Randomisers that draw many words per user (a Bloom filter's bits, a unary
encoding's bits) over a shard's contiguous range of users use
:class:`RangeRandom` (``for_range``) instead: one
Philox stream per block of :data:`GRID_USERS` consecutive global ids, keyed
by (purpose key, block) and positioned by its counter at the user's row, so
a user's words are again the same whatever range holds it, at about a fifth
of SplitMix64's cost per word in numpy.

``UserRandom``, ``RangeRandom`` (and ``OsRandom``, for real devices) expose the two methods the client-side
code needs (``random`` and ``integers``) with ``Generator``-compatible signatures, so a
randomiser written against ``numpy.random.Generator`` runs unchanged on it
as long as each call draws one value (or one fixed-size row) per user; and
``words``, raw uniform 64-bit words, for randomisers that compare 32-bit
halves with integer thresholds (:func:`fedhh.oracles.sampling.random_words`).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_SHIFT1, _SHIFT2, _SHIFT3 = np.uint64(30), np.uint64(27), np.uint64(31)
_UNIT = 1.0 / float(1 << 53)
_CHUNK = 1 << 15  # elements a chunked pass over a per-user array works on at once (256 KiB of words: L2)
GRID_USERS = 4096  # consecutive global user ids that share one Philox stream in keyed_range_words
_PHILOX_WORDS_PER_COUNTER = 4  # Philox-4x64 gives four 64-bit words per counter value
# Philox's constructor needs a seed; a fixed one avoids drawing OS entropy for a key we replace.
_UNUSED_SEED = np.random.SeedSequence(0)


def splitmix64(x: np.ndarray | np.uint64) -> np.ndarray:
    """SplitMix64 finaliser: a bijective, well-mixed map of uint64 values."""
    with np.errstate(over="ignore"):
        return _mix_in_place(np.asarray(x, dtype=np.uint64) + _GOLDEN)


def _mix_in_place(z: np.ndarray) -> np.ndarray:
    """SplitMix64's mixing of ``z`` (already offset by the golden ratio), overwriting ``z``: one
    scratch array instead of a temporary per operation, and the eight passes made a chunk of
    :data:`_CHUNK` words at a time, so they run in the cache instead of streaming the whole
    array through memory eight times."""
    if z.ndim == 0:
        z = z ^ (z >> np.uint64(30))
        z = z * _MUL1
        z = z ^ (z >> np.uint64(27))
        z = z * _MUL2
        return z ^ (z >> np.uint64(31))
    if not z.flags.c_contiguous:
        z[...] = _mix_in_place(np.ascontiguousarray(z))
        return z
    flat = z.reshape(-1)
    scratch = np.empty(min(flat.size, _CHUNK), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for first in range(0, flat.size, _CHUNK):
            chunk = flat[first : first + _CHUNK]
            spare = scratch[: chunk.size]
            for shift, multiplier in ((_SHIFT1, _MUL1), (_SHIFT2, _MUL2)):
                np.right_shift(chunk, shift, out=spare)
                chunk ^= spare
                chunk *= multiplier
            np.right_shift(chunk, _SHIFT3, out=spare)
            chunk ^= spare
    return z


def purpose_key(purpose: str) -> np.uint64:
    """A stable 64-bit key for a purpose name (independent of PYTHONHASHSEED)."""
    digest = hashlib.blake2b(purpose.encode("utf-8"), digest_size=8).digest()
    return np.uint64(int.from_bytes(digest, "little"))


def derive_key(seed: int, purpose: str, *parts: int) -> np.uint64:
    """Combine a seed, a purpose and integer parts (round, group...) into one key."""
    key = splitmix64(np.uint64(seed % (1 << 64)) ^ purpose_key(purpose))
    for part in parts:
        key = splitmix64(key ^ np.uint64(part % (1 << 64)))
    return np.uint64(key)


def keyed_range_words(key: np.uint64, first_user: int, n_users: int, columns: int) -> np.ndarray:
    """``(n_users, columns)`` uint64 words for the global users ``first_user, first_user + 1, ...``.

    User ``u``'s row is words ``[r c, (r + 1) c)`` (``c = columns``, ``r = u mod``
    :data:`GRID_USERS`) of the Philox-4x64 stream keyed ``(key, u // GRID_USERS)``;
    the stream is entered at that word through its counter, so the row does
    not depend on the range it is drawn in (a shard, a device, the whole
    population) and no word is drawn for a user outside the range.

    One Philox generator serves every block of the call: its state (key,
    counter, empty buffer) is set per block, which costs a third of building
    a generator (whose constructor also pulls operating-system entropy for a
    seed sequence the explicit key makes unused); a range inside one block
    returns Philox's own array, without a copy.
    """
    return keyed_ranges_words(key, ((first_user, n_users),), columns)


def keyed_ranges_words(key: np.uint64, ranges: tuple[tuple[int, int], ...], columns: int) -> np.ndarray:
    """The rows of :func:`keyed_range_words` for several ranges ``(first_user, n_users)``, one after
    the other: the same words as one call per range, from one generator."""
    stream = np.random.Philox(_UNUSED_SEED)
    pieces: list[np.ndarray] = []
    for first_user, n_users in ranges:
        end = first_user + n_users
        user = first_user
        while user < end:
            block, row = divmod(user, GRID_USERS)
            rows = min(GRID_USERS - row, end - user)
            counter, skip = divmod(row * columns, _PHILOX_WORDS_PER_COUNTER)
            stream.state = philox_state(key, block, counter)
            raw = stream.random_raw(skip + rows * columns)
            pieces.append(raw[skip:] if skip else raw)
            user += rows
    n_users = sum(n for _, n in ranges)
    if len(pieces) == 1:
        return pieces[0].reshape(n_users, columns)
    if not pieces:
        return np.empty((0, columns), dtype=np.uint64)
    return np.concatenate(pieces).reshape(n_users, columns)


def philox_state(key: np.uint64, block: int, counter: int = 0) -> Any:
    """The state of the Philox-4x64 stream keyed ``(key, block)`` about to produce the four words of
    ``counter`` (what ``np.random.Philox(key=[key, block], counter=[counter, 0, 0, 0])`` starts in)."""
    return {
        "bit_generator": "Philox",
        "state": {
            "counter": np.array([counter, 0, 0, 0], dtype=np.uint64),
            "key": np.array([key, block], dtype=np.uint64),
        },
        "buffer": np.zeros(_PHILOX_WORDS_PER_COUNTER, dtype=np.uint64),
        "buffer_pos": _PHILOX_WORDS_PER_COUNTER,
        "has_uint32": 0,
        "uinteger": 0,
    }


def os_words(n_users: int, columns: int) -> np.ndarray:
    """``(n_users, columns)`` uint64 words from the operating system's CSPRNG."""
    raw = secrets.token_bytes(8 * n_users * columns)
    return np.frombuffer(raw, dtype=np.uint64).reshape(n_users, columns).copy()


def uniform_from_bits(bits: np.ndarray) -> np.ndarray:
    """Map uint64 hashes to floats uniform on [0, 1) using their top 53 bits."""
    uniforms = (bits >> np.uint64(11)).astype(np.float64)
    uniforms *= _UNIT
    return uniforms


def _scaled_integers(words: np.ndarray, span: float, low: int) -> np.ndarray:
    """``low + floor(uniform_from_bits(words) x span)`` as int64 (``span`` an integer below
    ``2^52``), written over ``words`` (1-d, contiguous; a fresh array, not kept, spares the
    page faults of another): the same floats and integers, a chunk of :data:`_CHUNK` words at a time,
    in the cache rather than in whole-array passes through memory.  Truncation is ``floor`` here:
    every product is >= 0."""
    out = words.view(np.int64)  # a chunk is read before its integers are written over it
    tops = np.empty(min(words.size, _CHUNK), dtype=np.uint64)
    uniforms = np.empty(tops.size, dtype=np.float64)
    for first in range(0, words.size, _CHUNK):
        chunk = words[first : first + _CHUNK]
        top, uniform = tops[: chunk.size], uniforms[: chunk.size]
        np.right_shift(chunk, np.uint64(11), out=top)
        np.multiply(top, _UNIT, out=uniform)  # k 2^-53: k < 2^53 converts exactly
        uniform *= span
        np.copyto(out[first : first + chunk.size], uniform, casting="unsafe")
    if low:
        out += low
    return out


class _PerUserDraws:
    """``Generator``-compatible draws, one value (or one row) per user per call."""

    def __init__(self, n_users: int) -> None:
        self._n_users = n_users

    @property
    def n_users(self) -> int:
        return self._n_users

    def _bits(self, columns: int) -> np.ndarray:
        """``(n_users, columns)`` fresh uint64 words."""
        raise NotImplementedError

    def words(self, columns: int) -> np.ndarray:
        """``(n_users, columns)`` uniform uint64 words, one row per user (one call, like ``random``)."""
        if columns < 1:
            raise ValueError(f"words: columns must be >= 1, got {columns}")
        return self._bits(int(columns))

    def _check_size(self, size: int | tuple[int, ...] | None) -> tuple[int, ...]:
        if size is None:
            size = self.n_users
        shape = (int(size),) if isinstance(size, (int, np.integer)) else tuple(size)
        if not shape or shape[0] != self.n_users or len(shape) > 2:
            raise ValueError(
                f"per-user randomness draws one value or one row per user: size must be "
                f"({self.n_users},) or ({self.n_users}, k), got {shape}"
            )
        return shape

    def random(self, size: int | tuple[int, ...] | None = None) -> np.ndarray:
        """Uniform floats on [0, 1), one per user (or one row per user)."""
        shape = self._check_size(size)
        columns = shape[1] if len(shape) == 2 else 1
        return uniform_from_bits(self._bits(columns)).reshape(shape)

    def integers(
        self,
        low: int | np.ndarray,
        high: int | np.ndarray | None = None,
        size: int | tuple[int, ...] | None = None,
    ) -> np.ndarray:
        """Integers uniform on [low, high) (``Generator.integers`` semantics)."""
        if high is None:
            low, high = 0, low
        one_per_user = size is None or isinstance(size, (int, np.integer))
        if type(low) is int and type(high) is int and -(1 << 63) <= low and high < 1 << 63 and one_per_user:
            # plain bounds (a sketch's rows, HM's indices, once a block): the checks below in Python
            return self._one_integer_each(low, high - low, size)
        low_arr = np.asarray(low, dtype=np.int64)
        span = np.asarray(high, dtype=np.int64) - low_arr
        if np.any(span <= 0):
            raise ValueError("integers: high must be greater than low")
        if np.any(span > (1 << 52)):
            raise ValueError("integers: ranges above 2**52 are not supported")
        if span.ndim == 0 and low_arr.ndim == 0 and one_per_user:
            return self._one_integer_each(int(low_arr), int(span), size)
        draws = self.random(size)
        if np.broadcast_shapes(draws.shape, span.shape) != draws.shape:  # bounds wider than the draws
            return low_arr + np.floor(draws * span).astype(np.int64)
        draws *= span  # in place: the same floats as ``draws * span``, without temporaries
        draws = np.floor(draws, out=draws).astype(np.int64)
        if low_arr.ndim == 0 and low_arr == 0:
            return draws
        draws += low_arr
        return draws

    def _one_integer_each(self, low: int, span: int, size: int | tuple[int, ...] | None) -> np.ndarray:
        """One integer a user, uniform on ``[low, low + span)``: ``low + floor(u span)`` for the user's
        uniform ``u`` (:func:`_scaled_integers`), or for a power-of-two ``span = 2^s``, the same
        ``floor(k 2^-53 2^s) = k >> (53 - s)``: the top ``s`` bits of the word, without floats."""
        if span <= 0:
            raise ValueError("integers: high must be greater than low")
        if span > 1 << 52:
            raise ValueError("integers: ranges above 2**52 are not supported")
        shape = self._check_size(size)
        if span & (span - 1):
            return _scaled_integers(self._bits(1)[:, 0], float(span), low).reshape(shape)
        draws = self._bits(1)[:, 0]  # fresh words: shifted in place, below 2^63 read as int64 (no copy)
        draws >>= np.uint64(64 - span.bit_length() + 1)
        draws = draws.view(np.int64).reshape(shape)
        if low:
            draws += low
        return draws


class UserRandom(_PerUserDraws):
    """Per-user random streams for a batch of users, keyed by global user id.

    Each call returns draws for every user of the batch and advances an
    internal call counter, so the j-th draw of a user is the same whichever
    batch the user is in, provided client code makes the same calls.
    """

    def __init__(self, key: np.uint64, user_ids: np.ndarray) -> None:
        ids = np.asarray(user_ids, dtype=np.uint64)
        super().__init__(int(ids.shape[0]))
        self._key = np.uint64(key)
        self._ids = ids
        self._counter = 0
        self._user_keys: np.ndarray | None = None

    def _bits(self, columns: int) -> np.ndarray:
        """Word ``j`` of a user is ``splitmix64(splitmix64(id XOR key) + j)``, ``j`` counting every
        word the user drew before (so one call of ``c`` columns equals ``c`` calls of one).  The
        users' keys ``splitmix64(id XOR key)`` are hashed once, at the first call (a protocol
        often makes several one-word calls: half their SplitMix64 work)."""
        counters = np.uint64(self._counter) + np.arange(columns, dtype=np.uint64)
        self._counter += columns
        if self._user_keys is None:
            keys = self._ids ^ self._key
            with np.errstate(over="ignore"):
                keys += _GOLDEN
            self._user_keys = _mix_in_place(keys)  # splitmix64(id XOR key), without a second array
        with np.errstate(over="ignore"):
            if columns == 1:
                return _mix_in_place(self._user_keys + (counters[0] + _GOLDEN))[:, None]
            return _mix_in_place(self._user_keys[:, None] + (counters + _GOLDEN))


class RangeRandom(_PerUserDraws):
    """Per-user draws for the contiguous global users ``first_user, first_user + 1, ...``.

    Call ``j`` (counting from 0) is one :func:`keyed_range_words` draw under
    the key ``splitmix64(key XOR j)``: a user's words depend only on the key,
    its global id and the call sequence, so they are the same whatever range
    (shard, block of users) holds it, as with :class:`UserRandom`, at about a
    fifth of its cost per word.
    """

    def __init__(self, key: np.uint64, first_user: int, n_users: int) -> None:
        self._init(key, ((first_user, n_users),))

    @classmethod
    def over_ranges(cls, key: np.uint64, ranges: tuple[tuple[int, int], ...]) -> RangeRandom:
        """Draws for the users of several ranges ``(first_user, n_users)`` in a row (local index
        ``i`` is the ``i``-th user of the ranges in order): each user's draws are the ones a
        :class:`RangeRandom` of its range alone gives, so one batch of several ranges costs one
        set of calls, not one per range."""
        draws = cls.__new__(cls)
        draws._init(key, ranges)
        return draws

    def _init(self, key: np.uint64, ranges: tuple[tuple[int, int], ...]) -> None:
        ranges = tuple((int(first), int(n)) for first, n in ranges)
        if not ranges or any(first < 0 or n < 0 for first, n in ranges):
            raise ValueError(f"RangeRandom: first_user and n_users must be >= 0 (one range at least), got {ranges}")
        super().__init__(sum(n for _, n in ranges))
        self._key = np.uint64(key)
        self._ranges = ranges
        self._calls = 0

    @property
    def first_user(self) -> int:
        """Global id of the (first) range's first user."""
        return self._ranges[0][0]

    @property
    def ranges(self) -> tuple[tuple[int, int], ...]:
        """The ranges ``(first_user, n_users)`` whose users this draws for, in order."""
        return self._ranges

    def next_call_key(self) -> np.uint64:
        """The key of this range's next call, consuming the call: a sampler that draws from its own
        keyed streams (:mod:`fedhh.kernels.sparse_bernoulli`) takes one call like ``words``."""
        call_key = np.uint64(splitmix64(self._key ^ np.uint64(self._calls)))
        self._calls += 1
        return call_key

    def _bits(self, columns: int) -> np.ndarray:
        return keyed_ranges_words(self.next_call_key(), self._ranges, columns)


class OsRandom(_PerUserDraws):
    """Per-user draws straight from the operating system's CSPRNG."""

    def _bits(self, columns: int) -> np.ndarray:
        return os_words(self.n_users, columns)


class RandomnessSource(Protocol):
    """Where client code gets its per-user randomness for one purpose and round."""

    def for_users(self, purpose: str, round: int, user_ids: np.ndarray) -> UserRandom | OsRandom: ...

    def for_range(self, purpose: str, round: int, first_user: int, n_users: int) -> RangeRandom | OsRandom:
        """Per-user draws for a contiguous range of global users (cheaper per word than ``for_users``)."""
        ...

    def for_ranges(self, purpose: str, round: int, ranges: tuple[tuple[int, int], ...]) -> RangeRandom | OsRandom:
        """:meth:`for_range`'s draws for several ranges ``(first_user, n_users)`` in one batch."""
        ...


@dataclass(frozen=True)
class KeyedRandomness:
    """Simulation randomness: reproducible from the seed, independent of sharding."""

    seed: int

    def for_users(self, purpose: str, round: int, user_ids: np.ndarray) -> UserRandom:
        return UserRandom(derive_key(self.seed, purpose, round), user_ids)

    def for_range(self, purpose: str, round: int, first_user: int, n_users: int) -> RangeRandom:
        return RangeRandom(derive_key(self.seed, purpose, round), first_user, n_users)

    def for_ranges(self, purpose: str, round: int, ranges: tuple[tuple[int, int], ...]) -> RangeRandom:
        return RangeRandom.over_ranges(derive_key(self.seed, purpose, round), ranges)

    def generator(self, purpose: str, *parts: int) -> np.random.Generator:
        """A server-side generator (sampling, hash seeds) for one purpose and round."""
        return np.random.default_rng(int(derive_key(self.seed, purpose, *parts)))


class SecureRandomness:
    """Deployment randomness: a device draws from the operating system's CSPRNG.

    Nothing about a device's report is then predictable from public seeds.
    """

    def for_users(self, purpose: str, round: int, user_ids: np.ndarray) -> OsRandom:
        return OsRandom(int(np.asarray(user_ids).shape[0]))

    def for_range(self, purpose: str, round: int, first_user: int, n_users: int) -> OsRandom:
        return OsRandom(n_users)

    def for_ranges(self, purpose: str, round: int, ranges: tuple[tuple[int, int], ...]) -> OsRandom:
        return OsRandom(sum(int(n) for _, n in ranges))
