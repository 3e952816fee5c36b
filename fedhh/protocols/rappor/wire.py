"""What one RAPPOR user sends over a run (``fedhh.protocols.communication``'s conventions)."""

from __future__ import annotations

from ...oracles.base import index_bits
from ..communication import Communication, SentReport
from .server import RapporServer


def rappor_bits(server: RapporServer) -> Communication:
    """RAPPOR: the randomised Bloom filter, ``m`` bits (SUE on every bit), and the user's cohort."""
    params = server.params
    bits = params.bloom_bits + index_bits(params.cohorts)
    return Communication((SentReport("randomised Bloom filter with its cohort", bits, 1.0),), bits)
