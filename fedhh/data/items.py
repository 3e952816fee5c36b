"""Items as fixed-width rows of symbols over a public alphabet.

A prefix-growing protocol needs every item cut into the same kind of pieces
on every device, so the alphabet, the unit size (characters per symbol) and
the maximum length are public parameters.  An item becomes a row of symbol
ids followed by the end-of-sequence symbol and padding:

    "moon", unit 2  ->  [id("mo"), id("on"), EOS, PAD, ...]

Symbol ids: a unit of ``u`` characters with alphabet indices ``a_1..a_u`` in
``1..A`` (``0`` for the missing characters of a short final unit) is
``sum_j a_j (A+1)^(u-j)``.  The all-missing unit, id ``0``, is the
end-of-sequence symbol; ``PAD = -1`` fills the row after it.  Ids stay below
``(A+1)^u <= 257^4 < 2^63``.

Characters are the item's UTF-8 bytes for the ``bytes`` alphabet and its
code points for the others; an item with a character outside the alphabet is
an error or is dropped whole (never altered), and an item longer than the
maximum length is an error, dropped or truncated, as the caller chooses.
Every drop is counted in :class:`EncodingReport`.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..errors import InputError
from ..resources import INDEX_BYTES, require_memory

EOS = 0
PAD = -1

OverlongPolicy = Literal["error", "drop", "truncate"]
UnknownCharPolicy = Literal["error", "drop"]
OVERLONG_POLICIES: tuple[str, ...] = ("error", "drop", "truncate")
UNKNOWN_CHAR_POLICIES: tuple[str, ...] = ("error", "drop")
MAX_UNIT_SIZE = 4


class ItemError(InputError):
    """An item that cannot be encoded under the configured policies.

    ``position`` is the item's index in the list given to the codec and
    ``reason`` the message without it, so a caller that knows where the list
    came from (a file's line or row) can say where the item is instead.
    """

    def __init__(self, message: str, position: int | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.position = position
        self.reason = message if reason is None else reason


def _item_error(item: object, position: int, reason: str) -> ItemError:
    """An error about the item at ``position`` of the encoded list."""
    return ItemError(f"item {item!r} (position {position}) {reason}", position, f"item {item!r} {reason}")


@dataclass(frozen=True)
class Alphabet:
    """A public alphabet: a byte-to-index table shared by server and devices."""

    name: str
    characters: bytes

    @property
    def size(self) -> int:
        return len(self.characters)

    @property
    def byte_level(self) -> bool:
        """True when items are read as UTF-8 bytes rather than characters."""
        return self.name == "bytes"

    def index_table(self) -> np.ndarray:
        """``table[b]`` is the 1-based index of byte ``b``, 0 if not in the alphabet."""
        table = np.zeros(256, dtype=np.int64)
        table[np.frombuffer(self.characters, dtype=np.uint8)] = np.arange(1, self.size + 1)
        return table


ALPHABETS: dict[str, Alphabet] = {
    "lowercase": Alphabet("lowercase", string.ascii_lowercase.encode()),
    "ascii": Alphabet("ascii", bytes(range(0x20, 0x7F))),
    "bytes": Alphabet("bytes", bytes(range(256))),
}


def get_alphabet(name: str) -> Alphabet:
    try:
        return ALPHABETS[name]
    except KeyError:
        raise InputError(f"protocol.alphabet: unknown alphabet {name!r}; allowed: {sorted(ALPHABETS)}") from None


@dataclass(frozen=True)
class EncodingReport:
    """What happened to the vocabulary during encoding."""

    kept: int
    dropped_overlong: int
    truncated: int
    dropped_unknown_chars: int

    def to_dict(self) -> dict[str, int]:
        return {
            "kept": self.kept,
            "dropped_overlong": self.dropped_overlong,
            "truncated": self.truncated,
            "dropped_unknown_chars": self.dropped_unknown_chars,
        }


@dataclass(frozen=True)
class EncodedItems:
    """Symbol rows of a list of items, with the mask of the items that were kept."""

    rows: np.ndarray  # int64 [n_kept, max_symbols + 1]
    kept: np.ndarray  # bool [n_items]
    report: EncodingReport


@dataclass(frozen=True)
class ItemCodec:
    """Encode strings to symbol rows and decode symbol rows back to strings."""

    alphabet: Alphabet
    unit_size: int
    max_length: int  # in characters (bytes for the ``bytes`` alphabet)
    overlong: OverlongPolicy = "drop"
    unknown_chars: UnknownCharPolicy = "error"

    def __post_init__(self) -> None:
        if not 1 <= self.unit_size <= MAX_UNIT_SIZE:
            raise InputError(f"protocol.unit_size: must be an integer in 1..{MAX_UNIT_SIZE}, got {self.unit_size}")
        if self.max_length < 1:
            raise InputError(f"protocol.max_length: must be >= 1, got {self.max_length}")
        if self.overlong not in OVERLONG_POLICIES:
            raise InputError(f"protocol.overlong: got {self.overlong!r}; allowed: {list(OVERLONG_POLICIES)}")
        if self.unknown_chars not in UNKNOWN_CHAR_POLICIES:
            raise InputError(
                f"protocol.unknown_chars: got {self.unknown_chars!r}; allowed: {list(UNKNOWN_CHAR_POLICIES)}"
            )

    @property
    def max_symbols(self) -> int:
        """Symbols of the longest item, end-of-sequence not included."""
        return -(-self.max_length // self.unit_size)

    @property
    def max_rounds(self) -> int:
        """Trie depth ``L``: the symbols of the longest item plus end-of-sequence."""
        return self.max_symbols + 1

    @property
    def radix(self) -> int:
        return self.alphabet.size + 1

    @property
    def symbol_ids(self) -> int:
        """Distinct symbol ids of one position, end-of-sequence included: ``radix ** unit_size``."""
        return self.radix**self.unit_size

    def _units(self, items: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(code units of all items one after the other, units per item), with C-level loops only.

        Byte alphabets take the UTF-8 bytes.  Character alphabets take the code
        points, every one beyond ASCII becoming 0xFF, which no character
        alphabet contains (so such items are reported as having unknown
        characters, as their UTF-8 bytes would be).
        """
        if set(map(type, items)) - {str} or not all(items):
            for position, item in enumerate(items):
                _checked_item(item, position)
        try:
            if self.alphabet.byte_level:
                encoded = list(map(str.encode, items))
                lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(items))
                return np.frombuffer(b"".join(encoded), dtype=np.uint8), lengths
            codes = np.frombuffer("".join(items).encode("utf-32-le"), dtype=np.uint32)
        except UnicodeEncodeError:
            for position, item in enumerate(items):
                _check_unicode(item, position)
            raise
        lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
        return np.where(codes < 0x80, codes, 0xFF).astype(np.uint8), lengths

    def encode(self, items: list[str]) -> EncodedItems:
        """Encode items (vectorised over their characters) under the policies."""
        flat, lengths = self._units(items)
        indices = self.alphabet.index_table()[flat]
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1])) if lengths.size else np.zeros(0, np.int64)

        bad_char = np.zeros(lengths.size, dtype=bool)
        if flat.size:
            bad_positions = np.flatnonzero(indices == 0)
            bad_char[np.searchsorted(starts, bad_positions, side="right") - 1] = True
        if bad_char.any() and self.unknown_chars == "error":
            first = int(np.flatnonzero(bad_char)[0])
            raise _item_error(
                items[first],
                first,
                f"has characters outside the {self.alphabet.name!r} alphabet; set protocol.unknown_chars = "
                f'"drop" to drop such items, or choose another protocol.alphabet ({sorted(ALPHABETS)})',
            )
        overlong = (lengths > self.max_length) & ~bad_char
        if overlong.any() and self.overlong == "error":
            first = int(np.flatnonzero(overlong)[0])
            raise _item_error(
                items[first],
                first,
                f"has {lengths[first]} characters, more than protocol.max_length = {self.max_length}; set "
                'protocol.overlong to "drop" or "truncate" to accept it',
            )
        kept = ~bad_char
        if self.overlong == "drop":
            kept &= ~overlong
        clipped = np.minimum(lengths, self.max_length)
        self.require_encoding_memory(int(kept.sum()), int(clipped[kept].max(initial=0)), int(flat.size))
        rows = self._rows(indices, starts[kept], clipped[kept])
        report = EncodingReport(
            kept=int(kept.sum()),
            dropped_overlong=int(overlong.sum()) if self.overlong == "drop" else 0,
            truncated=int(overlong.sum()) if self.overlong == "truncate" else 0,
            dropped_unknown_chars=int(bad_char.sum()),
        )
        return EncodedItems(rows=rows, kept=kept, report=report)

    def encoding_bytes(self, n_items: int, longest: int, characters: int) -> int:
        """Bytes :meth:`encode` holds at once to encode ``n_items`` items of at most ``longest``
        characters (``characters`` in all): every item's row of ``max_rounds`` symbols, and, while
        they are computed, the character indices of all items and the characters (and, for units
        of several characters, the symbols) of each item up to the longest one present, not up to
        ``max_length``.  Int64 arrays that exist at the same time, so a lower bound of the peak;
        the rest (finding the distinct rows, the items' own texts) is a small share of it."""
        present = -(-min(longest, self.max_length) // self.unit_size)  # symbols of the longest item
        per_item = self.max_rounds + present * self.unit_size + (present if self.unit_size > 1 else 0)
        return INDEX_BYTES * (characters + n_items * per_item)

    def require_encoding_memory(self, n_items: int, longest: int, characters: int) -> None:
        """Refuse an encoding this process cannot hold (:meth:`encoding_bytes`), before any of it exists."""
        require_memory(
            self.encoding_bytes(n_items, longest, characters),
            f"protocol.max_length = {self.max_length:,}: encoding {n_items:,} items into rows of "
            f"{self.max_rounds:,} symbols",
            "lower protocol.max_length (longer items can be dropped or truncated: protocol.overlong)",
        )

    def require_memory_to_encode(self, items: list[str]) -> None:
        """:meth:`require_encoding_memory` for ``items`` before :meth:`encode` reads them: their
        lengths and the overlong policy give what is kept, taking every character to be in the
        alphabet (as the sampled sources' candidates are: they are drawn or filtered by it)."""
        lengths = np.fromiter(
            map(len, map(str.encode, items)) if self.alphabet.byte_level else map(len, items),
            dtype=np.int64,
            count=len(items),
        )
        kept = lengths <= self.max_length if self.overlong == "drop" else np.ones(lengths.size, dtype=bool)
        self.require_encoding_memory(int(kept.sum()), int(lengths[kept].max(initial=0)), int(lengths.sum()))

    def _rows(self, indices: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Pack character indices into symbol rows, one row per item.

        Characters and symbols are computed up to the longest item present;
        the columns after it are padding in every row, written once.
        """
        n_items = starts.shape[0]
        present = -(-int(lengths.max(initial=0)) // self.unit_size)  # symbols of the longest item
        width = present * self.unit_size
        chars = np.zeros((n_items, width), dtype=np.int64)
        if n_items and width:
            valid = np.arange(width)[None, :] < lengths[:, None]
            # the kept characters of every item in turn, as the row-major order of ``valid`` lists them
            before = np.cumsum(lengths) - lengths
            source = np.arange(int(lengths.sum())) + np.repeat(starts - before, lengths)
            chars[valid] = indices[source]
        if self.unit_size == 1:
            symbols = chars  # a unit of one character is its index
        else:
            weights = self.radix ** np.arange(self.unit_size - 1, -1, -1, dtype=np.int64)
            symbols = chars.reshape(n_items, present, self.unit_size) @ weights
        n_symbols = -(-lengths // self.unit_size)
        rows = np.full((n_items, self.max_rounds), PAD, dtype=np.int64)
        head = rows[:, : present + 1]  # a view: every symbol and end-of-sequence lies here
        head[:, :present] = symbols
        position = np.arange(present + 1)[None, :]
        head[position == n_symbols[:, None]] = EOS
        head[position > n_symbols[:, None]] = PAD
        return rows

    def decode_symbols(self, symbols: np.ndarray) -> str:
        """The text of a prefix row (stops at end-of-sequence or padding)."""
        return self.decode_rows(np.asarray(symbols, dtype=np.int64)[None, :])[0]

    def decode_rows(self, rows: np.ndarray) -> list[str]:
        """The text of each prefix row, vectorised over the rows' symbols."""
        rows = np.asarray(rows, dtype=np.int64)
        live = np.logical_and.accumulate(rows > EOS, axis=1)  # symbols before end-of-sequence or padding
        powers = self.radix ** np.arange(self.unit_size - 1, -1, -1, dtype=np.int64)
        indices = np.where(live[:, :, None], (rows[:, :, None] // powers) % self.radix, 0).reshape(
            rows.shape[0], rows.shape[1] * self.unit_size
        )
        present = indices > 0  # index 0: no character in this place of the unit
        codes = np.frombuffer(self.alphabet.characters, dtype=np.uint8)[indices[present] - 1].tobytes()
        ends = np.cumsum(np.count_nonzero(present, axis=1)).tolist()
        decode = (lambda raw: raw.decode("utf-8", errors="replace")) if self.alphabet.byte_level else bytes.decode
        return [decode(codes[start:end]) for start, end in zip([0, *ends[:-1]], ends)]

    def describe(self) -> dict[str, object]:
        return {
            "alphabet": self.alphabet.name,
            "unit_size": self.unit_size,
            "max_length": self.max_length,
            "max_rounds": self.max_rounds,
            "overlong": self.overlong,
            "unknown_chars": self.unknown_chars,
        }


def _check_unicode(item: str, position: int) -> None:
    try:
        item.encode("utf-8")
    except UnicodeEncodeError as error:
        raise _item_error(
            item, position, f"is not valid Unicode ({error.reason}: {item[error.start : error.end]!r})"
        ) from None


def _checked_item(item: object, position: int) -> str:
    if not isinstance(item, str):
        raise _item_error(item, position, f"is {type(item).__name__}, expected str")
    if item == "":
        raise _item_error(item, position, "is empty; items must have at least one character")
    return item
