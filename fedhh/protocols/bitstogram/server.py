"""Bitstogram's server: channel bits decoded into candidates, whose full-value estimates are reported."""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import NormalDist
from typing import Any

import numpy as np

from ...data.items import ItemCodec
from ...oracles.hashtogram import HashtogramStatistics
from ...schema import PrivacySection
from ..base import Response
from ..common.prefix_encoding import PrefixEncoding
from ..common.value_reports import (
    ValueReportingServer,
    public_seed,
)
from .messages import BitstogramRequest, BitstogramResponse
from .parameters import ABSENT_REPORTED, NAME, ORACLE, BitstogramParameters, bitstogram_parameters


class BitstogramServer(ValueReportingServer):
    """One round of reports, then channels decoded bit by bit and candidates estimated (the package docstring)."""

    name = NAME
    oracle_label = ORACLE
    rounds = 1
    finished = "one round: channels decoded and candidates estimated"
    params: BitstogramParameters

    def __init__(self, params: BitstogramParameters, codec: ItemCodec, seed: int) -> None:
        super().__init__(params, codec, params.split)
        self.request = BitstogramRequest(
            round=1,
            value_bits=params.value_bits,
            buckets=params.buckets,
            rows=params.rows,
            bit_epsilon=self.split.parts[0][1],
            final_epsilon=self.split.parts[1][1],
            channel_seed=public_seed(seed, "bitstogram.channels"),
            partition_seed=public_seed(seed, "bitstogram.partition"),
            oracle_seed=public_seed(seed, "bitstogram.oracle"),
        )
        self.threshold = self.noise_threshold()

    def noise_threshold(self) -> float:
        """The estimate a value held by nobody exceeds with probability ``ABSENT_REPORTED / T``."""
        zero = self.request.final_oracle().linear_variance(self.params.n_users).zero_count
        return math.sqrt(zero) * NormalDist().inv_cdf(1 - ABSENT_REPORTED / self.params.buckets)

    # -- ServerProtocol ---------------------------------------------------------------------------

    def next_request(self) -> BitstogramRequest | None:
        return self.request if self._reported is None else None

    def absorb(self, response: Response) -> None:
        if not isinstance(response, BitstogramResponse):
            raise TypeError(f"bitstogram: expected a BitstogramResponse, got {type(response).__name__}")
        candidates = np.unique(self.recover_channels(response), axis=0)
        candidates = candidates[self.encoding.reportable(candidates)]
        estimates = self.estimate(response, candidates)
        passed = np.flatnonzero(estimates >= self.threshold)
        reported = self._report(candidates, estimates, eligible=passed)
        self._record(
            users=response.responding_users,
            channels=self.params.buckets,
            candidates=int(candidates.shape[0]),
            above_threshold=int(passed.size),
            reported=reported,
            threshold=self.threshold,
        )

    def recover_channels(self, response: BitstogramResponse) -> np.ndarray:
        """Each channel's candidate ``[T, m]``: per position, the bit whose (channel, bit) pair is estimated higher."""
        oracle = self.request.bit_oracle()
        pairs = np.arange(2 * self.params.buckets, dtype=np.uint64)
        recovered = np.empty((self.params.buckets, self.params.value_bits), dtype=np.uint8)
        for position in range(self.params.value_bits):
            statistics = HashtogramStatistics(
                response.bit_sums[position][None, :], response.bit_users[position : position + 1]
            )
            estimates = oracle.estimate(statistics, pairs).reshape(self.params.buckets, 2)
            recovered[:, position] = estimates[:, 1] > estimates[:, 0]
        return recovered

    def estimate(self, response: BitstogramResponse, candidates: np.ndarray) -> np.ndarray:
        """Unbiased counts of candidate values ``[K, m]`` from everyone's full-value reports."""
        oracle = self.request.final_oracle()
        statistics = oracle.from_flat(response.final_sums, response.final_users)
        return oracle.estimate(statistics, self.encoding.keys(candidates))

    def stopped_because(self) -> str:
        stopped = super().stopped_because()
        if self._reported is not None and len(self._reported[1]) < self.params.top_k:
            stopped += f"; {len(self._reported[1])} of k = {self.params.top_k} values were above the threshold"
        return stopped

    def progress_note(self) -> str:
        return f"{self.params.buckets:,} channels, {self.params.value_bits} bit positions"

    def describe(self) -> dict[str, Any]:
        params = self.params
        return {
            **self.encoding.describe(),
            "buckets": params.buckets,
            "hashtogram_rows": params.rows,
            "bit_epsilon": self.request.bit_epsilon,
            "final_epsilon": self.request.final_epsilon,
            "users_per_bit_position": params.n_users / params.value_bits,
            "threshold": self.threshold,
            "top_k": params.top_k,
        }


def build_bitstogram(
    privacy: PrivacySection, protocol: Mapping[str, Any], n_users: int, codec: ItemCodec, seed: int
) -> BitstogramServer:
    value_bits = PrefixEncoding("bits", codec).length
    return BitstogramServer(bitstogram_parameters(protocol, privacy.epsilon, n_users, value_bits), codec, seed)
