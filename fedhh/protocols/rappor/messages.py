"""RAPPOR's messages: the one round's request (the public encoding) and the summed Bloom-filter bit counts."""

from __future__ import annotations

import functools

import numpy as np

from ..base import Request, SummedResponse
from ..messages import array_field, message, scalar_field
from .encoding import BloomEncoder


@message
class RapporRequest(Request):
    """Send your randomised Bloom filter (every public parameter a device needs)."""

    epsilon: float = scalar_field(minimum=0.0)  # ε of the whole report (each bit: ε / 2h)
    bloom_bits: int = scalar_field(minimum=2)  # m: bits of a Bloom filter
    bloom_hashes: int = scalar_field(minimum=1)  # h: bits set per item
    cohorts: int = scalar_field(minimum=1)  # C: cohorts, each with its own h hash functions
    cohort_seed: int  # public seed of the users' cohorts
    hash_seed: int  # σ_i = splitmix64(hash_seed + i) names hash i = c h + j

    def encoder(self) -> BloomEncoder:
        return _encoder(self.epsilon, self.bloom_bits, self.bloom_hashes, self.cohorts, self.hash_seed)


@functools.lru_cache(maxsize=2)
def _encoder(epsilon: float, bloom_bits: int, bloom_hashes: int, cohorts: int, hash_seed: int) -> BloomEncoder:
    """One encoder per round and process: its hash functions are expanded once for every shard."""
    return BloomEncoder(epsilon, bloom_bits, bloom_hashes, cohorts, hash_seed)


@message
class RapporResponse(SummedResponse):
    """Per cohort, how many reports have each bit set (cohort-major), and how many reports there are."""

    ones: np.ndarray = array_field("int64", ("B",))  # [cohort, bit]: reports with the bit set, cohort-major
    reporters: np.ndarray = array_field("int64", ("C",))  # reports per cohort
