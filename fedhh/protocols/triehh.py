"""TrieHH: interactive heavy-hitter discovery by a sampled, thresholded trie.

Zhu et al., AISTATS 2020, Algorithms 1-3.  Round ``r`` samples ``m`` users
uniformly without replacement; a sampled user whose item's length-(r-1)
prefix is in the trie votes for its length-r prefix; prefixes with at least
``θ`` votes grow the trie at depth r.  A user holding several items first
picks one with probability equal to its local frequency (Algorithm 3).  The
run stops when a round adds nothing or after ``L`` rounds; discovered items
are the root-to-leaf paths ending in the end-of-sequence symbol.

The module ends with TrieHH's spec: what a server that cannot trust its
nodes checks (a node's votes add up and only extend the trie's current
level), how a round's request narrows to a node's own sampled users, and
its responses as fixed-length vectors for secure aggregation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..data.items import EOS, ItemCodec
from ..data.population import Shard
from ..data.prefixes import row_keys, rows_in, sum_histograms
from ..kernels.randomness import KeyedRandomness, RandomnessSource
from ..kernels.sampling import uniform_subset
from ..privacy.report import PrivacyReport
from ..privacy.triehh import TrieHHParameters, solve_triehh
from .base import Discovery, ProtocolResult, Request, Response, RoundRecord, ServerProtocol
from .common.item_choice import choose_items
from .messages import array_field
from .registry import register_protocol
from .spec import HeldUsers, InvalidReply, ProtocolSpec, Section

SAMPLE_PURPOSE = "triehh.sample"
CHOICE_PURPOSE = "triehh.choice"


@dataclass(frozen=True)
class TrieHHRequest(Request):
    """Round ``r``: who is sampled, and the trie's extendable depth-(r-1) prefixes."""

    sampled: np.ndarray = array_field("int64", ("m",))  # sorted global user ids
    parents: np.ndarray = array_field("int64", ("K", "round-1"))  # the trie's depth-(round-1) prefixes, as symbol rows


@dataclass(frozen=True)
class TrieHHResponse(Response):
    """Votes per depth-r prefix (a sparse, additive histogram)."""

    prefixes: np.ndarray = array_field("int64", ("K", "round"))  # distinct voted depth-round prefixes, symbol rows
    votes: np.ndarray = array_field("int64", ("K",))  # votes for each prefix (at least 1 in an honest reply)

    @classmethod
    def combine(cls, responses: Sequence["TrieHHResponse"]) -> "TrieHHResponse":
        if not responses:
            raise ValueError("combine needs at least one response")
        rounds = {r.round for r in responses}
        if len(rounds) != 1:
            raise ValueError(f"cannot combine responses of different rounds: {sorted(rounds)}")
        (round_,) = rounds
        prefixes, votes = sum_histograms([(r.prefixes, r.votes) for r in responses], round_)
        return cls(
            round=round_,
            sampled_users=sum(r.sampled_users for r in responses),
            responding_users=sum(r.responding_users for r in responses),
            prefixes=prefixes,
            votes=votes,
        )


def round_sample(randomness: KeyedRandomness, round_: int, n_users: int, batch_size: int) -> np.ndarray:
    """The sorted global ids of round ``round_``'s uniform sample without replacement.

    Drawn once per round by the server from (seed, round) alone, so every
    transport and shard count sees the same sample.
    """
    return uniform_subset(randomness.generator(SAMPLE_PURPOSE, round_), n_users, batch_size)


def sampled_in_shard(sampled: np.ndarray, shard: Shard) -> np.ndarray:
    """Local indices of the sampled users that this shard holds."""
    lo, hi = np.searchsorted(sampled, [shard.first_user, shard.stop_user])
    return sampled[lo:hi] - shard.first_user


