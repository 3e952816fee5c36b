"""Bitstogram (Bassily, Nissim, Stemmer and Thakurta; [Bassily17] §4): heavy hitters recovered bit by bit.

A public hash ``h: V -> [T]`` spreads the values over ``T`` channels (about
``sqrt(n)``), so that each heavy value is, with good probability, the only
heavy value of its channel.  Every user is assigned one bit position ``l``
of the ``m``-bit value (public randomness keyed by the user id) and sends,
with half of its budget, the pair ``(h(v), v[l])`` through the Hashtogram
oracle over ``[T] x {0, 1}`` (a domain that small is not hashed); with the
other half it sends its whole value through the Hashtogram oracle (hashed
rows, :mod:`fedhh.oracles.hashtogram`).  All reports go in one round (the
paper's protocol is non-interactive).

The server decodes once: for each channel ``t`` and position ``l`` the bit
``b`` whose pair ``(t, b)`` is estimated more often becomes bit ``l`` of the
channel's candidate ``v_hat(t)``.  A heavy value alone in its channel is
recovered whole, since every user of its channel and position holding it
votes for its bit; the other channels give arbitrary bit strings.  The
``T`` candidates that can be items are then estimated with everyone's
full-value reports, and those estimated above the noise level (set so that
on average :data:`ABSENT_REPORTED` of the candidates no user holds passes)
are reported, the ``top_k`` best.  The estimates are unbiased (the
Hashtogram estimator); the privacy split is ε/2 + ε/2, as in TreeHist.
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
from ..oracles.base import FLAT_CELLS_LIMIT
from ..oracles.hashing import hash_keys
from ..oracles.hashtogram import Hashtogram, HashtogramStatistics
from ..privacy.ldp import BudgetRule, BudgetSplit
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

NAME = "bitstogram"
ORACLE = Hashtogram.name
ABSENT_REPORTED = 0.1  # expected candidates held by nobody that pass the final threshold, per run
ITEM_PURPOSE = "bitstogram.item"
BIT_PURPOSE = "bitstogram.bit-report"
FINAL_PURPOSE = "bitstogram.final-report"

def _power_of_two_or_auto(value: int) -> bool:
    return value == 0 or (value >= 2 and value & (value - 1) == 0)


KEYS: dict[str, Key] = {
    "buckets": Key(int, 0, "Bitstogram: T, channels values are hashed into and width of its Hashtogram oracles; 0: the power of two at or above sqrt(n)", check=_power_of_two_or_auto, constraint="0 or a power of two >= 2"),
    "hashtogram_rows": Key(int, 0, "Bitstogram: R, hash rows of the Hashtogram oracle that estimates whole values; 0: about ln n", check=lambda v: v >= 0, constraint=">= 0"),
    "top_k": TOP_K_KEY,  # shared with PEM/TreeHist: values reported at most
}


BUDGET = BudgetRule(
    (("(channel, bit) pair at a uniformly chosen bit position", 0.5), ("full value", 0.5)),
    "Bassily et al., Practical Locally Private Heavy Hitters (Bitstogram, §4); even split as for TreeHist",
)  # [Bassily17] §4: each user sends a (channel, bit) pair and its whole value, ε/2 each


def auto_buckets(n_users: int) -> int:
    """The power of two at or above ``sqrt(n)`` (Remark 4.1: ``T ~ sqrt(n)`` separates the heavy hitters)."""
    return 1 << max(1, math.ceil(math.log2(max(math.sqrt(n_users), 2))))


def auto_rows(n_users: int) -> int:
    """An odd number of rows near ``ln n`` (between 3 and 31)."""
    return min(max(2 * int(math.log(max(n_users, 3)) / 2) + 1, 3), 31)


@dataclass(frozen=True)
class BitstogramParameters:
    """Everything that fixes a Bitstogram run, checked with errors naming the config key."""

    n_users: int
    epsilon: float
    value_bits: int
    buckets: int
    rows: int
    top_k: int

    def __post_init__(self) -> None:
        check_users(self.n_users)
        if not (_power_of_two_or_auto(self.buckets) and self.buckets >= 2):
            raise InputError(f"protocol.buckets: must be a power of two >= 2, got {self.buckets}")
        if self.rows < 1:
            raise InputError(f"protocol.hashtogram_rows: must be >= 1, got {self.rows}")
        if self.rows * self.buckets > FLAT_CELLS_LIMIT:
            raise InputError(
                f"protocol.hashtogram_rows x protocol.buckets: {self.rows} x {self.buckets} cells exceed the "
                f"{FLAT_CELLS_LIMIT:,} a shard's statistics may hold; use fewer rows or buckets"
            )
        if self.value_bits * 2 * self.buckets > 16 * FLAT_CELLS_LIMIT:
            raise InputError(
                f"protocol.buckets: {self.value_bits} bit positions x {2 * self.buckets} (channel, bit) pairs "
                f"exceed the {16 * FLAT_CELLS_LIMIT:,} counts a shard may send; use fewer buckets"
            )
        if self.top_k < 1:
            raise InputError(f"protocol.top_k: must be >= 1, got {self.top_k}")

    @property
    def split(self) -> BudgetSplit:
        return BUDGET.split(NAME, self.epsilon)


def bitstogram_parameters(protocol: Mapping[str, Any], epsilon: float, n_users: int, value_bits: int) -> BitstogramParameters:
    """A config's ``[protocol]`` section as Bitstogram's parameters (0: automatic)."""
    BUDGET.split(NAME, epsilon)  # refuses a per-user ε no report's oracle can take, naming privacy.epsilon
    return BitstogramParameters(
        n_users=n_users,
        epsilon=epsilon,
        value_bits=value_bits,
        buckets=int(protocol["buckets"]) or auto_buckets(n_users),
        rows=int(protocol["hashtogram_rows"]) or auto_rows(n_users),
        top_k=int(protocol["top_k"]),
    )


# -- messages ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BitstogramRequest(Request):
    """The one round: every public parameter a device needs to send its two reports."""

    value_bits: int = scalar_field(minimum=1)  # m: bits of a value
    buckets: int = scalar_field(minimum=2)  # T: channels, and the width of both Hashtogram oracles
    rows: int = scalar_field(minimum=1)  # R: hash rows of the whole-value Hashtogram
    bit_epsilon: float = scalar_field(minimum=0.0)  # ε of the (channel, bit) report
    final_epsilon: float = scalar_field(minimum=0.0)  # ε of the whole-value report
    channel_seed: int  # σ of the channel hash
    partition_seed: int  # public seed of the users' bit positions
    oracle_seed: int  # seed of both Hashtogram oracles

    def bit_oracle(self) -> Hashtogram:
        """The oracle of the (channel, bit) pairs: ``2T`` values, not hashed."""
        return Hashtogram(self.bit_epsilon, 2 * self.buckets, rows=1, width=2 * self.buckets, seed=self.oracle_seed)

    def final_oracle(self) -> Hashtogram:
        """The oracle of whole values: ``R`` hashed rows of ``T`` buckets, median over rows ([Bassily17])."""
        return Hashtogram(self.final_epsilon, 1 << 64, rows=self.rows, width=self.buckets, seed=self.oracle_seed,
                          estimator="median")


@dataclass(frozen=True)
class BitstogramResponse(Response):
    """A shard's summed oracle statistics: per bit position, and of the whole values; additive."""

    bit_sums: np.ndarray = array_field("int64", ("B", "P"), minimum=None)  # [position, 2T] signed sums
    bit_users: np.ndarray = array_field("int64", ("B",))  # reports per position
    final_sums: np.ndarray = array_field("int64", ("F",), minimum=None)  # [R x T] signed sums, flat
    final_users: np.ndarray = array_field("int64", ("R",))  # reports per row

    @classmethod
    def combine(cls, responses: Sequence[BitstogramResponse]) -> BitstogramResponse:
        if not responses:
            raise ValueError("combine needs at least one response")
        if len({(r.round, r.bit_sums.shape, r.final_sums.shape) for r in responses}) != 1:
            raise ValueError("cannot combine responses of different rounds or shapes")
        return cls(
            round=responses[0].round,
            sampled_users=sum(r.sampled_users for r in responses),
            responding_users=sum(r.responding_users for r in responses),
            bit_sums=np.sum([r.bit_sums for r in responses], axis=0, dtype=np.int64),
            bit_users=np.sum([r.bit_users for r in responses], axis=0, dtype=np.int64),
            final_sums=np.sum([r.final_sums for r in responses], axis=0, dtype=np.int64),
            final_users=np.sum([r.final_users for r in responses], axis=0, dtype=np.int64),
        )


