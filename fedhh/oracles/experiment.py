"""Every frequency oracle on the same Zipf population: measured error against theory, and speed.

The survey's frequency-estimation experiment ([Cormode21] §7) in one call: draw
``users`` values from a Zipf(``zipf``) law over ``[0, domain)``, privatise
them with each oracle at the same ε, estimate the whole domain, and report
the mean squared error over the domain next to the predicted variance (the
oracles are unbiased, so the two should agree up to sampling noise; their
ratio is the check) and the throughput in users per second.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InputError
from .base import check_domain, check_epsilon, check_positive_int
from .histogram import Histogram
from .registry import make_oracle

MAX_EXPERIMENT_DOMAIN = 1 << 20
MAX_EXPERIMENT_USERS = 10_000_000  # every oracle holds every user's report at once
EXPERIMENT_ORACLES: tuple[str, ...] = ("grr", "sue", "oue", "blh", "olh", "flh", "hr", "hm")


def zipf_counts(domain: int, users: int, exponent: float, rng: np.random.Generator) -> np.ndarray:
    """How many of ``users`` hold each value when value ``r`` has weight ``(r + 1)^-exponent``."""
    weights = np.arange(1, domain + 1, dtype=np.float64) ** -exponent
    return rng.multinomial(users, weights / weights.sum())


def run_oracle_experiment(
    epsilon: float = 4.0,
    domain: int = 1024,
    users: int = 100_000,
    zipf: float = 1.1,
    seed: int = 0,
    oracles: Sequence[str] = EXPERIMENT_ORACLES,
) -> list[dict[str, Any]]:
    """One row per oracle: ``oracle``, ``mse``, ``predicted_variance``, ``ratio``,
    ``mse_standard_error``, ``users_per_s``, ``decode_s`` (aggregation and
    estimation only), all on the same population.

    ``mse_standard_error`` is the standard deviation the domain MSE would have
    if the errors were independent normals with the predicted variances
    (``sqrt(2 sum_v var_v^2) / d``): the yardstick for "MSE matches theory".

    Unary encodings use their shard path (Binomial counts), which has the same
    distribution as per-user bit rows and keeps large domains fast; it fuses
    randomisation and aggregation, so their ``decode_s`` is the estimation alone.
    """
    epsilon = check_epsilon(epsilon)
    domain = check_domain(domain, MAX_EXPERIMENT_DOMAIN)
    users = check_positive_int(users, "users", 1, MAX_EXPERIMENT_USERS)
    if not (math.isfinite(zipf) and zipf >= 0):
        raise InputError(f"zipf must be a finite number >= 0, got {zipf}")
    seed = check_positive_int(seed, "seed", 0)
    population_rng = np.random.default_rng([seed, 0])
    counts = zipf_counts(domain, users, zipf, population_rng)
    values = np.repeat(np.arange(domain, dtype=np.uint64), counts)
    truth = Histogram.from_dense(counts)
    candidates = np.arange(domain, dtype=np.uint64)
    rows = []
    for index, name in enumerate(oracles):
        oracle = make_oracle(name, epsilon=epsilon, domain=domain)
        rng = np.random.default_rng([seed, 1, index])
        start = time.perf_counter()
        if name in ("sue", "rappor", "oue"):
            statistics = oracle.randomize_aggregate(values, rng)
            randomized = time.perf_counter()
        else:
            reports = oracle.randomize(values, rng)
            randomized = time.perf_counter()
            statistics = oracle.aggregate(reports)
        estimates = oracle.estimate(statistics, candidates)
        finished = time.perf_counter()
        mse = float(np.mean((estimates - counts) ** 2))
        variances = oracle.variance(candidates, truth)
        predicted = float(np.mean(variances))
        rows.append(
            {
                "oracle": name,
                "mse": mse,
                "predicted_variance": predicted,
                "ratio": mse / predicted,
                "mse_standard_error": float(np.sqrt(2 * np.sum(variances**2))) / domain,
                "users_per_s": users / (finished - start),
                "decode_s": finished - randomized,
            }
        )
    return rows