def respond(request: TrieHHRequest, shard: Shard, randomness: RandomnessSource) -> TrieHHResponse:
    """The votes of a shard's sampled users for depth-``round`` prefixes.

    What each user does (a device is a shard of one user): if its global id
    is in ``sampled``, it picks one of its items (with one item, that item;
    with several, item ``i`` with probability its local frequency) and takes
    the item's first ``round`` symbols (the symbol row of ``fedhh.data.items``,
    end symbol included).  It votes for that prefix if the prefix exists (the
    item did not end before symbol ``round``) and, from round 2 on, its first
    ``round - 1`` symbols are a row of ``parents``.  The reply lists each
    distinct voted prefix once with its number of votes; ``sampled_users``
    counts the sampled users, ``responding_users`` the votes.

    Work is proportional to the shard's sampled users, not to the vocabulary:
    the chosen items are mapped to their prefixes, and these to the round's
    candidates (the prefixes that extend the trie), through the
    vocabulary's prefix index, which works out the candidates once per
    round for all the shards a process holds.
    """
    depth = request.round
    local = sampled_in_shard(request.sampled, shard)
    _, chosen = choose_items(shard, local, randomness, CHOICE_PURPOSE, depth)
    prefixes = shard.vocabulary.prefixes
    candidate_rows, candidate_of_prefix = prefixes.extending(depth, request.parents)
    _, item_to_prefix = prefixes.at(depth)
    candidate = candidate_of_prefix[item_to_prefix[chosen]]  # -1: no symbol at this depth, or off the trie
    candidate = candidate[candidate >= 0]
    if candidate_rows.shape[0] <= 4 * candidate.size:  # a count per candidate beats sorting the votes
        tally = np.bincount(candidate, minlength=candidate_rows.shape[0])
        voted = np.flatnonzero(tally)
        votes = tally[voted]
    else:
        voted, votes = np.unique(candidate, return_counts=True)
    rows = candidate_rows[voted]
    return TrieHHResponse(
        round=depth,
        sampled_users=int(local.size),
        responding_users=int(votes.sum()),
        prefixes=rows,
        votes=votes.astype(np.int64),
    )


class TrieHHServer(ServerProtocol):
    """TrieHH's server: samples users, thresholds votes, grows the trie."""

    name = "triehh"
    request_type = TrieHHRequest
    response_type = TrieHHResponse

    def __init__(self, params: TrieHHParameters, codec: ItemCodec, seed: int) -> None:
        if params.max_rounds != codec.max_rounds:
            raise ValueError(
                f"privacy parameters are for L = {params.max_rounds} rounds but the codec "
                f"allows items of {codec.max_rounds} symbols (end symbol included)"
            )
        self.params = params
        self.codec = codec
        self.seed = seed
        self._randomness = KeyedRandomness(seed)
        self._levels: list[tuple[np.ndarray, np.ndarray]] = []  # (prefix rows, votes) per depth
        self._trace: list[RoundRecord] = []
        self._pending: TrieHHRequest | None = None
        self._stopped_because: str | None = None

    @property
    def trace(self) -> list[RoundRecord]:
        return list(self._trace)

    @property
    def max_rounds(self) -> int:
        return self.params.max_rounds

    def privacy_report(self) -> PrivacyReport:
        return self.params.report()

    def progress_note(self) -> str:
        sizes = [int(rows.shape[0]) for rows, _ in self._levels]
        complete = sum(int(np.count_nonzero(rows[:, -1] == EOS)) for rows, _ in self._levels)
        return f"trie per depth {sizes}, {complete} items complete"

    @property
    def done(self) -> bool:
        return self._stopped_because is not None

    def _extendable(self) -> np.ndarray:
        if not self._levels:
            return np.zeros((0, 0), dtype=np.int64)
        rows, _ = self._levels[-1]
        return rows[rows[:, -1] != EOS]

    def next_request(self) -> TrieHHRequest | None:
        if self.done:
            return None
        if self._pending is None:
            round_ = len(self._levels) + 1
            sampled = round_sample(self._randomness, round_, self.params.n_users, self.params.batch_size)
            self._pending = TrieHHRequest(round=round_, sampled=sampled, parents=self._extendable())
        return self._pending

    def absorb(self, response: Response) -> None:
        if not isinstance(response, TrieHHResponse):
            raise TypeError(f"TrieHH expects a TrieHHResponse, got {type(response).__name__}")
        if self._pending is None:
            raise ValueError(f"response for round {response.round}, but no request is pending")
        if response.round != self._pending.round:
            raise ValueError(
                f"response for round {response.round}, but round {self._pending.round} is pending"
            )
        round_ = response.round
        accepted = response.votes >= self.params.theta
        rows, votes = response.prefixes[accepted], response.votes[accepted]
        self._pending = None
        if rows.shape[0]:
            self._levels.append((rows, votes))
        self._trace.append(
            RoundRecord(
                round_,
                {
                    "sampled_users": int(response.sampled_users),
                    "prefixes_added": int(rows.shape[0]),
                    "items_completed": int(np.count_nonzero(rows[:, -1] == EOS)) if rows.size else 0,
                    "trie_size_per_depth": [int(level.shape[0]) for level, _ in self._levels],
                },
                server_view={
                    "responding_users": int(response.responding_users),
                    "votes_received": int(response.votes.sum()),
                    "prefixes_voted": int(response.prefixes.shape[0]),
                },
            )
        )
        if not rows.shape[0]:
            self._stopped_because = f"round {round_} added no prefix"
        elif round_ >= self.params.max_rounds:
            self._stopped_because = f"reached L = {self.params.max_rounds} rounds"
        elif self._extendable().shape[0] == 0:
            self._stopped_because = f"every prefix ended after round {round_}"

    def discovered(self) -> list[Discovery]:
        found = []
        for rows, votes in self._levels:
            complete = rows[:, -1] == EOS
            items = self.codec.decode_rows(rows[complete])
            for item, row, support in zip(items, rows[complete].tolist(), votes[complete].tolist()):
                found.append(Discovery(item, tuple(row), support=support))
        return found

    def frequent_prefixes(self) -> list[str]:
        """Trie leaves that are not complete items: frequent, unfinished prefixes."""
        leaves = []
        for depth, (rows, _) in enumerate(self._levels, start=1):
            open_rows = rows[rows[:, -1] != EOS]
            if depth < len(self._levels):
                children = self._levels[depth][0][:, :depth]
                open_rows = open_rows[~rows_in(open_rows, children)]
            leaves.extend(self.codec.decode_rows(open_rows))
        return leaves

    def result(self) -> ProtocolResult:
        return ProtocolResult(
            protocol=self.name,
            discoveries=self.discovered(),
            frequent_prefixes=self.frequent_prefixes(),
            trace=self.trace,
            privacy=self.privacy_report(),
            params={
                "theta": self.params.theta,
                "batch_size": self.params.batch_size,
                "max_length": self.codec.max_length,
                "max_rounds": self.params.max_rounds,
                "unit_size": self.codec.unit_size,
                "alphabet": self.codec.alphabet.name,
            },
            stopped_because=self._stopped_because or "not finished",
        )