# -- client -----------------------------------------------------------------------------------------


def respond(request: BitstogramRequest, shard: Shard, randomness: RandomnessSource) -> BitstogramResponse:
    """A shard's two reports per user, summed into the oracles' statistics (vectorised over users).

    What each user does (a device is a shard of one user, ``u`` its global id):
    its value is its item's ``value_bits`` bits in the ``bits`` encoding (the
    empty value, all bits 0, when it holds no item) and its key the value's
    oracle key (see "Values as bits or symbols").  Its channel is
    ``hash64(channel_seed, key, buckets)`` (the seed taken as ``σ`` itself)
    and its bit position ``l = public_index(partition_seed, u, value_bits)``.
    It sends two reports:

    * the pair ``2 channel + (bit l of its value, 0 = the first bit)``
      through ``hashtogram`` at ε = ``bit_epsilon`` over ``d = 2 buckets``
      values with ``rows = 1``, ``width = 2 buckets`` (so not hashed) and
      ``seed = oracle_seed``;
    * its key through ``hashtogram`` at ε = ``final_epsilon`` over
      ``d = 2^64`` with ``rows = rows``, ``width = buckets``,
      ``seed = oracle_seed``.

    The reply: ``bit_sums[l]`` is the first oracle's flat cells summed over
    the users of position ``l`` (zeros for a position without any) and
    ``bit_users[l]`` their number; ``final_sums`` and ``final_users`` are the
    second oracle's flat statistics summed over all users;
    ``sampled_users = responding_users`` = the number of users.
    """
    bits, keys = value_table(shard, request.value_bits)
    local = np.arange(shard.n_users)
    items = np.full(shard.n_users, -1, dtype=np.int64)  # -1: the empty value, last in the table
    holders, chosen = choose_items(shard, local, randomness, ITEM_PURPOSE, 0)
    items[holders] = chosen
    channels = hash_keys(np.uint64(request.channel_seed), keys, request.buckets).astype(np.int64)
    positions = bit_positions(request.partition_seed, request.value_bits, local + shard.first_user)
    order = np.argsort(positions, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(positions, minlength=request.value_bits))))
    bit_oracle = request.bit_oracle()
    bit_sums = np.zeros((request.value_bits, 2 * request.buckets), dtype=np.int64)
    for position in range(request.value_bits):  # a loop over bit positions, vectorised over their users
        members = order[bounds[position] : bounds[position + 1]]
        member_items = items[members]
        pairs = 2 * channels[member_items] + bits[member_items, position]
        rng = randomness.for_users(BIT_PURPOSE, position, members + shard.first_user)
        bit_sums[position] = bit_oracle.aggregate(bit_oracle.randomize(pairs.astype(np.uint64), rng)).sums[0]
    final_oracle = request.final_oracle()
    rng = randomness.for_users(FINAL_PURPOSE, 0, local + shard.first_user)
    final = final_oracle.aggregate(final_oracle.randomize(keys[items], rng))
    return BitstogramResponse(
        round=request.round,
        sampled_users=shard.n_users,
        responding_users=shard.n_users,
        bit_sums=bit_sums,
        bit_users=np.bincount(positions, minlength=request.value_bits).astype(np.int64),
        final_sums=final.sums.ravel(),
        final_users=final.users,
    )


