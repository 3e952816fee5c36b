"""What an exact server checks of its nodes' replies, and what dropouts change."""

from __future__ import annotations

from ..base import RoundRecord
from ..common.item_baselines import check_item_rows
from ..spec import HeldUsers, InvalidReply
from .messages import SHARE_UNIT, ItemsRequest, ItemWeights
from .server import ExactServer

DROPOUT_PRIVACY = (
    "none to keep: the exact baseline has no privacy guarantee; lost users' items are missing from the counts"
)


def check_reply(request: ItemsRequest, response: ItemWeights, node: HeldUsers, server: ExactServer) -> None:
    """Shares that a node's users can hold (at most one whole user per user, to rounding), each item once."""
    symbols = server.codec.symbol_ids
    if response.sampled_users != node.users or response.responding_users > node.users:
        raise InvalidReply(
            f"ItemWeights.sampled_users: the node holds {node.users} users, it says "
            f"{response.sampled_users} ({response.responding_users} responding)"
        )
    rows = response.items
    # each user's shares add up to 2**32 within half a unit per item it holds
    if int(response.weights.sum()) > response.responding_users * SHARE_UNIT + rows.shape[0] * response.responding_users:
        raise InvalidReply(f"ItemWeights.weights: more than the {response.responding_users} responding users' shares")
    check_item_rows(rows, symbols, "ItemWeights.items")


def describe_round(record: RoundRecord) -> str:
    values = record.values
    return (
        f"{values['users']:,} users hold {values['items_present']:,} distinct items; "
        f"the top {values['released']:,} published"
    )
