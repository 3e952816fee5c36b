"""RAPPOR's ``[protocol]`` keys and constants."""

from __future__ import annotations

import numpy as np

from ...schema import Key
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

RAPPOR_KEYS: dict[str, Key] = {
    "bloom_bits": Key(
        int, 256, "RAPPOR: bits m of each Bloom filter", check=lambda v: 2 <= v <= 1 << 16, constraint="in 2..65536"
    ),
    "bloom_hashes": Key(
        int,
        2,
        "RAPPOR: hash functions h per cohort (bits an item sets)",
        check=lambda v: 1 <= v <= 16,
        constraint="in 1..16",
    ),
    "cohorts": Key(
        int,
        512,
        "RAPPOR: cohorts C, user groups with their own hash functions",
        check=lambda v: 1 <= v <= 1 << 16,
        constraint="in 1..65536",
    ),
    "candidates": Key(
        str,
        "",
        "RAPPOR: candidate dictionary the server decodes against, a text file of one candidate per line; "
        "empty: the population's vocabulary, which a real deployment would not have",
    ),
    "report": REPORT_KEY,  # shared with SFP
    "top_k": TOP_K_KEY,  # shared with PEM/TreeHist: K under protocol.report = "top_k"
}

POPULATION_DICTIONARY_NOTE = (
    "candidate dictionary: the population's own vocabulary (protocol.candidates empty), which a real "
    "deployment would not have; it makes the decoding easier than in practice, and for a file or dataset "
    "population it is the set of items users hold, which no guarantee covers"
)
