"""RAPPOR's ``[protocol]`` keys and constants."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...schema import ConfigSection, Key
from ..common.keys import TOP_K_KEY
from ..common.report_mode import REPORT_KEY

NAME = "rappor"
COHORT_PURPOSE = "rappor.cohort"
HASH_PURPOSE = "rappor.hashes"
ITEM_PURPOSE = "rappor.item"
REPORT_PURPOSE = "rappor.report"
REFINE_PURPOSE = "rappor.report.refine"
SIGNIFICANCE = 0.05  # family-wise level of the Bonferroni-corrected test, as in RAPPOR's decoder
MAX_REGRESSED = 1024  # candidates regressed at most (the screening keeps the best)
BITS_PER_BLOCK = 1 << 22  # report bits randomised together: 512 KiB packed, so a block's arrays stay in cache
PACKED_WORD = np.dtype("<u8")  # a packed report's words: bit b is bit b % 64 of word b // 64
CANDIDATES_PER_BLOCK = 4096  # candidates screened together


@dataclass(frozen=True)
class RapporKeys(ConfigSection):
    """RAPPOR's own ``[protocol]`` keys."""

    bloom_bits: int = Key(
        int, 256, "RAPPOR: bits m of each Bloom filter", check=lambda v: 2 <= v <= 1 << 16, constraint="in 2..65536"
    ).field()
    bloom_hashes: int = Key(
        int,
        2,
        "RAPPOR: hash functions h per cohort (bits an item sets)",
        check=lambda v: 1 <= v <= 16,
        constraint="in 1..16",
    ).field()
    cohorts: int = Key(
        int,
        512,
        "RAPPOR: cohorts C, user groups with their own hash functions",
        check=lambda v: 1 <= v <= 1 << 16,
        constraint="in 1..65536",
    ).field()
    candidates: str = Key(
        str,
        "",
        "RAPPOR: candidate dictionary the server decodes against, a text file of one candidate per line; "
        "empty: the population's vocabulary, which a real deployment would not have",
    ).field()
    report: str = REPORT_KEY.field()  # shared with SFP
    top_k: int = TOP_K_KEY.field()  # shared with PEM/TreeHist: K under protocol.report = "top_k"


RAPPOR_KEYS: dict[str, Key] = RapporKeys.keys()

POPULATION_DICTIONARY_NOTE = (
    "candidate dictionary: the population's own vocabulary (protocol.candidates empty), which a real "
    "deployment would not have; it makes the decoding easier than in practice, and for a file or dataset "
    "population it is the set of items users hold, which no guarantee covers"
)
