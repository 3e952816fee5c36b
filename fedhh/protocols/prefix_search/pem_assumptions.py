"""What PEM's optimizer assumes of a population the config says nothing about, and its survival models.

Defaults of ``fedhh plan pem``, ``fedhh size pem`` and of a run whose
``protocol.segment_length`` is 0 (:mod:`fedhh.protocols.prefix_search.pem_analysis`).
"""

from __future__ import annotations

DEFAULT_QUERY_LIMIT = 1 << 20  # [Wang19] §VI-A
DEFAULT_ZIPF_EXPONENT = 1.0  # [Wang19] §IV-C: f_j ∝ 1/j
DEFAULT_DISTINCT_VALUES = 10_000
ORDER_STATISTICS, EQUATION_5 = "order-statistics", "eq5"
MODELS: tuple[str, ...] = (ORDER_STATISTICS, EQUATION_5)
