"""What one PEM or TreeHist user sends over a run (``fedhh.protocols.communication``'s conventions)."""

from __future__ import annotations

from ...oracles.base import index_bits
from ..communication import Communication, SentReport
from .search import PrefixSearchServer


def prefix_search_bits(server: PrefixSearchServer) -> Communication:
    """PEM and TreeHist: one report of a prefix at the user's level, and TreeHist's full-value report.

    A user is assigned one of the ``g`` levels (PEM's groups) with
    probability ``shares[i]`` and sends its level ``i`` (``ceil(log2 g)``
    bits) with that level's oracle report; TreeHist's users also send their
    whole value through the final pass's oracle.  Levels differ in domain,
    so an oracle whose report grows with the domain (GRR, unary encoding)
    sends more at the deeper levels: the expectation weighs each level by
    its share, the maximum takes the deepest costliest level.
    """
    params = server.params
    level_field = index_bits(params.levels)
    levels = [level_field + server.level_oracle(level).report_bits() for level in range(params.levels)]
    reports = [
        SentReport(f"level {level + 1} prefix ({params.oracle}) with its level", bits, share)
        for level, (bits, share) in enumerate(zip(levels, params.shares, strict=True))
    ]
    final = 0
    if server.final_pass:
        final = server.final_oracle().report_bits()
        reports.append(SentReport(f"full value ({params.oracle})", final, 1.0))
    return Communication(tuple(reports), max(levels) + final)
