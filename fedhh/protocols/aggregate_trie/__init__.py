"""The aggregate-DP prefix tree: noisy level counts over securely aggregated user contributions.

``protocol.name = "aggregate-trie"`` (Chadha, Chen, Duchi, Feldman,
Hashemi, Javidbakht, McMillan, Talwar: "Differentially Private Heavy
Hitter Detection using Federated Analytics", IEEE SaTML 2024).  The tree
grows level by level: each level samples users (Poisson sampling at rate
``users_per_level / n``); a sampled user adds 1 to the counts of the
level's candidates (the kept prefixes extended by ``extension`` symbols)
that its chosen data extends (``data_selection``: one item at random, by
weight, its most frequent, or several up to ``contributions``); the
counts are summed (secure aggregation on Flower) and the server adds
Gaussian or Laplace noise once to every candidate's count, then keeps the
largest above a threshold.  The per-level mechanisms are composed by
dp-accounting into the run's user-level (ε, δ)
(:mod:`fedhh.privacy.aggregate_trie`).

The package: its keys (``parameters``), the numbering of a level's
candidates (``extensions``), its messages (``messages``), the device side
(``client``) and its law sampler (``law``), the server (``server``), what an untrusting server checks and
the dense layout secure aggregation sums (``nodes``), its planner
(``plan``) and sizing (``sizing``), the bits a user sends (``wire``), and its spec, registered here.
"""

from __future__ import annotations

from ..registry import register_protocol
from ..spec import ContractText, ProtocolSpec
from .client import respond
from .law import law
from .messages import LevelCounts, LevelRequest
from .nodes import DROPOUT_PRIVACY, AggregateTrieDense, check_reply, describe_round, narrow, reply_budget
from .parameters import AggregateTrieKeys
from .plan import AGGREGATE_TRIE_PLAN, plan_aggregate_trie
from .server import NAME, AggregateTrieServer, build_aggregate_trie
from .sizing import AGGREGATE_TRIE_SIZING
from .wire import aggregate_trie_bits

CONTRACT = ContractText(
    definitions=(
        "The aggregate-DP prefix tree (aggregate-trie): a sampled user chooses among its items by the request's "
        "data_selection (its `weighted` scheme is the choice by share above, among the items that extend the tree), "
        "sends its counts in the clear or inside secure aggregation's masked vector, and adds no noise: the server "
        "adds it once to the sum.",
    )
)

SPEC = register_protocol(
    ProtocolSpec(
        name=NAME,
        summary="aggregate-DP prefix tree (Chadha et al.): noisy summed level counts, composed by dp-accounting; "
        "central DP",
        build=build_aggregate_trie,
        respond=respond,
        law=law,
        request_type=LevelRequest,
        response_type=LevelCounts,
        dropout_privacy=DROPOUT_PRIVACY,
        keys=AggregateTrieKeys.keys(),
        narrow=narrow,
        reply_budget=reply_budget,
        check_reply=check_reply,
        describe_round=describe_round,
        dense=AggregateTrieDense,
        planner=plan_aggregate_trie,
        plan_command=AGGREGATE_TRIE_PLAN,
        sizing=AGGREGATE_TRIE_SIZING,
        communication=aggregate_trie_bits,
        contract=CONTRACT,
    )
)

__all__ = ["SPEC", "AggregateTrieServer", "LevelCounts", "LevelRequest", "respond"]
