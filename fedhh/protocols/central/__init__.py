"""The curator baseline: a central-model noisy histogram of the items present, above a threshold.

``protocol.name = "central"`` is what a trusted curator could publish at
the same (ε, δ) as a federated or local protocol: every user sends one of
its items in the clear (chosen as TrieHH chooses it), the curator adds
noise once to the count of every item present (Laplace, or Gaussian with
``protocol.noise = "gaussian"``) and releases the ``protocol.top_k``
largest noisy counts above a threshold τ calibrated to (ε, δ)
(:mod:`fedhh.privacy.central`: the stability-based histogram over an
unknown domain).  It shows what federation and local noise cost.

The package: its messages (``messages``), the device side (``client``),
its law sampler (``law``), the server (``server``), what an untrusting
server checks (``nodes``), its planner (``plan``), the bits a user sends
(``wire``), and its spec, registered here.
"""

from __future__ import annotations

from ..common.item_baselines import NO_DENSE_LAYOUT
from ..registry import register_protocol
from ..spec import ContractText, ProtocolSpec
from .client import respond
from .law import law
from .messages import ItemHistogram, ItemRequest
from .nodes import DROPOUT_PRIVACY, check_reply, describe_round
from .plan import CENTRAL_PLAN, plan_central
from .server import NAME, CentralKeys, CentralServer, build_central
from .wire import central_bits

CONTRACT = ContractText(
    definitions=(
        "The curator baseline (central): a user holding several items sends one of them, each with probability its "
        "share of the user's items; a user holding none sends nothing (the curator sees who takes part, and every "
        "item in the clear).",
    )
)

SPEC = register_protocol(
    ProtocolSpec(
        name=NAME,
        summary="curator baseline: noisy counts of the items present above a threshold for (ε, δ); central DP",
        build=build_central,
        respond=respond,
        request_type=ItemRequest,
        response_type=ItemHistogram,
        dropout_privacy=DROPOUT_PRIVACY,
        keys=CentralKeys.keys(),
        check_reply=check_reply,
        describe_round=describe_round,
        no_dense_reason=NO_DENSE_LAYOUT,
        planner=plan_central,
        plan_command=CENTRAL_PLAN,
        communication=central_bits,
        contract=CONTRACT,
        law=law,
    )
)

__all__ = ["SPEC", "CentralServer", "ItemHistogram", "ItemRequest", "respond"]
