"""The exact baseline's messages: one request for everyone's items, answered by their summed shares."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...data.population import SHARE_BITS
from ...data.prefixes import sum_histograms
from ..base import Request, Response
from ..messages import array_field, message

SHARE_UNIT = 1 << SHARE_BITS  # a user's whole weight: its shares of its items add up to this (to rounding)


@message
class ItemsRequest(Request):
    """The one round: every user sends all of its items with their shares."""


@message
class ItemWeights(Response):
    """Per item, the sum over a batch's users of the item's share of the user's items, in units of
    ``2**-32`` (one user holding one item gives it ``2**32``): a sparse, additive histogram."""

    items: np.ndarray = array_field("int64", ("K", "L"), minimum=-1)  # item rows (symbol ids, PAD = -1 after the end)
    weights: np.ndarray = array_field("int64", ("K",), minimum=1)  # summed shares, in units of 2**-32

    @classmethod
    def combine(cls, responses: Sequence[ItemWeights]) -> ItemWeights:
        if not responses:
            raise ValueError("combine needs at least one response")
        items, weights = sum_histograms([(r.items, r.weights) for r in responses], responses[0].items.shape[1])
        return cls(
            round=responses[0].round,
            sampled_users=sum(r.sampled_users for r in responses),
            responding_users=sum(r.responding_users for r in responses),
            items=items,
            weights=weights,
        )
