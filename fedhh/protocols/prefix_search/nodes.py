"""What a server that cannot trust its nodes knows about a prefix search's replies (PEM, TreeHist).

A node can check nothing about the server, but the server can check a lot
about a node: which of its users belong to the asked level (public
randomness), how many counts it may send and how large they can be, and,
for a one-shot collection, that its report rows are split over the levels
exactly as its users are.  A node that holds no user of the asked level is
not asked at all.  :func:`fedhh.protocols.prefix_search.family.prefix_search_spec`
puts these into the spec of each variant (PEM, TreeHist).
"""

from __future__ import annotations

import numpy as np

from ...oracles import FrequencyOracle
from ..base import RoundRecord
from ..common.prefix_encoding import PrefixEncoding
from ..spec import NPY_HEADER_BYTES, HeldUsers, InvalidReply
from .oracles import counts_size
from .report_table import to_table
from .reports import COLLECT, LEVEL, PrefixRequest, PrefixResponse, level_sizes
from .search import PrefixSearchServer


def asked_users(request: PrefixRequest, node: HeldUsers) -> int:
    """How many of a node's users the request asks: one level's members, or all of them."""
    if request.mode != LEVEL:
        return node.users
    sizes = level_sizes(request.partition_seed, request.level_bounds, node.first_user, node.users)
    return int(sizes[request.level])


def report_width(request: PrefixRequest, server: PrefixSearchServer) -> int:
    """Columns of a one-shot report row: the level, the level report, the full-value report."""
    encoding = PrefixEncoding(request.encoding, server.codec)  # type: ignore[arg-type]
    oracle = request.oracle_for(int(request.lengths[0]), request.epsilon, encoding)
    template = oracle.randomize(np.zeros(1, dtype=np.uint64), np.random.default_rng(0))
    width = to_table(template).shape[1]
    return 1 + width * (2 if request.final_epsilon > 0 else 1)


def check_reply(request: PrefixRequest, response: PrefixResponse, node: HeldUsers, server: PrefixSearchServer) -> None:
    """Raise :class:`InvalidReply` unless ``response`` is a possible answer of the node.

    A law simulation's node draws how its users split over the levels
    (:mod:`fedhh.protocols.prefix_search.law`) instead of computing each user's level
    (:attr:`~fedhh.protocols.base.ServerProtocol.by_law`): then a level round's reporters may be
    any number up to the node's users, and a collection's rows any split of them over the levels."""
    tag = type(response).__name__
    drawn_level = server.by_law and request.mode == LEVEL
    asked = response.sampled_users if drawn_level else asked_users(request, node)
    if drawn_level and not 0 <= asked <= node.users:
        raise InvalidReply(f"{tag}.sampled_users: {asked} of the node's {node.users} users")
    if response.sampled_users != asked or response.responding_users != asked:
        raise InvalidReply(
            f"{tag}.sampled_users/responding_users: the node holds {asked} asked users, it says "
            f"{response.sampled_users}/{response.responding_users} (every asked user reports)"
        )
    if request.mode == COLLECT:
        _check_collection(request, response, node, server, tag)
        return
    if response.report_rows.shape != (0, 0) or response.report_counts.shape != (0,):
        raise InvalidReply(
            f"{tag}.report_rows: only a one-shot collection sends reports; outside it report_rows has shape "
            f"(0, 0) and report_counts (0,), got {response.report_rows.shape} and {response.report_counts.shape}"
        )
    oracle = asked_oracle(request, server)
    counts, reporters = counts_size(oracle, request.candidates.size)
    if response.reporters.size != reporters or response.counts.size != counts:
        raise InvalidReply(
            f"{tag}.counts: {response.counts.size} counts from {response.reporters.size} row(s), expected "
            f"{counts} from {reporters} for oracle {oracle.name!r} and {request.candidates.size} candidates"
        )
    if int(response.reporters.sum()) != asked:
        raise InvalidReply(f"{tag}.reporters: they add up to {int(response.reporters.sum())}, not {asked}")
    limit = oracle.max_support() * asked
    if response.counts.size and int(np.abs(response.counts).max()) > limit:
        raise InvalidReply(f"{tag}.counts: a count exceeds {limit}, the most {asked} reports can add")


def asked_oracle(request: PrefixRequest, server: PrefixSearchServer) -> FrequencyOracle:
    """The oracle a node randomised with in a level or final round."""
    encoding = PrefixEncoding(request.encoding, server.codec)  # type: ignore[arg-type]
    if request.mode == LEVEL:
        return request.oracle_for(int(request.lengths[request.level]), request.epsilon, encoding)
    return request.oracle_for(encoding.length, request.final_epsilon, encoding)


def _check_collection(
    request: PrefixRequest, response: PrefixResponse, node: HeldUsers, server: PrefixSearchServer, tag: str
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
    if server.by_law:  # the node drew its users' levels: any split of all of them
        if int(np.rint(sent).sum()) != node.users:
            raise InvalidReply(f"{tag}.report_rows: {int(np.rint(sent).sum())} reports from {node.users} users")
        return
    expected = level_sizes(request.partition_seed, request.level_bounds, node.first_user, node.users)
    if not np.array_equal(np.rint(sent).astype(np.int64), expected):
        raise InvalidReply(
            f"{tag}.report_rows: reports per level {sent.astype(int).tolist()}, its users per level {expected.tolist()}"
        )


def narrow(request: PrefixRequest, node: HeldUsers) -> PrefixRequest | None:
    """Nothing for a node that holds no user of the asked level."""
    return request if asked_users(request, node) else None


def reply_budget(request: PrefixRequest, node: HeldUsers, server: PrefixSearchServer) -> int:
    """Most array bytes an honest reply carries: its report rows (one-shot), else its counts."""
    if request.mode == COLLECT:
        return 8 * node.users * (report_width(request, server) + 1) + 4 * NPY_HEADER_BYTES
    counts, reporters = counts_size(asked_oracle(request, server), request.candidates.size)
    return 8 * (counts + reporters) + 4 * NPY_HEADER_BYTES


def describe_round(record: RoundRecord) -> str:
    """The round's log line: a level, the final estimation pass, or the one-shot collection."""
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
