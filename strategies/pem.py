"""PEM on Flower, and what every prefix search (PEM, TreeHist) shares there.

Everything else (levels, candidates, selection, estimates) is the core's
``PrefixSearchServer``; this module declares what a prefix search's
messages look like on the wire, asks a node only in the rounds where it
holds users of the asked level, refuses replies that no honest node could
send, and logs each round.  A node can check nothing about the server, but
the server can check a lot about a node: which of its users belong to the
level (public randomness), how many supports it may send, and, for a
one-shot collection, that its report rows are split over the levels exactly
as its users are.
"""

from __future__ import annotations

import numpy as np

from fedhh.protocols import Request, Response, RoundRecord
from fedhh.protocols.pem import PEMRequest, PEMResponse
from fedhh.protocols.prefix_encoding import PrefixEncoding
from fedhh.oracles import FrequencyOracle
from fedhh.protocols.prefix_oracles import counts_size, support_bound
from fedhh.protocols.prefix_reports import COLLECT, LEVEL, PrefixRequest, PrefixResponse, level_sizes
from fedhh.protocols.prefix_search import PrefixSearchServer
from fedhh.protocols.report_table import to_table

from .base import ProtocolStrategy
from .codec import ArraySpec, MessageCodec
from .errors import InvalidReply
from .shards import ShardInfo

NPY_HEADER_BYTES = 256  # np.save header of one array, generously

# A round asks for the candidates' keys (C of them) of one level, with the
# public parameters (L levels: their prefix lengths and user shares); the
# answer is S counts (the oracle's flat statistics, or the candidates' support
# counts) with U reporter counts (per sketch row), or, one-shot, R distinct
# report rows of W columns with their counts.
REQUEST_ARRAYS = {
    "lengths": ArraySpec("int64", ("levels",), minimum=1),
    "level_bounds": ArraySpec("float64", ("levels+1",), minimum=0.0),
    "candidates": ArraySpec("uint64", ("C",)),
}
REQUEST_MINIMUMS = {"round": 1, "level": -1, "levels": 1, "epsilon": 0.0, "final_epsilon": 0.0}
RESPONSE_ARRAYS = {
    "counts": ArraySpec("int64", ("S",), minimum=None),  # Hadamard-based counts are signed
    "reporters": ArraySpec("int64", ("U",)),
    "report_rows": ArraySpec("uint64", ("R", "W")),
    "report_counts": ArraySpec("int64", ("R",), minimum=1),
}

REQUEST_CODEC: MessageCodec[PEMRequest] = MessageCodec(PEMRequest, REQUEST_ARRAYS, REQUEST_MINIMUMS)
RESPONSE_CODEC: MessageCodec[PEMResponse] = MessageCodec(PEMResponse, RESPONSE_ARRAYS, {"round": 1})


def asked_users(request: PrefixRequest, shard: ShardInfo) -> int:
    """How many of a node's users the request asks: one level's members, or all of them."""
    if request.mode != LEVEL:
        return shard.users
    sizes = level_sizes(request.partition_seed, request.level_bounds, shard.first_user, shard.users)
    return int(sizes[request.level])


class PrefixSearchStrategy(ProtocolStrategy):
    """Rounds of a prefix search over Flower (PEM: one group per round)."""

    server: PrefixSearchServer

    @property
    def dropout_privacy(self) -> str:
        return (
            "unchanged: every report is ε-LDP on the device that sends it, whatever else happens; "
            "a node that does not answer only removes its users' reports, which lowers the counts of "
            "their values but reveals nothing about anyone"
        )

    def request_for(self, request: Request, shard: ShardInfo) -> Request | None:
        """Nothing for a node that holds no user of the asked level."""
        assert isinstance(request, PrefixRequest)
        return request if asked_users(request, shard) else None

    def reply_budget(self, request: Request, shard: ShardInfo) -> int:
        assert isinstance(request, PrefixRequest)
        if request.mode == COLLECT:
            return 8 * shard.users * (report_width(request, self.server) + 1) + 4 * NPY_HEADER_BYTES
        counts, reporters = counts_size(asked_oracle(request, self.server), request.candidates.size)
        return 8 * (counts + reporters) + 4 * NPY_HEADER_BYTES

    def check_response(self, request: Request, response: Response, shard: ShardInfo) -> None:
        assert isinstance(request, PrefixRequest) and isinstance(response, PrefixResponse)
        check_reply(request, response, shard, self.server)

    def describe_round(self, record: RoundRecord) -> str:
        values = record.values
        if "levels" in values:  # one-shot: every level decoded after one round
            kept = [step["kept"] for step in values["levels"]]
            return f"one-shot collection from {values['users']:,} users; survivors per level {kept}"
        if values.get("level") == "final":
            return f"final estimation pass over {values['candidates']} survivors, {values['users']:,} users"
        threshold = "" if values["threshold"] is None else f", threshold {values['threshold']:,.0f}"
        return (
            f"level {values['level']}: prefixes of {values['prefix_length']} units from about "
            f"{values['users']:,} users, {values['candidates']:,} candidates, {values['kept']} kept{threshold}"
        )


