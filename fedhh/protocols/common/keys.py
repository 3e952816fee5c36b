"""``[protocol]`` keys that several protocol families read, declared once (protocols that share a key
must share its declaration: :func:`fedhh.protocols.registry.register_protocol`)."""

from __future__ import annotations

from ...schema import Key

TOP_K_KEY = Key(
    int,
    32,
    "PEM/TreeHist/Bitstogram/SPM/MCM/central/exact: k, values reported at most; RAPPOR: the K reported under "
    "protocol.report = top_k",
    check=lambda v: v >= 1,
    constraint=">= 1",
)
