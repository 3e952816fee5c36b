"""The multiple-channel method (MCM; Bassily and Smith 2015 as [Wang19] §III-D describes it, §VI-A's version).

A public hash ``H`` maps every value to one of ``h`` channels, so that
with good probability each channel holds at most one frequent value.  Every
user is assigned one bit position ``l`` (public randomness keyed by the user
id) and reports, with ε/2 each, the pair ``(H(v), v[l])`` and its whole
value.  In [Bassily15] the pair travels as ``h`` bits, random except the
own channel's, which is ``v[l]`` under randomised response; [Wang19] §VI-A
replaces that primitive with OLH (the pair over ``[h] x {0, 1}``), uses
``h = ceil(k^1.5)`` channels instead of ``n^1.5``, and reports the top ``k``
instead of testing a threshold; this module is that version.

Round 1: per bit position, the shards send OLH support counts of all ``2h``
pairs from the position's users; the server sets bit ``l`` of channel
``j``'s candidate to the bit whose pair ``(j, b)`` is estimated higher (the
majority vote).  Round 2: the candidates that can be items are estimated
with everyone's full-value reports and the ``k`` best are reported.  The
estimates are OLH's, unbiased.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from ..data.items import ItemCodec
from ..data.population import Shard
from ..errors import InputError
from ..kernels.randomness import RandomnessSource
from ..oracles import Support, make_oracle
from ..oracles.hashing import hash_keys
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
    bit_positions,
    check_all_users_report,
    public_seed,
    value_table,
)
from .messages import array_field, scalar_field
from .registry import register_protocol
from .spec import HeldUsers, InvalidReply, ProtocolSpec

NAME = "mcm"
ORACLE = "olh"
BITS, FINAL = "bits", "final"
MAX_CHANNELS = 1 << 16
ITEM_PURPOSE = "mcm.item"
BIT_PURPOSE = "mcm.bit-report"
FULL_PURPOSE = "mcm.full-report"

KEYS: dict[str, Key] = {
    "channels": Key(int, 0, "MCM: h, channels values are hashed into; 0: ceil(k^1.5) ([Wang19] §VI-A)", check=lambda v: v == 0 or 2 <= v <= MAX_CHANNELS, constraint=f"0 or in 2..{MAX_CHANNELS:,}"),
    "top_k": TOP_K_KEY,
}


BUDGET = BudgetRule(
    (("(channel, bit) pair at a uniformly chosen bit position", 0.5), ("full value", 0.5)),
    "Wang et al., Locally Differentially Private Heavy Hitter Identification, §III-D and §VI-A "
    "(MCM after Bassily and Smith); even split",
)  # ε_1 + ε_2 = ε ([Wang19] §III-D); [Wang19] does not say how, so evenly


@dataclass(frozen=True)
class MCMParameters:
    """Everything that fixes an MCM run, checked with errors naming the config key."""

    n_users: int
    epsilon: float
    value_bits: int
    channels: int
    top_k: int

    def __post_init__(self) -> None:
        check_users(self.n_users)
        if not 2 <= self.channels <= MAX_CHANNELS:
            raise InputError(
                f"protocol.channels: {self.channels} channels; must be in 2..{MAX_CHANNELS:,} "
                "(0 takes ceil(k^1.5) from protocol.top_k)"
            )
        if self.top_k < 1:
            raise InputError(f"protocol.top_k: must be >= 1, got {self.top_k}")


def mcm_parameters(protocol: Mapping[str, Any], epsilon: float, n_users: int, value_bits: int) -> MCMParameters:
    BUDGET.split(NAME, epsilon)  # refuses a per-user ε no report's oracle can take, naming privacy.epsilon
    top_k = int(protocol["top_k"])
    channels = int(protocol["channels"]) or max(2, math.ceil(top_k**1.5))
    return MCMParameters(n_users, epsilon, value_bits, channels, top_k)


# -- messages ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MCMRequest(Request):
    """A round: the (channel, bit) pairs of every position, or the candidates' full values."""

    mode: str  # bits | final
    value_bits: int = scalar_field(minimum=1)  # m: bits of a value
    channels: int = scalar_field(minimum=2)  # h: channels values are hashed into
    bit_epsilon: float = scalar_field(minimum=0.0)  # ε of the (channel, bit) report
    final_epsilon: float = scalar_field(minimum=0.0)  # ε of the whole-value report
    channel_seed: int  # σ of the channel hash
    partition_seed: int  # public seed of the users' bit positions
    candidates: np.ndarray = array_field("uint64", ("C",))  # final: keys of the candidate values


