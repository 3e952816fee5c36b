"""The curator baseline's law sampler: how many users send each item, drawn from the item counts.

A user holding one item sends it; a user holding several sends one, each with
probability its local frequency, independently of the others; a user
holding none sends nothing.  So the users of one type (the same items and
local counts, :class:`~fedhh.data.counted.UserTypes`) split over its items
as ``Multinomial(users, shares)`` (:func:`~fedhh.protocols.law.reported_holders`),
and the one-item users send their item: the reply's law exactly, with no
assumption but the users' independence.  The curator's noise is the
server's, drawn as in a users run.
"""

from __future__ import annotations

from ...data.counted import CountedShard
from ...kernels.randomness import KeyedRandomness
from ..law import reported_holders
from .client import item_histogram
from .messages import ItemHistogram, ItemRequest


def law(request: ItemRequest, counts: CountedShard, randomness: KeyedRandomness) -> ItemHistogram:
    """A shard's histogram of the items its users send, drawn from its law (module docstring)."""
    sent = reported_holders(counts, randomness)[:-1]  # the last entry: users holding no item, who send nothing
    return item_histogram(request, sent, counts.vocabulary, counts.n_users)
