"""Local hashing: binary (BLH, ``g = 2``) and optimised (OLH, ``g = round(e^ε) + 1``).

Each user draws a fresh 64-bit seed naming a hash function ``H: [0, d) ->
[0, g)`` (the 32-bit family of :mod:`fedhh.oracles.hashing`) and reports ``(seed, y)`` where
``y`` is randomised response over ``[0, g)`` applied to ``H(v)``: ``y = H(v)``
with probability ``p = e^ε / (e^ε + g - 1)``.  The seed does not depend on
the value, so the ratio of report probabilities is at most ``e^ε``.

A report supports ``v`` when ``H(v) = y``: probability ``p`` for the true
value and ``q = 1/g`` for any other (the hash collides with probability
``1/g``), so this is a pure protocol.  The variance does not depend on ``d``.

The price is decoding: every report must be tested against every candidate,
``O(n |C|)`` work (three vectorised integer operations per pair).  There is
no smaller sufficient statistic, so the statistics are the reports
themselves and adding shards concatenates them; a shard that already knows
the candidate set sends its support counts instead (``support``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .base import PureOracle, Support, check_epsilon, check_kind, check_lengths, check_positive_int, index_bits
from .device_spec import DeviceSpec
from .hashing import MAX_RANGE, count_supports, local_hash
from .sampling import RandomSource, check_rng_batch, randomized_response, uniform_words

SEED_BITS = 64  # a user's hash seed: uniform over 64-bit words
_SEED_PROBABILITY = 2.0**-SEED_BITS


@dataclass(frozen=True)
class LocalHashReports:
    """Per user: the seed of the hash function and the randomised bucket."""

    seeds: np.ndarray
    buckets: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "seeds", np.asarray(self.seeds, dtype=np.uint64).ravel())
        object.__setattr__(self, "buckets", np.asarray(self.buckets, dtype=np.uint32).ravel())
        check_lengths("LocalHashReports", seeds=self.seeds, buckets=self.buckets)

    def __len__(self) -> int:
        return int(self.seeds.shape[0])

    def __add__(self, other: LocalHashReports) -> LocalHashReports:
        if not isinstance(other, LocalHashReports):
            return NotImplemented
        return LocalHashReports(np.r_[self.seeds, other.seeds], np.r_[self.buckets, other.buckets])

    @property
    def n_users(self) -> int:
        return len(self)

    def take(self, rows: np.ndarray) -> LocalHashReports:
        return LocalHashReports(self.seeds[rows], self.buckets[rows])


class LocalHashing(PureOracle[LocalHashReports, LocalHashReports]):
    """Local hashing into ``g`` buckets followed by randomised response."""

    name = "lh"
    device_spec = DeviceSpec(
        parameters="`olh`: `g = max(2, round(E) + 1)` (round half to even); `blh`: `g = 2`; `p = E / (E + g - 1)`.",
        randomizer="`seeds`: a uniform 64-bit seed `σ`, fresh per report; `buckets = RR(hash32(σ, v, g), g, p)`.",
        statistics="None: the statistics are the reports themselves.",
        support="`counts[i]` is the number of reports `(σ, y)` with `hash32(σ, candidates[i], g) = y`; "
        "`reporters = [n]`.",
    )

    def __init__(self, epsilon: float, domain: int, g: int) -> None:
        super().__init__(epsilon, domain)
        self.g = check_positive_int(g, "g", minimum=2, maximum=MAX_RANGE)
        e = math.exp(self.epsilon)
        self.keep_probability = e / (e + self.g - 1)
        self.p = self.keep_probability
        self.q = 1.0 / self.g

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon}, domain={self.domain}, g={self.g})"

    def randomize(self, values: np.ndarray, rng: RandomSource) -> LocalHashReports:
        values = self._values(values)
        n_users = values.shape[0]
        check_rng_batch(rng, n_users)
        seeds = uniform_words(rng, (n_users,))
        hashed = local_hash(seeds, values, self.g)
        return LocalHashReports(seeds, randomized_response(rng, hashed, self.g, self.keep_probability))

    def aggregate(self, reports: LocalHashReports) -> LocalHashReports:
        check_kind(self.name, reports, LocalHashReports, "reports")
        if len(reports) and int(reports.buckets.max()) >= self.g:
            raise ValueError(f"{self.name}: reports.buckets must be in [0, {self.g}), got {int(reports.buckets.max())}")
        return reports

    def support(self, statistics: LocalHashReports, candidates: np.ndarray) -> Support:
        statistics = self.aggregate(statistics)
        candidates = self._values(candidates, "candidates")
        counts = count_supports(statistics.seeds, statistics.buckets, self.g, candidates)
        return Support(counts, len(statistics))

    def report_bits(self) -> int:
        """The 64-bit seed naming the user's own hash function, and the bucket in ``[0, g)``."""
        return SEED_BITS + index_bits(self.g)

    def report_probabilities(self, value: int, reports: LocalHashReports) -> np.ndarray:
        hashed = local_hash(reports.seeds, np.uint64(value), self.g)
        grr_other = (1 - self.keep_probability) / (self.g - 1)
        return _SEED_PROBABILITY * np.where(hashed == reports.buckets, self.keep_probability, grr_other)


class BinaryLocalHashing(LocalHashing):
    """BLH: one-bit hashes (``g = 2``)."""

    name = "blh"

    def __init__(self, epsilon: float, domain: int) -> None:
        super().__init__(epsilon, domain, 2)


class OptimisedLocalHashing(LocalHashing):
    """OLH: ``g = round(e^ε) + 1`` minimises the variance to about ``4 e^ε / (e^ε - 1)^2`` per user."""

    name = "olh"

    def __init__(self, epsilon: float, domain: int) -> None:
        super().__init__(epsilon, domain, optimal_range(epsilon))


def optimal_range(epsilon: float) -> int:
    """OLH's number of buckets, ``round(e^ε) + 1`` (at least 2)."""
    return max(2, int(round(math.exp(check_epsilon(epsilon)))) + 1)
