"""The aggregate-DP prefix tree's server: it samples each level's users, adds noise once to every
candidate's summed count, and keeps the prefixes above the threshold."""

from __future__ import annotations

import numpy as np

from ...data.items import EOS, PAD, ItemCodec
from ...errors import InputError
from ...kernels.randomness import KeyedRandomness
from ...kernels.sampling import uniform_subset
from ...privacy.aggregate_trie import AggregateTrieParameters, noise_tail_quantile, solve_aggregate_trie
from ...privacy.central import LAPLACE
from ...privacy.report import PrivacyReport
from ...schema import PrivacySection
from ..base import Discovery, ProtocolResult, Response, RoundRecord, ServerProtocol
from ..spec import Section
from .extensions import ExtensionDomain
from .messages import LevelCounts, LevelRequest
from .parameters import AggregateTrieKeys, levels_for, sampling_rate

NAME = "aggregate-trie"
SAMPLE_PURPOSE = "aggregate-trie.sample"
NOISE_PURPOSE = "aggregate-trie.noise"


def poisson_sample(generator: np.random.Generator, n_users: int, rate: float) -> np.ndarray:
    """Sorted global ids of a Poisson sample at ``rate``: a binomial number of users, then a uniform
    subset of that size (the same law as including every user independently)."""
    if rate >= 1:
        return np.arange(n_users, dtype=np.int64)
    return uniform_subset(generator, n_users, int(generator.binomial(n_users, rate)))


def level_noise(noise: str, scale: float, size: int, generator: np.random.Generator) -> np.ndarray:
    """One draw of the level's noise law per candidate."""
    if noise == LAPLACE:
        return generator.laplace(0.0, scale, size)
    return generator.normal(0.0, scale, size)


def is_complete(rows: np.ndarray) -> np.ndarray:
    """Which prefix rows hold the end symbol (a whole item)."""
    return ((rows == EOS) | (rows == PAD)).any(axis=1)


def threshold_for(noise: str, scale: float, count_threshold: float, candidates: int) -> float:
    """A level's threshold: ``count_threshold``, or when 0 the noise's upper ``1/D`` quantile for ``D``
    candidates (a candidate nobody holds passes with chance ``1/D``: about one a level)."""
    if count_threshold > 0:
        return count_threshold
    return noise_tail_quantile(noise, scale, 1 / max(candidates, 2))


