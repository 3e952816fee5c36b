"""What one Bitstogram user sends over a run (``fedhh.protocols.communication``'s conventions)."""

from __future__ import annotations

from ...oracles.base import index_bits
from ..communication import Communication, SentReport
from .server import BitstogramServer


def bitstogram_bits(server: BitstogramServer) -> Communication:
    """Bitstogram: the (channel, bit) pair of the user's bit position through Hashtogram, and the full value.

    The bit report is the position (``ceil(log2 m)`` bits for ``m``-bit
    values) and a Hashtogram report over the ``2T`` pairs (one row: a
    Hadamard index of ``log2 2T`` bits and the randomised bit); the full
    value goes through the ``R``-row Hashtogram of ``T`` buckets (row,
    index, bit).
    """
    request = server.request
    bits = index_bits(request.value_bits) + request.bit_oracle().report_bits()
    final = request.final_oracle().report_bits()
    reports = (
        SentReport("(channel, bit) pair with its bit position (hashtogram)", bits, 1.0),
        SentReport("full value (hashtogram)", final, 1.0),
    )
    return Communication(reports, bits + final)
