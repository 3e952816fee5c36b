"""RAPPOR's budget split and the statistics of its counts: bit probabilities, the noise of a count,
the significance level of the decoding test and the Bloom filter's size limits."""

from __future__ import annotations

import math
from statistics import NormalDist

from ...errors import InputError
from ...privacy.ldp import BudgetRule, BudgetSplit
from .parameters import NAME, SIGNIFICANCE

SPLIT_SOURCE = (
    "Erlingsson, Pihur and Korolova, RAPPOR (one-time: permanent randomised response); "
    "Cormode et al.'s survey §4 and §7.5.1"
)


def rappor_budget(bloom_hashes: int = 2) -> BudgetRule:
    """One report per user, the whole ε: ``2h`` bits at ``ε / 2h`` each in the worst case."""
    return BudgetRule(
        ((f"Bloom filter of the item ({bloom_hashes} bits set), each bit randomised at ε/{2 * bloom_hashes}", 1.0),),
        SPLIT_SOURCE,
    )


def rappor_split(epsilon: float, bloom_hashes: int = 2) -> BudgetSplit:
    """:func:`rappor_budget` for a per-user ``epsilon`` (refused, naming privacy.epsilon, outside the
    oracles' range)."""
    return rappor_budget(bloom_hashes).split(NAME, epsilon)


def bit_probabilities(epsilon: float, bloom_hashes: int) -> tuple[float, float]:
    """``(p, q)``: probability that a set bit, and a clear bit, is reported set."""
    half = math.exp(epsilon / (2 * bloom_hashes))
    return half / (half + 1), 1 / (half + 1)


def count_noise(n_users: int, epsilon: float, bloom_hashes: int) -> float:
    """Standard deviation of a count estimate from randomisation alone, for a candidate
    whose ``h`` bits are apart from the other candidates' (no collisions): the ``hC``
    bit estimates of variance ``N_c q (1 - q) / (p - q)^2`` regressed with weights ``N_c / N``."""
    p, q = bit_probabilities(epsilon, bloom_hashes)
    return math.sqrt(n_users * q * (1 - q) / bloom_hashes) / (p - q)


def significance_level(candidates: int) -> float:
    """``Φ⁻¹(1 - 0.05 / M)``: the z-score a candidate's estimate must reach."""
    return NormalDist().inv_cdf(1 - SIGNIFICANCE / max(candidates, 1))


def check_bloom_size(bloom_bits: int, cohorts: int, candidates: int) -> None:
    """The regression identifies the candidates only if the ``mC`` bits outnumber them."""
    if bloom_bits * cohorts < candidates:
        raise InputError(
            f"protocol.bloom_bits: a Bloom filter of {bloom_bits} bits in {cohorts} cohorts gives "
            f"{bloom_bits * cohorts:,} bit counts, fewer than the {candidates:,} candidates the regression "
            f"must tell apart; use protocol.bloom_bits x protocol.cohorts >= {candidates:,} "
            f"(e.g. protocol.bloom_bits = {-(-candidates // cohorts)}) or a smaller protocol.candidates dictionary"
        )
