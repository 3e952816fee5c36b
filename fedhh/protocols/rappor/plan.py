"""``fedhh plan rappor``: the bit probabilities, the noise of a count, and the count an item needs."""

from __future__ import annotations

from typing import Any

from ...planning.commands import Option, ldp_plan_command
from ...privacy.ldp import ldp_report
from ...privacy.validation import check_users
from .analysis import bit_probabilities, check_bloom_size, count_noise, rappor_split, significance_level
from .parameters import NAME


def plan_rappor(
    n_users: int,
    epsilon: float,
    bloom_bits: int = 256,
    bloom_hashes: int = 2,
    cohorts: int = 512,
    candidates: int = 100_000,
) -> dict[str, Any]:
    """The bit probabilities, the noise of a count and the count an item needs to be reported
    about half the time (its estimate at the significance level), for a target ε."""
    check_users(n_users)
    split = rappor_split(epsilon, bloom_hashes=bloom_hashes)
    check_bloom_size(bloom_bits, cohorts, candidates)
    p, q = bit_probabilities(epsilon, bloom_hashes)
    noise = count_noise(n_users, epsilon, bloom_hashes)
    z = significance_level(candidates)
    return {
        "protocol": NAME,
        "n_users": n_users,
        "epsilon": split.epsilon,
        "bloom_bits": bloom_bits,
        "bloom_hashes": bloom_hashes,
        "cohorts": cohorts,
        "candidates": candidates,
        "bit_keep_probability": p,
        "bit_flip_on_probability": q,
        "count_standard_deviation": noise,
        "significance_z": z,
        "count_found_half_the_time": z * noise,
        "share_found_half_the_time": z * noise / n_users,
        "privacy": ldp_report(split, "SUE on Bloom filter bits", {"cohorts": cohorts}).to_dict(),
    }


RAPPOR_PLAN = ldp_plan_command(
    NAME,
    "RAPPOR's bit probabilities, count noise and the count an item needs to be reported, from (n, ε)",
    plan_rappor,
    [
        Option("--bloom-bits", "bits of a Bloom filter", int, 256, "bloom_bits"),
        Option("--bloom-hashes", "bits an item sets", int, 2, "bloom_hashes"),
        Option("--cohorts", "cohorts (each its own hash functions)", int, 512, "cohorts"),
        Option("--candidates", "size of the candidate dictionary", int, 100_000, "candidates"),
    ],
)
