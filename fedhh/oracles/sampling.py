"""The only draws the client side makes: uniform floats, bounded integers and raw words.

Every randomiser takes ``rng``: a ``numpy.random.Generator``, a
:class:`fedhh.kernels.randomness.UserRandom` or :class:`fedhh.kernels.randomness.RangeRandom`
(simulation) or an :class:`fedhh.kernels.randomness.OsRandom` (a device).  The
simulation's kinds key each draw by (user, call number), so a randomiser must
make the *same sequence of calls* whatever the shard holds: each call draws one value (or one
fixed-width row) per user, and no call count may depend on the data or on the
number of users.  The
helpers here keep that discipline while reaching bounds beyond the 2**52 that
``UserRandom.integers`` supports.
"""

from __future__ import annotations

import numpy as np

from fedhh.kernels.randomness import OsRandom, RangeRandom, UserRandom

RandomSource = np.random.Generator | UserRandom | RangeRandom | OsRandom

_WORD_HALF = 1 << 32
_SMALL_BOUND = 1 << 52
_TWO_TO_64 = 1 << 64


def check_rng_batch(rng: RandomSource, n_users: int) -> None:
    """Refuse per-user randomness built for a different number of users."""
    if not isinstance(rng, np.random.Generator) and rng.n_users != n_users:
        raise ValueError(
            f"rng: per-user randomness for {rng.n_users} users but values has {n_users}; "
            "build it over the same users as the values"
        )


def random_words(rng: RandomSource, n_users: int, columns: int) -> np.ndarray:
    """``(n_users, columns)`` uniform uint64 words in one call: raw bits for integer thresholds,
    about half the cost of two 32-bit ``integers`` draws (:func:`uniform_words`) per word."""
    if isinstance(rng, np.random.Generator):
        return rng.integers(0, np.iinfo(np.uint64).max, size=(n_users, columns), dtype=np.uint64, endpoint=True)
    return rng.words(columns)


def uniform_words(rng: RandomSource, shape: tuple[int, ...]) -> np.ndarray:
    """Uniform 64-bit words, from two 32-bit draws (exact on both rng kinds)."""
    high = rng.integers(0, _WORD_HALF, size=shape).astype(np.uint64)
    low = rng.integers(0, _WORD_HALF, size=shape).astype(np.uint64)
    return (high << np.uint64(32)) | low


def uniform_below(rng: RandomSource, shape: tuple[int, ...], bound: int) -> np.ndarray:
    """Integers uniform on ``[0, bound)`` as uint64, for any ``1 <= bound <= 2**64``.

    Bounds up to 2**52 use one ``integers`` call; powers of two mask a 64-bit
    word; other large bounds reject the few words above the largest multiple
    of ``bound`` and redraw *whole rows* until every user has a value.  A
    user's value is then the first accepted draw of its own stream, so the
    result does not depend on who else is in the shard.
    """
    if not 1 <= bound <= _TWO_TO_64:
        raise ValueError(f"bound must be in [1, 2**64], got {bound}")
    if bound <= _SMALL_BOUND:
        return rng.integers(0, bound, size=shape).astype(np.uint64)
    if bound & (bound - 1) == 0:
        return uniform_words(rng, shape) & np.uint64((bound - 1) % _TWO_TO_64)
    limit = np.uint64((_TWO_TO_64 // bound) * bound - 1)
    result = np.zeros(shape, dtype=np.uint64)
    pending = np.ones(shape, dtype=bool)
    while pending.any():
        words = uniform_words(rng, shape)
        accepted = pending & (words <= limit)
        result[accepted] = words[accepted] % np.uint64(bound)
        pending &= ~accepted
    return result


def randomized_response(rng: RandomSource, true_values: np.ndarray, domain: int, keep_probability: float) -> np.ndarray:
    """Generalised randomised response over ``[0, domain)``, one value per user.

    Keeps the true value with ``keep_probability``, else reports a value
    uniform over the ``domain - 1`` others.  Two calls on ``rng`` whatever the
    outcome (a uniform, then a bounded integer), so the call sequence is fixed.
    """
    keep = rng.random(true_values.shape) < keep_probability
    reported = uniform_below(rng, true_values.shape, domain - 1)
    reported += reported >= true_values  # skip over the true value
    return np.where(keep, true_values, reported)
