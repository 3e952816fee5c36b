"""SPM's messages: a stage's request (segments, pairs or whole values) and the OLH support counts that answer it."""

from __future__ import annotations

import numpy as np

from ..base import Request, SummedResponse
from ..messages import array_field, message, scalar_field


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
class SPMResponse(SummedResponse):
    """Support counts (segments: every pattern; pairs: joint and single per pair; final: candidates); additive."""

    counts: np.ndarray = array_field("int64", ("S",))  # support counts, laid out per mode (see How users answer)
    # users per segment (segments), per pair (pairs), or all (final)
    reporters: np.ndarray = array_field("int64", ("U",))
