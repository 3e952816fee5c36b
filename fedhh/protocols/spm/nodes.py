"""What an SPM server that cannot trust its nodes checks, and its round log line."""

from __future__ import annotations

import numpy as np

from ..base import RoundRecord, ServerProtocol
from ..common.value_reports import (
    check_all_users_report,
    users_per_index,
)
from ..spec import NPY_HEADER_BYTES, HeldUsers, InvalidReply
from .client import segment_pairs, user_pairs
from .messages import SPMRequest, SPMResponse
from .parameters import FINAL, PAIRS, SEGMENTS


def expected_sizes(request: SPMRequest) -> tuple[int, int]:
    """``(counts, reporters)`` lengths of an honest reply."""
    if request.mode == FINAL:
        return int(request.candidates.size), 1
    widths = np.diff(request.bounds)
    if request.mode == SEGMENTS:
        return int(sum(1 << int(w) for w in widths)), request.segments
    sizes = np.diff(request.pattern_offsets)
    pairs = segment_pairs(request.segments)
    return int(sum(sizes[a] * sizes[b] + sizes[a] + sizes[b] for a, b in pairs)), len(pairs)


def check_reply(request: SPMRequest, response: SPMResponse, node: HeldUsers, server: ServerProtocol) -> None:
    tag = type(response).__name__
    check_all_users_report(response, node)
    counts, reporters = expected_sizes(request)
    if response.counts.size != counts or response.reporters.size != reporters:
        raise InvalidReply(
            f"{tag}.counts: {response.counts.size} counts from {response.reporters.size} groups, "
            f"expected {counts} from {reporters}"
        )
    if request.mode == FINAL:
        expected = np.array([node.users])
    elif request.mode == PAIRS:
        expected = users_per_index(
            server,
            node,
            response.reporters,
            reporters,
            lambda ids: user_pairs(request.partition_seed, request.segments, ids),
        )
    elif server.by_law:  # a law simulation draws the pairs' split: any with two segments a user
        expected = response.reporters
        fits = int(expected.min(initial=0)) >= 0 and int(expected.max(initial=0)) <= node.users
        if not fits or int(expected.sum()) != 2 * node.users:
            raise InvalidReply(
                f"{tag}.reporters: {expected.tolist()}, not two segments for each of the node's {node.users} users"
            )
    else:
        chosen = segment_pairs(request.segments)[
            user_pairs(
                request.partition_seed, request.segments, np.arange(node.first_user, node.first_user + node.users)
            )
        ]
        expected = np.array([(chosen == s).any(axis=1).sum() for s in range(request.segments)])
    if not np.array_equal(response.reporters, expected):
        raise InvalidReply(
            f"{tag}.reporters: {response.reporters.tolist()}, the node's users per group {expected.tolist()}"
        )
    limit = int(response.reporters.max(initial=0)) if request.mode != FINAL else node.users
    if response.counts.size and int(response.counts.max()) > limit:
        raise InvalidReply(f"{tag}.counts: a count exceeds {limit}, the most its reports can support")


def reply_budget(request: SPMRequest, node: HeldUsers, server: ServerProtocol) -> int:
    counts, reporters = expected_sizes(request)
    return 8 * (counts + reporters) + 2 * NPY_HEADER_BYTES


def describe_round(record: RoundRecord) -> str:
    values = record.values
    if values["stage"] == SEGMENTS:
        return f"segments from {values['users']:,} users: patterns kept {values['patterns_kept']}"
    if values["stage"] == PAIRS:
        return (
            f"segment pairs from {values['users']:,} users: {values['value_pairs_kept']} value pairs kept "
            f"per segment pair, {values['candidates']:,} candidates"
        )
    return (
        f"full values from {values['users']:,} users: {values['candidates']:,} candidates, "
        f"{values['reported']} reported"
    )
