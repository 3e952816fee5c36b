"""The segment-pair method (SPM; [Wang19] §III-C after Fanti et al.'s RAPPOR for unknown dictionaries).

The ``m``-bit value is cut into ``g`` segments of ``s`` bits (the last one
shorter when ``s`` does not divide ``m``).  Every user is assigned, by
public randomness, one of the ``C(g, 2)`` segment pairs ``(α, β)`` and sends
three reports with ε/3 each: segment α, segment β and the whole value, each
through OLH ([Wang19] §VI-A's fair comparison replaces RAPPOR with OLH).

The server works in three rounds over the same reports (a user's reports
are keyed by its id, so asking again returns the same ones):

1. *segments*: every pattern of every segment is estimated from the
   reports of that segment (``2n/g`` users); the ``k`` most frequent
   patterns of segment ``i`` form ``C_i`` (§VI-A: exactly ``k`` per segment);
2. *pairs*: for each segment pair ``(i, j)``, the users assigned to it
   estimate the joint frequency of every ``(x, y)`` in ``C_i x C_j`` from
   their two independent reports: with ``A``, ``B`` the indicators that the
   reports support ``x`` and ``y``, ``E[(A - q)(B - q)] = (p - q)^2 [holds
   x and y]``, so ``(sum AB - q sum A - q sum B + n_ij q^2) / (p - q)^2``
   (scaled by ``C(g, 2)``) is unbiased.  A value is a candidate when each of
   its segment pairs is among the ``L`` most frequent of its pair (the
   a-priori principle); ``L`` starts at ``k`` and doubles until more than
   ``k`` candidates are found (§VI-A);
3. *final*: the candidates are estimated with everyone's full-value reports
   and the ``k`` best reported (top-k instead of the original threshold test,
   §VI-A).

The segment length is the longest whose ``g 2^s`` patterns stay within
:data:`AUTO_PATTERN_LIMIT` (OLH's decoding costs ``2n 2^s``) unless
``protocol.segment_bits`` sets it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..data.items import ItemCodec
from ..data.population import Shard
from ..errors import InputError
from ..kernels.blas import single_blas_thread
from ..kernels.randomness import RandomnessSource, UserRandom
from ..oracles import make_oracle
from ..oracles.hashing import local_hash
from ..oracles.local_hashing import LocalHashing
from ..privacy.ldp import BudgetRule
from ..privacy.validation import check_users
from ..schema import Key
from .base import Request, Response, RoundRecord, ServerProtocol
from .common.item_choice import choose_items
from .common.keys import TOP_K_KEY
from .common.prefix_encoding import PrefixEncoding
from .common.value_reports import (
    DROPOUT_PRIVACY,
    NPY_HEADER_BYTES,
    ValueReportingServer,
    check_all_users_report,
    public_seed,
)
from .messages import array_field, scalar_field
from .registry import register_protocol
from .spec import HeldUsers, InvalidReply, ProtocolSpec

NAME = "spm"
ORACLE = "olh"
SEGMENTS, PAIRS, FINAL = "segments", "pairs", "final"
MODES: tuple[str, ...] = (SEGMENTS, PAIRS, FINAL)
AUTO_PATTERN_LIMIT = 1 << 16  # g 2^s patterns at most when the segment length is automatic
MAX_SEGMENT_BITS = 20
MAX_CANDIDATES = 1 << 16
ITEM_PURPOSE = "spm.item"
SEGMENT_PURPOSE = "spm.segment-report"
FULL_PURPOSE = "spm.full-report"

KEYS: dict[str, Key] = {
    "segment_bits": Key(int, 0, f"SPM: s, bits per segment (the last one shorter if s does not divide m); 0: the longest with g 2^s <= {AUTO_PATTERN_LIMIT:,}", check=lambda v: 0 <= v <= MAX_SEGMENT_BITS, constraint=f"in 0..{MAX_SEGMENT_BITS}"),
    "top_k": TOP_K_KEY,
}


BUDGET = BudgetRule(
    (("segment α of the user's pair", 1 / 3), ("segment β of the user's pair", 1 / 3), ("full value", 1 / 3)),
    "Wang et al., Locally Differentially Private Heavy Hitter Identification, §III-C (SPM after Fanti et al.)",
)  # [Wang19] §III-C: "the user runs three reporting protocols in parallel, each using one third of privacy budget"


def segment_bounds(value_bits: int, segment_bits: int) -> np.ndarray:
    """Start of every segment and the end of the last: ``[0, s, 2s, ..., m]``."""
    return np.unique(np.r_[np.arange(0, value_bits, segment_bits), value_bits]).astype(np.int64)


def auto_segment_bits(value_bits: int) -> int:
    """The longest segment with at least two segments and ``g 2^s <= AUTO_PATTERN_LIMIT``."""
    for bits in range(min(MAX_SEGMENT_BITS, value_bits - 1), 0, -1):
        if (segment_bounds(value_bits, bits).size - 1) << bits <= AUTO_PATTERN_LIMIT:
            return bits
    return 1


@dataclass(frozen=True)
class SPMParameters:
    """Everything that fixes an SPM run, checked with errors naming the config key."""

    n_users: int
    epsilon: float
    value_bits: int
    segment_bits: int
    top_k: int

    def __post_init__(self) -> None:
        check_users(self.n_users)
        if not 1 <= self.segment_bits <= MAX_SEGMENT_BITS:
            raise InputError(f"protocol.segment_bits: must be in 1..{MAX_SEGMENT_BITS}, got {self.segment_bits}")
        if self.segment_bits >= self.value_bits:
            raise InputError(
                f"protocol.segment_bits: {self.segment_bits} bits leave one segment of the {self.value_bits}-bit "
                f"values; SPM needs pairs of segments, so at most {self.value_bits - 1}"
            )
        if self.top_k < 1:
            raise InputError(f"protocol.top_k: must be >= 1, got {self.top_k}")

    @property
    def bounds(self) -> np.ndarray:
        return segment_bounds(self.value_bits, self.segment_bits)

    @property
    def segments(self) -> int:
        return int(self.bounds.size - 1)


def spm_parameters(protocol: Mapping[str, Any], epsilon: float, n_users: int, value_bits: int) -> SPMParameters:
    BUDGET.split(NAME, epsilon)  # refuses a per-user ε no report's oracle can take, naming privacy.epsilon
    return SPMParameters(n_users, epsilon, value_bits, int(protocol["segment_bits"]) or auto_segment_bits(value_bits),
                         int(protocol["top_k"]))


# -- messages ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SPMRequest(Request):
    """One of the three rounds, with every public parameter a device needs to answer it."""

    mode: str  # segments | pairs | final
    value_bits: int = scalar_field(minimum=1)  # m: bits of a value
    segments: int = scalar_field(minimum=2)  # g: segments of a value
    bounds: np.ndarray = array_field("int64", ("segments+1",))  # segment i is bits [bounds[i], bounds[i+1])
    epsilon: float = scalar_field(minimum=0.0)  # ε of each report
    partition_seed: int  # public seed of the users' segment pairs
    patterns: np.ndarray = array_field("uint64", ("P",))  # pairs: C_0, C_1, ... concatenated
    pattern_offsets: np.ndarray = array_field("int64", ("segments+1",))  # pairs: C_i = patterns[offsets[i]:offsets[i+1]]
    candidates: np.ndarray = array_field("uint64", ("C",))  # final: keys of the candidate values


@dataclass(frozen=True)
class SPMResponse(Response):
    """Support counts (segments: every pattern; pairs: joint and single per pair; final: candidates); additive."""

    counts: np.ndarray = array_field("int64", ("S",))  # support counts, laid out per mode (see How users answer)
    # users per segment (segments), per pair (pairs), or all (final)
    reporters: np.ndarray = array_field("int64", ("U",))

    @classmethod
    def combine(cls, responses: Sequence[SPMResponse]) -> SPMResponse:
        if not responses:
            raise ValueError("combine needs at least one response")
        if len({(r.round, r.counts.shape, r.reporters.shape) for r in responses}) != 1:
            raise ValueError("cannot combine responses of different rounds or shapes")
        return cls(
            round=responses[0].round,
            sampled_users=sum(r.sampled_users for r in responses),
            responding_users=sum(r.responding_users for r in responses),
            counts=np.sum([r.counts for r in responses], axis=0, dtype=np.int64),
            reporters=np.sum([r.reporters for r in responses], axis=0, dtype=np.int64),
        )


# -- client -----------------------------------------------------------------------------------------


def segment_pairs(segments: int) -> np.ndarray:
    """The ``C(g, 2)`` pairs ``(α, β)``, ``α < β``, as rows."""
    first, second = np.triu_indices(segments, 1)
    return np.stack([first, second], axis=1)


def user_pairs(partition_seed: int, segments: int, user_ids: np.ndarray) -> np.ndarray:
    """The pair index of each global user id (public randomness: the same on every device and shard)."""
    pairs = segments * (segments - 1) // 2
    return UserRandom(np.uint64(partition_seed), np.asarray(user_ids, dtype=np.int64)).integers(0, pairs)


def segment_keys(bits: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Every row's segment values ``[rows, g]`` (segment bits read as a binary number)."""
    keys = np.zeros((bits.shape[0], bounds.size - 1), dtype=np.uint64)
    for segment in range(bounds.size - 1):
        weights = np.uint64(1) << np.arange(bounds[segment + 1] - bounds[segment] - 1, -1, -1, dtype=np.uint64)
        keys[:, segment] = (bits[:, bounds[segment] : bounds[segment + 1]].astype(np.uint64) * weights).sum(axis=1)
    return keys


