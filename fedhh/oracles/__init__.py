"""LDP frequency oracles, sketches over them, and the keys that feed them.

Framework-free (numpy and scipy only).  The protocols call::

    oracle = make_oracle("olh", epsilon=2.0, domain=2**64)
    reports = oracle.randomize(values, rng)          # client, one shard
    statistics = oracle.aggregate(reports)           # additive across shards
    support = oracle.support(statistics, candidates) # additive across shards
    counts = oracle.estimate_support(support)        # unbiased counts

with values and candidates as integer keys (``key_items`` / ``key_rows``
turn strings and symbol rows into 64-bit keys).
"""

from .base import FrequencyOracle, LinearVariance, PureOracle, Support
from .histogram import Histogram
from .keys import key_items, key_rows
from .registry import BASE_ORACLES, ORACLE_NAMES, SKETCHES, make_oracle
from .sampling import RandomSource

__all__ = [
    "BASE_ORACLES",
    "ORACLE_NAMES",
    "SKETCHES",
    "FrequencyOracle",
    "Histogram",
    "LinearVariance",
    "PureOracle",
    "RandomSource",
    "Support",
    "key_items",
    "key_rows",
    "make_oracle",
]
