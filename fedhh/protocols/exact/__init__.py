"""The exact baseline: the true top k of all users' items, without privacy (the ceiling).

``protocol.name = "exact"`` is what any protocol could at best find: every
user sends all of its items with their shares, the server adds them up and
publishes the ``protocol.top_k`` items of the largest summed share, which
is the ranking the evaluation's truth uses, so with ``protocol.top_k =
run.top_k`` its F1 is 1.  It has **no privacy guarantee**: its report says
so (ε = ∞, δ = 1, model "no guarantee"), every field of its result is
outside any guarantee, and a privacy ledger refuses to charge it.

The package: its messages (``messages``), the device side (``client``),
its law sampler (``law``), the server (``server``), what the server checks
of a node's reply (``nodes``), the bits a user sends (``wire``), and its
spec, registered here.  It has no planner: there is nothing to solve.
"""

from __future__ import annotations

from ..common.item_baselines import NO_DENSE_LAYOUT
from ..registry import register_protocol
from ..spec import ContractText, ProtocolSpec
from .client import respond
from .law import law
from .messages import ItemsRequest, ItemWeights
from .nodes import DROPOUT_PRIVACY, check_reply, describe_round
from .server import NAME, ExactKeys, ExactServer, build_exact
from .wire import exact_bits

CONTRACT = ContractText(
    definitions=(
        "The exact baseline (exact) has no privacy: a user sends every item it holds, in the clear, with its share "
        "of the user's items in units of 2^-32.",
    )
)

SPEC = register_protocol(
    ProtocolSpec(
        name=NAME,
        summary="baseline without privacy: the exact top k of all users' items (the ceiling of comparisons)",
        build=build_exact,
        respond=respond,
        request_type=ItemsRequest,
        response_type=ItemWeights,
        dropout_privacy=DROPOUT_PRIVACY,
        keys=ExactKeys.keys(),
        check_reply=check_reply,
        describe_round=describe_round,
        no_dense_reason=NO_DENSE_LAYOUT,
        communication=exact_bits,
        contract=CONTRACT,
        law=law,
    )
)

__all__ = ["SPEC", "ExactServer", "ItemWeights", "ItemsRequest", "respond"]