def users_values(request: SPMRequest, shard: Shard, randomness: RandomnessSource) -> tuple[np.ndarray, np.ndarray]:
    """The value bits ``[V + 1, m]`` of the vocabulary (the empty value last) and each user's row in it."""
    encoding = PrefixEncoding("bits", shard.vocabulary.codec)
    if encoding.length != request.value_bits:
        raise ValueError(f"request.value_bits: {request.value_bits}, but the item codec gives {encoding.length}-bit values")
    bits = np.concatenate([encoding.units(shard.vocabulary), np.zeros((1, request.value_bits), dtype=np.uint8)])
    items = np.full(shard.n_users, -1, dtype=np.int64)
    holders, chosen = choose_items(shard, np.arange(shard.n_users), randomness, ITEM_PURPOSE, 0)
    items[holders] = chosen
    return bits, items


def segment_reports(request: SPMRequest, shard: Shard, randomness: RandomnessSource, segment: int,
                    reporters: np.ndarray, values: np.ndarray) -> tuple[LocalHashing, Any]:
    """The OLH reports of ``segment`` by its reporters (local ids), keyed by (segment, global id)."""
    width = int(request.bounds[segment + 1] - request.bounds[segment])
    oracle = make_oracle(ORACLE, epsilon=request.epsilon, domain=1 << width)
    rng = randomness.for_users(SEGMENT_PURPOSE, segment, reporters + shard.first_user)
    return oracle, oracle.randomize(values, rng)