# -- server -----------------------------------------------------------------------------------------


class BitstogramServer(ValueReportingServer):
    """One round of reports, then channels decoded bit by bit and candidates estimated (module docstring)."""

    name = NAME
    request_type = BitstogramRequest
    response_type = BitstogramResponse
    oracle_label = ORACLE
    rounds = 1
    finished = "one round: channels decoded and candidates estimated"
    params: BitstogramParameters

    def __init__(self, params: BitstogramParameters, codec: ItemCodec, seed: int) -> None:
        super().__init__(params, codec, params.split)
        self.request = BitstogramRequest(
            round=1,
            value_bits=params.value_bits,
            buckets=params.buckets,
            rows=params.rows,
            bit_epsilon=self.split.parts[0][1],
            final_epsilon=self.split.parts[1][1],
            channel_seed=public_seed(seed, "bitstogram.channels"),
            partition_seed=public_seed(seed, "bitstogram.partition"),
            oracle_seed=public_seed(seed, "bitstogram.oracle"),
        )
        self.threshold = self.noise_threshold()

    def noise_threshold(self) -> float:
        """The estimate a value held by nobody exceeds with probability ``ABSENT_REPORTED / T``."""
        zero = self.request.final_oracle().linear_variance(self.params.n_users).zero_count
        return math.sqrt(zero) * NormalDist().inv_cdf(1 - ABSENT_REPORTED / self.params.buckets)

    # -- ServerProtocol ---------------------------------------------------------------------------

    def next_request(self) -> BitstogramRequest | None:
        return self.request if self._reported is None else None

    def absorb(self, response: Response) -> None:
        if not isinstance(response, BitstogramResponse):
            raise TypeError(f"bitstogram: expected a BitstogramResponse, got {type(response).__name__}")
        candidates = np.unique(self.recover_channels(response), axis=0)
        candidates = candidates[self.encoding.reportable(candidates)]
        estimates = self.estimate(response, candidates)
        passed = np.flatnonzero(estimates >= self.threshold)
        reported = self._report(candidates, estimates, eligible=passed)
        self._record(users=response.responding_users, channels=self.params.buckets, candidates=int(candidates.shape[0]),
                     above_threshold=int(passed.size), reported=reported, threshold=self.threshold)

    def recover_channels(self, response: BitstogramResponse) -> np.ndarray:
        """Each channel's candidate ``[T, m]``: per position, the bit whose (channel, bit) pair is estimated higher."""
        oracle = self.request.bit_oracle()
        pairs = np.arange(2 * self.params.buckets, dtype=np.uint64)
        recovered = np.empty((self.params.buckets, self.params.value_bits), dtype=np.uint8)
        for position in range(self.params.value_bits):
            statistics = HashtogramStatistics(response.bit_sums[position][None, :], response.bit_users[position : position + 1])
            estimates = oracle.estimate(statistics, pairs).reshape(self.params.buckets, 2)
            recovered[:, position] = estimates[:, 1] > estimates[:, 0]
        return recovered

    def estimate(self, response: BitstogramResponse, candidates: np.ndarray) -> np.ndarray:
        """Unbiased counts of candidate values ``[K, m]`` from everyone's full-value reports."""
        oracle = self.request.final_oracle()
        statistics = oracle.from_flat(response.final_sums, response.final_users)
        return oracle.estimate(statistics, self.encoding.keys(candidates))

    def stopped_because(self) -> str:
        stopped = super().stopped_because()
        if self._reported is not None and len(self._reported[1]) < self.params.top_k:
            stopped += f"; {len(self._reported[1])} of k = {self.params.top_k} values were above the threshold"
        return stopped

    def progress_note(self) -> str:
        return f"{self.params.buckets:,} channels, {self.params.value_bits} bit positions"

    def describe(self) -> dict[str, Any]:
        params = self.params
        return {
            **self.encoding.describe(),
            "buckets": params.buckets,
            "hashtogram_rows": params.rows,
            "bit_epsilon": self.request.bit_epsilon,
            "final_epsilon": self.request.final_epsilon,
            "users_per_bit_position": params.n_users / params.value_bits,
            "threshold": self.threshold,
            "top_k": params.top_k,
        }