# -- what a server that cannot trust its nodes knows (the spec's hooks) ------------------

NPY_HEADER_BYTES = 256  # np.save header of one array, generously

DROPOUT_PRIVACY = (
    "unchanged: a sampled user whose vote is lost counts as a sampled user holding no item, "
    "and TrieHH's guarantee (sampling m of n users, threshold θ) holds for every population, "
    "so for that one too; lost votes only lower counts, which can keep a prefix out of the trie"
)


def sampled_of(request: TrieHHRequest, node: HeldUsers) -> np.ndarray:
    """The sampled users that a node holds."""
    lo, hi = np.searchsorted(request.sampled, [node.first_user, node.first_user + node.users])
    return request.sampled[lo:hi]


def symbol_count(codec: ItemCodec) -> int:
    """Distinct symbol ids of one trie level, end-of-sequence included."""
    return codec.radix**codec.unit_size


def narrow(request: TrieHHRequest, node: HeldUsers) -> TrieHHRequest | None:
    """Only the node's own sampled users: a device learns whether it is sampled, not who else is."""
    sampled = sampled_of(request, node)
    if sampled.size == 0:
        return None
    return TrieHHRequest(round=request.round, sampled=sampled, parents=request.parents)


def reply_budget(request: TrieHHRequest, node: HeldUsers, server: ServerProtocol) -> int:
    """One voted prefix per sampled user at most: ``m_node`` rows of ``round`` symbols plus votes."""
    return 8 * request.sampled.size * (request.round + 1) + 2 * NPY_HEADER_BYTES


def check_reply(request: TrieHHRequest, response: TrieHHResponse, node: HeldUsers, server: TrieHHServer) -> None:
    """Counts that add up, and only votes for extensions of the trie's current level."""
    check_votes(request, response, symbol_count(server.codec))


def describe_round(record: RoundRecord) -> str:
    """The operator's log line: the server's own view (raw votes) next to the published growth."""
    values, seen = record.values, record.server_view
    return (
        f"{seen['votes_received']} votes from {values['sampled_users']} sampled users, "
        f"{seen['prefixes_voted']} prefixes voted, {values['prefixes_added']} added "
        f"({values['items_completed']} complete items); trie size "
        f"{sum(values['trie_size_per_depth'])}, per depth {values['trie_size_per_depth']}"
    )