def respond(request: SPMRequest, shard: Shard, randomness: RandomnessSource) -> SPMResponse:
    """A shard's support counts for the round (vectorised over users; loops over segments and pairs only).

    What each user does (a device is a shard of one user, ``u`` its global
    id): its value and key are as for ``bitstogram`` (``bits`` encoding, the
    empty value without an item).  Segment ``i`` of the value is its bits
    ``[bounds[i], bounds[i+1])`` read as a binary number, the first bit most
    significant.  The user's segment pair is the ``k``-th of the ``g (g -
    1) / 2`` pairs ``(α, β)``, ``α < β``, in lexicographic order ``(0, 1),
    (0, 2), ..., (1, 2), ...``, with ``k = public_index(partition_seed, u,
    g (g - 1) / 2)``.  It draws once, and sends in every round that asks for
    them, one ``olh`` report of segment ``α`` and one of segment ``β``, each
    at ε = ``epsilon`` over ``d = 2^(segment width)``; and once one ``olh``
    report of its key at ε = ``epsilon`` over ``d = min(2^value_bits, 2^64)``.

    * Mode ``segments``: for each segment ``i`` in order, the support counts
      of every pattern ``0 .. 2^(width of i) - 1`` from the segment-``i``
      reports (of the users whose pair contains ``i``), concatenated in
      ``counts``; ``reporters[i]`` the number of those users.
    * Mode ``pairs``: ``C_i = patterns[pattern_offsets[i] :
      pattern_offsets[i+1]]``.  For each pair ``(i, j)`` in order, over the
      users of that pair, ``A[u, x] = 1`` when ``u``'s segment-``i`` report
      supports ``C_i[x]`` and ``B[u, y]`` likewise for segment ``j``:
      ``counts`` gets ``A^T B`` (``|C_i| x |C_j|``, row-major), then the
      column sums of ``A``, then those of ``B``; ``reporters[pair]`` is the
      pair's number of users.
    * Mode ``final``: ``counts[i]`` is the support count of
      ``candidates[i]`` by the full-value reports, ``reporters = [n]``.

    ``sampled_users = responding_users`` = the number of users.
    """
    if request.mode not in MODES:
        raise ValueError(f"request.mode: got {request.mode!r}; allowed: {list(MODES)}")
    bits, items = users_values(request, shard, randomness)
    local = np.arange(shard.n_users)
    if request.mode == FINAL:
        encoding = PrefixEncoding("bits", shard.vocabulary.codec)
        oracle = make_oracle(ORACLE, epsilon=request.epsilon, domain=encoding.domain(request.value_bits))
        reports = oracle.randomize(encoding.keys(bits)[items], randomness.for_users(FULL_PURPOSE, 0, local + shard.first_user))
        support = oracle.support(reports, request.candidates)
        return _response(request, shard, support.counts, np.array([shard.n_users]))
    values = segment_keys(bits, request.bounds)[items]  # [users, g]
    pairs = segment_pairs(request.segments)[user_pairs(request.partition_seed, request.segments, local + shard.first_user)]
    counts, reporters = [], []
    supports: list[np.ndarray] = []  # pairs: per segment, [its reporters, |C_i|] support indicators
    for segment in range(request.segments):
        members = np.flatnonzero((pairs == segment).any(axis=1))
        oracle, reports = segment_reports(request, shard, randomness, segment, members, values[members, segment])
        if request.mode == SEGMENTS:
            width = int(request.bounds[segment + 1] - request.bounds[segment])
            counts.append(oracle.support(reports, np.arange(1 << width, dtype=np.uint64)).counts)
            reporters.append(members.size)
        else:
            patterns = request.patterns[request.pattern_offsets[segment] : request.pattern_offsets[segment + 1]]
            supported = local_hash(reports.seeds[:, None], patterns[None, :], oracle.g) == reports.buckets[:, None]
            supports.append(supported)
    if request.mode == PAIRS:
        for pair, (first, second) in enumerate(segment_pairs(request.segments)):
            group = np.flatnonzero(np.all(pairs == (first, second), axis=1))
            a = supports[first][np.searchsorted(np.flatnonzero((pairs == first).any(axis=1)), group)].astype(np.float64)
            b = supports[second][np.searchsorted(np.flatnonzero((pairs == second).any(axis=1)), group)].astype(np.float64)
            with single_blas_thread():
                pair_counts = a.T @ b
            counts += [np.rint(pair_counts).astype(np.int64).ravel(), a.sum(axis=0).astype(np.int64), b.sum(axis=0).astype(np.int64)]
            reporters.append(group.size)
    return _response(request, shard, np.concatenate(counts), np.asarray(reporters))


