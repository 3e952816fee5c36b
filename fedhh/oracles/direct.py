"""Direct encoding (generalised randomised response, GRR / DE).

The user reports its own value with probability ``p = e^ε / (e^ε + d - 1)``
and each other value with probability ``q = 1 / (e^ε + d - 1)``; the ratio is
exactly ``e^ε``.  Variance grows with ``d``, so DE wins only on small domains,
but a report is one value and the statistics are a histogram of reported
values, which works for ``d`` up to ``2**64`` with candidate queries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .base import HistogramFlatForm, PureOracle, Support, check_kind, check_values, index_bits
from .device_spec import DeviceSpec
from .histogram import Histogram
from .sampling import RandomSource, check_rng_batch, randomized_response


@dataclass(frozen=True)
class DirectReports:
    """One reported value per user."""

    values: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", np.asarray(self.values, dtype=np.uint64).ravel())

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def take(self, rows: np.ndarray) -> DirectReports:
        return DirectReports(self.values[rows])


@dataclass(frozen=True)
class DirectStatistics:
    """Histogram of reported values and the number of reports."""

    reported: Histogram
    n_users: int

    def __add__(self, other: DirectStatistics) -> DirectStatistics:
        if not isinstance(other, DirectStatistics):
            return NotImplemented
        return DirectStatistics(self.reported + other.reported, self.n_users + other.n_users)


class DirectEncoding(HistogramFlatForm, PureOracle[DirectReports, DirectStatistics]):
    """Generalised randomised response over ``[0, domain)``."""

    name = "grr"
    statistics_type = DirectStatistics
    device_spec = DeviceSpec(
        parameters="`p = E / (E + d - 1)`.",
        randomizer="`values = RR(v, d, p)`.",
        statistics="When `d <= FLAT_CELLS_LIMIT`: `cells[x]` (`x < d`) is the number of reports equal to `x`; "
        "`reporters = [n]`.",
        support="`counts[i]` is the number of reports equal to `candidates[i]`; `reporters = [n]`.",
    )

    @property
    def histogram_size(self) -> int:
        return self.domain

    def __init__(self, epsilon: float, domain: int) -> None:
        super().__init__(epsilon, domain)
        denominator = math.exp(self.epsilon) + self.domain - 1
        self.p = math.exp(self.epsilon) / denominator
        self.q = 1.0 / denominator

    def randomize(self, values: np.ndarray, rng: RandomSource) -> DirectReports:
        values = self._values(values)
        check_rng_batch(rng, values.shape[0])
        return DirectReports(randomized_response(rng, values, self.domain, self.p))

    def aggregate(self, reports: DirectReports) -> DirectStatistics:
        check_kind(self.name, reports, DirectReports, "reports")
        reported = check_values(reports.values, self.domain, "reports.values")
        return DirectStatistics(Histogram.of(reported, bound=self.domain), len(reports))

    def support(self, statistics: DirectStatistics, candidates: np.ndarray) -> Support:
        check_kind(self.name, statistics, DirectStatistics, "statistics")
        candidates = self._values(candidates, "candidates")
        return Support(statistics.reported.lookup(candidates), statistics.n_users)

    def report_bits(self) -> int:
        """One value of the domain."""
        return index_bits(self.domain)

    def report_probabilities(self, value: int, reports: DirectReports) -> np.ndarray:
        return np.where(reports.values == np.uint64(value), self.p, self.q)
