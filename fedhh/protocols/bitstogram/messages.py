"""Bitstogram's messages: the one round's request (public seeds and sizes) and the summed oracle statistics."""

from __future__ import annotations

import numpy as np

from ...oracles.hashtogram import Hashtogram
from ..base import Request, SummedResponse
from ..messages import array_field, message, scalar_field


@message
class BitstogramRequest(Request):
    """The one round: every public parameter a device needs to send its two reports."""

    value_bits: int = scalar_field(minimum=1)  # m: bits of a value
    buckets: int = scalar_field(minimum=2)  # T: channels, and the width of both Hashtogram oracles
    rows: int = scalar_field(minimum=1)  # R: hash rows of the whole-value Hashtogram
    bit_epsilon: float = scalar_field(minimum=0.0)  # ε of the (channel, bit) report
    final_epsilon: float = scalar_field(minimum=0.0)  # ε of the whole-value report
    channel_seed: int  # σ of the channel hash
    partition_seed: int  # public seed of the users' bit positions
    oracle_seed: int  # seed of both Hashtogram oracles

    def bit_oracle(self) -> Hashtogram:
        """The oracle of the (channel, bit) pairs: ``2T`` values, not hashed."""
        return Hashtogram(self.bit_epsilon, 2 * self.buckets, rows=1, width=2 * self.buckets, seed=self.oracle_seed)

    def final_oracle(self) -> Hashtogram:
        """The oracle of whole values: ``R`` hashed rows of ``T`` buckets, median over rows ([Bassily17])."""
        return Hashtogram(
            self.final_epsilon, 1 << 64, rows=self.rows, width=self.buckets, seed=self.oracle_seed, estimator="median"
        )


@message
class BitstogramResponse(SummedResponse):
    """A shard's summed oracle statistics: per bit position, and of the whole values; additive."""

    bit_sums: np.ndarray = array_field("int64", ("B", "P"), minimum=None)  # [position, 2T] signed sums
    bit_users: np.ndarray = array_field("int64", ("B",))  # reports per position
    final_sums: np.ndarray = array_field("int64", ("F",), minimum=None)  # [R x T] signed sums, flat
    final_users: np.ndarray = array_field("int64", ("R",))  # reports per row
