"""SFP's budget split, its fragment positions and pairs, the noise of its sketches, and the order
statistics its server reads them with."""

from __future__ import annotations

import numpy as np

from ...data.items import ItemCodec
from ...errors import InputError
from ...oracles import make_oracle
from ...privacy.ldp import BudgetRule, BudgetSplit
from .parameters import HASH_VALUES, MAX_PAIRS, NAME


def sfp_budget(fragment_share: float = 0.5, word_pass: bool = True) -> BudgetRule:
    """The fragment report takes ``fragment_share x ε`` and the full word the rest; without
    the word pass the fragment report takes the whole ε."""
    if isinstance(fragment_share, bool) or not isinstance(fragment_share, (int, float)) or not 0 < fragment_share < 1:
        raise InputError(
            f"protocol.fragment_share: must be a number in the open interval (0, 1), got {fragment_share!r}"
        )
    fragment = "fragment with the word's 8-bit hash"
    parts = ((fragment, 1.0),) if not word_pass else ((fragment, fragment_share), ("full word", 1 - fragment_share))
    return BudgetRule(
        parts,
        "Apple, Learning with Privacy at Scale (Sequence Fragment Puzzle); Cormode et al.'s survey §5, "
        "which splits evenly (the default)",
    )


def sfp_split(epsilon: float, fragment_share: float = 0.5, word_pass: bool = True) -> BudgetSplit:
    """:func:`sfp_budget` for a per-user ``epsilon`` (refused, naming privacy.epsilon, outside the oracles' range)."""
    return sfp_budget(fragment_share, word_pass).split(NAME, epsilon)


def fragment_positions(codec: ItemCodec, fragment_length: int) -> int:
    """``U / f``, refusing a fragment length that does not divide the item's ``U`` symbols."""
    symbols = codec.max_symbols
    if fragment_length < 1 or symbols % fragment_length:
        divisors = [d for d in range(1, symbols + 1) if symbols % d == 0]
        raise InputError(
            f"protocol.fragment_length: {fragment_length} does not divide the {symbols} symbols of an item "
            f"(protocol.max_length / protocol.unit_size); allowed: {divisors}"
        )
    return symbols // fragment_length


def fragment_pairs(codec: ItemCodec, fragment_length: int) -> int:
    """(fragment, hash) pairs a position can hold, refused when too many to enumerate."""
    pairs = codec.symbol_ids**fragment_length * HASH_VALUES
    if pairs > MAX_PAIRS:
        raise InputError(
            f"protocol.fragment_length: fragments of {fragment_length} symbols give {pairs:,} (fragment, hash) "
            f"pairs per position, more than the {MAX_PAIRS:,} the server enumerates; use a shorter fragment"
        )
    return pairs


def sketch_noise(oracle: str, epsilon: float, rows: int, width: int, users: float) -> float:
    """Variance of a count-mean sketch estimate of a value nobody holds, from ``users`` reports:
    ``users x (inner per-user variance) x (m / (m - 1))^2``."""
    inner = make_oracle({"cms": "oue", "hcms": "hm"}[oracle], epsilon=epsilon, domain=width)
    other, _ = inner.per_user_variance()
    return users * other * (width / (width - 1)) ** 2


def best_first(scores: np.ndarray, count: int) -> np.ndarray:
    """``np.argsort(-scores, kind="stable")[:count]`` (ties by index) without sorting every score:
    only those at least the ``count``-th largest are sorted."""
    if count >= scores.size:
        return np.argsort(-scores, kind="stable")
    kth = np.partition(scores, scores.size - count)[scores.size - count]
    top = np.flatnonzero(scores >= kth)
    return top[np.argsort(-scores[top], kind="stable")][:count]


def median(values: np.ndarray, scratch: np.ndarray) -> np.float64:
    """``np.median(values)`` of finite values, the same float, by one selection in ``scratch``
    (``values`` itself may be it) instead of numpy's copy and three-point partition: the upper
    middle value, and for an even count the largest below it, averaged by ``np.mean`` as numpy does."""
    if scratch is not values:
        np.copyto(scratch, values)
    half = values.size // 2
    scratch.partition(half)
    middle = scratch[half : half + 1] if values.size % 2 else np.array([scratch[:half].max(), scratch[half]])
    return np.mean(middle)  # as numpy: a mean of one -0.0 is 0.0
