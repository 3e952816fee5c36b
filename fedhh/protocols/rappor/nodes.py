"""What a RAPPOR server that cannot trust its nodes checks, and its round log line."""

from __future__ import annotations

import numpy as np

from ..base import RoundRecord, ServerProtocol
from ..common.value_reports import check_all_users_report, users_per_index
from ..spec import HeldUsers, InvalidReply
from .encoding import user_cohorts
from .messages import RapporRequest, RapporResponse


def check_reply(request: RapporRequest, response: RapporResponse, node: HeldUsers, server: ServerProtocol) -> None:
    """A node reports exactly its users, cohort by cohort, and no bit more often than it has reports."""
    tag = type(response).__name__
    check_all_users_report(response, node)
    if response.ones.size != request.cohorts * request.bloom_bits or response.reporters.size != request.cohorts:
        raise InvalidReply(
            f"{tag}.ones: {response.ones.size} counts for {response.reporters.size} cohorts, expected "
            f"{request.cohorts} x {request.bloom_bits}"
        )
    expected = users_per_index(
        server,
        node,
        response.reporters,
        request.cohorts,
        lambda ids: user_cohorts(request.cohort_seed, request.cohorts, ids),
    )
    if not np.array_equal(response.reporters, expected):
        raise InvalidReply(f"{tag}.reporters: reports per cohort differ from the node's users per cohort")
    if np.any(response.ones.reshape(request.cohorts, -1) > expected[:, None]):
        raise InvalidReply(f"{tag}.ones: a bit is set in more reports than its cohort has")


def reply_budget(request: RapporRequest, node: HeldUsers, server: ServerProtocol) -> int:
    return 8 * request.cohorts * (request.bloom_bits + 1) + 1024


def describe_round(record: RoundRecord) -> str:
    values = record.values
    reported = f", {values['reported']} reported (the best estimates)" if "reported" in values else ""
    return (
        f"Bloom filters of {values['users']:,} users decoded against {values['candidates']:,} candidates: "
        f"{values['regressed']} regressed, {values['significant']} significant{reported}"
    )
