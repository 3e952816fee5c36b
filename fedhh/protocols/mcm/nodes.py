"""What an MCM server that cannot trust its nodes checks, and its round log line."""

from __future__ import annotations

import numpy as np

from ..base import RoundRecord, ServerProtocol
from ..common.value_reports import (
    bit_positions,
    check_all_users_report,
    users_per_index,
)
from ..spec import NPY_HEADER_BYTES, HeldUsers, InvalidReply
from .messages import MCMRequest, MCMResponse
from .parameters import BITS, FINAL


def check_reply(request: MCMRequest, response: MCMResponse, node: HeldUsers, server: ServerProtocol) -> None:
    check_all_users_report(response, node)
    tag = type(response).__name__
    if request.mode == FINAL:
        expected_counts, expected = request.candidates.size, np.array([node.users])
    else:
        expected_counts = request.value_bits * 2 * request.channels
        expected = users_per_index(
            server,
            node,
            response.reporters,
            request.value_bits,
            lambda ids: bit_positions(request.partition_seed, request.value_bits, ids),
        )
    if response.counts.size != expected_counts or not np.array_equal(response.reporters, expected):
        raise InvalidReply(
            f"{tag}: {response.counts.size} counts from reporters {response.reporters.tolist()}, "
            f"expected {expected_counts} from {expected.tolist()}"
        )
    limits = expected if request.mode == FINAL else np.repeat(expected, 2 * request.channels)
    if np.any(response.counts > limits):
        raise InvalidReply(f"{tag}.counts: a count exceeds the reports that can support it")


def reply_budget(request: MCMRequest, node: HeldUsers, server: ServerProtocol) -> int:
    counts = request.candidates.size if request.mode == FINAL else request.value_bits * 2 * request.channels
    return 8 * (counts + request.value_bits + 1) + 2 * NPY_HEADER_BYTES


def describe_round(record: RoundRecord) -> str:
    values = record.values
    if values["stage"] == BITS:
        return (
            f"(channel, bit) pairs from {values['users']:,} users: {values['channels']:,} channels, "
            f"{values['candidates']:,} candidates"
        )
    return (
        f"full values from {values['users']:,} users: {values['candidates']:,} candidates, "
        f"{values['reported']} reported"
    )
