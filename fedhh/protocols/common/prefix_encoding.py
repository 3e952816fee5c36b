"""Values as fixed-length strings of units -- bits or the codec's symbols -- and their prefixes.

PEM and TreeHist discover a value a few units at a time: a level asks for
prefixes of length ``l`` and the server extends the surviving prefixes by
every possible next segment.  Both need the same three things, which this
module gives for the two encodings a config can name:

* ``bits``: [Wang19]'s setting.  Each character becomes a fixed-width code:
  its 1-based alphabet index for the text alphabets (5 bits for lowercase,
  7 for ascii) and the byte itself for the bytes alphabet (8 bits), most
  significant bit first; code 0 marks "no character", so shorter items are
  padded with zero codes.  A
  value has ``m = max_length x width`` bits and every bit string of that
  length is a possible value (the protocol assumes no domain knowledge).
* ``symbols``: the codec's symbols (``unit_size`` characters each, ids in
  ``[0, radix^unit_size)``); symbol 0 ends the item and only zeros follow,
  so a prefix that has ended has one extension, not ``radix^unit_size``.

A prefix of ``l`` units is keyed for the frequency oracles by its integer
value in base ``B`` (``B`` = 2 or the symbol count) when ``B^l <= 2^64``, so
an oracle over ``[0, B^l)`` sees the true domain (direct encoding depends on
it); longer prefixes are keyed by a 64-bit hash of the units.  Keys are
computed once per distinct item (the vocabulary), never per user.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ...data.items import PAD, ItemCodec
from ...data.population import Vocabulary
from ...errors import InputError
from ...oracles.keys import key_rows

Encoding = Literal["bits", "symbols"]
ENCODINGS: tuple[str, ...] = ("bits", "symbols")
MAX_DOMAIN = 1 << 64
MAX_CANDIDATES = 1 << 24  # candidates of one level: 128 MB of uint64 keys and more in hash tables

_UNIT_CACHE: dict[tuple[int, str], np.ndarray] = {}
_KEY_CACHE: dict[tuple[int, str, int], np.ndarray] = {}


@dataclass(frozen=True)
class ValueSpace:
    """What the analysis needs of an encoding: ``m`` units of ``base`` values each, and whether
    a zero unit ends the value (symbols), which leaves an ended prefix a single extension."""

    length: int
    base: int
    zero_ends: bool = False

    def segment_count(self, units: int) -> int:
        """Segments of ``units`` units a prefix that has not ended can grow by."""
        if not self.zero_ends:
            return self.base**units
        return sum((self.base - 1) ** live for live in range(units + 1))

    def domain(self, length: int) -> int:
        """Size of the oracle domain for prefixes of ``length`` units."""
        return min(self.base**length, MAX_DOMAIN)


@dataclass(frozen=True)
class PrefixEncoding:
    """How items become unit strings, how prefixes are keyed, and how they extend."""

    kind: Encoding
    codec: ItemCodec

    def __post_init__(self) -> None:
        if self.kind not in ENCODINGS:
            raise InputError(f"protocol.encoding: got {self.kind!r}; allowed: {list(ENCODINGS)}")

    @property
    def char_bits(self) -> int:
        """Bits per character code (bits encoding)."""
        return 8 if self.codec.alphabet.byte_level else self.codec.alphabet.size.bit_length()

    @property
    def base(self) -> int:
        """Distinct values of one unit."""
        return 2 if self.kind == "bits" else self.codec.symbol_ids

    @property
    def length(self) -> int:
        """Units of a whole value, ``m``."""
        if self.kind == "bits":
            return self.codec.max_length * self.char_bits
        return self.codec.max_symbols

    @property
    def unit_name(self) -> str:
        return "bits" if self.kind == "bits" else "symbols"

    @property
    def space(self) -> ValueSpace:
        return ValueSpace(self.length, self.base, zero_ends=self.kind == "symbols")

    def domain(self, length: int) -> int:
        return self.space.domain(length)

    # -- values of a vocabulary --------------------------------------------------------

    def units(self, vocabulary: Vocabulary) -> np.ndarray:
        """Every vocabulary item as a row of ``length`` units (uint8 bits or int64 symbols).

        Cached per vocabulary object for the life of that object: every
        round of every shard reuses the same rows.
        """
        key = (id(vocabulary), self.kind)
        rows = _UNIT_CACHE.get(key)
        if rows is None:
            rows = self._bit_rows(vocabulary) if self.kind == "bits" else self._symbol_rows(vocabulary)
            _UNIT_CACHE[key] = rows
            weakref.finalize(vocabulary, _UNIT_CACHE.pop, key, None)
        return rows

    def prefix_keys(self, vocabulary: Vocabulary, length: int) -> np.ndarray:
        """The oracle key of every item's ``length``-unit prefix, followed by the key of
        the empty value (all-zero units), which users without an item report.

        Cached per vocabulary object, like :meth:`units` (read-only): a level
        asks for its prefixes' keys once per round and shard.
        """
        cache_key = (id(vocabulary), self.kind, int(length))
        keys = _KEY_CACHE.get(cache_key)
        if keys is None:
            rows = self.units(vocabulary)[:, :length]
            empty = np.zeros((1, length), dtype=rows.dtype)
            keys = self.keys(np.concatenate([rows, empty]))
            keys.flags.writeable = False
            _KEY_CACHE[cache_key] = keys
            weakref.finalize(vocabulary, _KEY_CACHE.pop, cache_key, None)
        return keys

    def _symbol_rows(self, vocabulary: Vocabulary) -> np.ndarray:
        rows = vocabulary.rows[:, : self.length].astype(np.int64, copy=True)
        rows[rows == PAD] = 0
        return rows

    def _bit_rows(self, vocabulary: Vocabulary) -> np.ndarray:
        codec = self.codec
        symbols = self._symbol_rows(vocabulary)
        powers = codec.radix ** np.arange(codec.unit_size - 1, -1, -1, dtype=np.int64)
        indices = (symbols[:, :, None] // powers) % codec.radix  # 1-based char index, 0 = none
        indices = indices.reshape(symbols.shape[0], -1)[:, : codec.max_length]
        if codec.alphabet.byte_level:
            if np.any(indices == 1):
                raise InputError(
                    'protocol.encoding: "bits" pads values with zero bytes, so items of the bytes '
                    'alphabet must not contain the NUL byte; use protocol.encoding = "symbols"'
                )
            codes = np.maximum(indices - 1, 0)
        else:
            codes = indices
        shifts = np.arange(self.char_bits - 1, -1, -1, dtype=np.int64)
        bits = (codes[:, :, None] >> shifts) & 1
        return bits.reshape(symbols.shape[0], -1).astype(np.uint8)

    # -- prefixes ----------------------------------------------------------------------

    def keys(self, rows: np.ndarray) -> np.ndarray:
        """Oracle keys of prefix rows ``[K, l]``: the base-``B`` value, or a hash when it
        would not fit 64 bits."""
        rows = np.asarray(rows)
        length = rows.shape[1]
        if self.base**length > MAX_DOMAIN:
            return key_rows(rows.astype(np.int64))
        value = np.zeros(rows.shape[0], dtype=np.uint64)
        base = np.uint64(self.base)
        with np.errstate(over="ignore"):
            for column in range(length):
                value = value * base + rows[:, column].astype(np.uint64)
        return value

    def extensions(self, units: int) -> np.ndarray:
        """Every segment of ``units`` units a prefix that has not ended can grow by."""
        count = self.space.segment_count(units)
        if count > MAX_CANDIDATES:
            raise InputError(
                f"protocol.segment_length: a segment of {units} {self.unit_name} has {count:,} values, more "
                f"than the {MAX_CANDIDATES:,} candidates one level may query"
            )
        if self.kind == "bits":
            shifts = np.arange(units - 1, -1, -1, dtype=np.int64)
            return ((np.arange(count, dtype=np.int64)[:, None] >> shifts) & 1).astype(np.uint8)
        symbols = self.base - 1  # non-zero symbols; a zero ends the value
        blocks = []
        for live in range(units, -1, -1):  # ``live`` non-zero symbols, then zeros
            digits = np.arange(symbols**live, dtype=np.int64)
            powers = symbols ** np.arange(live - 1, -1, -1, dtype=np.int64)
            block = np.zeros((digits.size, units), dtype=np.int64)
            block[:, :live] = (digits[:, None] // powers) % symbols + 1
            blocks.append(block)
        return np.concatenate(blocks)

    def extend(self, parents: np.ndarray, units: int) -> np.ndarray:
        """Children of the parent prefixes ``[K, l]``: rows ``[K', l + units]``, parents in order.

        With symbols, a parent whose last symbol is 0 has ended and gets only
        the all-zero segment.
        """
        segments = self.extensions(units)
        parents = np.asarray(parents, dtype=segments.dtype)
        ended = np.zeros(parents.shape[0], dtype=bool)
        if self.kind == "symbols" and parents.shape[1] > 0:
            ended = parents[:, -1] == 0
        per_parent = np.where(ended, 1, segments.shape[0])
        total = int(per_parent.sum())
        if total > MAX_CANDIDATES:
            raise InputError(
                f"protocol.segment_length: extending {parents.shape[0]} prefixes by {units} "
                f"{self.unit_name} gives {total:,} candidates, more than {MAX_CANDIDATES:,}; "
                "use shorter segments or fewer protocol.candidates_per_step"
            )
        owner = np.repeat(np.arange(parents.shape[0]), per_parent)
        position = np.arange(total) - np.repeat(np.cumsum(per_parent) - per_parent, per_parent)
        grown = segments[position]
        grown[ended[owner]] = 0
        return np.concatenate([parents[owner], grown], axis=1)

    def character_codes(self, rows: np.ndarray) -> np.ndarray:
        """Per-character codes ``[K, max_length]`` of whole values (0: no character).

        Bits: each character's fixed-width code; symbols: the alphabet indices
        inside each symbol's units.
        """
        rows = np.asarray(rows, dtype=np.int64)
        if self.kind == "symbols":
            powers = self.codec.radix ** np.arange(self.codec.unit_size - 1, -1, -1, dtype=np.int64)
            return ((rows[:, :, None] // powers) % self.codec.radix).reshape(rows.shape[0], -1)
        weights = 1 << np.arange(self.char_bits - 1, -1, -1, dtype=np.int64)
        return rows.reshape(rows.shape[0], -1, self.char_bits) @ weights

    def reportable(self, rows: np.ndarray) -> np.ndarray:
        """Which whole values ``[K, m]`` are the encoding of some item.

        The others decode to nothing ("" is what users without an item
        report), to the same text as another value (a character after a "no
        character" code is never read), or to a code no character has; none
        of them can be an item, so the output's k places go to values that can.
        """
        codes = self.character_codes(rows)
        if codes.shape[1] == 0:
            return np.zeros(codes.shape[0], dtype=bool)
        ended = np.cumsum(codes == 0, axis=1) > 0
        valid = (codes[:, 0] != 0) & ~np.any(ended & (codes != 0), axis=1)
        if not self.codec.alphabet.byte_level:
            valid &= np.all(codes <= self.codec.alphabet.size, axis=1)
        return valid

    def decode(self, row: np.ndarray) -> str:
        """The text of a whole value (units up to the first "no character" code)."""
        if self.kind == "symbols":
            return self.codec.decode_symbols(np.asarray(row, dtype=np.int64))
        alphabet = self.codec.alphabet
        out = bytearray()
        for code in self.character_codes(np.asarray(row)[None, :])[0].tolist():
            if code == 0:
                break
            if alphabet.byte_level:
                out.append(code)
            elif code <= alphabet.size:
                out.append(alphabet.characters[code - 1])
            else:
                out.extend("\ufffd".encode())  # a code no character has: never an item
        return out.decode("utf-8", errors="replace")

    def describe(self) -> dict[str, object]:
        return {"encoding": self.kind, "value_length": self.length, "unit": self.unit_name, "unit_values": self.base}