def build_bitstogram(
    privacy: Mapping[str, Any], protocol: Mapping[str, Any], n_users: int, codec: ItemCodec, seed: int
) -> BitstogramServer:
    value_bits = PrefixEncoding("bits", codec).length
    return BitstogramServer(bitstogram_parameters(protocol, float(privacy["epsilon"]), n_users, value_bits), codec, seed)


# -- what an untrusting server checks ------------------------------------------------------------------


def check_reply(request: BitstogramRequest, response: BitstogramResponse, node: HeldUsers, server: ServerProtocol) -> None:
    """Raise :class:`InvalidReply` unless ``response`` is a possible answer of the node."""
    check_all_users_report(response, node)
    tag = type(response).__name__
    shapes = {
        "bit_sums": (response.bit_sums.shape, (request.value_bits, 2 * request.buckets)),
        "final_sums": (response.final_sums.shape, (request.rows * request.buckets,)),
        "final_users": (response.final_users.shape, (request.rows,)),
    }
    for field, (got, expected) in shapes.items():
        if got != expected:
            raise InvalidReply(f"{tag}.{field}: shape {got}, expected {expected}")
    positions = np.bincount(bit_positions(request.partition_seed, request.value_bits,
                                          np.arange(node.first_user, node.first_user + node.users)),
                            minlength=request.value_bits)
    if not np.array_equal(response.bit_users, positions):
        raise InvalidReply(f"{tag}.bit_users: {response.bit_users.tolist()}, its users per bit position {positions.tolist()}")
    if int(response.final_users.sum()) != node.users:
        raise InvalidReply(f"{tag}.final_users: they add up to {int(response.final_users.sum())}, not {node.users}")
    if np.any(np.abs(response.bit_sums).sum(axis=1) > positions) or int(np.abs(response.final_sums).sum()) > node.users:
        raise InvalidReply(f"{tag}: signed sums larger than the node's reports can add")


