"""What one SPM user sends over a run (``fedhh.protocols.communication``'s conventions)."""

from __future__ import annotations

import math

from ...oracles.base import index_bits
from ..communication import Communication, SentReport
from .server import SPMServer


def spm_bits(server: SPMServer) -> Communication:
    """SPM: the user's segment pair, and three OLH reports at ε/3 (segment α, segment β, whole value).

    The pair is one of ``C(g, 2)`` (``ceil(log2 C(g, 2))`` bits); each OLH
    report is a 64-bit seed and a bucket, its size set by ε/3 alone.  The
    three rounds read the same reports, so they are sent once.
    """
    pairs = math.comb(server.params.segments, 2)
    report = server.oracle.report_bits()
    reports = (
        SentReport("segment pair", index_bits(pairs), 1.0),
        SentReport("segment or whole-value report (olh)", report, 3.0),
    )
    return Communication(reports, index_bits(pairs) + 3 * report)
