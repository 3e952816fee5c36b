"""The candidates of a level: every way ``k`` symbols can extend a prefix, numbered densely.

A level extends each kept prefix (a row of symbols without the end symbol)
by ``k`` symbols.  An item's next ``k`` symbols are either ``k`` symbols
other than the end symbol, or ``j < k`` of them followed by the end symbol
(``EOS``) and padding (``PAD``): with ``A`` symbols besides the end symbol
there are ``D = A^0 + A^1 + ... + A^k`` extensions.  Extension ``e`` with
its end symbol at position ``j`` (``j = k``: none) is numbered
``A^0 + ... + A^(j-1) + sum_i (e_i - 1) A^(j-1-i)``.  The candidates of a
level with ``K`` parents are numbered ``parent * D + extension``: the
public layout of the count vector that the server adds noise to and that
secure aggregation sums.
"""

from __future__ import annotations

import numpy as np

from ...data.items import EOS, PAD


class ExtensionDomain:
    """Every extension of ``length`` symbols over ``symbols`` symbol ids (the end symbol, 0, included)."""

    def __init__(self, symbols: int, length: int) -> None:
        if symbols < 2 or length < 1:
            raise ValueError(f"an extension needs >= 2 symbol ids and >= 1 symbol, got {symbols}, {length}")
        self.symbols, self.length = symbols, length
        self.letters = symbols - 1  # A: symbols other than the end symbol
        powers = self.letters ** np.arange(length + 1, dtype=np.int64)
        self._offsets = np.concatenate(([0], np.cumsum(powers)))  # offset of the end at position j
        self.size = int(self._offsets[-1])

    def codes(self, extensions: np.ndarray) -> np.ndarray:
        """The number of each extension row (``length`` columns of symbol ids, EOS, PAD)."""
        extensions = np.asarray(extensions, dtype=np.int64)
        ended = (extensions == EOS) | (extensions == PAD)
        end = np.where(ended.any(axis=1), ended.argmax(axis=1), self.length)  # letters before the end
        letters = np.where(np.arange(self.length) < end[:, None], extensions - 1, 0)
        value = np.zeros(extensions.shape[0], dtype=np.int64)
        for column in range(self.length):
            value = np.where(column < end, value * self.letters + letters[:, column], value)
        return self._offsets[end] + value

    def rows(self, codes: np.ndarray) -> np.ndarray:
        """The extension rows of ``codes`` (the inverse of :meth:`codes`)."""
        codes = np.asarray(codes, dtype=np.int64)
        end = np.searchsorted(self._offsets, codes, side="right") - 1
        value = codes - self._offsets[end]
        rows = np.full((codes.size, self.length), PAD, dtype=np.int64)
        for column in range(self.length):
            place = end - 1 - column  # the power of A that column holds
            has = place >= 0
            digit = (value // np.where(has, self.letters ** np.maximum(place, 0), 1)) % self.letters
            rows[:, column] = np.where(has, digit + 1, np.where(column == end, EOS, PAD))
        return rows
