"""What one TrieHH user sends over a run (``fedhh.protocols.communication``'s conventions)."""

from __future__ import annotations

from ...oracles.base import index_bits
from ..communication import Communication, SentReport
from .server import TrieHHServer


def triehh_bits(server: TrieHHServer) -> Communication:
    """TrieHH: a sampled user's vote, its item's prefix of ``r`` symbols in round ``r``.

    Round ``r`` samples ``m`` of the ``n`` users; a sampled user whose item
    extends the trie votes with its depth-``r`` prefix, ``r`` symbols of
    ``ceil(log2 S)`` bits each (``S`` symbol ids, end-of-sequence included),
    as the votes travel.  A user takes part in a round with probability
    ``m / n``, so over a run of all ``L`` rounds it sends on average
    ``(m / n) b L (L + 1) / 2`` bits; one sampled in every round sends
    ``b L (L + 1) / 2``.  A run that stops before round ``L`` (a round that
    adds nothing) sends less: these are the figures of the full ``L`` rounds.
    A sampled user whose prefix left the trie sends nothing, counted here as
    a full vote (an upper bound).
    """
    params = server.params
    symbol_bits = index_bits(server.codec.symbol_ids)
    rate = params.batch_size / params.n_users
    reports = tuple(
        SentReport(f"round {round_} vote: a depth-{round_} prefix", round_ * symbol_bits, rate)
        for round_ in range(1, params.max_rounds + 1)
    )
    return Communication(
        reports,
        sum(report.bits for report in reports),
        note=f"over all L = {params.max_rounds} rounds; a user is sampled in a round with probability m/n = {rate:.3g}",
    )
