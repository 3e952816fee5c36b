"""MCM's messages: the one round's request (public seeds and sizes) and the summed OLH statistics."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..base import Request, Response
from ..messages import array_field, message, scalar_field, summed


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
class MCMResponse(Response):
    """OLH support counts: ``[position, 2h]`` pairs (bits) or one per candidate (final); additive."""

    # [position, 2h] support counts (bits), or one per candidate (final)
    counts: np.ndarray = array_field("int64", ("S",))
    reporters: np.ndarray = array_field("int64", ("U",))  # per position (bits), or all (final)

    @classmethod
    def combine(cls, responses: Sequence[MCMResponse]) -> MCMResponse:
        if not responses:
            raise ValueError("combine needs at least one response")
        if len({(r.round, r.counts.shape, r.reporters.shape) for r in responses}) != 1:
            raise ValueError("cannot combine responses of different rounds or shapes")
        return cls(
            round=responses[0].round,
            sampled_users=sum(r.sampled_users for r in responses),
            responding_users=sum(r.responding_users for r in responses),
            counts=summed([r.counts for r in responses]),
            reporters=summed([r.reporters for r in responses]),
        )