class PEMStrategy(PrefixSearchStrategy):
    """PEM rounds over Flower: one group of users per round (or one round, one-shot)."""


def report_width(request: PrefixRequest, server: PrefixSearchServer) -> int:
    """Columns of a one-shot report row: the level, the level report, the full-value report."""
    encoding = PrefixEncoding(request.encoding, server.codec)  # type: ignore[arg-type]
    oracle = request.oracle_for(int(request.lengths[0]), request.epsilon, encoding)
    template = oracle.randomize(np.zeros(1, dtype=np.uint64), np.random.default_rng(0))
    width = to_table(template).shape[1]
    return 1 + width * (2 if request.final_epsilon > 0 else 1)


def check_reply(request: PrefixRequest, response: PrefixResponse, shard: ShardInfo, server: PrefixSearchServer) -> None:
    """Raise :class:`InvalidReply` unless ``response`` is a possible answer of the node."""
    tag = type(response).__name__
    asked = asked_users(request, shard)
    if response.sampled_users != asked or response.responding_users != asked:
        raise InvalidReply(
            f"{tag}.sampled_users/responding_users: the node holds {asked} asked users, it says "
            f"{response.sampled_users}/{response.responding_users} (every asked user reports)"
        )
    if request.mode == COLLECT:
        _check_collection(request, response, shard, server, tag)
        return
    if response.report_rows.size or response.report_counts.size:
        raise InvalidReply(f"{tag}.report_rows: only a one-shot collection sends reports")
    oracle = asked_oracle(request, server)
    counts, reporters = counts_size(oracle, request.candidates.size)
    if response.reporters.size != reporters or response.counts.size != counts:
        raise InvalidReply(
            f"{tag}.counts: {response.counts.size} counts from {response.reporters.size} row(s), expected "
            f"{counts} from {reporters} for oracle {oracle.name!r} and {request.candidates.size} candidates"
        )
    if int(response.reporters.sum()) != asked:
        raise InvalidReply(f"{tag}.reporters: they add up to {int(response.reporters.sum())}, not {asked}")
    limit = support_bound(oracle) * asked
    if response.counts.size and int(np.abs(response.counts).max()) > limit:
        raise InvalidReply(f"{tag}.counts: a count exceeds {limit}, the most {asked} reports can add")


def asked_oracle(request: PrefixRequest, server: PrefixSearchServer) -> FrequencyOracle:
    """The oracle a node randomised with in a level or final round."""
    encoding = PrefixEncoding(request.encoding, server.codec)  # type: ignore[arg-type]
    if request.mode == LEVEL:
        return request.oracle_for(int(request.lengths[request.level]), request.epsilon, encoding)
    return request.oracle_for(encoding.length, request.final_epsilon, encoding)


def _check_collection(
    request: PrefixRequest, response: PrefixResponse, shard: ShardInfo, server: PrefixSearchServer, tag: str
) -> None:
    if response.counts.size or response.reporters.size:
        raise InvalidReply(f"{tag}.counts: a one-shot collection sends reports, not counts")
    width = report_width(request, server)
    if response.report_rows.shape[1] != width:
        raise InvalidReply(f"{tag}.report_rows: rows of {response.report_rows.shape[1]} columns, expected {width}")
    levels = response.report_rows[:, 0]
    if levels.size and int(levels.max()) >= request.levels:
        raise InvalidReply(f"{tag}.report_rows: a level beyond the {request.levels} levels")
    sent = np.bincount(levels.astype(np.int64), weights=response.report_counts, minlength=request.levels)
    expected = level_sizes(request.partition_seed, request.level_bounds, shard.first_user, shard.users)
    if not np.array_equal(np.rint(sent).astype(np.int64), expected):
        raise InvalidReply(f"{tag}.report_rows: reports per level {sent.astype(int).tolist()}, its users per level {expected.tolist()}")
