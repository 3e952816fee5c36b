"""The exact baseline's law sampler: nothing to draw, its reply is a function of the item counts.

Every user sends all of its items with their shares, in the clear, so a
shard's reply is its users' summed shares: the true counts a
:class:`~fedhh.data.counted.CountedShard` holds give exactly the reply its
users give (:meth:`~fedhh.data.counted.CountedShard.counts` rounds each user
type's shares as each of its users rounds them).  Exact, with no assumption;
in a law run of a generated population the counts themselves are drawn
(:func:`~fedhh.data.counted.counted_users`), as for every protocol.
"""

from __future__ import annotations

from ...data.counted import CountedShard
from ...kernels.randomness import KeyedRandomness
from .client import summed_shares
from .messages import ItemsRequest, ItemWeights


def law(request: ItemsRequest, counts: CountedShard, randomness: KeyedRandomness) -> ItemWeights:
    """A shard's summed shares, from its counts (module docstring)."""
    return summed_shares(request, counts.counts(), counts.vocabulary)
