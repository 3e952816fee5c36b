"""Small populations built from hand-written items, shared by the tests."""

from __future__ import annotations

from fedhh.items import ItemCodec, get_alphabet
from fedhh.population import Shard, Vocabulary


def lowercase_codec(max_length: int = 8, unit_size: int = 1) -> ItemCodec:
    return ItemCodec(get_alphabet("lowercase"), unit_size, max_length)


def population_of(items: list[str], codec: ItemCodec | None = None) -> Shard:
    """One user per listed item, in order."""
    vocabulary, item_ids = Vocabulary.encode(items, codec or lowercase_codec())
    return Shard.single_item(vocabulary, 0, item_ids)
