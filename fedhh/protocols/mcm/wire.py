"""What one MCM user sends over a run (``fedhh.protocols.communication``'s conventions)."""

from __future__ import annotations

from ...oracles.base import index_bits
from ..communication import Communication, SentReport
from .server import MCMServer


def mcm_bits(server: MCMServer) -> Communication:
    """MCM: the (channel, bit) pair of the user's bit position through OLH, and the full value through OLH.

    Each OLH report is a 64-bit hash seed and a bucket of ``ceil(log2 g)``
    bits (``g`` from the report's ε/2); the bit report also names the
    position (``ceil(log2 m)`` bits).
    """
    bits = index_bits(server.params.value_bits) + server.bit_oracle.report_bits()
    final = server.final_oracle.report_bits()
    reports = (
        SentReport("(channel, bit) pair with its bit position (olh)", bits, 1.0),
        SentReport("full value (olh)", final, 1.0),
    )
    return Communication(reports, bits + final)
