"""TAPS's messages: one level of every party's prefix tree per round, answered by support counts."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..base import Request, Response
from ..messages import array_field, message, scalar_field, summed


@message
class PartyLevelRequest(Request):
    """One level of every party's prefix tree: each party's candidate prefixes, queried through an
    ε-LDP frequency oracle by the party's users of that level."""

    level: int = scalar_field(minimum=0)  # the level asked (0-based)
    levels: int = scalar_field(minimum=1)  # levels (user groups) within every party
    encoding: str  # bits | symbols: how values become units
    length: int = scalar_field(minimum=1)  # prefix length (units) every party's users report this level
    parties: int = scalar_field(minimum=2)  # number of parties P
    party_bounds: np.ndarray = array_field("int64", ("parties+1",), minimum=0)  # first global user id of each party
    partition_seed: int  # public seed of the users' levels
    oracle: str  # the LDP oracle's name (see "LDP oracles")
    epsilon: float = scalar_field(minimum=0.0)  # ε of a user's one report
    oracle_seed: int  # the oracle's option seed: names its public hash functions
    candidates: np.ndarray = array_field("uint64", ("C",))  # oracle keys of every party's candidates, party by party
    candidate_bounds: np.ndarray = array_field("int64", ("parties+1",), minimum=0)  # where each party's start


@message
class PartySupport(Response):
    """Each candidate's support among its own party's reports, and each party's reporters; additive."""

    counts: np.ndarray = array_field("int64", ("C",), minimum=0)  # support of each candidate in its party
    reporters: np.ndarray = array_field("int64", ("P",), minimum=0)  # users of each party who reported

    @classmethod
    def combine(cls, responses: Sequence[PartySupport]) -> PartySupport:
        if not responses:
            raise ValueError("combine needs at least one response")
        first = responses[0]
        return cls(
            round=first.round,
            sampled_users=sum(r.sampled_users for r in responses),
            responding_users=sum(r.responding_users for r in responses),
            counts=summed([r.counts for r in responses]),
            reporters=summed([r.reporters for r in responses]),
        )
