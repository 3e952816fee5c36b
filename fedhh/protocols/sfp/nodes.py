"""What an SFP server that cannot trust its nodes checks, and its round log line."""

from __future__ import annotations

import numpy as np

from ..base import RoundRecord, ServerProtocol
from ..common.value_reports import check_all_users_report, users_per_index
from ..spec import HeldUsers, InvalidReply
from .encoding import user_positions
from .messages import SFPRequest, SFPResponse, flat_cells
from .server import SFPServer


def check_reply(request: SFPRequest, response: SFPResponse, node: HeldUsers, server: ServerProtocol) -> None:
    """A node reports exactly its users: per position as public randomness placed them, and once each in full."""
    tag = type(response).__name__
    check_all_users_report(response, node)
    assert isinstance(server, SFPServer)
    oracle = request.fragment_oracle(server.codec)
    if response.fragment_counts.shape != (server.positions, oracle.flat_size()):
        raise InvalidReply(
            f"{tag}.fragment_counts: shape {response.fragment_counts.shape}, expected "
            f"({server.positions}, {oracle.flat_size()})"
        )
    reported = response.fragment_reporters.sum(axis=1)
    placed = users_per_index(
        server,
        node,
        reported,
        server.positions,
        lambda ids: user_positions(request.position_seed, server.positions, ids),
    )
    if not np.array_equal(reported, placed):
        raise InvalidReply(f"{tag}.fragment_reporters: reports per position differ from the node's users per position")
    words = int(response.word_reporters.sum())
    if words != (node.users if request.word_epsilon > 0 else 0):
        raise InvalidReply(f"{tag}.word_reporters: {words} word reports from {node.users} users")


def reply_budget(request: SFPRequest, node: HeldUsers, server: ServerProtocol) -> int:
    assert isinstance(server, SFPServer)
    cells = server.positions * (flat_cells(request.fragment_oracle(server.codec)) + request.sketch_rows)
    if request.word_epsilon > 0:
        cells += flat_cells(request.word_oracle()) + request.sketch_rows
    return 8 * cells + 2048


def describe_round(record: RoundRecord) -> str:
    values = record.values
    return (
        f"fragments of {values['users']:,} users: {values['fragments_kept']} kept per position, "
        f"{values['candidates']} words reassembled, {values['reported']} reported"
    )
