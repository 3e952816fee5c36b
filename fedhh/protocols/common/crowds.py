"""The crowds the ε-LDP protocols' reports hide among once shuffled (:class:`fedhh.privacy.shuffle.Crowd`).

A report kind sent by every user hides among all ``n``; one sent by a public
group (a PEM group, a TreeHist level, a bit position, a RAPPOR cohort, an
SFP fragment position, an SPM segment pair: public randomness keyed by the
user id) hides only among that group, whose share of the users each
protocol states here from its report's parameters.  Each function takes the
run's budget split and its privacy report's parameters (or a plan's, which
hold the same keys) and names the split's parts each message carries.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...privacy.ldp import BudgetSplit
from ...privacy.shuffle import Crowd

EVERYONE = "every user"


def equal_groups(count: int) -> tuple[float, ...]:
    """``count`` groups drawn uniformly."""
    return (1.0 / count,) * count


def _names(split: BudgetSplit) -> list[str]:
    return [name for name, _ in split.parts]


def prefix_search_crowds(split: BudgetSplit, parameters: Mapping[str, Any]) -> tuple[Crowd, ...]:
    """PEM and TreeHist: the level report among the users of the level's group (the groups' shares,
    ``group_shares``, or ``levels`` equal ones); TreeHist's full value among everyone."""
    shares = parameters.get("group_shares") or equal_groups(int(parameters["levels"]))
    level, *full = _names(split)
    crowds = [Crowd((level,), "the users of the smallest group (level)", tuple(float(s) for s in shares))]
    return (*crowds, *(Crowd((name,), EVERYONE) for name in full))


def bit_position_crowds(split: BudgetSplit, parameters: Mapping[str, Any]) -> tuple[Crowd, ...]:
    """MCM and Bitstogram: the (channel, bit) pair among the users of the same bit position, the full
    value among everyone."""
    bits = int(parameters.get("value_bits") or parameters["value_length"])
    pair, full = _names(split)
    return Crowd((pair,), "the users of the smallest bit position", equal_groups(bits)), Crowd((full,), EVERYONE)


def segment_pair_crowds(split: BudgetSplit, parameters: Mapping[str, Any]) -> tuple[Crowd, ...]:
    """SPM: the two segment reports form one message (the server pairs them per user), among the users of
    the same segment pair; the full value among everyone."""
    segments = int(parameters["segments"])
    first, second, full = _names(split)
    pairs = equal_groups(segments * (segments - 1) // 2)
    return Crowd((first, second), "the users of the smallest segment pair", pairs), Crowd((full,), EVERYONE)


def cohort_crowds(split: BudgetSplit, parameters: Mapping[str, Any]) -> tuple[Crowd, ...]:
    """RAPPOR: the one report among the users of the same cohort."""
    (report,) = _names(split)
    return (Crowd((report,), "the users of the smallest cohort", equal_groups(int(parameters["cohorts"]))),)


def fragment_crowds(split: BudgetSplit, parameters: Mapping[str, Any]) -> tuple[Crowd, ...]:
    """SFP: the fragment report among the users of the same fragment position, the full word (when
    sent) among everyone."""
    fragment, *word = _names(split)
    positions = equal_groups(int(parameters["positions"]))
    return (
        Crowd((fragment,), "the users of the smallest fragment position", positions),
        *(Crowd((name,), EVERYONE) for name in word),
    )


def party_level_crowds(split: BudgetSplit, parameters: Mapping[str, Any]) -> tuple[Crowd, ...]:
    """TAPS: the one report among the users of the same party and level (a party's reports are told
    apart from the others', so each party's level group is a crowd of its own)."""
    (report,) = _names(split)
    groups = int(parameters["parties"]) * int(parameters["levels"])
    return (Crowd((report,), "the users of the smallest party level", equal_groups(groups)),)
