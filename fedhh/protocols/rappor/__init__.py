"""RAPPOR (Erlingsson, Pihur and Korolova 2014; [Cormode21] §4 and §7.5.1): Bloom filters
randomised bit by bit, decoded by regression against a candidate dictionary.

Users are split into ``C`` cohorts by public randomness; cohort ``c`` has its own
``h`` public hash functions into ``[0, m)``.  A user sets the ``h`` bits of its
item in an ``m``-bit Bloom filter (none when it holds no item) and randomises
every bit with symmetric unary encoding's randomised response: a set bit stays
set with ``p = e^(ε/2h) / (e^(ε/2h) + 1)``, a clear bit turns on with
``q = 1 - p``.  Two items' filters differ in at most ``2h`` bits, each costing
``ln(p / q) = ε / 2h``, so a report is ε-LDP (one-time RAPPOR: the permanent
randomised response alone, sent once).

A shard sends, per cohort, how many of its reports have each bit set, and how
many reports it has: additive, ``C (m + 1)`` integers whatever the shard's
size.  The server decodes once:

1. ``t_cb = (ones_cb - q N_c) / (p - q)`` estimates, without bias, how many
   of cohort ``c``'s users have bit ``b`` set in their true filter;
2. screening (where RAPPOR runs the LASSO): every candidate is scored by the
   sum of the centred ``t`` of its ``hC`` bits, and those whose score is
   above ``Φ⁻¹(1 - 1/M)`` times its noise (a robust spread of the bit
   estimates) are kept, the best ``min(mC / 4, 1024)`` at most.  Keeping
   many more (the best 1024 whatever their score) biases the heavy items'
   counts down: light candidates kept because their bits happen to carry
   others' mass take a share of the heavy bits they overlap;
3. regression: ``t = X β + background + noise``, where column ``v`` of ``X``
   holds ``N_c / N`` at the bits of ``v`` in cohort ``c`` (so ``β_v`` is
   ``v``'s count) and one more column, ``N_c / N`` everywhere, takes the mass
   of the candidates left out (their bits fall uniformly over a cohort's
   filter in expectation over the hash functions);
4. a candidate is reported when its estimate is significant at level 0.05
   after Bonferroni's correction for the ``M`` candidates
   (``β_v / se_v > Φ⁻¹(1 - 0.05 / M)``), the residuals giving the noise
   variance, as in RAPPOR's own decoder.

With ``protocol.report = "top_k"`` (:mod:`fedhh.protocols.common.report_mode`) the
server reports instead the ``K = protocol.top_k`` best estimates whatever
their significance, as pure-ldp does: the screening then also keeps the ``K``
best-scored candidates below its level, so that ``min(K, M)`` are regressed
and reported, best first.

The regression identifies ``M`` candidates only when the ``mC`` bits outnumber
them, so a smaller Bloom filter is refused (``protocol.bloom_bits``).
The candidate dictionary (``protocol.candidates``) is by default the
population's own vocabulary, which a real deployment would not have: the
privacy report says so.

The package: its keys and constants (``parameters``), budget split and the
statistics of its counts (``analysis``), public hashing and randomiser
(``encoding``), messages (``messages``), device side (``client``), law
sampler (``law``), server (``server``), what an untrusting server checks
(``nodes``), planner (``plan``), the bits a user sends (``wire``), and its
spec, registered here.
"""

from __future__ import annotations

from ..common.item_choice import ITEM_CHOICE_CONTRACT
from ..registry import register_protocol
from ..spec import ProtocolSpec
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
        summary="RAPPOR: Bloom filters randomised bit by bit (SUE), decoded by regression against a candidate dictionary",
        build=build_rappor,
        respond=respond,  # type: ignore[arg-type]
        request_type=RapporRequest,
        response_type=RapporResponse,
        dropout_privacy=(
            "unchanged: every Bloom filter is ε-LDP on the device that sends it; a node that does not "
            "answer only removes its users' reports"
        ),
        keys=RAPPOR_KEYS,
        reply_budget=reply_budget,  # type: ignore[arg-type]
        check_reply=check_reply,  # type: ignore[arg-type]
        describe_round=describe_round,
        budget=rappor_budget(),
        planner=plan_rappor,
        plan_command=RAPPOR_PLAN,
        communication=rappor_bits,
        contract=ITEM_CHOICE_CONTRACT,
        law=law,  # type: ignore[arg-type]
    )
)