def reply_budget(request: BitstogramRequest, node: HeldUsers, server: ServerProtocol) -> int:
    cells = request.value_bits * (2 * request.buckets + 1) + request.rows * (request.buckets + 1)
    return 8 * cells + 4 * NPY_HEADER_BYTES


def describe_round(record: RoundRecord) -> str:
    values = record.values
    return (
        f"one round from {values['users']:,} users: {values['channels']:,} channels decoded bit by bit, "
        f"{values['candidates']:,} candidates, {values['above_threshold']} above the threshold "
        f"{values['threshold']:,.0f}, {values['reported']} reported"
    )


# -- plan ---------------------------------------------------------------------------------------------


def discovery_probability(params: BitstogramParameters, frequency: float) -> float:
    """Chance that a value of population share ``frequency``, alone in its channel, is reported.

    Every bit position's vote: ``f n / m`` holders among the position's
    ``n / m`` users, against two uncorrelated estimates of variance
    ``(n / m) / c^2`` each (``c`` at ε/2): right with probability
    ``Phi(c f n / m / sqrt(2 n / m))``, all ``m`` of them to the power ``m``.
    Then the full-value estimate must pass the threshold.  Other values
    sharing the channel only shift the votes by about ``n / (T m)``, which
    ``T ~ sqrt(n)`` keeps well below the noise; this is ignored.
    """
    split = params.split
    n, m = params.n_users, params.value_bits
    c = math.tanh(split.parts[0][1] / 2)  # (e^ε - 1)/(e^ε + 1)
    holders = frequency * n
    per_bit = NormalDist().cdf(c * holders / m / math.sqrt(2 * n / m))
    final = Hashtogram(split.parts[1][1], 1 << 64, rows=params.rows, width=params.buckets, estimator="median")
    other, same = final.per_user_variance()
    sd = math.sqrt((n - holders) * other + holders * same)
    threshold = math.sqrt(n * other) * NormalDist().inv_cdf(1 - ABSENT_REPORTED / params.buckets)
    return per_bit**m * NormalDist().cdf((holders - threshold) / sd)


SPEC = register_protocol(
    ProtocolSpec(
        name=NAME,
        summary="Bitstogram (Bassily et al.): values hashed into channels, each channel's heavy hitter recovered bit by bit",
        build=build_bitstogram,
        respond=respond,  # type: ignore[arg-type]
        request_type=BitstogramRequest,
        response_type=BitstogramResponse,
        dropout_privacy=DROPOUT_PRIVACY,
        keys=KEYS,
        reply_budget=reply_budget,  # type: ignore[arg-type]
        check_reply=check_reply,  # type: ignore[arg-type]
        describe_round=describe_round,
        budget=BUDGET,
        planner="fedhh.planning.bitstogram:plan_bitstogram",
        plan_command="fedhh.planning.bitstogram:BITSTOGRAM_PLAN",
        communication="fedhh.protocols.communication:bitstogram_bits",
    )
)