def _response(request: SPMRequest, shard: Shard, counts: np.ndarray, reporters: np.ndarray) -> SPMResponse:
    return SPMResponse(
        round=request.round,
        sampled_users=shard.n_users,
        responding_users=shard.n_users,
        counts=np.asarray(counts, dtype=np.int64),
        reporters=np.asarray(reporters, dtype=np.int64),
    )


# -- server -----------------------------------------------------------------------------------------


class SPMServer(ValueReportingServer):
    """Segments, then segment pairs, then the candidates' full values (module docstring)."""

    name = NAME
    request_type = SPMRequest
    response_type = SPMResponse
    oracle_label = ORACLE
    rounds = 3
    finished = "segments, pairs and candidates estimated"
    trace_fields = ("stage", "users", "patterns_kept", "value_pairs_kept", "candidates", "reported")
    params: SPMParameters

    def __init__(self, params: SPMParameters, codec: ItemCodec, seed: int) -> None:
        super().__init__(params, codec, BUDGET.split(NAME, params.epsilon))
        self.report_epsilon = self.split.parts[0][1]
        self.partition_seed = public_seed(seed, "spm.partition")
        self.oracle = make_oracle(ORACLE, epsilon=self.report_epsilon, domain=2)  # p and q do not depend on the domain
        self._patterns: list[np.ndarray] = []  # C_i
        self._candidates: np.ndarray | None = None  # value rows [K, m]
        self._kept_per_pair = 0
        self._pending: SPMRequest | None = None

    @property
    def stage(self) -> str | None:
        if self._reported is not None:
            return None
        if not self._patterns:
            return SEGMENTS
        return PAIRS if self._candidates is None else FINAL

    def next_request(self) -> SPMRequest | None:
        stage = self.stage
        if stage is None:
            return None
        if self._pending is None or self._pending.mode != stage:
            patterns = np.concatenate(self._patterns) if self._patterns else np.zeros(0, dtype=np.uint64)
            offsets = np.r_[0, np.cumsum([p.size for p in self._patterns])] if self._patterns else np.zeros(self.params.segments + 1)
            candidates = self.encoding.keys(self._candidates) if stage == FINAL else np.zeros(0, dtype=np.uint64)
            self._pending = SPMRequest(
                round=len(self._trace) + 1, mode=stage, value_bits=self.params.value_bits, segments=self.params.segments,
                bounds=self.params.bounds, epsilon=self.report_epsilon, partition_seed=self.partition_seed,
                patterns=patterns.astype(np.uint64), pattern_offsets=np.asarray(offsets, dtype=np.int64),
                candidates=candidates.astype(np.uint64),
            )
        return self._pending

    def absorb(self, response: Response) -> None:
        if not isinstance(response, SPMResponse):
            raise TypeError(f"spm: expected an SPMResponse, got {type(response).__name__}")
        stage = self.stage
        if stage == SEGMENTS:
            self._absorb_segments(response)
        elif stage == PAIRS:
            self._absorb_pairs(response)
        else:
            self._absorb_final(response)

    def _estimate(self, support: np.ndarray, reporters: float) -> np.ndarray:
        return (support - reporters * self.oracle.q) / (self.oracle.p - self.oracle.q)

    def _absorb_segments(self, response: SPMResponse) -> None:
        bounds, k = self.params.bounds, self.params.top_k
        start = 0
        for segment in range(self.params.segments):
            size = 1 << int(bounds[segment + 1] - bounds[segment])
            estimates = self._estimate(response.counts[start : start + size], float(response.reporters[segment]))
            start += size
            self._patterns.append(np.argsort(-estimates, kind="stable")[:k].astype(np.uint64))
        self._record_stage(SEGMENTS, response, patterns_kept=[int(p.size) for p in self._patterns])

    def pair_estimates(self, response: SPMResponse) -> dict[tuple[int, int], np.ndarray]:
        """Unbiased population counts of every ``(x, y)`` in ``C_i x C_j``, per segment pair (module docstring)."""
        p, q = self.oracle.p, self.oracle.q
        pairs = segment_pairs(self.params.segments)
        joints: dict[tuple[int, int], np.ndarray] = {}
        start = 0
        for index, (first, second) in enumerate(pairs.tolist()):
            ka, kb = self._patterns[first].size, self._patterns[second].size
            both = response.counts[start : start + ka * kb].reshape(ka, kb).astype(np.float64)
            a = response.counts[start + ka * kb : start + ka * kb + ka].astype(np.float64)
            b = response.counts[start + ka * kb + ka : start + ka * kb + ka + kb].astype(np.float64)
            start += ka * kb + ka + kb
            n_pair = float(response.reporters[index])
            joints[first, second] = (both - q * a[:, None] - q * b[None, :] + n_pair * q * q) / (p - q) ** 2 * len(pairs)
        return joints

    def _absorb_pairs(self, response: SPMResponse) -> None:
        joints = self.pair_estimates(response)
        kept = self.params.top_k
        while True:
            candidates = self._assemble(joints, kept)
            largest = max(j.size for j in joints.values())
            if candidates.shape[0] > self.params.top_k or kept >= largest:
                break
            kept *= 2
        self._kept_per_pair = min(kept, max(j.size for j in joints.values()))
        rows = self._rows(candidates)
        self._candidates = rows[self.encoding.reportable(rows)][:MAX_CANDIDATES]
        self._record_stage(PAIRS, response, value_pairs_kept=self._kept_per_pair, candidates=int(self._candidates.shape[0]))

    def _assemble(self, joints: dict[tuple[int, int], np.ndarray], kept: int) -> np.ndarray:
        """Index tuples ``[K, g]`` into ``C_0 .. C_{g-1}`` whose every segment pair is among its pair's ``kept`` best."""
        frequent = {}
        for pair, joint in joints.items():
            flat = np.zeros(joint.size, dtype=bool)
            flat[np.argsort(-joint.ravel(), kind="stable")[:kept]] = True
            frequent[pair] = flat.reshape(joint.shape)
        partial = np.arange(self._patterns[0].size)[:, None]
        for segment in range(1, self.params.segments):
            size = self._patterns[segment].size
            grown = np.concatenate([np.repeat(partial, size, axis=0), np.tile(np.arange(size), partial.shape[0])[:, None]], axis=1)
            keep = np.ones(grown.shape[0], dtype=bool)
            for earlier in range(segment):
                keep &= frequent[earlier, segment][grown[:, earlier], grown[:, segment]]
            partial = grown[keep][: MAX_CANDIDATES]
        return partial

    def _rows(self, chosen: np.ndarray) -> np.ndarray:
        """Value bit rows ``[K, m]`` of index tuples into the segments' patterns."""
        rows = np.zeros((chosen.shape[0], self.params.value_bits), dtype=np.uint8)
        bounds = self.params.bounds
        for segment in range(self.params.segments):
            width = int(bounds[segment + 1] - bounds[segment])
            values = self._patterns[segment][chosen[:, segment]] if chosen.size else np.zeros(0, dtype=np.uint64)
            shifts = np.arange(width - 1, -1, -1, dtype=np.uint64)
            rows[:, bounds[segment] : bounds[segment + 1]] = (values[:, None] >> shifts) & np.uint64(1)
        return rows

    def _absorb_final(self, response: SPMResponse) -> None:
        assert self._candidates is not None
        estimates = self._estimate(response.counts.astype(np.float64), float(response.reporters[0]))
        reported = self._report(self._candidates, estimates)
        self._record_stage(FINAL, response, candidates=int(estimates.size), reported=reported)

    def _record_stage(self, stage: str, response: SPMResponse, **values: Any) -> None:
        self._record(stage=stage, users=response.responding_users, **values)

    def progress_note(self) -> str:
        return f"{self.stage or 'done'}: {self.params.segments} segments of {self.params.segment_bits} bits"

    def describe(self) -> dict[str, Any]:
        params = self.params
        return {
            **self.encoding.describe(),
            "segments": params.segments,
            "segment_bits": params.segment_bits,
            "segment_bounds": [int(b) for b in params.bounds],
            "segment_pairs": params.segments * (params.segments - 1) // 2,
            "report_epsilon": self.report_epsilon,
            "top_k": params.top_k,
        }


