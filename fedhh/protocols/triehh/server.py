"""TrieHH's server: it samples users each round, thresholds their votes and grows the trie one symbol a round."""

from __future__ import annotations

import numpy as np

from ...data.items import EOS, ItemCodec
from ...data.prefixes import rows_in
from ...kernels.randomness import KeyedRandomness
from ...kernels.sampling import uniform_subset
from ...privacy.report import PrivacyReport
from ...privacy.triehh import TrieHHParameters, solve_triehh
from ...schema import PrivacySection
from ..base import Discovery, ProtocolResult, Response, RoundRecord, ServerProtocol
from ..spec import Section
from .messages import TrieHHRequest, TrieHHResponse

NAME = "triehh"
SAMPLE_PURPOSE = "triehh.sample"


def round_sample(randomness: KeyedRandomness, round_: int, n_users: int, batch_size: int) -> np.ndarray:
    """The sorted global ids of round ``round_``'s uniform sample without replacement.

    Drawn once per round by the server from (seed, round) alone, so every
    transport and shard count sees the same sample.
    """
    return uniform_subset(randomness.generator(SAMPLE_PURPOSE, round_), n_users, batch_size)


class TrieHHServer(ServerProtocol):
    """TrieHH's server: samples users, thresholds votes, grows the trie."""

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
        self._by_law = False

    def simulate_by_law(self) -> None:
        """Requests then name how many users a round samples, not which (:mod:`.law`)."""
        self._by_law = True

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
            if self._by_law:
                sampled = np.zeros(0, dtype=np.int64)
            else:
                sampled = round_sample(self._randomness, round_, self.params.n_users, self.params.batch_size)
            self._pending = TrieHHRequest(
                round=round_, sampled=sampled, parents=self._extendable(), sample_size=self.params.batch_size
            )
        return self._pending

    def absorb(self, response: Response) -> None:
        if not isinstance(response, TrieHHResponse):
            raise TypeError(f"TrieHH expects a TrieHHResponse, got {type(response).__name__}")
        if self._pending is None:
            raise ValueError(f"response for round {response.round}, but no request is pending")
        if response.round != self._pending.round:
            raise ValueError(f"response for round {response.round}, but round {self._pending.round} is pending")
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
            protocol=NAME,
            discoveries=self.discovered(),
            frequent_prefixes=self.frequent_prefixes(),
            trace=self.trace,
            privacy=self.guarantee(),
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


def build_triehh(privacy: PrivacySection, protocol: Section, n_users: int, codec: ItemCodec, seed: int) -> TrieHHServer:
    """TrieHH from a config: θ and m solved from the (ε, δ) target for n users and L rounds."""
    params = solve_triehh(n_users, privacy.epsilon, privacy.delta, codec.max_rounds)
    return TrieHHServer(params, codec, seed)
