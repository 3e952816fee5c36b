"""TrieHH: interactive heavy-hitter discovery by a sampled, thresholded trie.

Zhu et al., AISTATS 2020, Algorithms 1-3.  Round ``r`` samples ``m`` users
uniformly without replacement; a sampled user whose item's length-(r-1)
prefix is in the trie votes for its length-r prefix; prefixes with at least
``θ`` votes grow the trie at depth r.  A user holding several items first
picks one with probability equal to its local frequency (Algorithm 3).  The
run stops when a round adds nothing or after ``L`` rounds; discovered items
are the root-to-leaf paths ending in the end-of-sequence symbol.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..items import EOS, ItemCodec
from ..population import Shard
from ..prefixes import rows_in, sum_histograms
from ..privacy.report import PrivacyReport
from ..privacy.triehh import TrieHHParameters
from ..randomness import KeyedRandomness, RandomnessSource
from ..sampling import uniform_subset
from .base import Discovery, ProtocolResult, Request, Response, RoundRecord, ServerProtocol

SAMPLE_PURPOSE = "triehh.sample"
CHOICE_PURPOSE = "triehh.choice"


@dataclass(frozen=True)
class TrieHHRequest(Request):
    """Round ``r``: who is sampled, and the trie's extendable depth-(r-1) prefixes."""

    sampled: np.ndarray  # sorted global user ids, int64 [m]
    parents: np.ndarray  # int64 [K, r - 1]


@dataclass(frozen=True)
class TrieHHResponse(Response):
    """Votes per depth-r prefix (a sparse, additive histogram)."""

    prefixes: np.ndarray  # int64 [K, r]
    votes: np.ndarray  # int64 [K]

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


def choose_items(
    shard: Shard, local_users: np.ndarray, randomness: RandomnessSource, purpose: str, round_: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each user picks one of its items with probability equal to its local frequency.

    Returns (users that hold an item, chosen item id per such user).  The draw
    is keyed by global user id, so it does not depend on sharding.
    """
    if shard.one_item_per_user:
        chosen = shard.item_of_user[local_users]
        holds = chosen >= 0
        return local_users[holds], chosen[holds]
    starts = shard.item_offsets[local_users]
    ends = shard.item_offsets[local_users + 1]
    holds = ends > starts
    users, starts, ends = local_users[holds], starts[holds], ends[holds]
    cumulative = np.concatenate(([0], np.cumsum(shard.item_counts)))
    total = cumulative[ends] - cumulative[starts]
    uniforms = randomness.for_users(purpose, round_, users + shard.first_user).random(users.size)
    target = cumulative[starts] + np.floor(uniforms * total).astype(np.int64)
    entry = np.searchsorted(cumulative, target, side="right") - 1
    return users, shard.item_ids[entry]


def respond(request: TrieHHRequest, shard: Shard, randomness: RandomnessSource) -> TrieHHResponse:
    """The votes of a shard's sampled users for depth-``round`` prefixes.

    Work is proportional to the shard's sampled users, not to the vocabulary:
    the chosen items are mapped to their prefixes through the vocabulary's
    cached prefix index, and only the distinct voted prefixes are checked
    against the trie.
    """
    depth = request.round
    local = sampled_in_shard(request.sampled, shard)
    _, chosen = choose_items(shard, local, randomness, CHOICE_PURPOSE, depth)
    prefix_rows, item_to_prefix = shard.vocabulary.prefixes.at(depth)
    prefix_of_vote = item_to_prefix[chosen]
    prefix_of_vote = prefix_of_vote[prefix_of_vote >= 0]
    if prefix_rows.shape[0] <= 4 * prefix_of_vote.size:  # a count per prefix beats sorting the votes
        tally = np.bincount(prefix_of_vote, minlength=prefix_rows.shape[0])
        voted = np.flatnonzero(tally)
        votes = tally[voted]
    else:
        voted, votes = np.unique(prefix_of_vote, return_counts=True)
    rows = prefix_rows[voted]
    if depth > 1:
        extends_trie = rows_in(rows[:, :-1], request.parents)
        rows, votes = rows[extends_trie], votes[extends_trie]
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