def build_spm(privacy: Mapping[str, Any], protocol: Mapping[str, Any], n_users: int, codec: ItemCodec, seed: int) -> SPMServer:
    value_bits = PrefixEncoding("bits", codec).length
    return SPMServer(spm_parameters(protocol, float(privacy["epsilon"]), n_users, value_bits), codec, seed)


# -- what an untrusting server checks ------------------------------------------------------------------


def expected_sizes(request: SPMRequest) -> tuple[int, int]:
    """``(counts, reporters)`` lengths of an honest reply."""
    if request.mode == FINAL:
        return int(request.candidates.size), 1
    widths = np.diff(request.bounds)
    if request.mode == SEGMENTS:
        return int(sum(1 << int(w) for w in widths)), request.segments
    sizes = np.diff(request.pattern_offsets)
    pairs = segment_pairs(request.segments)
    return int(sum(sizes[a] * sizes[b] + sizes[a] + sizes[b] for a, b in pairs)), len(pairs)


def check_reply(request: SPMRequest, response: SPMResponse, node: HeldUsers, server: ServerProtocol) -> None:
    tag = type(response).__name__
    check_all_users_report(response, node)
    counts, reporters = expected_sizes(request)
    if response.counts.size != counts or response.reporters.size != reporters:
        raise InvalidReply(f"{tag}.counts: {response.counts.size} counts from {response.reporters.size} groups, expected {counts} from {reporters}")
    ids = np.arange(node.first_user, node.first_user + node.users)
    if request.mode == FINAL:
        expected = np.array([node.users])
    else:
        pairs = user_pairs(request.partition_seed, request.segments, ids)
        if request.mode == PAIRS:
            expected = np.bincount(pairs, minlength=reporters)
        else:
            chosen = segment_pairs(request.segments)[pairs]
            expected = np.array([(chosen == s).any(axis=1).sum() for s in range(request.segments)])
    if not np.array_equal(response.reporters, expected):
        raise InvalidReply(f"{tag}.reporters: {response.reporters.tolist()}, the node's users per group {expected.tolist()}")
    limit = int(response.reporters.max(initial=0)) if request.mode != FINAL else node.users
    if response.counts.size and int(response.counts.max()) > limit:
        raise InvalidReply(f"{tag}.counts: a count exceeds {limit}, the most its reports can support")