def check_votes(request: TrieHHRequest, response: TrieHHResponse, symbols: int) -> None:
    """Raise :class:`InvalidReply` unless ``response`` is a possible answer to ``request``."""
    sampled = int(request.sampled.size)
    if response.sampled_users != sampled:
        raise InvalidReply(f"TrieHHResponse.sampled_users: {sampled} of its users were sampled, it says {response.sampled_users}")
    if response.responding_users > sampled:
        raise InvalidReply(f"TrieHHResponse.responding_users: {response.responding_users} > {sampled} sampled users")
    total = int(response.votes.sum())
    if total != response.responding_users:
        raise InvalidReply(f"TrieHHResponse.votes: they add up to {total}, responding_users says {response.responding_users}")
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
        self.symbols = symbol_count(codec)

    def length(self, request: TrieHHRequest) -> int:
        return 2 + max(request.parents.shape[0], 1) * self.symbols

    def max_entry(self, request: TrieHHRequest) -> int:
        """No entry of an honest node's vector exceeds its sampled users."""
        return int(request.sampled.size)

    def encode(self, request: TrieHHRequest, response: TrieHHResponse) -> np.ndarray:
        """The vector of a node's response (int64)."""
        check_votes(request, response, self.symbols)
        vector = np.zeros(self.length(request), dtype=np.int64)
        vector[:2] = response.sampled_users, response.responding_users
        rows = response.prefixes
        if rows.shape[0]:
            parent = self._parent_index(request, rows[:, :-1])
            np.add.at(vector, 2 + parent * self.symbols + rows[:, -1], response.votes)
        return vector

    def decode(self, request: TrieHHRequest, vector: np.ndarray, contributors: list[TrieHHRequest]) -> TrieHHResponse:
        """The summed response of the nodes that were asked ``contributors``, checked."""
        sampled_users = sum(int(asked.sampled.size) for asked in contributors)
        if vector.shape != (self.length(request),):
            raise InvalidReply(f"secure sum: expected {self.length(request)} entries, got shape {vector.shape}")
        if vector.min() < 0 or vector.max() > sampled_users:
            raise InvalidReply(f"secure sum: entries must be in 0..{sampled_users} (the contributors' sampled users)")
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
        everyone = TrieHHRequest(round=request.round, sampled=np.arange(sampled_users), parents=request.parents)
        check_votes(everyone, total, self.symbols)
        return TrieHHResponse.combine([total])  # the canonical prefix order of the plain path

    @staticmethod
    def _parent_index(request: TrieHHRequest, parents: np.ndarray) -> np.ndarray:
        if request.round == 1:
            return np.zeros(parents.shape[0], dtype=np.int64)
        keys = row_keys(request.parents)
        order = np.argsort(keys)
        position = np.searchsorted(keys[order], row_keys(parents))
        return order[np.minimum(position, order.size - 1)]


def build_triehh(privacy: Section, protocol: Section, n_users: int, codec: ItemCodec, seed: int) -> TrieHHServer:
    """TrieHH from a config: θ and m solved from the (ε, δ) target for n users and L rounds."""
    params = solve_triehh(n_users, privacy["epsilon"], privacy["delta"], codec.max_rounds)
    return TrieHHServer(params, codec, seed)


SPEC = register_protocol(
    ProtocolSpec(
        name="triehh",
        summary="TrieHH (Zhu et al.): a sampled, thresholded trie grown one symbol per round; central DP",
        build=build_triehh,
        respond=respond,  # type: ignore[arg-type]
        request_type=TrieHHRequest,
        response_type=TrieHHResponse,
        dropout_privacy=DROPOUT_PRIVACY,
        narrow=narrow,  # type: ignore[arg-type]
        reply_budget=reply_budget,  # type: ignore[arg-type]
        check_reply=check_reply,  # type: ignore[arg-type]
        describe_round=describe_round,
        dense=TrieHHDense,
        planner="fedhh.planning.plan:plan_triehh",
        plan_command="fedhh.planning.plan:TRIEHH_PLAN",
        sizing="fedhh.planning.sizing:TRIEHH_SIZING",
        communication="fedhh.communication:triehh_bits",
    )
)