@dataclass(frozen=True)
class MCMResponse(Response):
    """OLH support counts: ``[position, 2h]`` pairs (bits) or one per candidate (final); additive."""

    # [position, 2h] support counts (bits), or one per candidate (final)
    counts: np.ndarray = array_field("int64", ("S",))
    reporters: np.ndarray = array_field("int64", ("U",))  # per position (bits), or all (final)

    @classmethod
    def combine(cls, responses: Sequence[MCMResponse]) -> MCMResponse:
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


def respond(request: MCMRequest, shard: Shard, randomness: RandomnessSource) -> MCMResponse:
    """A shard's OLH support counts for the round (vectorised over users; a loop over bit positions).

    What each user does (a device is a shard of one user, ``u`` its global
    id): its value and key are as for ``bitstogram`` (``bits`` encoding, the
    empty value without an item).

    * Mode ``bits``: its channel is ``hash64(channel_seed, key, channels)``
      and its bit position ``l = public_index(partition_seed, u,
      value_bits)``; it reports ``2 channel + (bit l of its value)`` through
      ``olh`` at ε = ``bit_epsilon`` over ``d = 2 channels``.  ``counts``
      holds, position by position, the support counts of the ``2 channels``
      pairs ``0, 1, ...`` from the reports of that position's users
      (``counts[l * 2 channels + x]``), ``reporters[l]`` the number of
      users of position ``l``.
    * Mode ``final``: it reports its key through ``olh`` at ε =
      ``final_epsilon`` over ``d = min(2^value_bits, 2^64)``; ``counts[i]``
      is the support count of ``candidates[i]``, ``reporters = [n]``.

    ``sampled_users = responding_users`` = the number of users.
    """
    if request.mode not in (BITS, FINAL):
        raise ValueError(f"request.mode: got {request.mode!r}; allowed: {[BITS, FINAL]}")
    bits, keys = value_table(shard, request.value_bits)
    local = np.arange(shard.n_users)
    items = np.full(shard.n_users, -1, dtype=np.int64)  # -1: the empty value, last in the table
    holders, chosen = choose_items(shard, local, randomness, ITEM_PURPOSE, 0)
    items[holders] = chosen
    if request.mode == FINAL:
        encoding = PrefixEncoding("bits", shard.vocabulary.codec)
        oracle = make_oracle(ORACLE, epsilon=request.final_epsilon, domain=encoding.domain(request.value_bits))
        reports = oracle.randomize(keys[items], randomness.for_users(FULL_PURPOSE, 0, local + shard.first_user))
        counts, reporters = oracle.support(reports, request.candidates).counts, np.array([shard.n_users])
    else:
        channels = hash_keys(np.uint64(request.channel_seed), keys, request.channels).astype(np.int64)
        positions = bit_positions(request.partition_seed, request.value_bits, local + shard.first_user)
        oracle = make_oracle(ORACLE, epsilon=request.bit_epsilon, domain=2 * request.channels)
        pairs = np.arange(2 * request.channels, dtype=np.uint64)
        rows = []
        for position in range(request.value_bits):  # a loop over bit positions, vectorised over their users
            members = np.flatnonzero(positions == position)
            values = (2 * channels[items[members]] + bits[items[members], position]).astype(np.uint64)
            reports = oracle.randomize(values, randomness.for_users(BIT_PURPOSE, position, members + shard.first_user))
            rows.append(oracle.support(reports, pairs).counts)
        counts, reporters = np.concatenate(rows), np.bincount(positions, minlength=request.value_bits)
    return MCMResponse(
        round=request.round, sampled_users=shard.n_users, responding_users=shard.n_users,
        counts=np.asarray(counts, dtype=np.int64), reporters=np.asarray(reporters, dtype=np.int64),
    )