class AggregateTrieServer(ServerProtocol):
    """Grows the tree level by level: sample, sum, add noise once, keep what passes the threshold.

    Fixed parameters: every level extends by ``extension`` symbols.  With
    ``adaptive``, a level's extension is chosen from the prefixes the last
    level kept: the longest ``k >= extension`` (so the run never takes more
    levels than accounted for) whose count vector, ``K`` kept prefixes times
    ``D(k)`` extensions, holds at most ``max_vector`` entries.  Either way,
    a level keeps at most ``max_prefixes`` prefixes, and no more than fit
    ``max_vector`` at the next level's extension (the largest noisy counts
    first).  The threshold of a level with ``D`` candidates is
    ``count_threshold``, or when 0 the noise's upper ``1/D`` quantile.
    """

    def __init__(self, params: AggregateTrieParameters, keys: AggregateTrieKeys, codec: ItemCodec, seed: int) -> None:
        self.params = params
        self.keys = keys
        self.codec = codec
        self.seed = seed
        self.symbols = codec.symbol_ids
        self._randomness = KeyedRandomness(seed)
        self._kept: list[tuple[np.ndarray, np.ndarray]] = []  # (prefix rows, noisy counts) per level
        self._parents = np.zeros((0, 0), dtype=np.int64)
        self._trace: list[RoundRecord] = []
        self._pending: LevelRequest | None = None
        self._stopped_because: str | None = None
        self._by_law = False
        if ExtensionDomain(self.symbols, keys.extension).size > keys.max_vector:
            raise InputError(
                f"protocol.max_vector: {keys.max_vector:,} entries cannot hold one prefix's "
                f"{ExtensionDomain(self.symbols, keys.extension).size:,} extensions of {keys.extension} symbols; "
                "raise max_vector or lower protocol.extension"
            )

    def simulate_by_law(self) -> None:
        """Requests then name the sampling rate, not the sampled users: each shard's law sampler draws
        its own Poisson sample (:mod:`.law`)."""
        self._by_law = True

    @property
    def trace(self) -> list[RoundRecord]:
        return list(self._trace)

    @property
    def max_rounds(self) -> int:
        return self.params.levels

    @property
    def depth(self) -> int:
        return int(self._parents.shape[1])

    @property
    def done(self) -> bool:
        return self._stopped_because is not None

    def privacy_report(self) -> PrivacyReport:
        return self.params.report()

    def progress_note(self) -> str:
        return f"depth {self.depth}, {self._parents.shape[0]} prefixes to extend, {len(self.discovered())} items"

    def extension_for(self, parents: int) -> int:
        """The next level's extension for ``parents`` kept prefixes (see the class docstring)."""
        room = self.codec.max_rounds - self.depth
        if not self.keys.adaptive:
            return min(self.keys.extension, room)
        length = self.keys.extension
        while length < room and parents * ExtensionDomain(self.symbols, length + 1).size <= self.keys.max_vector:
            length += 1
        return min(length, room)

    def threshold(self, candidates: int) -> float:
        return threshold_for(self.params.noise, self.params.scale, self.keys.count_threshold, candidates)

    def next_request(self) -> LevelRequest | None:
        if self.done:
            return None
        if self._pending is None:
            round_ = len(self._trace) + 1
            if self._by_law:
                sampled = np.zeros(0, dtype=np.int64)
            else:
                generator = self._randomness.generator(SAMPLE_PURPOSE, round_)
                sampled = poisson_sample(generator, self.params.n_users, self.params.sampling_rate)
            self._pending = LevelRequest(
                round=round_,
                depth=self.depth,
                extension=self.extension_for(max(self._parents.shape[0], 1)),
                data_selection=self.keys.data_selection,
                choose_from=self.keys.choose_from,
                contributions=self.keys.contributions,
                sampling_rate=self.params.sampling_rate,
                sampled_by_law=self._by_law,
                sampled=sampled,
                parents=self._parents,
            )
        return self._pending

    def absorb(self, response: Response) -> None:
        if not isinstance(response, LevelCounts):
            raise TypeError(f"aggregate-trie expects LevelCounts, got {type(response).__name__}")
        request = self._pending
        if request is None or response.round != request.round:
            raise ValueError(f"response for level {response.round}, but no request for it is pending")
        if response.width != request.depth + request.extension:
            raise ValueError(
                f"level {request.round}: candidates of {request.depth + request.extension} symbols "
                f"expected, got {response.width}"
            )
        domain = ExtensionDomain(self.symbols, request.extension)
        parents = max(request.parents.shape[0], 1)
        candidates = parents * domain.size
        counts = self.dense_counts(request, response, domain)
        noisy = counts + level_noise(
            self.params.noise, self.params.scale, candidates, self._randomness.generator(NOISE_PURPOSE, request.round)
        )
        threshold = self.threshold(candidates)
        passed = np.flatnonzero(noisy > threshold)
        ranked = passed[np.lexsort((passed, -noisy[passed]))]
        parent, code = np.divmod(ranked, domain.size)
        base = request.parents if request.depth else np.zeros((1, 0), dtype=np.int64)
        rows = np.concatenate([base[parent], domain.rows(code)], axis=1)
        complete = is_complete(rows)
        kept_complete = ranked[complete][: self.keys.max_prefixes]
        open_ranked = ranked[~complete]
        self._pending = None
        room = self.codec.max_rounds - response.width
        cap = self.keys.max_prefixes
        if room > 0:
            cap = min(cap, self.keys.max_vector // ExtensionDomain(self.symbols, min(self.keys.extension, room)).size)
        else:
            open_ranked = open_ranked[:0]
        kept_open = open_ranked[:cap]
        kept = np.concatenate([kept_complete, kept_open])
        kept_rows = np.concatenate([rows[complete][: kept_complete.size], rows[~complete][: kept_open.size]])
        self._kept.append((kept_rows, noisy[kept]))
        self._parents = rows[~complete][: kept_open.size]
        self._trace.append(
            RoundRecord(
                request.round,
                {
                    "depth": int(response.width),
                    "extension": int(domain.length),
                    "candidates": int(candidates),
                    "threshold": float(threshold),
                    "passed": int(passed.size),
                    "kept": int(kept.size),
                    "completed": int(kept_complete.size),
                },
                server_view={
                    "sampled_users": int(response.sampled_users),
                    "responding_users": int(response.responding_users),
                    "candidates_counted": int(response.counts.size),
                    "count_total": int(response.counts.sum()),
                },
            )
        )
        if self._parents.shape[0] == 0:
            self._stopped_because = f"level {request.round} kept no prefix to extend"
        elif response.width >= self.codec.max_rounds:
            self._stopped_because = f"reached the longest items ({self.codec.max_rounds} symbols)"
        elif request.round >= self.params.levels:
            self._stopped_because = f"reached the {self.params.levels} levels accounted for"

    def dense_counts(self, request: LevelRequest, response: LevelCounts, domain: ExtensionDomain) -> np.ndarray:
        """The level's count vector over every candidate (``parent * D + extension``)."""
        parents = max(request.parents.shape[0], 1)
        counts = np.zeros(parents * domain.size, dtype=np.float64)
        if response.counts.size:
            rows = response.prefixes
            parent = parent_index(request, rows[:, : request.depth])
            np.add.at(counts, parent * domain.size + domain.codes(rows[:, request.depth :]), response.counts)
        return counts

    def discovered(self) -> list[Discovery]:
        """The kept complete items, each with its noisy count scaled to the population (divided by q)."""
        found = []
        for rows, noisy in self._kept:
            complete = is_complete(rows)
            items = self.codec.decode_rows(rows[complete])
            for item, row, count in zip(items, rows[complete].tolist(), noisy[complete].tolist()):
                found.append(Discovery(item, tuple(row), estimated_count=float(count) / self.params.sampling_rate))
        return found

    def frequent_prefixes(self) -> list[str]:
        """Kept prefixes that no later level extended: frequent, unfinished prefixes."""
        return self.codec.decode_rows(self._parents) if self._parents.shape[0] and self.done else []

    def result(self) -> ProtocolResult:
        keys = self.keys
        return ProtocolResult(
            protocol=NAME,
            discoveries=self.discovered(),
            frequent_prefixes=self.frequent_prefixes(),
            trace=self.trace,
            privacy=self.privacy_report(),
            params={
                "level_noise": self.params.noise,
                "scale": self.params.scale,
                "sampling_rate": self.params.sampling_rate,
                "levels": self.params.levels,
                "extension": keys.extension,
                "adaptive": keys.adaptive,
                "max_prefixes": keys.max_prefixes,
                "max_vector": keys.max_vector,
                "data_selection": keys.data_selection,
                "choose_from": keys.choose_from,
                "contributions": keys.contributions,
                "count_threshold": keys.count_threshold,
                "max_length": self.codec.max_length,
                "unit_size": self.codec.unit_size,
                "alphabet": self.codec.alphabet.name,
            },
            stopped_because=self._stopped_because or "not finished",
        )


def parent_index(request: LevelRequest, prefixes: np.ndarray) -> np.ndarray:
    """The index in ``request.parents`` of each row of ``prefixes`` (depth ``request.depth``; rows
    that are not parents get an arbitrary index: callers check them first)."""
    if request.depth == 0:
        return np.zeros(prefixes.shape[0], dtype=np.int64)
    from ...data.prefixes import row_keys

    keys = row_keys(request.parents)
    order = np.argsort(keys)
    position = np.searchsorted(keys[order], row_keys(np.ascontiguousarray(prefixes)))
    return order[np.minimum(position, order.size - 1)]


def build_aggregate_trie(
    privacy: PrivacySection, protocol: Section, n_users: int, codec: ItemCodec, seed: int
) -> AggregateTrieServer:
    """The tree from a config: the noise scale solved from the (ε, δ) target over its levels."""
    keys = AggregateTrieKeys.of(protocol)
    keys.check()
    levels = levels_for(codec.max_rounds, keys.extension)
    params = solve_aggregate_trie(
        n_users,
        privacy.epsilon,
        privacy.delta,
        keys.level_noise,
        keys.contributions,
        sampling_rate(keys.users_per_level, n_users),
        levels,
    )
    check_findable(params, keys.count_threshold, keys.max_prefixes, keys.extension, codec)
    return AggregateTrieServer(params, keys, codec, seed)


def check_findable(
    params: AggregateTrieParameters, count_threshold: float, max_prefixes: int, extension: int, codec: ItemCodec
) -> float:
    """The threshold of a level with ``max_prefixes`` parents; refuse a run where no count can pass it
    (above the users sampled per level)."""
    candidates = max_prefixes * ExtensionDomain(codec.symbol_ids, extension).size
    threshold = threshold_for(params.noise, params.scale, count_threshold, candidates)
    if threshold >= params.expected_users:
        raise InputError(
            f"privacy.epsilon: at ε = {params.target_epsilon:g}, δ = {params.delta:g} over {params.levels} levels the "
            f"noise (scale {params.scale:.4g}) needs a threshold of {threshold:,.1f}, above the "
            f"{params.expected_users:,.0f} users sampled per level: nothing could be found; raise ε, "
            "protocol.users_per_level or protocol.extension"
        )
    return threshold
