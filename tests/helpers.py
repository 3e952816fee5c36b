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


def processes_left_behind(before: dict[int, int], timeout: float = 30.0) -> list[int]:
    """PIDs of this process's descendants that were not in ``before`` and are still running after
    up to ``timeout`` seconds (a cluster's processes take a moment to exit after its shutdown)."""
    import os
    import time

    from simulations.processes import descendant_identities

    deadline = time.monotonic() + timeout
    while (left := set(descendant_identities(os.getpid()).items()) - set(before.items())) and time.monotonic() < deadline:
        time.sleep(0.2)
    return sorted(pid for pid, _ in left)