# -- server -----------------------------------------------------------------------------------------


class MCMServer(ValueReportingServer):
    """Channels decoded bit by bit by majority, then the candidates' full values (module docstring)."""

    name = NAME
    request_type = MCMRequest
    response_type = MCMResponse
    oracle_label = ORACLE
    rounds = 2
    finished = "channels decoded and candidates estimated"
    trace_fields = ("stage", "users", "channels", "candidates", "reported")
    params: MCMParameters

    def __init__(self, params: MCMParameters, codec: ItemCodec, seed: int) -> None:
        super().__init__(params, codec, BUDGET.split(NAME, params.epsilon))
        self.bit_oracle = make_oracle(ORACLE, epsilon=self.split.parts[0][1], domain=2 * params.channels)
        self.final_oracle = make_oracle(ORACLE, epsilon=self.split.parts[1][1], domain=self.encoding.domain(params.value_bits))
        self.channel_seed = public_seed(seed, "mcm.channels")
        self.partition_seed = public_seed(seed, "mcm.partition")
        self._candidates: np.ndarray | None = None

    def next_request(self) -> MCMRequest | None:
        if self._reported is not None:
            return None
        final = self._candidates is not None
        return MCMRequest(
            round=len(self._trace) + 1, mode=FINAL if final else BITS, value_bits=self.params.value_bits,
            channels=self.params.channels, bit_epsilon=self.split.parts[0][1], final_epsilon=self.split.parts[1][1],
            channel_seed=self.channel_seed, partition_seed=self.partition_seed,
            candidates=self.encoding.keys(self._candidates) if final else np.zeros(0, dtype=np.uint64),
        )

    def absorb(self, response: Response) -> None:
        if not isinstance(response, MCMResponse):
            raise TypeError(f"mcm: expected an MCMResponse, got {type(response).__name__}")
        if self._candidates is None:
            recovered = np.unique(self.recover_channels(response), axis=0)
            self._candidates = recovered[self.encoding.reportable(recovered)]
            self._record_stage(BITS, response, candidates=int(self._candidates.shape[0]))
            return
        estimates = self.final_oracle.estimate_support(Support(response.counts, int(response.reporters.sum())))
        reported = self._report(self._candidates, estimates)
        self._record_stage(FINAL, response, candidates=int(estimates.size), reported=reported)

    def recover_channels(self, response: MCMResponse) -> np.ndarray:
        """Each channel's candidate ``[h, m]``: per position, the bit whose pair is estimated higher."""
        h, m = self.params.channels, self.params.value_bits
        counts = response.counts.reshape(m, 2 * h).astype(np.float64)
        estimates = (counts - response.reporters[:, None] * self.bit_oracle.q) / (self.bit_oracle.p - self.bit_oracle.q)
        return (estimates[:, 1::2] > estimates[:, 0::2]).T.astype(np.uint8)

    def _record_stage(self, stage: str, response: MCMResponse, **values: Any) -> None:
        self._record(stage=stage, users=response.responding_users, channels=self.params.channels, **values)

    def progress_note(self) -> str:
        return f"{self.params.channels:,} channels, {self.params.value_bits} bit positions"

    def describe(self) -> dict[str, Any]:
        return {
            **self.encoding.describe(),
            "channels": self.params.channels,
            "bit_epsilon": self.split.parts[0][1],
            "final_epsilon": self.split.parts[1][1],
            "users_per_bit_position": self.params.n_users / self.params.value_bits,
            "top_k": self.params.top_k,
        }


def build_mcm(privacy: Mapping[str, Any], protocol: Mapping[str, Any], n_users: int, codec: ItemCodec, seed: int) -> MCMServer:
    value_bits = PrefixEncoding("bits", codec).length
    return MCMServer(mcm_parameters(protocol, float(privacy["epsilon"]), n_users, value_bits), codec, seed)


