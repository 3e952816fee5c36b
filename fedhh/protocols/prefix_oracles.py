"""The frequency oracle each level of a prefix search uses, built the same on server and devices.

A level's oracle is fixed by public parameters only: its name, ε, the
domain of the level's prefixes, the seed of its public hash functions (FLH,
sketches) and the sketch shape.  Requests carry these, so a device rebuilds
exactly the oracle the server decodes with.  Every oracle of
:func:`fedhh.oracles.make_oracle` can serve a level, and so can TreeHist's
count sketch with Hadamard bits (``count-sketch-hadamard``).
"""

from __future__ import annotations

import functools
import inspect
import math

import numpy as np

from ..errors import InputError
from ..oracles import ORACLE_NAMES, FrequencyOracle, Support, make_oracle
from ..oracles.registry import BASE_ORACLES, SKETCHES
from ..oracles.sketches import SketchOracle
from .count_sketch_hadamard import NAME as COUNT_SKETCH_HADAMARD
from .count_sketch_hadamard import CountSketchHadamard

PREFIX_ORACLES: tuple[str, ...] = (*ORACLE_NAMES, COUNT_SKETCH_HADAMARD)
AUTO = "auto"


def build_level_oracle(name: str, epsilon: float, domain: int, seed: int, rows: int, width: int) -> FrequencyOracle:
    """The oracle of one level.

    ``rows`` and ``width`` shape the sketches (0: the oracle's default);
    ``seed`` names the public hash functions where the oracle has any.
    """
    if name == COUNT_SKETCH_HADAMARD:
        return CountSketchHadamard(epsilon, domain, hashes=rows or 15, width=width or 1024, seed=seed)
    builder = BASE_ORACLES.get(name) or SKETCHES.get(name)
    if builder is None:
        raise InputError(f"protocol.oracle: unknown name {name!r}; allowed: {list(PREFIX_ORACLES)}")
    accepted = inspect.signature(builder).parameters
    options: dict[str, int] = {}
    if "seed" in accepted:
        options["seed"] = seed
    if rows and "rows" in accepted:
        options["rows"] = rows
    if width and "width" in accepted:
        options["width"] = width
    return make_oracle(name, epsilon=epsilon, domain=domain, **options)


@functools.lru_cache(maxsize=2)
def level_oracle(name: str, epsilon: float, domain: int, seed: int, rows: int, width: int) -> FrequencyOracle:
    """:func:`build_level_oracle`, shared by the shards of one process within a round
    (expanding FLH's or a sketch's public hash functions once, not once per shard);
    only the current and the previous level are kept."""
    return build_level_oracle(name, epsilon, domain, seed, rows, width)


def support_bound(oracle: FrequencyOracle) -> int:
    """The most one report adds to one candidate's support (in absolute value)."""
    inner = getattr(oracle, "inner", oracle)
    return int(getattr(inner, "coefficients", 1))


def auto_sketch_shape(n_users: int) -> tuple[int, int]:
    """TreeHist's sketch for ``n`` users: an odd ``t`` near ``ln n`` ([Bassily17]: ``O(log(n/β))``)
    and a width, the power of two at or above ``sqrt(n)`` ([Bassily17] §5 uses ``m = sqrt(n)``)."""
    hashes = 2 * int(math.log(max(n_users, 3)) / 2) + 1
    width = 1 << max(1, math.ceil(math.log2(max(math.sqrt(n_users), 2))))
    return min(max(hashes, 3), 31), width


def support_rows(oracle: FrequencyOracle) -> tuple[int, int]:
    """(rows, halves) of an oracle's support counts per candidate: sketches count per row
    (signed ones in two halves); every other oracle has one count per candidate."""
    if isinstance(oracle, SketchOracle):
        return oracle.rows, 1 + int(oracle.signed)
    if isinstance(oracle, CountSketchHadamard):
        return oracle.hashes, 1
    return 1, 1


def restore_support(oracle: FrequencyOracle, counts: np.ndarray, users: np.ndarray) -> Support:
    """Support counts as they travel (flat, users as a vector) back in the oracle's own shape."""
    rows, halves = support_rows(oracle)
    if isinstance(oracle, SketchOracle):
        return Support(counts.reshape(rows, halves, -1), users)
    if isinstance(oracle, CountSketchHadamard):
        return Support(counts.reshape(rows, -1), users)
    return Support(counts, users[0])


def shard_counts(oracle: FrequencyOracle, statistics: object, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What a shard sends for its reports' statistics: their flat form where the oracle has
    one (so the server decodes the sum once), else the candidates' support counts (the
    shard decodes its own reports).  Either is ``(counts, reporters)``, additive."""
    if oracle.flat_size() is not None:
        return oracle.to_flat(statistics)
    support = oracle.support(statistics, candidates)
    return support.counts.ravel(), np.atleast_1d(support.n_users)


def decode_counts(oracle: FrequencyOracle, counts: np.ndarray, reporters: np.ndarray, candidates: np.ndarray) -> Support:
    """The candidates' support from the (summed) counts of :func:`shard_counts`."""
    if oracle.flat_size() is not None:
        return oracle.support(oracle.from_flat(counts, reporters), candidates)
    return restore_support(oracle, counts, reporters)


def counts_size(oracle: FrequencyOracle, candidates: int) -> tuple[int, int]:
    """Lengths of ``(counts, reporters)`` a shard sends for ``candidates`` candidates."""
    rows, halves = support_rows(oracle)
    flat = oracle.flat_size()
    return (rows * halves * candidates if flat is None else flat), rows
