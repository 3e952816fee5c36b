"""MCM's server: each channel's bits decided by vote into a candidate, whose full-value estimate is reported."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...data.items import ItemCodec
from ...oracles import Support, make_oracle
from ...oracles.local_hashing import LocalHashing
from ...schema import PrivacySection
from ..base import Response
from ..common.prefix_encoding import PrefixEncoding
from ..common.value_reports import (
    ValueReportingServer,
    public_seed,
)
from .messages import MCMRequest, MCMResponse
from .parameters import BITS, BUDGET, FINAL, NAME, ORACLE, MCMParameters, mcm_parameters


class MCMServer(ValueReportingServer):
    """Channels decoded bit by bit by majority, then the candidates' full values (the package docstring)."""

    name = NAME
    oracle_label = ORACLE
    rounds = 2
    finished = "channels decoded and candidates estimated"
    trace_fields = ("stage", "users", "channels", "candidates", "reported")
    params: MCMParameters

    def __init__(self, params: MCMParameters, codec: ItemCodec, seed: int) -> None:
        super().__init__(params, codec, BUDGET.split(NAME, params.epsilon))
        self.bit_oracle = typing.cast(  # OLH
            LocalHashing, make_oracle(ORACLE, epsilon=self.split.parts[0][1], domain=2 * params.channels)
        )
        self.final_oracle = make_oracle(
            ORACLE, epsilon=self.split.parts[1][1], domain=self.encoding.domain(params.value_bits)
        )
        self.channel_seed = public_seed(seed, "mcm.channels")
        self.partition_seed = public_seed(seed, "mcm.partition")
        self._candidates: np.ndarray | None = None

    def next_request(self) -> MCMRequest | None:
        if self._reported is not None:
            return None
        candidates = self._candidates  # set once the channels are decoded: the final round
        return MCMRequest(
            round=len(self._trace) + 1,
            mode=FINAL if candidates is not None else BITS,
            value_bits=self.params.value_bits,
            channels=self.params.channels,
            bit_epsilon=self.split.parts[0][1],
            final_epsilon=self.split.parts[1][1],
            channel_seed=self.channel_seed,
            partition_seed=self.partition_seed,
            candidates=self.encoding.keys(candidates) if candidates is not None else np.zeros(0, dtype=np.uint64),
        )

    def absorb(self, response: Response) -> None:
        if not isinstance(response, MCMResponse):
            raise TypeError(f"mcm: expected an MCMResponse, got {type(response).__name__}")
        if self._candidates is None:
            recovered = np.unique(self.recover_channels(response), axis=0)
            self._candidates = recovered[self.encoding.reportable(recovered)]
            self._record_stage(BITS, response, candidates=int(self._candidates.shape[0]))
            return
        estimates = self.final_oracle.estimate_support(Support(response.counts, int(response.reporters.sum())))
        reported = self._report(self._candidates, estimates)
        self._record_stage(FINAL, response, candidates=int(estimates.size), reported=reported)

    def recover_channels(self, response: MCMResponse) -> np.ndarray:
        """Each channel's candidate ``[h, m]``: per position, the bit whose pair is estimated higher."""
        h, m = self.params.channels, self.params.value_bits
        counts = response.counts.reshape(m, 2 * h).astype(np.float64)
        estimates = (counts - response.reporters[:, None] * self.bit_oracle.q) / (self.bit_oracle.p - self.bit_oracle.q)
        return (estimates[:, 1::2] > estimates[:, 0::2]).T.astype(np.uint8)

    def _record_stage(self, stage: str, response: MCMResponse, **values: Any) -> None:
        self._record(stage=stage, users=response.responding_users, channels=self.params.channels, **values)

    def progress_note(self) -> str:
        return f"{self.params.channels:,} channels, {self.params.value_bits} bit positions"

    def describe(self) -> dict[str, Any]:
        return {
            **self.encoding.describe(),
            "channels": self.params.channels,
            "bit_epsilon": self.split.parts[0][1],
            "final_epsilon": self.split.parts[1][1],
            "users_per_bit_position": self.params.n_users / self.params.value_bits,
            "top_k": self.params.top_k,
        }


def build_mcm(
    privacy: PrivacySection, protocol: Mapping[str, Any], n_users: int, codec: ItemCodec, seed: int
) -> MCMServer:
    value_bits = PrefixEncoding("bits", codec).length
    return MCMServer(mcm_parameters(protocol, privacy.epsilon, n_users, value_bits), codec, seed)