# -- what an untrusting server checks ------------------------------------------------------------------


def check_reply(request: MCMRequest, response: MCMResponse, node: HeldUsers, server: ServerProtocol) -> None:
    check_all_users_report(response, node)
    tag = type(response).__name__
    if request.mode == FINAL:
        expected_counts, expected = request.candidates.size, np.array([node.users])
    else:
        ids = np.arange(node.first_user, node.first_user + node.users)
        expected_counts = request.value_bits * 2 * request.channels
        expected = np.bincount(bit_positions(request.partition_seed, request.value_bits, ids), minlength=request.value_bits)
    if response.counts.size != expected_counts or not np.array_equal(response.reporters, expected):
        raise InvalidReply(f"{tag}: {response.counts.size} counts from reporters {response.reporters.tolist()}, "
                           f"expected {expected_counts} from {expected.tolist()}")
    limits = expected if request.mode == FINAL else np.repeat(expected, 2 * request.channels)
    if np.any(response.counts > limits):
        raise InvalidReply(f"{tag}.counts: a count exceeds the reports that can support it")


def reply_budget(request: MCMRequest, node: HeldUsers, server: ServerProtocol) -> int:
    counts = request.candidates.size if request.mode == FINAL else request.value_bits * 2 * request.channels
    return 8 * (counts + request.value_bits + 1) + 2 * NPY_HEADER_BYTES


def describe_round(record: RoundRecord) -> str:
    values = record.values
    if values["stage"] == BITS:
        return f"(channel, bit) pairs from {values['users']:,} users: {values['channels']:,} channels, {values['candidates']:,} candidates"
    return f"full values from {values['users']:,} users: {values['candidates']:,} candidates, {values['reported']} reported"


# -- plan ---------------------------------------------------------------------------------------------


def discovery_probability(params: MCMParameters, frequency: float) -> float:
    """Chance that a value of population share ``frequency`` is recovered and reported, in the worst case.

    It must share its channel with none of the other ``k - 1`` heaviest values
    (``(1 - 1/h)^(k - 1)``), win every bit position's vote (``f n / m``
    holders among ``n / m`` reporters, against two OLH estimates of variance
    ``(n / m) Var_OLH`` each, every bit contested), and its full-value
    estimate must beat an absent value's by the noise (``Phi(f n / sd)``,
    standing for the top-k selection among the ``h`` candidates).
    """
    n, m = params.n_users, params.value_bits
    bit_oracle = make_oracle(ORACLE, epsilon=params.epsilon / 2, domain=2 * params.channels)
    final_oracle = make_oracle(ORACLE, epsilon=params.epsilon / 2, domain=2)
    holders = frequency * n
    vote = NormalDist().cdf(holders / m / math.sqrt(2 * n / m * bit_oracle.per_user_variance()[0]))
    final = NormalDist().cdf(holders / math.sqrt(n * final_oracle.per_user_variance()[0]))
    alone = (1 - 1 / params.channels) ** (params.top_k - 1)
    return alone * vote**m * final


SPEC = register_protocol(
    ProtocolSpec(
        name=NAME,
        summary="MCM (Bassily and Smith, as Wang et al. §VI-A run it): k^1.5 channels decoded bit by bit with OLH, top k",
        build=build_mcm,
        respond=respond,  # type: ignore[arg-type]
        request_type=MCMRequest,
        response_type=MCMResponse,
        dropout_privacy=DROPOUT_PRIVACY,
        keys=KEYS,
        reply_budget=reply_budget,  # type: ignore[arg-type]
        check_reply=check_reply,  # type: ignore[arg-type]
        describe_round=describe_round,
        budget=BUDGET,
        planner="fedhh.planning.mcm:plan_mcm",
        plan_command="fedhh.planning.mcm:MCM_PLAN",
        communication="fedhh.protocols.communication:mcm_bits",
    )
)
