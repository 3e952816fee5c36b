"""The curator baseline's messages: one request for everyone's item, answered by a histogram of items."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...data.prefixes import sum_histograms
from ..base import Request, Response
from ..messages import array_field, message


@message
class ItemRequest(Request):
    """The one round: every user sends its item (one of them, for a user holding several)."""


@message
class ItemHistogram(Response):
    """How many users of a batch sent each item (a sparse, additive histogram)."""

    items: np.ndarray = array_field("int64", ("K", "L"), minimum=-1)  # item rows (symbol ids, PAD = -1 after the end)
    counts: np.ndarray = array_field("int64", ("K",), minimum=1)  # users that sent each item

    @classmethod
    def combine(cls, responses: Sequence[ItemHistogram]) -> ItemHistogram:
        if not responses:
            raise ValueError("combine needs at least one response")
        items, counts = sum_histograms([(r.items, r.counts) for r in responses], responses[0].items.shape[1])
        return cls(
            round=responses[0].round,
            sampled_users=sum(r.sampled_users for r in responses),
            responding_users=sum(r.responding_users for r in responses),
            items=items,
            counts=counts,
        )
