"""What one user of the curator baseline sends (``fedhh.protocols.communication``'s conventions)."""

from __future__ import annotations

from ...oracles.base import index_bits
from ..communication import Communication, SentReport
from .server import CentralServer


def central_bits(server: CentralServer) -> Communication:
    """One item, in the clear: its row of ``L`` symbols (end symbol included) of ``ceil(log2 S)``
    bits each, ``S`` the symbol ids; every user sends it once."""
    codec = server.codec
    bits = codec.max_rounds * index_bits(codec.symbol_ids)
    return Communication((SentReport("its item, in the clear", bits, 1.0),), bits)
