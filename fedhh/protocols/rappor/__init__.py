"""RAPPOR (Erlingsson, Pihur and Korolova 2014; [Cormode21] §4 and §7.5.1): Bloom filters
randomised bit by bit, decoded by regression against a candidate dictionary.

Users are split into ``C`` cohorts by public randomness; cohort ``c`` has its
own ``h`` public hash functions into ``[0, m)``.  A user sets the ``h`` bits
of its item in an ``m``-bit Bloom filter and randomises every bit with
symmetric unary encoding's randomised response at ε/2h a bit, so a report
is ε-LDP (one-time RAPPOR).  A shard sends, per cohort, how many of its
reports have each bit set and how many reports it has (additive).  The
server decodes once: unbiased bit counts, a screening of the candidates,
a regression of the bit counts on the kept ones, and the candidates whose
estimate is significant after Bonferroni's correction (or, with
``protocol.report = "top_k"``, the ``K`` best:
:mod:`fedhh.protocols.common.report_mode`).  The decoder is derived in
``docs/derivations.md`` ("RAPPOR's decoder").  The candidate dictionary
(``protocol.candidates``) is by default the population's own vocabulary,
which a real deployment would not have: the privacy report says so.

The package: its keys and constants (``parameters``), budget split and the
statistics of its counts (``analysis``), public hashing and randomiser
(``encoding``), messages (``messages``), device side (``client``), law
sampler (``law``), server (``server``), what an untrusting server checks
(``nodes``), planner (``plan``), the bits a user sends (``wire``), and its
spec, registered here.
"""

from __future__ import annotations

from ..common.crowds import cohort_crowds
from ..common.item_choice import ITEM_CHOICE_CONTRACT
from ..registry import register_protocol
from ..spec import DENSE_NOT_DECLARED, ProtocolSpec
from .analysis import rappor_budget
from .client import respond
from .law import law
from .messages import RapporRequest, RapporResponse
from .nodes import check_reply, describe_round, reply_budget
from .parameters import NAME, RAPPOR_KEYS
from .plan import RAPPOR_PLAN, plan_rappor
from .server import build_rappor
from .wire import rappor_bits

SPEC = register_protocol(
    ProtocolSpec(
        name=NAME,
        summary=(
            "RAPPOR: Bloom filters randomised bit by bit (SUE), decoded by regression against a candidate dictionary"
        ),
        build=build_rappor,
        respond=respond,
        request_type=RapporRequest,
        response_type=RapporResponse,
        dropout_privacy=(
            "unchanged: every Bloom filter is ε-LDP on the device that sends it; a node that does not "
            "answer only removes its users' reports"
        ),
        keys=RAPPOR_KEYS,
        reply_budget=reply_budget,
        check_reply=check_reply,
        describe_round=describe_round,
        no_dense_reason=DENSE_NOT_DECLARED,
        budget=rappor_budget(),
        crowds=cohort_crowds,
        planner=plan_rappor,
        plan_command=RAPPOR_PLAN,
        communication=rappor_bits,
        contract=ITEM_CHOICE_CONTRACT,
        law=law,
    )
)
