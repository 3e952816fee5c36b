"""What a server that cannot trust its nodes checks of a TAPS reply, and why dropouts keep the guarantee."""

from __future__ import annotations

import numpy as np

from ..base import RoundRecord
from ..spec import HeldUsers, InvalidReply
from .client import level_bounds, user_parties
from .messages import PartyLevelRequest, PartySupport
from .server import TapsServer

DROPOUT_PRIVACY = (
    "unchanged: every report is ε-LDP on the device that sends it, whatever else happens; "
    "a node that does not answer only removes its users' reports, which lowers the counts of "
    "their values but reveals nothing about anyone"
)
NO_DENSE_LAYOUT = (
    "not declared yet: a round's counts have a length fixed by the request (its candidates), "
    "but no dense layout is declared for TAPS"
)


def check_reply(request: PartyLevelRequest, response: PartySupport, node: HeldUsers, server: TapsServer) -> None:
    """Each party's reporters are the node's users of that party at the asked level (public
    randomness), and no candidate's support exceeds its party's reporters.

    A law simulation's node draws how its users split over the levels
    (:mod:`fedhh.protocols.taps.law`) instead of computing each user's level
    (:attr:`~fedhh.protocols.base.ServerProtocol.by_law`): then any number of
    reporters up to the node's users in the party is honest."""
    if server.by_law:
        most = _party_users(request.party_bounds, node)
        if response.reporters.shape != most.shape or np.any((response.reporters < 0) | (response.reporters > most)):
            raise InvalidReply(
                f"PartySupport.reporters: the node holds {most.tolist()} users per party, it says "
                f"{response.reporters.tolist()} of them reported"
            )
    else:
        expected = _level_members(request, node)
        if response.reporters.shape != expected.shape or np.any(response.reporters != expected):
            raise InvalidReply(
                f"PartySupport.reporters: the node's users of level {request.level} per party are "
                f"{expected.tolist()}, it says {response.reporters.tolist()}"
            )
    if response.counts.shape != request.candidates.shape:
        raise InvalidReply(
            f"PartySupport.counts: {request.candidates.size} candidates asked, {response.counts.size} counts sent"
        )
    bounds = request.candidate_bounds
    most = np.repeat(response.reporters, np.diff(bounds))
    if np.any(response.counts < 0) or np.any(response.counts > most):
        raise InvalidReply("PartySupport.counts: a candidate's support exceeds its party's reporters")


def _level_members(request: PartyLevelRequest, node: HeldUsers) -> np.ndarray:
    """The node's users of each party at the asked level (public randomness)."""
    from ..prefix_search.reports import range_levels

    levels = range_levels(request.partition_seed, level_bounds(request.levels), node.first_user, node.users)
    members = np.flatnonzero(levels == request.level) + node.first_user
    return np.bincount(user_parties(request.party_bounds, members), minlength=request.party_bounds.size - 1)


def _party_users(party_bounds: np.ndarray, node: HeldUsers) -> np.ndarray:
    """The node's users in each party (its id range cut by the parties')."""
    bounds = np.asarray(party_bounds, dtype=np.int64)
    stop = node.first_user + node.users
    return np.clip(bounds[1:], node.first_user, stop) - np.clip(bounds[:-1], node.first_user, stop)


def describe_round(record: RoundRecord) -> str:
    """A level's log line: its prefix length and each party's candidates and kept prefixes."""
    values = record.values
    per_party = ", ".join(f"{c}→{k}" for c, k in zip(values["candidates"], values["kept"], strict=True))
    return (
        f"level {values['level']}: prefixes of {values['prefix_length']} units; candidates→kept per party: {per_party}"
    )