def reply_budget(request: SPMRequest, node: HeldUsers, server: ServerProtocol) -> int:
    counts, reporters = expected_sizes(request)
    return 8 * (counts + reporters) + 2 * NPY_HEADER_BYTES


def describe_round(record: RoundRecord) -> str:
    values = record.values
    if values["stage"] == SEGMENTS:
        return f"segments from {values['users']:,} users: patterns kept {values['patterns_kept']}"
    if values["stage"] == PAIRS:
        return (f"segment pairs from {values['users']:,} users: {values['value_pairs_kept']} value pairs kept "
                f"per segment pair, {values['candidates']:,} candidates")
    return f"full values from {values['users']:,} users: {values['candidates']:,} candidates, {values['reported']} reported"


# -- plan ---------------------------------------------------------------------------------------------


def stage_margins(params: SPMParameters, frequency: float) -> dict[str, float]:
    """How many standard deviations a value of population share ``frequency`` stands above an
    absent one at each stage (OLH at ε/3; patterns and pairs shared with other values ignored).

    Segments: ``2n/g`` reporters of each segment; pairs: ``n / C(g, 2)``
    reporters of each pair, the joint estimator's variance per reporter being
    about ``(q (1 - q))^2 / (p - q)^4``; final: all ``n``.
    """
    oracle = make_oracle(ORACLE, epsilon=params.epsilon / 3, domain=2)
    p, q = oracle.p, oracle.q
    n, g = params.n_users, params.segments
    pairs = g * (g - 1) / 2
    single = oracle.per_user_variance()[0]
    segment_users, pair_users = 2 * n / g, n / pairs
    return {
        "segments": frequency * segment_users / math.sqrt(segment_users * single),
        "pairs": frequency * pair_users / math.sqrt(pair_users * (q * (1 - q)) ** 2 / (p - q) ** 4),
        "final": frequency * n / math.sqrt(n * single),
    }


SPEC = register_protocol(
    ProtocolSpec(
        name=NAME,
        summary="SPM (Wang et al. §III-C): segment patterns, then segment pairs, then the assembled candidates, OLH at ε/3 each",
        build=build_spm,
        respond=respond,  # type: ignore[arg-type]
        request_type=SPMRequest,
        response_type=SPMResponse,
        dropout_privacy=DROPOUT_PRIVACY,
        keys=KEYS,
        reply_budget=reply_budget,  # type: ignore[arg-type]
        check_reply=check_reply,  # type: ignore[arg-type]
        describe_round=describe_round,
        budget=BUDGET,
        planner="fedhh.planning.spm:plan_spm",
        plan_command="fedhh.planning.spm:SPM_PLAN",
        communication="fedhh.protocols.communication:spm_bits",
    )
)
