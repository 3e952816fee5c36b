"""MCM's messages: the one round's request (public seeds and sizes) and the summed OLH statistics."""

from __future__ import annotations

import numpy as np

from ..base import Request, SummedResponse
from ..messages import array_field, message, scalar_field


@message
class MCMRequest(Request):
    """A round: the (channel, bit) pairs of every position, or the candidates' full values."""

    mode: str  # bits | final
    value_bits: int = scalar_field(minimum=1)  # m: bits of a value
    channels: int = scalar_field(minimum=2)  # h: channels values are hashed into
    bit_epsilon: float = scalar_field(minimum=0.0)  # ε of the (channel, bit) report
    final_epsilon: float = scalar_field(minimum=0.0)  # ε of the whole-value report
    channel_seed: int  # σ of the channel hash
    partition_seed: int  # public seed of the users' bit positions
    candidates: np.ndarray = array_field("uint64", ("C",))  # final: keys of the candidate values


@message
class MCMResponse(SummedResponse):
    """OLH support counts: ``[position, 2h]`` pairs (bits) or one per candidate (final); additive."""

    # [position, 2h] support counts (bits), or one per candidate (final)
    counts: np.ndarray = array_field("int64", ("S",))
    reporters: np.ndarray = array_field("int64", ("U",))  # per position (bits), or all (final)
