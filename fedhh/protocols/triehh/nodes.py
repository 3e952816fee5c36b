"""What a TrieHH server that cannot trust its nodes knows: how a request narrows to a node's own sampled
users, the bytes and the check of an honest reply, why dropouts keep the guarantee, and the dense layout
that secure aggregation sums."""

from __future__ import annotations

import numpy as np

from ...data.items import ItemCodec
from ...data.prefixes import row_keys, rows_in
from ..base import RoundRecord, ServerProtocol
from ..common.sampled_rounds import check_sampled_users, check_secure_sum, sampled_in_node
from ..spec import NPY_HEADER_BYTES, HeldUsers, InvalidReply
from .law import sampled_in_range
from .messages import TrieHHRequest, TrieHHResponse
from .server import TrieHHServer

DROPOUT_PRIVACY = (
    "unchanged: a sampled user whose vote is lost counts as a sampled user holding no item, "
    "and TrieHH's guarantee (sampling m of n users, threshold θ) holds for every population, "
    "so for that one too; lost votes only lower counts, which can keep a prefix out of the trie"
)


def by_law(request: TrieHHRequest) -> bool:
    """A law simulation's request: it names how many users the round samples, not which."""
    return request.sampled.size == 0 and request.sample_size > 0


def narrow(request: TrieHHRequest, node: HeldUsers) -> TrieHHRequest | None:
    """Only the node's own sampled users: a device learns whether it is sampled, not who else is.
    A law simulation's request goes to every node, whose law sampler finds its own share."""
    if by_law(request):
        return request
    sampled = sampled_in_node(request.sampled, node)
    if sampled.size == 0:
        return None
    return TrieHHRequest(round=request.round, sampled=sampled, parents=request.parents, sample_size=request.sample_size)


def reply_budget(request: TrieHHRequest, node: HeldUsers, server: ServerProtocol) -> int:
    """One voted prefix per sampled user at most: ``m_node`` rows of ``round`` symbols plus votes."""
    sampled = min(node.users, request.sample_size) if by_law(request) else request.sampled.size
    return 8 * sampled * (request.round + 1) + 2 * NPY_HEADER_BYTES


def check_reply(request: TrieHHRequest, response: TrieHHResponse, node: HeldUsers, server: TrieHHServer) -> None:
    """Counts that add up, and only votes for extensions of the trie's current level (in a law
    simulation, from as many sampled users as the keyed sample puts in the node's range)."""
    sampled = int(request.sampled.size)
    if by_law(request):
        sampled = sampled_in_range(server.seed, request, node.first_user, node.users, server.params.n_users)
    check_votes(request, response, server.codec.symbol_ids, sampled)


def describe_round(record: RoundRecord) -> str:
    """The operator's log line: the server's own view (raw votes) next to the published growth."""
    values, seen = record.values, record.server_view
    return (
        f"{seen['votes_received']} votes from {values['sampled_users']} sampled users, "
        f"{seen['prefixes_voted']} prefixes voted, {values['prefixes_added']} added "
        f"({values['items_completed']} complete items); trie size "
        f"{sum(values['trie_size_per_depth'])}, per depth {values['trie_size_per_depth']}"
    )


def check_votes(request: TrieHHRequest, response: TrieHHResponse, symbols: int, sampled: int) -> None:
    """Raise :class:`InvalidReply` unless ``response`` is a possible answer to ``request`` from
    ``sampled`` sampled users."""
    check_sampled_users(response, sampled)
    total = int(response.votes.sum())
    if total != response.responding_users:
        raise InvalidReply(
            f"TrieHHResponse.votes: they add up to {total}, responding_users says {response.responding_users}"
        )
    if response.votes.size and response.votes.min() < 1:
        raise InvalidReply("TrieHHResponse.votes: a listed prefix must have at least one vote")
    rows = response.prefixes
    if np.unique(row_keys(rows)).size != rows.shape[0]:
        raise InvalidReply("TrieHHResponse.prefixes: a prefix is listed twice")
    if rows.size and not (0 <= rows[:, -1].min() and rows[:, -1].max() < symbols):
        raise InvalidReply(f"TrieHHResponse.prefixes: a symbol outside the alphabet's ids 0..{symbols - 1}")
    if request.round > 1:
        outside = ~rows_in(rows[:, :-1], request.parents)
        if outside.any():
            raise InvalidReply(
                f"TrieHHResponse.prefixes: {int(outside.sum())} voted prefix(es) do not extend the trie's "
                f"depth-{request.round - 1} prefixes (first: {rows[outside][0].tolist()})"
            )


class TrieHHDense:
    """A TrieHH response as a fixed-length vector over every extension of the trie's level.

    Secure aggregation sums vectors of one public length, so a sparse vote
    histogram becomes ``[sampled_users, responding_users, votes...]`` with
    one vote slot per candidate: each of the request's K parents (one empty
    parent in round 1) followed by each of the S symbol ids, in that order.
    """

    def __init__(self, codec: ItemCodec) -> None:
        self.symbols = codec.symbol_ids

    def length(self, request: TrieHHRequest) -> int:
        return 2 + max(request.parents.shape[0], 1) * self.symbols

    def max_entry(self, request: TrieHHRequest) -> int:
        """No entry of an honest node's vector exceeds its sampled users."""
        return int(request.sampled.size)

    def encode(self, request: TrieHHRequest, response: TrieHHResponse) -> np.ndarray:
        """The vector of a node's response (int64)."""
        check_votes(request, response, self.symbols, int(request.sampled.size))
        vector = np.zeros(self.length(request), dtype=np.int64)
        vector[:2] = response.sampled_users, response.responding_users
        rows = response.prefixes
        if rows.shape[0]:
            parent = self._parent_index(request, rows[:, :-1])
            np.add.at(vector, 2 + parent * self.symbols + rows[:, -1], response.votes)
        return vector

    def decode(self, request: TrieHHRequest, vector: np.ndarray, contributors: list[TrieHHRequest]) -> TrieHHResponse:
        """The summed response of the nodes that were asked ``contributors``, checked."""
        sampled_users = check_secure_sum(vector, self.length(request), contributors)
        votes = vector[2:]
        slots = np.flatnonzero(votes)
        parents = request.parents if request.round > 1 else np.zeros((1, 0), dtype=np.int64)
        prefixes = np.concatenate([parents[slots // self.symbols], (slots % self.symbols)[:, None]], axis=1)
        total = TrieHHResponse(
            round=request.round,
            sampled_users=int(vector[0]),
            responding_users=int(vector[1]),
            prefixes=prefixes.astype(np.int64),
            votes=votes[slots].astype(np.int64),
        )
        check_votes(request, total, self.symbols, sampled_users)
        return TrieHHResponse.combine([total])  # the canonical prefix order of the plain path

    @staticmethod
    def _parent_index(request: TrieHHRequest, parents: np.ndarray) -> np.ndarray:
        if request.round == 1:
            return np.zeros(parents.shape[0], dtype=np.int64)
        keys = row_keys(request.parents)
        order = np.argsort(keys)
        position = np.searchsorted(keys[order], row_keys(parents))
        return order[np.minimum(position, order.size - 1)]
