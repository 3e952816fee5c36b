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

The package: its keys, budget and parameters (``parameters``), messages
(``messages``), device side (``client``), law sampler (``law``), server
(``server``), what an untrusting server checks (``nodes``), planner
(``plan``), the bits a user sends (``wire``), and its spec, registered here.
"""

from __future__ import annotations

from ..common.crowds import segment_pair_crowds
from ..common.item_choice import ITEM_CHOICE_CONTRACT
from ..registry import register_protocol
from ..spec import DENSE_NOT_DECLARED, LDP_DROPOUT_PRIVACY, ProtocolSpec
from .client import respond
from .law import law
from .messages import SPMRequest, SPMResponse
from .nodes import check_reply, describe_round, reply_budget
from .parameters import BUDGET, KEYS, NAME
from .plan import SPM_PLAN, plan_spm
from .server import build_spm
from .wire import spm_bits

SPEC = register_protocol(
    ProtocolSpec(
        name=NAME,
        summary=(
            "SPM (Wang et al. §III-C): segment patterns, then segment pairs, then the assembled candidates, "
            "OLH at ε/3 each"
        ),
        build=build_spm,
        respond=respond,
        request_type=SPMRequest,
        response_type=SPMResponse,
        dropout_privacy=LDP_DROPOUT_PRIVACY,
        keys=KEYS,
        reply_budget=reply_budget,
        check_reply=check_reply,
        describe_round=describe_round,
        no_dense_reason=DENSE_NOT_DECLARED,
        budget=BUDGET,
        crowds=segment_pair_crowds,
        planner=plan_spm,
        plan_command=SPM_PLAN,
        communication=spm_bits,
        contract=ITEM_CHOICE_CONTRACT,
        law=law,
    )
)
