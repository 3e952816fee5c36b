"""What one aggregate-trie user sends over a run (``fedhh.protocols.communication``'s conventions)."""

from __future__ import annotations

from ...oracles.base import index_bits
from ..communication import Communication, SentReport
from .server import AggregateTrieServer


def aggregate_trie_bits(server: AggregateTrieServer) -> Communication:
    """A sampled user's counted candidates, each its prefix of ``d_l`` symbols in level ``l``.

    Level ``l`` of the fixed schedule extends prefixes to depth
    ``d_l = min(l k, L)`` (``k`` the extension, ``L`` the symbols of the
    longest item plus the end symbol); a sampled user sends at most ``c``
    candidates (``protocol.contributions``), each ``d_l`` symbols of
    ``ceil(log2 S)`` bits (``S`` symbol ids, end-of-sequence included).  A
    user is sampled in a level with probability ``q``, so over the run it
    sends on average ``q c b (d_1 + ... + d_levels)`` bits, and one sampled
    in every level ``c b (d_1 + ... + d_levels)``.  These are the figures of
    the candidates in the clear; under secure aggregation a sampled user
    sends instead its whole count vector over the level's candidates (at
    most ``protocol.max_vector`` entries), masked.  A run that stops early,
    or an adaptive one (longer extensions, fewer levels), sends less.
    """
    params, keys, codec = server.params, server.keys, server.codec
    symbol_bits = index_bits(codec.symbol_ids)
    depths = [min(level * keys.extension, codec.max_rounds) for level in range(1, params.levels + 1)]
    reports = tuple(
        SentReport(
            f"level {level} candidates: {keys.contributions} prefix(es) of {depth} symbols",
            keys.contributions * depth * symbol_bits,
            params.sampling_rate,
        )
        for level, depth in enumerate(depths, start=1)
    )
    return Communication(
        reports,
        sum(report.bits for report in reports),
        note=f"over all {params.levels} levels; a user is sampled in a level with probability q = "
        f"{params.sampling_rate:.3g}; in the clear (secure aggregation sends the masked count vector instead)",
    )
