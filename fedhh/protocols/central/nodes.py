"""What a curator that cannot trust its nodes checks, and why dropouts keep the guarantee."""

from __future__ import annotations

from ..base import RoundRecord
from ..common.item_baselines import check_item_rows
from ..spec import HeldUsers, InvalidReply
from .messages import ItemHistogram, ItemRequest
from .server import CentralServer

DROPOUT_PRIVACY = (
    "unchanged: a user whose item is lost is a user outside the population, and the guarantee "
    "(add/remove one user) holds for every population; the noise is added once, by the server, after "
    "aggregation, so lost items only lower counts"
)


def check_reply(request: ItemRequest, response: ItemHistogram, node: HeldUsers, server: CentralServer) -> None:
    """Counts that add up to at most the node's users, each item listed once, rows of symbol ids."""
    check_histogram(response, node.users, server.codec.symbol_ids)


def check_histogram(response: ItemHistogram, users: int, symbols: int) -> None:
    """Raise :class:`InvalidReply` unless ``response`` is a possible histogram of ``users`` users' items."""
    if response.sampled_users != users:
        raise InvalidReply(
            f"ItemHistogram.sampled_users: the node holds {users} users, it says {response.sampled_users}"
        )
    total = int(response.counts.sum())
    if total != response.responding_users or total > users:
        raise InvalidReply(
            f"ItemHistogram.counts: they add up to {total}, responding_users says "
            f"{response.responding_users}, of {users} users"
        )
    check_item_rows(response.items, symbols, "ItemHistogram.items")


def describe_round(record: RoundRecord) -> str:
    """The curator's log line: what it counted (its own view) next to what it released."""
    values, seen = record.values, record.server_view
    return (
        f"{seen['users_counted']:,} users sent {seen['items_present']:,} distinct items; "
        f"{values['above_threshold']:,} passed the threshold, {values['released']:,} released"
    )
