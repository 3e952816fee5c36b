"""SPM's messages: a stage's request (segments, pairs or whole values) and the OLH support counts that answer it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..base import Request, Response
from ..messages import array_field, message, scalar_field, summed


@message
class SPMRequest(Request):
    """One of the three rounds, with every public parameter a device needs to answer it."""

    mode: str  # segments | pairs | final
    value_bits: int = scalar_field(minimum=1)  # m: bits of a value
    segments: int = scalar_field(minimum=2)  # g: segments of a value
    bounds: np.ndarray = array_field("int64", ("segments+1",))  # segment i is bits [bounds[i], bounds[i+1])
    epsilon: float = scalar_field(minimum=0.0)  # ε of each report
    partition_seed: int  # public seed of the users' segment pairs
    patterns: np.ndarray = array_field("uint64", ("P",))  # pairs: C_0, C_1, ... concatenated
    # pairs: C_i = patterns[offsets[i]:offsets[i+1]]
    pattern_offsets: np.ndarray = array_field("int64", ("segments+1",))
    candidates: np.ndarray = array_field("uint64", ("C",))  # final: keys of the candidate values


@message
class SPMResponse(Response):
    """Support counts (segments: every pattern; pairs: joint and single per pair; final: candidates); additive."""

    counts: np.ndarray = array_field("int64", ("S",))  # support counts, laid out per mode (see How users answer)
    # users per segment (segments), per pair (pairs), or all (final)
    reporters: np.ndarray = array_field("int64", ("U",))

    @classmethod
    def combine(cls, responses: Sequence[SPMResponse]) -> SPMResponse:
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
