"""Which users each SuperNode answers for, checked before the first round.

Responses are additive, so a node that is duplicated or built from another
population would silently change the discovery rather than fail.  Before
round 1 the strategy asks every node for its :class:`ShardInfo` and admits
the nodes into a :class:`Federation`, using the same shard split
(``fedhh.data.population.shard_bounds``) as the fast driver:

* ``shards`` federations (virtual users, population config known to every
  node): the nodes must cover the users ``0..n-1`` exactly once; anything
  else is a misconfiguration and refused;
* ``devices`` federations (one real user per node, ``n`` shards of one
  user): a device is shard ``u`` of ``n`` for its user id ``u``.  Devices
  that are offline at the start are missing users, not an error, and a
  device whose claim is invalid or collides with another one is left out
  (logged), so one misbehaving device cannot stop a fleet's run.

The same exchange makes every node build its shard, so start-up cost is
measured apart from the rounds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fedhh.data.population import shard_bounds
from fedhh.errors import InputError
from fedhh.protocols.messages import message, scalar_field

from .codec import MessageCodec
from .errors import FederationError

# Flower message types: category "query" (no model is trained), one action each.
SHARD_INFO_MESSAGE = "query.shard"
ROUND_MESSAGE = "query.round"

SHARDS = "shards"
DEVICES = "devices"


class ShardCoverageError(FederationError):
    """The connected nodes do not hold every user exactly once."""


@dataclass(frozen=True)
class ShardQuery:
    """The server's question before round 1, "which users do you hold?" (it carries only the envelope)."""


SHARD_QUERY_CODEC: MessageCodec[ShardQuery] = MessageCodec(ShardQuery)


@message
class ShardInfo:
    """A node's answer to "which users do you hold?"."""

    shard_index: int  # a device: its global user id
    num_shards: int = scalar_field(minimum=1)  # a device: n, every user being a shard of one
    first_user: int  # the global id of the node's first user
    users: int  # how many users the node holds: ids first_user .. first_user + users - 1
    population: int  # n of the population the node's experiment built (a device: n it was told)


SHARD_INFO_CODEC: MessageCodec[ShardInfo] = MessageCodec(ShardInfo)


@dataclass(frozen=True)
class Federation:
    """The admitted nodes, by shard, and the users nobody holds."""

    n_users: int
    members: dict[int, ShardInfo]  # node id -> its shard, ordered by shard index
    refused: dict[int, str] = field(default_factory=dict)  # node id -> why it was left out

    @property
    def nodes(self) -> list[int]:
        return list(self.members)

    @property
    def missing_users(self) -> int:
        """Users of ``0..n-1`` that no admitted node holds (devices offline at the start)."""
        return self.n_users - sum(info.users for info in self.members.values())


def admit(infos: Mapping[int, ShardInfo], n_users: int, num_shards: int, mode: str) -> Federation:
    """Check the nodes' shards against the split of ``n_users`` into ``num_shards``.

    ``shards`` mode raises :class:`ShardCoverageError` unless every shard is
    held by exactly one node; ``devices`` mode leaves out the nodes whose
    claim is invalid or shared with another node and admits the rest.
    """
    if mode not in (SHARDS, DEVICES):
        raise InputError(f"run.federation: got {mode!r}; allowed: {[SHARDS, DEVICES]}")
    if not infos:
        raise ShardCoverageError("no node answered the shard query")
    if mode == SHARDS:
        counts = {info.num_shards for info in infos.values()}
        if len(counts) != 1:
            raise ShardCoverageError(f"nodes disagree on the number of shards: {sorted(counts)}")
        (claimed,) = counts
        if claimed != len(infos) or claimed != num_shards:
            held = sorted(info.shard_index for info in infos.values())
            raise ShardCoverageError(
                f"{len(infos)} node(s) answered but they split the users into {claimed} shards "
                f"(shards held: {held}) and run.shards = {num_shards}; every shard needs exactly one node"
            )
    problems = {node: _claim_problem(node, info, n_users, num_shards) for node, info in infos.items()}
    by_index: dict[int, list[int]] = {}
    for node, info in infos.items():
        if problems[node] is None:
            by_index.setdefault(info.shard_index, []).append(node)
    for index, nodes in by_index.items():
        if len(nodes) > 1:
            for node in nodes:
                problems[node] = f"nodes {sorted(nodes)} all claim shard {index}"
    refused = {node: problem for node, problem in problems.items() if problem is not None}
    if refused and mode == SHARDS:
        raise ShardCoverageError("; ".join(sorted(set(refused.values()))))
    members = {nodes[0]: infos[nodes[0]] for _, nodes in sorted(by_index.items()) if len(nodes) == 1}
    return Federation(n_users, members, refused)


def _claim_problem(node: int, info: ShardInfo, n_users: int, num_shards: int) -> str | None:
    """Why a node's claim cannot be admitted, or ``None`` if it is consistent."""
    if info.population != n_users:
        return (
            f"node {node} built a population of {info.population} users, the server "
            f"{n_users}: server and nodes must run the same population config"
        )
    if info.num_shards != num_shards:
        return f"node {node} splits the users into {info.num_shards} shards, the server into {num_shards}"
    if not 0 <= info.shard_index < num_shards:
        return f"node {node} claims shard {info.shard_index}, outside 0..{num_shards - 1}"
    start, stop = shard_bounds(n_users, info.shard_index, num_shards)
    if (info.first_user, info.users) != (start, stop - start):
        return (
            f"node {node} holds users [{info.first_user}, {info.first_user + info.users}) "
            f"as shard {info.shard_index}/{num_shards}, expected [{start}, {stop})"
        )
    return None
