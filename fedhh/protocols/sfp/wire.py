"""What one SFP user sends over a run (``fedhh.protocols.communication``'s conventions)."""

from __future__ import annotations

from ...oracles.base import index_bits
from ..communication import Communication, SentReport
from .encoding import sketch
from .parameters import HASH_VALUES, ORACLE_PURPOSE
from .server import SFPServer


def sfp_bits(server: SFPServer) -> Communication:
    """SFP: the fragment report (position, then fragment and word hash through the sketch) and the word report.

    Every user sends its fragment position (``ceil(log2 P)`` bits) with its
    sketch report of (fragment, 8-bit hash), and, with the word pass, the
    sketch report of its whole value: a row index and the inner oracle's
    report (OUE: the sketch's width in bits, Apple's CMS; HM(1): a Hadamard
    index and a bit, HCMS).
    """
    params = server.params
    epsilons = [epsilon for _, epsilon in server.split.parts]  # the fragment's, then the word pass's if any
    seed = server.seeds[ORACLE_PURPOSE]
    domain = server.fragments.fragment_values * HASH_VALUES
    fragment_oracle = sketch(
        params.fragment_oracle, epsilons[0], domain, params.fragment_sketch_rows, params.fragment_sketch_width, seed
    )
    fragment = index_bits(server.positions) + fragment_oracle.report_bits()
    reports = [SentReport(f"fragment with its position ({params.fragment_oracle})", fragment, 1.0)]
    if len(epsilons) > 1:
        word_oracle = sketch(
            params.fragment_oracle,
            epsilons[1],
            1 << 64,
            params.fragment_sketch_rows,
            params.fragment_sketch_width,
            seed,
        )
        reports.append(SentReport(f"whole word ({params.fragment_oracle})", word_oracle.report_bits(), 1.0))
    return Communication(tuple(reports), sum(report.bits for report in reports))
