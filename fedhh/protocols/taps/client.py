"""TAPS's device side: a user of party ``p`` at level ``j`` reports its prefix once, through an ε-LDP
oracle, and the shard counts each party's candidates' support among that party's reports."""

from __future__ import annotations

import numpy as np

from ...data.population import Shard
from ...kernels.randomness import RandomnessSource
from ..common.prefix_encoding import PrefixEncoding
from ..prefix_search.oracles import level_oracle
from ..prefix_search.reports import held_items, range_levels
from .messages import PartyLevelRequest, PartySupport

REPORT_PURPOSE = "taps.report"


def level_bounds(levels: int) -> np.ndarray:
    """The cumulative shares of a party's users per level: ``levels`` equal groups."""
    bounds = np.linspace(0.0, 1.0, levels + 1)
    bounds[-1] = 1.0
    return bounds


def user_parties(party_bounds: np.ndarray, user_ids: np.ndarray) -> np.ndarray:
    """The party of each global user id: party ``p`` holds the ids ``[party_bounds[p], party_bounds[p + 1])``."""
    return np.searchsorted(np.asarray(party_bounds, dtype=np.int64), user_ids, side="right") - 1


def respond(request: PartyLevelRequest, shard: Shard, randomness: RandomnessSource) -> PartySupport:
    """The support of every party's candidates among the reports of that party's users of the level.

    What each user does (a device is a shard of one user): its party is
    public (the range of global ids holding it, ``party_bounds``), and so is
    its level, one of ``levels`` equal groups drawn from public randomness
    keyed by (``partition_seed``, user), as in PEM.  A user whose level is
    the one asked holds one item for the whole run (one of its items, chosen
    once, for a user holding several; the empty value for a user holding
    none), takes that item's prefix of ``length`` units and sends it once
    through the oracle ``oracle`` at ``epsilon`` (its only report: the whole
    ε).  The reply counts, for each party's candidates, how many of that
    party's reports support each (the oracle's support counts), and how
    many users of each party reported.
    """
    encoding = PrefixEncoding(request.encoding, shard.vocabulary.codec)  # type: ignore[arg-type]
    oracle = level_oracle(request.oracle, request.epsilon, encoding.domain(request.length), request.oracle_seed, 0, 0)
    parties = request.party_bounds.size - 1
    counts = np.zeros(request.candidates.size, dtype=np.int64)
    reporters = np.zeros(parties, dtype=np.int64)
    levels = range_levels(request.partition_seed, level_bounds(request.levels), shard.first_user, shard.n_users)
    members = np.flatnonzero(levels == request.level)
    if members.size:
        values = encoding.prefix_keys(shard.vocabulary, request.length)[held_items(shard, randomness)[members]]
        member_party = user_parties(request.party_bounds, members + shard.first_user)
        for party in np.unique(member_party).tolist():
            mine = member_party == party
            start, stop = int(request.candidate_bounds[party]), int(request.candidate_bounds[party + 1])
            draws = randomness.for_users(REPORT_PURPOSE, request.level, members[mine] + shard.first_user)
            support = oracle.randomize_support(values[mine], request.candidates[start:stop], draws)
            counts[start:stop] = support.counts.reshape(-1)
            reporters[party] = int(support.n_users)
    return PartySupport(
        round=request.round,
        sampled_users=int(members.size),
        responding_users=int(members.size),
        counts=counts,
        reporters=reporters,
    )
