"""Which shard of users each SuperNode answers for, checked before the first round.

Responses are additive, so a node that is missing, duplicated, or built
from another population would silently change the discovery rather than
fail.  Before round 1 the strategy asks every node for its
:class:`ShardInfo` and checks that the nodes cover the users ``0..n-1``
exactly once, with the same shard split (``fedhh.population.shard_bounds``)
that the fast driver uses.  The same exchange makes every node build its
shard, so start-up cost is measured apart from the rounds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fedhh.population import shard_bounds

from .codec import MessageCodec

# Flower message types: category "query" (no model is trained), one action each.
SHARD_INFO_MESSAGE = "query.shard"
ROUND_MESSAGE = "query.round"


class ShardCoverageError(RuntimeError):
    """The connected nodes do not hold every user exactly once."""


@dataclass(frozen=True)
class ShardInfo:
    """A node's answer to "which users do you hold?"."""

    shard_index: int
    num_shards: int
    first_user: int
    users: int
    population: int  # n of the population the node's experiment built


SHARD_INFO_CODEC: MessageCodec[ShardInfo] = MessageCodec(ShardInfo, arrays={}, minimums={"num_shards": 1})


def order_by_shard(infos: Mapping[int, ShardInfo], n_users: int) -> list[int]:
    """Node ids sorted by shard index, after checking they cover ``0..n-1`` exactly once."""
    if not infos:
        raise ShardCoverageError("no node answered the shard query")
    counts = {info.num_shards for info in infos.values()}
    if len(counts) != 1:
        raise ShardCoverageError(f"nodes disagree on the number of shards: {sorted(counts)}")
    (num_shards,) = counts
    if num_shards != len(infos):
        held = sorted(info.shard_index for info in infos.values())
        raise ShardCoverageError(
            f"{len(infos)} node(s) answered but they split the users into {num_shards} shards "
            f"(shards held: {held}); every shard needs exactly one node"
        )
    by_index: dict[int, int] = {}
    for node_id, info in infos.items():
        if info.population != n_users:
            raise ShardCoverageError(
                f"node {node_id} built a population of {info.population} users, the server "
                f"{n_users}: server and nodes must run the same population config"
            )
        if not 0 <= info.shard_index < num_shards:
            raise ShardCoverageError(
                f"node {node_id} claims shard {info.shard_index}, outside 0..{num_shards - 1}"
            )
        if info.shard_index in by_index:
            raise ShardCoverageError(
                f"nodes {by_index[info.shard_index]} and {node_id} both hold shard {info.shard_index}"
            )
        start, stop = shard_bounds(n_users, info.shard_index, num_shards)
        if (info.first_user, info.users) != (start, stop - start):
            raise ShardCoverageError(
                f"node {node_id} holds users [{info.first_user}, {info.first_user + info.users}) "
                f"as shard {info.shard_index}/{num_shards}, expected [{start}, {stop})"
            )
        by_index[info.shard_index] = node_id
    return [by_index[index] for index in sorted(by_index)]
