"""Items of any length become 64-bit keys before any oracle sees them.

Oracles work on integer values in ``[0, domain)``; strings, byte strings and
the codec's symbol rows are first keyed to uint64 by a fixed public hash, so
the oracle domain can be the full ``2**64`` and the server queries a
candidate set instead of enumerating it.  Two distinct items share a key with
probability about ``2**-64`` per pair: for a vocabulary of a million items
the chance of any collision is below ``3e-8``.

Keys are computed per *distinct* item (the vocabulary), then gathered per
user by item id, so the Python-level encoding of strings never runs per user.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedhh.kernels.randomness import purpose_key, splitmix64

_ITEM_STREAM = purpose_key("fedhh.oracles.item-key")
_ROW_STREAM = purpose_key("fedhh.oracles.row-key")


def _absorb_columns(state: np.ndarray, words: np.ndarray) -> np.ndarray:
    """Fold the columns of a (n, w) uint64 matrix into one 64-bit state per row."""
    with np.errstate(over="ignore"):
        for column in range(words.shape[1]):
            state = splitmix64(state ^ words[:, column])
    return state


def key_items(items: Sequence[str | bytes]) -> np.ndarray:
    """One uint64 key per item; a ``str`` is keyed as its UTF-8 bytes."""
    for item in items:
        if not isinstance(item, (str, bytes)):
            raise ValueError(f"items: every item must be str or bytes, got {type(item).__name__}")
    encoded = [item.encode("utf-8") if isinstance(item, str) else item for item in items]
    lengths = np.fromiter((len(item) for item in encoded), dtype=np.uint64, count=len(encoded))
    width = max(8, -(-int(lengths.max(initial=0)) // 8) * 8)
    matrix = np.zeros((len(encoded), width), dtype=np.uint8)
    for row, item in enumerate(encoded):
        matrix[row, : len(item)] = np.frombuffer(item, dtype=np.uint8)
    words = matrix.view("<u8")
    state = splitmix64(_ITEM_STREAM ^ lengths)
    return _absorb_columns(state, words)


def key_rows(rows: np.ndarray) -> np.ndarray:
    """One uint64 key per row of a 2-D integer array (for example the codec's symbol rows).

    Rows of different widths get unrelated keys, so a prefix of width ``w``
    and a full item never collide by construction.
    """
    rows = np.asarray(rows)
    if rows.ndim != 2 or not np.issubdtype(rows.dtype, np.integer):
        raise ValueError(f"rows: expected a 2-D integer array, got shape {rows.shape} dtype {rows.dtype}")
    words = rows.astype(np.int64).view(np.uint64)
    state = np.full(rows.shape[0], splitmix64(_ROW_STREAM ^ np.uint64(rows.shape[1])), dtype=np.uint64)
    return _absorb_columns(state, words)
