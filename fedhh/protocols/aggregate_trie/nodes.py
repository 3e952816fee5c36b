"""What an aggregate-trie server that cannot trust its nodes knows: how a level's request narrows to a
node's own sampled users, the bytes and the check of an honest reply, why dropouts keep the guarantee,
and the dense layout that secure aggregation sums."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...data.items import EOS, PAD, ItemCodec
from ...data.prefixes import row_keys, rows_in
from ..base import RoundRecord, ServerProtocol
from ..common.sampled_rounds import check_sampled_users, check_secure_sum, sampled_in_node
from ..spec import NPY_HEADER_BYTES, HeldUsers, InvalidReply
from .extensions import ExtensionDomain
from .messages import LevelCounts, LevelRequest
from .server import AggregateTrieServer, parent_index

DROPOUT_PRIVACY = (
    "unchanged: a sampled user whose counts are lost is a user outside the population, and the guarantee "
    "(add/remove one user, Poisson sampling independent of the others) holds for every population; the noise "
    "is added once, by the server, after aggregation, so lost counts only lower counts"
)


def narrow(request: LevelRequest, node: HeldUsers) -> LevelRequest | None:
    """Only the node's own sampled users: a device learns whether it is sampled, not who else is.
    A law simulation's request goes to every node, whose law sampler draws its own sample."""
    if request.sampled_by_law:
        return request
    sampled = sampled_in_node(request.sampled, node)
    if sampled.size == 0:
        return None
    return replace(request, sampled=sampled)


def reply_budget(request: LevelRequest, node: HeldUsers, server: ServerProtocol) -> int:
    """``contributions`` candidates per sampled user at most (in a law simulation, per user of the
    node), each a row of ``depth + extension`` symbols and a count."""
    sampled = node.users if request.sampled_by_law else request.sampled.size
    return 8 * sampled * request.contributions * (request.depth + request.extension + 1) + 2 * NPY_HEADER_BYTES


def check_reply(request: LevelRequest, response: LevelCounts, node: HeldUsers, server: AggregateTrieServer) -> None:
    """Counts that add up, and only candidates that extend the kept prefixes (in a law simulation,
    from at most the node's users: its sample is its own draw)."""
    if request.sampled_by_law and response.sampled_users > node.users:
        raise InvalidReply(f"LevelCounts.sampled_users: {response.sampled_users} > the node's {node.users} users")
    sampled = response.sampled_users if request.sampled_by_law else int(request.sampled.size)
    check_counts(request, response, server.codec.symbol_ids, sampled)


def describe_round(record: RoundRecord) -> str:
    """The operator's log line: what the server summed (its own view) next to what it kept."""
    values, seen = record.values, record.server_view
    return (
        f"{seen['responding_users']:,} of {seen['sampled_users']:,} sampled users counted "
        f"{seen['candidates_counted']:,} candidates; {values['passed']:,} of {values['candidates']:,} passed "
        f"{values['threshold']:,.1f}, {values['kept']} kept ({values['completed']} complete), depth "
        f"{values['depth']}"
    )


def check_counts(request: LevelRequest, response: LevelCounts, symbols: int, sampled: int) -> None:
    """Raise :class:`InvalidReply` unless ``response`` is a possible answer to ``request`` from
    ``sampled`` sampled users."""
    check_sampled_users(response, sampled)
    if not request.depth < response.width <= request.depth + request.extension:
        raise InvalidReply(
            f"LevelCounts.width: candidates of depth {request.depth} + at most {request.extension} "
            f"symbols, got {response.width}"
        )
    total = int(response.counts.sum())
    if total > response.responding_users * request.contributions or total < response.responding_users:
        raise InvalidReply(
            f"LevelCounts.counts: they add up to {total}, for {response.responding_users} responding "
            f"users adding 1 to at most {request.contributions} candidate(s) each"
        )
    if response.counts.size and response.counts.max() > response.responding_users:
        raise InvalidReply("LevelCounts.counts: a count exceeds the responding users")
    rows = response.prefixes
    if np.unique(row_keys(rows)).size != rows.shape[0]:
        raise InvalidReply("LevelCounts.prefixes: a candidate is listed twice")
    if not rows.shape[0]:
        return
    if request.depth and not rows_in(rows[:, : request.depth], request.parents).all():
        raise InvalidReply(f"LevelCounts.prefixes: a candidate does not extend the kept depth-{request.depth} prefixes")
    tail = rows[:, request.depth :]
    ended = (tail == EOS) | (tail == PAD)
    after_end = np.cumsum(ended, axis=1) > 1
    if (tail >= symbols).any() or (tail[:, 0] == PAD).any() or (tail[after_end] != PAD).any():
        raise InvalidReply(
            f"LevelCounts.prefixes: extensions must be symbol ids below {symbols}, the end symbol, then padding"
        )


class AggregateTrieDense:
    """A level's counts as a fixed-length vector over every candidate of the level.

    ``[sampled_users, responding_users, counts...]``, one count per
    candidate numbered ``parent * D + extension``
    (:mod:`fedhh.protocols.aggregate_trie.extensions`): the layout the
    server adds its noise to.
    """

    def __init__(self, codec: ItemCodec) -> None:
        self.symbols = codec.symbol_ids
        self.width = codec.max_rounds

    def domain(self, request: LevelRequest) -> ExtensionDomain:
        return ExtensionDomain(self.symbols, min(request.extension, self.width - request.depth))

    def length(self, request: LevelRequest) -> int:
        return 2 + max(request.parents.shape[0], 1) * self.domain(request).size

    def max_entry(self, request: LevelRequest) -> int:
        """No entry of an honest node's vector exceeds its sampled users."""
        return int(request.sampled.size)

    def encode(self, request: LevelRequest, response: LevelCounts) -> np.ndarray:
        """The vector of a node's response (int64)."""
        check_counts(request, response, self.symbols, int(request.sampled.size))
        domain = self.domain(request)
        vector = np.zeros(self.length(request), dtype=np.int64)
        vector[:2] = response.sampled_users, response.responding_users
        if response.counts.size:
            rows = response.prefixes
            parent = parent_index(request, rows[:, : request.depth])
            np.add.at(vector, 2 + parent * domain.size + domain.codes(rows[:, request.depth :]), response.counts)
        return vector

    def decode(self, request: LevelRequest, vector: np.ndarray, contributors: list[LevelRequest]) -> LevelCounts:
        """The summed response of the nodes that were asked ``contributors``, checked."""
        sampled_users = check_secure_sum(vector, self.length(request), contributors)
        domain = self.domain(request)
        counts = vector[2:]
        slots = np.flatnonzero(counts)
        parent, code = np.divmod(slots, domain.size)
        parents = request.parents if request.depth else np.zeros((1, 0), dtype=np.int64)
        total = LevelCounts(
            round=request.round,
            sampled_users=int(vector[0]),
            responding_users=int(vector[1]),
            width=request.depth + domain.length,
            prefixes=np.concatenate([parents[parent], domain.rows(code)], axis=1).astype(np.int64),
            counts=counts[slots].astype(np.int64),
        )
        check_counts(request, total, self.symbols, sampled_users)
        return LevelCounts.combine([total])  # the canonical candidate order of the plain path
