"""The aggregate-DP prefix tree's messages: a level's request (who is sampled, the kept prefixes, how far
to extend them, which data to count) and the candidate counts that answer it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...data.prefixes import sum_histograms
from ..base import Request, Response
from ..messages import array_field, message, scalar_field


@message
class LevelRequest(Request):
    """Level ``round``: the sampled users, the kept prefixes and the extension length."""

    depth: int  # symbols of the kept prefixes (0 at the first level)
    extension: int = scalar_field(minimum=1)  # symbols this level adds to each kept prefix
    data_selection: str  # random, weighted, most_frequent or several: which of its items a user counts
    choose_from: str  # extending: among the items that extend a kept prefix; all: among all, counting those only
    contributions: int = scalar_field(minimum=1)  # distinct candidates a user adds 1 to, at most
    sampling_rate: float  # q: each user's chance to be sampled in this level (public)
    # a law simulation: sampled lists nobody, each shard draws its own Poisson sample at sampling_rate
    sampled_by_law: bool
    sampled: np.ndarray = array_field("int64", ("m",))  # sorted global user ids sampled in this level
    parents: np.ndarray = array_field("int64", ("K", "depth"))  # the kept prefixes, symbol rows without the end


@message
class LevelCounts(Response):
    """Users per candidate (a sparse, additive histogram of depth ``width`` prefixes)."""

    width: int  # symbols of a candidate: depth + extension
    prefixes: np.ndarray = array_field("int64", ("K", "width"), minimum=-1)  # counted candidates (PAD -1 after the end)
    counts: np.ndarray = array_field("int64", ("K",), minimum=1)  # users that added 1 to each candidate

    @classmethod
    def combine(cls, responses: Sequence[LevelCounts]) -> LevelCounts:
        if not responses:
            raise ValueError("combine needs at least one response")
        shapes = {(r.round, r.width) for r in responses}
        if len(shapes) != 1:
            raise ValueError(f"cannot combine responses of different levels: {sorted(shapes)}")
        ((round_, width),) = shapes
        prefixes, counts = sum_histograms([(r.prefixes, r.counts) for r in responses], width)
        return cls(
            round=round_,
            sampled_users=sum(r.sampled_users for r in responses),
            responding_users=sum(r.responding_users for r in responses),
            width=width,
            prefixes=prefixes,
            counts=counts,
        )
