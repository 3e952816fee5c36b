"""The prefix index (one sort serving every depth) against the definition of each depth's
prefixes, and its per-round candidates (the prefixes extending the trie)."""

from __future__ import annotations

import numpy as np
import pytest

from fedhh.data.items import PAD
from fedhh.data.population import Vocabulary
from fedhh.data.prefixes import PrefixIndex, row_keys, rows_in

from .helpers import lowercase_codec

WORDS = ["the", "then", "there", "to", "toe", "a", "an", "and", "ant", "zebra", "zen", "z", "thermal", "tree"]


def defined_level(rows: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Depth ``depth``'s distinct prefixes (in key order) and each row's prefix index, by definition."""
    has_symbol = rows[:, depth - 1] != PAD
    prefixes = np.ascontiguousarray(rows[has_symbol, :depth])
    _, first, inverse = np.unique(row_keys(prefixes), return_index=True, return_inverse=True)
    item_to_prefix = np.full(rows.shape[0], -1, dtype=np.int64)
    item_to_prefix[has_symbol] = inverse.ravel()
    return prefixes[first], item_to_prefix


def coded_rows(rng: np.random.Generator, items: int, width: int, symbols: int) -> np.ndarray:
    """Rows as a codec writes them (symbols, then PAD after each item's end), duplicates allowed."""
    lengths = rng.integers(0, width + 1, items)
    symbols_drawn = rng.integers(0, symbols, (items, width))
    return np.where(np.arange(width)[None, :] < lengths[:, None], symbols_drawn, PAD)


def row_sets() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    vocabulary, _ = Vocabulary.encode(WORDS, lowercase_codec(max_length=8))
    return [
        vocabulary.rows,
        *(coded_rows(rng, int(rng.integers(1, 300)), int(rng.integers(1, 7)), 4) for _ in range(20)),
        rng.integers(-2, 3, (200, 5)),  # any int64 rows, PAD anywhere
        np.zeros((0, 3), dtype=np.int64),
    ]


@pytest.mark.parametrize("rows", row_sets())
def test_every_depth_is_its_definition(rows: np.ndarray) -> None:
    index = PrefixIndex(rows)
    for depth in range(1, rows.shape[1] + 1):
        prefix_rows, item_to_prefix = index.at(depth)
        expected_rows, expected_map = defined_level(rows, depth)
        np.testing.assert_array_equal(prefix_rows, expected_rows)
        np.testing.assert_array_equal(item_to_prefix, expected_map)
        assert prefix_rows.dtype == np.int64 and item_to_prefix.dtype == np.int64


@pytest.mark.parametrize("rows", row_sets()[:-1])
def test_candidates_are_the_prefixes_extending_the_parents(rows: np.ndarray) -> None:
    rng = np.random.default_rng(3)
    index = PrefixIndex(rows)
    for depth in range(1, rows.shape[1] + 1):
        prefix_rows, _ = index.at(depth)
        if depth == 1:
            parents = np.zeros((0, 0), dtype=np.int64)
            expected = prefix_rows
        else:
            earlier, _ = index.at(depth - 1)
            parents = earlier[rng.random(earlier.shape[0]) < 0.4]
            parents = np.concatenate([parents, np.full((1, depth - 1), 99)])  # a parent no row has
            expected = prefix_rows[rows_in(prefix_rows[:, :-1], parents)]
        candidate_rows, candidate_of_prefix = index.extending(depth, parents)
        np.testing.assert_array_equal(candidate_rows, expected)
        assert candidate_of_prefix.shape == (prefix_rows.shape[0] + 1,) and candidate_of_prefix[-1] == -1
        listed = np.flatnonzero(candidate_of_prefix[:-1] >= 0)
        np.testing.assert_array_equal(prefix_rows[listed], candidate_rows)
        np.testing.assert_array_equal(candidate_of_prefix[listed], np.arange(listed.size))


def test_the_kept_answer_is_only_reused_for_the_same_question() -> None:
    vocabulary, _ = Vocabulary.encode(WORDS, lowercase_codec(max_length=8))
    index = PrefixIndex(vocabulary.rows)
    a, t = (vocabulary.codec.encode([letter]).rows[:1, :1] for letter in "at")
    parents = a.copy()
    first, _ = index.extending(2, parents)
    assert vocabulary.codec.decode_rows(first[first[:, -1] != 0]) == ["an"]  # and "a" itself ends there
    parents[...] = t  # the same array, asking another question
    second, _ = index.extending(2, parents)
    assert vocabulary.codec.decode_rows(second) == ["th", "to", "tr"]
    with pytest.raises(ValueError, match="rows of 1 symbols"):
        index.extending(2, np.zeros((1, 2), dtype=np.int64))


def test_a_vocabulary_hands_its_sorted_key_order_to_its_index() -> None:
    rng = np.random.default_rng(11)
    letters = np.array(list("abcdefghij"))
    words = ["".join(rng.choice(letters, int(rng.integers(1, 7)))) for _ in range(2_000)]  # repeats too
    vocabulary, _ = Vocabulary.encode(words + WORDS, lowercase_codec(max_length=6, unit_size=2))
    order = vocabulary.key_order
    assert order is not None and sorted(order.tolist()) == list(range(vocabulary.size))
    keys = row_keys(vocabulary.rows)[order]
    np.testing.assert_array_equal(keys, np.unique(keys))  # in key order, and the rows distinct
    fresh = PrefixIndex(vocabulary.rows)  # sorts for itself
    for depth in range(1, vocabulary.rows.shape[1] + 1):
        for given, own in zip(vocabulary.prefixes.at(depth), fresh.at(depth)):
            np.testing.assert_array_equal(given, own)
