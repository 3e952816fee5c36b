"""What one user of the exact baseline sends (``fedhh.protocols.communication``'s conventions)."""

from __future__ import annotations

from ...data.population import SHARE_BITS
from ...oracles.base import index_bits
from ..communication import Communication, SentReport
from .server import ExactServer


def exact_bits(server: ExactServer) -> Communication:
    """Every item a user holds, in the clear: its row of ``L`` symbols of ``ceil(log2 S)`` bits
    (``S`` the symbol ids) and its share in 32 bits; counted here for a user holding one item."""
    codec = server.codec
    bits = codec.max_rounds * index_bits(codec.symbol_ids) + SHARE_BITS
    return Communication(
        (SentReport("each item held, in the clear, with its share", bits, 1.0),),
        bits,
        note="per item the user holds: one item counted",
    )
