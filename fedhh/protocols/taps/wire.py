"""What one TAPS user sends over a run (``fedhh.protocols.communication``'s conventions)."""

from __future__ import annotations

from ...oracles.base import index_bits
from ..communication import Communication, SentReport
from .server import TapsServer


def taps_bits(server: TapsServer) -> Communication:
    """One report of the prefix of the user's level (``ceil(log2 g)`` bits) through the oracle.

    The oracle's report size does not grow with the prefix's domain for the
    hashing oracles (OLH, BLH); for GRR it does, so the maximum is that of
    whole values and the expectation weighs the levels equally (they hold
    equal shares of each party), taking every level at the largest length it
    can have, whole values (the lengths adapt as the run goes).
    """
    level_field = index_bits(server.levels)
    bits = level_field + server.oracle(server.encoding.length).report_bits()
    return Communication(
        (SentReport(f"prefix of the user's level ({server.keys.tree_oracle}) with its level", bits, 1.0),), bits
    )
