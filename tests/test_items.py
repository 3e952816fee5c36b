"""The item codec: symbol rows, unit sizes, end symbol, and its input policies."""

from __future__ import annotations

import numpy as np
import pytest

from fedhh.data.items import EOS, PAD, ItemCodec, ItemError, get_alphabet


def codec(alphabet: str = "lowercase", unit: int = 1, length: int = 10, **policies: str) -> ItemCodec:
    return ItemCodec(get_alphabet(alphabet), unit, length, **policies)


@pytest.mark.parametrize("alphabet", ["lowercase", "ascii", "bytes"])
@pytest.mark.parametrize("unit", [1, 2, 3, 4])
def test_round_trip_every_alphabet_and_unit_size(alphabet: str, unit: int) -> None:
    items = ["moon", "sun", "a", "starlights"]
    if alphabet != "lowercase":
        items += ["Hi there!", "x~y{z}"]
    if alphabet == "bytes":
        items += ["héllo", "日本"]
    c = codec(alphabet, unit, 10)
    encoded = c.encode(items)
    assert encoded.report.kept == len(items)
    assert [c.decode_symbols(row) for row in encoded.rows] == items
    assert c.decode_rows(encoded.rows) == items  # all rows at once
    prefixes = encoded.rows[:, :2]  # prefix rows of two symbols decode to the items' first characters
    assert c.decode_rows(prefixes) == [item.encode()[: 2 * unit].decode("utf-8", errors="replace") for item in items]
    assert encoded.rows.shape == (len(items), -(-10 // unit) + 1)


def test_rows_hold_symbols_then_end_then_padding() -> None:
    rows = codec(unit=2, length=6).encode(["moon", "sun"]).rows
    radix = 27
    mo, on = 13 * radix + 15, 15 * radix + 14
    su, n_ = 19 * radix + 21, 14 * radix
    np.testing.assert_array_equal(rows, [[mo, on, EOS, PAD], [su, n_, EOS, PAD]])


def test_max_rounds_counts_the_end_symbol() -> None:
    assert codec(unit=1, length=10).max_rounds == 11
    assert codec(unit=2, length=10).max_rounds == 6
    assert codec(unit=3, length=10).max_rounds == 5


def test_overlong_policies() -> None:
    items = ["short", "muchtoolongword"]
    with pytest.raises(ItemError, match="protocol.max_length = 8"):
        codec(length=8, overlong="error").encode(items)
    dropped = codec(length=8, overlong="drop").encode(items)
    assert dropped.kept.tolist() == [True, False]
    assert dropped.report.dropped_overlong == 1
    truncating = codec(length=8, overlong="truncate")
    truncated = truncating.encode(items)
    assert truncated.report.truncated == 1
    assert truncating.decode_symbols(truncated.rows[1]) == "muchtool"


def test_unknown_characters_error_or_drop_whole_item() -> None:
    with pytest.raises(ItemError, match="outside the 'lowercase' alphabet"):
        codec().encode(["fine", "Not-fine"])
    dropped = codec(unknown_chars="drop").encode(["fine", "café", "ok"])
    assert dropped.kept.tolist() == [True, False, True]
    assert dropped.report.dropped_unknown_chars == 1
    assert [codec().decode_symbols(r) for r in dropped.rows] == ["fine", "ok"]


@pytest.mark.parametrize(
    ("item", "message"),
    [("", "empty"), ("bad\udc80", "not valid Unicode"), (b"bytes", "expected str")],
)
def test_bad_items_are_refused(item: object, message: str) -> None:
    with pytest.raises(ItemError, match=message):
        codec("bytes").encode(["ok", item])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"unit": 5}, "unit_size"), ({"unit": 0}, "unit_size"), ({"length": 0}, "max_length"),
     ({"overlong": "clip"}, "overlong"), ({"unknown_chars": "skip"}, "unknown_chars")],
)
def test_bad_codec_parameters_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=f"protocol.{field}"):
        codec(**kwargs)


def test_unknown_alphabet_lists_choices() -> None:
    with pytest.raises(ValueError, match="allowed: \\['ascii', 'bytes', 'lowercase'\\]"):
        get_alphabet("klingon")
