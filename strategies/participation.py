"""Who took part in each round, and what the run lost to failures.

A real federation loses nodes: a SuperNode crashes or is disconnected, a
device goes offline, a straggler answers after the round's timeout, or a
reply is malformed.  None of these stops the run; the round goes on with
the replies it has, and this record says, per round, which shards were
asked, which answered, and why the others are missing:

* ``offline``: the SuperLink reported the node offline, so it was not asked;
* ``late``: no reply before ``run.round_timeout`` (a straggler, or a node
  that died without the SuperLink noticing yet);
* ``failed``: the reply was an error (the ClientApp raised, the SuperLink
  declared the node unavailable, the message could not be delivered);
* ``rejected``: the reply was malformed or impossible (see the strategy's
  checks) and was dropped.

Shards are named by their index (a device by its user id): node ids are
random numbers that mean nothing to a reader.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The keys a round's participation adds to its line of the trace.
PARTICIPATION_KEYS: tuple[str, ...] = (
    "nodes_asked",
    "nodes_answered",
    "offline_shards",
    "late_shards",
    "failed_shards",
    "rejected_shards",
    "lost_shards",
    "lost_users",
    "refusals",
)


@dataclass
class RoundParticipation:
    """One round's participation, filled in as replies are classified."""

    round: int
    asked: int = 0
    answered: int = 0
    offline: list[int] = field(default_factory=list)
    late: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    rejected: list[int] = field(default_factory=list)
    lost_users: int = 0  # users held by the shards that did not contribute
    reasons: dict[int, str] = field(default_factory=dict)  # shard -> why its reply failed or was refused

    @property
    def lost_shards(self) -> list[int]:
        return sorted({*self.offline, *self.late, *self.failed, *self.rejected})

    def to_dict(self) -> dict[str, Any]:
        """The round's participation under :data:`PARTICIPATION_KEYS`."""
        values = (
            self.asked,
            self.answered,
            sorted(self.offline),
            sorted(self.late),
            sorted(self.failed),
            sorted(self.rejected),
            self.lost_shards,
            self.lost_users,
            [f"shard {shard}: {reason}" for shard, reason in sorted(self.reasons.items())],
        )
        return dict(zip(PARTICIPATION_KEYS, values))

    def describe(self) -> str:
        """A short log fragment: ``answered 2/3, late [1]``."""
        text = f"answered {self.answered}/{self.asked + len(self.offline)}"
        for name in ("offline", "late", "failed", "rejected"):
            shards = getattr(self, name)
            if shards:
                text += f", {name} {sorted(shards)}"
        return text


def participation_summary(
    rounds: list[RoundParticipation], nodes: int, missing_users: int, privacy_note: str
) -> dict[str, Any]:
    """The run-level summary written next to the trace."""
    lost = sorted({shard for record in rounds for shard in record.lost_shards})
    return {
        "nodes": nodes,
        "users_without_node": missing_users,
        "rounds_with_losses": sum(1 for record in rounds if record.lost_shards),
        "lost_shards": lost,
        "privacy": privacy_note,
    }
