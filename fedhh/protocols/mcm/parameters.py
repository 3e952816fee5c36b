"""MCM's ``[protocol]`` keys, budget split and the parameters a run derives from them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import InputError
from ...privacy.ldp import BudgetRule
from ...privacy.validation import check_users
from ...schema import ConfigSection, Key
from ..common.keys import TOP_K_KEY

NAME = "mcm"
ORACLE = "olh"
BITS, FINAL = "bits", "final"
MAX_CHANNELS = 1 << 16
ITEM_PURPOSE = "mcm.item"
BIT_PURPOSE = "mcm.bit-report"
FULL_PURPOSE = "mcm.full-report"


@dataclass(frozen=True)
class MCMKeys(ConfigSection):
    """MCM's own ``[protocol]`` keys."""

    channels: int = Key(
        int,
        0,
        "MCM: h, channels values are hashed into; 0: ceil(k^1.5) ([Wang19] §VI-A)",
        check=lambda v: v == 0 or 2 <= v <= MAX_CHANNELS,
        constraint=f"0 or in 2..{MAX_CHANNELS:,}",
    ).field()
    top_k: int = TOP_K_KEY.field()


KEYS: dict[str, Key] = MCMKeys.keys()


BUDGET = BudgetRule(
    (("(channel, bit) pair at a uniformly chosen bit position", 0.5), ("full value", 0.5)),
    "Wang et al., Locally Differentially Private Heavy Hitter Identification, §III-D and §VI-A "
    "(MCM after Bassily and Smith); even split",
)  # ε_1 + ε_2 = ε ([Wang19] §III-D); [Wang19] does not say how, so evenly


@dataclass(frozen=True)
class MCMParameters:
    """Everything that fixes an MCM run, checked with errors naming the config key."""

    n_users: int
    epsilon: float
    value_bits: int
    channels: int
    top_k: int

    def __post_init__(self) -> None:
        check_users(self.n_users)
        if not 2 <= self.channels <= MAX_CHANNELS:
            raise InputError(
                f"protocol.channels: {self.channels} channels; must be in 2..{MAX_CHANNELS:,} "
                "(0 takes ceil(k^1.5) from protocol.top_k)"
            )
        if self.top_k < 1:
            raise InputError(f"protocol.top_k: must be >= 1, got {self.top_k}")


def mcm_parameters(protocol: Mapping[str, Any], epsilon: float, n_users: int, value_bits: int) -> MCMParameters:
    BUDGET.split(NAME, epsilon)  # refuses a per-user ε no report's oracle can take, naming privacy.epsilon
    keys = MCMKeys.of(protocol)
    channels = keys.channels or max(2, math.ceil(keys.top_k**1.5))
    return MCMParameters(n_users, epsilon, value_bits, channels, keys.top_k)
