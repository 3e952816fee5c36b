"""What the protocols whose server samples users each round (TrieHH, the aggregate-DP prefix tree) check
of their nodes: which sampled users a node holds, how many users a reply says were sampled and
answered, and the summed vector of secure aggregation, ``[sampled users, responding users, counts...]``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ..base import Response
from ..spec import HeldUsers, InvalidReply


class SampledRequest(Protocol):
    @property
    def sampled(self) -> np.ndarray: ...  # the sampled users' global ids, sorted


def sampled_in_node(sampled: np.ndarray, node: HeldUsers) -> np.ndarray:
    """The users of ``sampled`` (sorted global ids) that ``node`` holds."""
    lo, hi = np.searchsorted(sampled, [node.first_user, node.first_user + node.users])
    return sampled[lo:hi]


def check_sampled_users(response: Response, sampled: int) -> None:
    """Raise :class:`InvalidReply` unless ``response`` comes from the ``sampled`` users it was asked of,
    and no more of them answered."""
    name = type(response).__name__
    if response.sampled_users != sampled:
        raise InvalidReply(
            f"{name}.sampled_users: {sampled} of its users were sampled, it says {response.sampled_users}"
        )
    if response.responding_users > sampled:
        raise InvalidReply(f"{name}.responding_users: {response.responding_users} > {sampled} sampled users")


def check_secure_sum(vector: np.ndarray, length: int, contributors: Sequence[SampledRequest]) -> int:
    """The sampled users of the nodes asked ``contributors``, once the summed ``vector`` is checked: of
    ``length`` entries, each of them from 0 to that many."""
    sampled_users = sum(int(asked.sampled.size) for asked in contributors)
    if vector.shape != (length,):
        raise InvalidReply(f"secure sum: expected {length} entries, got shape {vector.shape}")
    if vector.min() < 0 or vector.max() > sampled_users:
        raise InvalidReply(f"secure sum: entries must be in 0..{sampled_users} (the contributors' sampled users)")
    return sampled_users
