"""What a Bitstogram server that cannot trust its nodes checks, and its round log line."""

from __future__ import annotations

import numpy as np

from ..base import RoundRecord, ServerProtocol
from ..common.value_reports import (
    bit_positions,
    check_all_users_report,
    users_per_index,
)
from ..spec import NPY_HEADER_BYTES, HeldUsers, InvalidReply
from .messages import BitstogramRequest, BitstogramResponse


def check_reply(
    request: BitstogramRequest, response: BitstogramResponse, node: HeldUsers, server: ServerProtocol
) -> None:
    """Raise :class:`InvalidReply` unless ``response`` is a possible answer of the node."""
    check_all_users_report(response, node)
    tag = type(response).__name__
    shapes = {
        "bit_sums": (response.bit_sums.shape, (request.value_bits, 2 * request.buckets)),
        "final_sums": (response.final_sums.shape, (request.rows * request.buckets,)),
        "final_users": (response.final_users.shape, (request.rows,)),
    }
    for field, (got, expected) in shapes.items():
        if got != expected:
            raise InvalidReply(f"{tag}.{field}: shape {got}, expected {expected}")
    positions = users_per_index(
        server,
        node,
        response.bit_users,
        request.value_bits,
        lambda ids: bit_positions(request.partition_seed, request.value_bits, ids),
    )
    if not np.array_equal(response.bit_users, positions):
        raise InvalidReply(
            f"{tag}.bit_users: {response.bit_users.tolist()}, its users per bit position {positions.tolist()}"
        )
    if int(response.final_users.sum()) != node.users:
        raise InvalidReply(f"{tag}.final_users: they add up to {int(response.final_users.sum())}, not {node.users}")
    if np.any(np.abs(response.bit_sums).sum(axis=1) > positions) or int(np.abs(response.final_sums).sum()) > node.users:
        raise InvalidReply(f"{tag}: signed sums larger than the node's reports can add")


def reply_budget(request: BitstogramRequest, node: HeldUsers, server: ServerProtocol) -> int:
    cells = request.value_bits * (2 * request.buckets + 1) + request.rows * (request.buckets + 1)
    return 8 * cells + 4 * NPY_HEADER_BYTES


def describe_round(record: RoundRecord) -> str:
    values = record.values
    return (
        f"one round from {values['users']:,} users: {values['channels']:,} channels decoded bit by bit, "
        f"{values['candidates']:,} candidates, {values['above_threshold']} above the threshold "
        f"{values['threshold']:,.0f}, {values['reported']} reported"
    )
